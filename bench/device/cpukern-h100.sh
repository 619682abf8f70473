#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1: the 16-core host) from the repo root with .devbin/ carried
# (bench/device/build-for-device.sh makes it); about 4 minutes expected, every step under its own timeout
# (590 s at worst, below the device's 10 minutes). The CPU optimizer at host memory speed
# (issue 15) and the simulator's shared host (issue 20), in one call:
#  1. calibrate (the fresh profile: thread curve, rank curve, bound);
#  2. the variants sweep: k = 1, 2, 4 rank processes at once through the engine's CPU path, AdamW bf16,
#     every tuning variant (cpu_tuning.h's knobs: prefetch distance and level, unroll, interleave,
#     streamed copy, work-stealing block, pool spin) and huge pages on/off, each row against the
#     read-modify-write bound of the optimizer's own streams measured by the same processes (plain and
#     streamed copy stores), the simulator's node time from the fresh profile beside the default row;
#     then the default rows once more (how much the check itself moves between two measurements);
#  3. per core: the same sweep with 1 thread, and 4 threads alone (torch's k = 4 share, alone);
#  4. torch fused CPU AdamW, k processes on the same shares, their timed windows started together
#     (--start-at) and checked for overlap, plus 1 and 4 threads alone;
#  5. the engine's own CPU ops of mlp-2b at ratio 0.05 (k = 1, 2, 4) against the simulator;
#  6. the real step: `twinflow run` mlp-2b at ratio 0.05 (the engine's defaults), beside torch, and again
#     with the sweep's best variant at k = 1 (--cpu-tuning).
# Results: $OUT/cpukern.md and $OUT/cpukern.json (the best variant per k first), the logs in
# $OUT/cpukern.tar.gz. Without a GPU (a dry run here) the sizes shrink and the GPU steps fail with their rc;
# the report is still written. N (elements over all ranks), ITERS, KS override.
set -uo pipefail
W=/tmp/cpukern
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build  # a dry run from a local build
rm -rf "${W:?}"/* 2>/dev/null
GPU=0
nvidia-smi -L > /dev/null 2>&1 && GPU=1
CORES=$(nproc)
if [ "$GPU" = 1 ]; then N=${N:-134217728} ITERS=${ITERS:-7}; else N=${N:-4194304} ITERS=${ITERS:-3}; fi
KS=${KS:-$(for k in 1 2 4; do [ "$k" -le "$CORES" ] && echo -n "$k,"; done | sed 's/,$//')}
VARIANTS="prefetch=0;prefetch=2048;prefetch=4096;level=1;unroll=2;unroll=4;interleave=2;nt=1;spin=50;block=64"
VARIANTS="$VARIANTS;nt=1,unroll=2;nt=1,level=1,prefetch=2048;nt=1,spin=50"
pack() { tar czf "$OUT/cpukern.tar.gz" -C "$W" . 2> /dev/null; }
trap pack EXIT
echo "N $N ITERS $ITERS KS $KS GPU $GPU binaries $B"

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
  lscpu | grep -E "Model name|NUMA|Socket|Thread|Core|MHz"; grep -H . /sys/kernel/mm/transparent_hugepage/enabled \
  /sys/kernel/mm/transparent_hugepage/defrag; grep -E "HugePages_|AnonHugePages" /proc/meminfo; } 2>&1 |
  tee "$W/machine.txt"

step "calibrate (the fresh profile)"
timeout 100 $B/twinflow calibrate --reps 10 --out "$W/cal.yaml" --force > "$W/calibrate.log" 2> "$W/calibrate.err"
echo "rc $?"; grep -E "cpu adamw|cpu read-modify|cpu optimizer streams|slowdown" "$W/calibrate.log"
PROFILE=()
[ -s "$W/cal.yaml" ] && PROFILE=(--profile "$W/cal.yaml")

step "the variants sweep: k ranks at once, AdamW bf16, against the bound of the same processes"
timeout 80 $B/twinflow bench --cpu-ranks "$KS" --n "$N" --iters "$ITERS" --optimizers adamw --grads bf16 \
  --variants "$VARIANTS" --huge-pages both "${PROFILE[@]}" --json "$W/ranks.json" > "$W/ranks.log" 2> "$W/ranks.err"
echo "rc $?"; sed -n '/^ranks /,$p' "$W/ranks.log" | head -60; grep -E "rank [0-9]+:|bound:" "$W/ranks.err"

step "the simulator's check again: the default rows of every k, measured a second time (the check's own spread)"
timeout 30 $B/twinflow bench --cpu-ranks "$KS" --n "$N" --iters "$ITERS" --optimizers adamw --grads bf16 \
  "${PROFILE[@]}" --json "$W/repeat.json" > "$W/repeat.log" 2> "$W/repeat.err"
echo "rc $?"; sed -n '/^ranks /,$p' "$W/repeat.log" | head -8

step "per core: 1 thread, and 4 threads alone (every variant)"
timeout 30 $B/twinflow bench --cpu-ranks 1 --threads 1 --n $((N / 8)) --iters "$ITERS" --optimizers adamw \
  --grads bf16 --variants "$VARIANTS" --json "$W/percore.json" > "$W/percore.log" 2> "$W/percore.err"
echo "rc $?"; sed -n '/^ranks /,$p' "$W/percore.log" | head -20
FOUR=$((CORES < 4 ? CORES : 4))
timeout 30 $B/twinflow bench --cpu-ranks 1 --threads "$FOUR" --n $((N / 4)) --iters "$ITERS" --optimizers adamw \
  --grads bf16,fp32 --variants "nt=1;unroll=2;level=1" --json "$W/four.json" > "$W/four.log" 2> "$W/four.err"
echo "rc $?"; sed -n '/^ranks /,$p' "$W/four.log" | head -12

step "torch fused CPU AdamW: k processes on the same shares, timed windows started together"
if python3 -c "import torch" 2> /dev/null; then
  for k in ${KS//,/ }; do torch_at_once "$k" "$N" $((2 * ITERS)) "$W/ranks.err" 40; done
  timeout 25 taskset -c 0 python3 bench/peer/torch_adamw.py --cpu-only --threads 1 --n $((N / 8)) \
    --iters $((2 * ITERS)) --json "$W/torch-alone-t1.json" > "$W/torch-alone-t1.log" 2>&1
  timeout 25 taskset -c "0-$((FOUR - 1))" python3 bench/peer/torch_adamw.py --cpu-only --threads "$FOUR" \
    --n $((N / 4)) --iters $((2 * ITERS)) --json "$W/torch-alone-t4.json" > "$W/torch-alone-t4.log" 2>&1
  cat "$W"/torch-alone-*.log
else
  echo "no torch on this machine: the torch rows are left out"
fi

step "the engine's CPU ops of mlp-2b at ratio 0.05 against the simulator (CPU only)"
timeout 30 $B/twinflow bench --cpu-ranks "$KS" --scenario scenarios/real/mlp-2b.yaml --ratio 0.05 --iters "$ITERS" \
  --optimizers adamw --grads bf16 --variants "spin=50;nt=1;nt=1,spin=50" "${PROFILE[@]}" \
  --json "$W/engine-ops.json" > "$W/engine-ops.log" 2> "$W/engine-ops.err"
echo "rc $?"; sed -n '/^ranks /,$p' "$W/engine-ops.log" | head -20

step "the engine on a real step: mlp-2b at ratio 0.05 (0.107 B CPU params), 6 steps"
timeout 60 $B/twinflow run scenarios/real/mlp-2b.yaml --ratio 0.05 --steps 6 --json "$W/run-2b.json" \
  > "$W/run-2b.log" 2>&1
echo "rc $?"; grep -E "^run:|CPU optimizer threads" "$W/run-2b.log" | head -2

step "the real step again with the sweep's best variant at k = 1 (--cpu-tuning)"
BEST=$(python3 -c "
import json, sys
rows = [r for r in json.load(open('$W/ranks.json')) if r['ranks'] == 1 and r['dma'] == 'off' and 'huge=0' not in r['tuning']]
print(max(rows, key=lambda r: r['Gparam/s'])['tuning'])" 2> /dev/null)
echo "best at k = 1: ${BEST:-none}"
if [ -n "$BEST" ] && [ "$BEST" != default ]; then
  timeout 60 $B/twinflow run scenarios/real/mlp-2b.yaml --ratio 0.05 --steps 6 --cpu-tuning "$BEST" \
    --json "$W/run-2b-best.json" > "$W/run-2b-best.log" 2>&1
  echo "rc $?"; grep -E "^run:" "$W/run-2b-best.log" | head -1
fi

step "report"
python3 bench/device/cpukern_report.py "$W" "$OUT/cpukern.md" "$OUT/cpukern.json"
echo "rc $?"
cat "$OUT/cpukern.md"
ls -la "$OUT"
