#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried
# (bench/device/build-for-device.sh makes it). Issue 4 on one H100, part A: the CUDA tests, parity
# with the functional simulator, MLP training, the infeasible ratio, the 5B ratio sweep.
# Part B (issue4-h100-opt.sh): the optimizer step against torch. Logs and JSON under $OUT.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
nproc | tee -a "$OUT/machine.txt"; free -g | head -2 | tee -a "$OUT/machine.txt"

step "tf_cuda_tests (engine parity, timeline, faults; MLP workload vs double reference)"
timeout 300 $B/tf_cuda_tests > "$OUT/cuda_tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|TFLOP" "$OUT/cuda_tests.log" | head -30

step "parity with the functional simulator: 1 GPU, ratios 0, 0.3, 1 (bitwise, 5 steps)"
timeout 200 $B/twinflow run scenarios/real/parity-mlp.yaml --ratios 0,0.3,1 --verify --steps 5 \
  --save-master /tmp/master-1gpu > "$OUT/parity-1gpu.log" 2>&1; echo "rc $?"
grep -E "parity" "$OUT/parity-1gpu.log"
sha256sum /tmp/master-1gpu.r* | tee "$OUT/master-1gpu.sha256"

step "faults: non-finite gradient (bf16 stops, fp16 skips), infeasible ratio"
timeout 60 $B/twinflow run scenarios/real/parity-mlp.yaml --ratio 0.3 --steps 3 --inject-inf-at-step 2 2>&1 | tail -2; echo "rc $?"
timeout 120 $B/twinflow run scenarios/real/mlp-5b-h100.yaml --ratio 0 --steps 1 2>&1 | tail -2; echo "rc $?"

step "MLP training (cuBLAS), 6.3M params, 30 steps, ratio 0.3"
timeout 120 $B/twinflow run scenarios/real/parity-mlp.yaml --workload mlp --ratio 0.3 --steps 30 \
  --json "$OUT/mlp-small.json" > "$OUT/mlp-small.log" 2>&1; echo "rc $?"
grep -E "^(1|2|10|20|30) " "$OUT/mlp-small.log" | head -8

step "ratio sweep: 5.0B MLP on one H100 (ratio 0 does not fit)"
timeout 420 $B/twinflow run scenarios/real/mlp-5b-h100.yaml --ratios 0.05,0.1,0.25,0.5,1 --steps 4 \
  --json "$OUT/sweep-5b.json" --trace "$OUT/trace-5b-r1.json" > "$OUT/sweep-5b.log" 2>&1; echo "rc $?"
sed -n '/^summary/,$p' "$OUT/sweep-5b.log"
grep -E "^ratio|GPU segment" "$OUT/sweep-5b.log" | head -12
