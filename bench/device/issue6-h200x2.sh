#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried
# (bench/device/build-for-device.sh makes it). Issue 6 on two H200s, ZeRO-3: calibrate (with the
# workloads' GEMM shapes), `twinflow validate` (measures the ratio sweep with the real backend over
# both GPUs, simulates the same points) on a 2.15B and an 8.05B MLP, then calibrate again for the
# stability check. Everything lands in $OUT/issue6-h200x2.tar.gz; the tables print here.
set -uo pipefail
OUT=${OUT:-out/device}
W=/tmp/issue6-h200x2
mkdir -p "$OUT" "$W"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
pack() { tar czf "$OUT/issue6-h200x2.tar.gz" -C "$W" .; }
CAL="--scenario scenarios/real/mlp-2b-h200x2.yaml --scenario scenarios/real/mlp-8b-h200x2.yaml"

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2;
  lscpu | grep -E "Model name|NUMA|Socket|Thread"; nvidia-smi topo -m | head -4; } | tee "$W/machine.txt"

step "calibrate (A)"
timeout 200 $B/twinflow calibrate --out "$W/h200x2-cal-a.yaml" $CAL > "$W/calibrate-a.log" 2> "$W/calibrate-a.err"
echo "rc $?"; tail -4 "$W/calibrate-a.err"; pack

for m in 2b 8b; do
  step "validate: ${m} MLP on 2 GPUs"
  timeout 270 $B/twinflow validate scenarios/real/mlp-${m}-h200x2.yaml --profile "$W/h200x2-cal-a.yaml" \
    --run-json "$W/sweep-${m}.json" --trace "$W/trace-${m}.json" --json "$W/validate-${m}.json" \
    --svg "$W/validate-${m}.svg" > "$W/validate-${m}.log" 2>&1
  echo "rc $?"; sed -n '/^validate: mlp/,$p' "$W/validate-${m}.log"; grep -E "summary" -A14 "$W/validate-${m}.log" | head -16
  pack
done

step "calibrate (B), for the stability check"
timeout 120 $B/twinflow calibrate --out "$W/h200x2-cal-b.yaml" $CAL > "$W/calibrate-b.log" 2> "$W/calibrate-b.err"
echo "rc $?"; tail -2 "$W/calibrate-b.err"; pack
ls -la "$OUT"
