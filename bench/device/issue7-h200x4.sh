#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x4, .devbin/ carried. Issue 7 (4-GPU variant) and issue 6's
# calibration of this machine: calibrate, then ZeRO-3 + Twin-Flow on a 13.0B model across 4 H200s,
# a ratio sweep from the smallest feasible ratio (0 fits) to 1. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
if [ -z "${SKIP_CALIBRATE:-}" ]; then
step "calibrate this machine"
timeout 200 $B/twinflow calibrate --out "$OUT/h200x4-64core-calibrated.yaml" > "$OUT/calibrate.log" 2> "$OUT/calibrate.err"; echo "rc $?"
tail -40 "$OUT/calibrate.log"; tail -3 "$OUT/calibrate.err"
fi
step "13.0B MLP, ZeRO-3 over 4 H200s, ratios 0 .. 1"
timeout 420 $B/twinflow launch --nproc-per-node 4 -- run scenarios/real/mlp-13b-4gpu.yaml --ratios 0,0.25,0.5,1 \
  --steps 3 > "$OUT/sweep-13b-4gpu.log" 2>&1; echo "rc $?"
grep -E "GPU segment" "$OUT/sweep-13b-4gpu.log" | head -4
sed -n '/^summary/,$p' "$OUT/sweep-13b-4gpu.log"
