#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1: the 16-core host; later nvidia-h200-x2: 32 cores) from the repo
# root with .devbin/ carried (bench/device/build-for-device.sh makes it). Issue 20 and the CPU part of
# issue 15, in under 5 minutes:
#  1. calibrate: the profile, with the node rate of k = 1, 2, 4 (and GPUs) rank processes at once;
#  2. `bench --cpu-ranks 1,2,4`: k processes through the engine's CPU path (cpu::CpuSegment), each on
#     its share of the cores, AdamW/Adam/Adagrad/Lion, node Gparam/s and GB/s against the
#     read-modify-write bound measured by the same processes; AdamW with DMA traffic on GPU 0; the
#     work-stealing block and prefetch variants; the simulator's node time (the profile of step 1);
#  3. the engine's own per-layer CPU op sequence of mlp-2b at ratio 0.05 (0.107 B CPU params), CPU-only,
#     with and without DMA, per op;
#  4. torch fused CPU AdamW: k processes at once on the same shares (taskset), the same threads;
#  5. one real step sequence: `twinflow run` mlp-2b at ratio 0.05, the engine's CPU Gparam/s.
# Results: $OUT/cpu-optimizer.md (the tables) and $OUT/cpu-optimizer.json, the logs in
# $OUT/cpu-optimizer.tar.gz. N (elements over all ranks, default 2^28) and ITERS (default 10) override.
set -uo pipefail
W=/tmp/cpu-optimizer
. bench/device/device_env.sh
N=${N:-268435456}
ITERS=${ITERS:-10}
pack() { tar czf "$OUT/cpu-optimizer.tar.gz" -C "$W" .; }

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2;
  lscpu | grep -E "Model name|NUMA|Socket|Thread|Core"; cat /sys/kernel/mm/transparent_hugepage/enabled; } |
  tee "$W/machine.txt"

step "calibrate (the profile with the node rate by ranks)"
timeout 150 $B/twinflow calibrate --out "$W/cal.yaml" --force > "$W/calibrate.log" 2> "$W/calibrate.err"
echo "rc $?"; grep -E "cpu adamw|cpu read-modify|slowdown" "$W/calibrate.log"; pack
PROFILE=()
[ -s "$W/cal.yaml" ] && PROFILE=(--profile "$W/cal.yaml")

step "k ranks at once: every optimizer, the bound, the variants"
timeout 150 $B/twinflow bench --cpu-ranks 1,2,4 --n "$N" --iters "$ITERS" --optimizers adamw,adam,adagrad,lion \
  --grads bf16,fp32 --blocks 0,16,64 --prefetches 0,1024,2048 "${PROFILE[@]}" \
  --json "$W/ranks.json" > "$W/ranks.log" 2> "$W/ranks.err"
echo "rc $?"; sed -n '/^ranks /,$p' "$W/ranks.log"; grep -E "rank [0-9]+:" "$W/ranks.err" | sort -u; pack

step "before the shares: k ranks pinned to the same first cores (the engine's old pinning), AdamW"
timeout 40 $B/twinflow bench --cpu-ranks 1,2,4 --n "$N" --iters "$ITERS" --optimizers adamw --grads bf16 \
  --pinning identical --json "$W/ranks-identical.json" > "$W/ranks-identical.log" 2> "$W/ranks-identical.err"
echo "rc $?"; sed -n '/^ranks /,$p' "$W/ranks-identical.log"; pack

step "k ranks at once, AdamW under DMA (H2D + D2H on GPU 0)"
timeout 60 $B/twinflow bench --cpu-ranks 1,2,4 --n "$N" --iters "$ITERS" --optimizers adamw --grads bf16 \
  --dma both --json "$W/ranks-dma.json" > "$W/ranks-dma.log" 2> "$W/ranks-dma.err"
echo "rc $?"; sed -n '/^ranks /,$p' "$W/ranks-dma.log"; pack

step "the engine's CPU ops of mlp-2b at ratio 0.05, CPU only (k = 1, 2, 4 ranks of that model)"
timeout 60 $B/twinflow bench --cpu-ranks 1,2,4 --scenario scenarios/real/mlp-2b.yaml --ratio 0.05 \
  --iters "$ITERS" --optimizers adamw --grads bf16 --dma both --per-layer "${PROFILE[@]}" \
  --json "$W/engine-ops.json" > "$W/engine-ops.log" 2> "$W/engine-ops.err"
echo "rc $?"; sed -n '/^rank 0/,$p' "$W/engine-ops.log" | head -40; pack

step "torch fused CPU AdamW, k processes at once on the same shares"
if python3 -c "import torch" 2>/dev/null; then
  for k in 1 2 4; do torch_at_once "$k" "$N" $((2 * ITERS)) "$W/ranks.err"; done
else
  echo "no torch on this machine: the torch rows are left out"
fi
pack

step "the engine on a real step: mlp-2b at ratio 0.05 (0.107 B CPU params), 6 steps"
timeout 120 $B/twinflow run scenarios/real/mlp-2b.yaml --ratio 0.05 --steps 6 --json "$W/run-2b.json" \
  --trace "$W/run-2b-trace.json" > "$W/run-2b.log" 2>&1
echo "rc $?"; grep -E "^run:|CPU optimizer threads" "$W/run-2b.log" | head -2; pack

step "report"
python3 bench/device/cpu_optimizer_report.py "$W" "$OUT/cpu-optimizer.md" "$OUT/cpu-optimizer.json"
cat "$OUT/cpu-optimizer.md"
pack
ls -la "$OUT"
