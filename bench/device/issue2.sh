#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root, with .devbin/ carried (bench/device/build-for-device.sh
# makes it). Everything issue 2 needs in one call: tests (CUDA ones included), the torch oracle
# check, bitwise verify across backends, and the benchmarks side by side with torch.
# Writes logs and JSON under $OUT (or out/device when OUT is unset).
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
run() { "$@" || { echo "FAILED ($?): $*"; status=1; }; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node\(s\)|Flags' | sed 's/Flags:.*\(avx512f\).*/Flags: ... avx512f .../' | tee -a "$OUT/machine.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/machine.txt"

step "unit + conformance tests (CUDA included)"
run $B/tf_unit_tests --gtest_brief=1 2>&1 | tail -3
run $B/tf_conformance_tests --gtest_brief=1 > "$OUT/conformance.log" 2>&1
tail -4 "$OUT/conformance.log"
grep -c 'SKIPPED' "$OUT/conformance.log" | sed 's/^/skipped lines: /'

step "Eigen double reference vs torch.optim (float64)"
run python3 tests/torch/test_reference_vs_torch.py $B/tf_reference_dump 2>&1 | tail -28

step "verify: bitwise parity scalar/AVX2/AVX-512/CUDA, tolerance vs reference, 100 steps"
run $B/twinflow verify --n 100003 --steps 100 --json "$OUT/verify.json" 2>/dev/null | tail -52

step "CUDA vs CPU bitwise check + GPU kernel table (cuda_optim_check)"
run $B/cuda_optim_check 2>&1 | tee "$OUT/cuda_check.log" | tail -30

step "torch peers: fused AdamW on GPU and CPU"
run python3 bench/peer/torch_adamw.py --json "$OUT/torch.json" 2>&1 | tail -12

step "twinflow bench (CPU pinned, all cores; GPU), torch ratios from the same run"
run $B/twinflow bench ${BENCH_FLAGS:-} --n $((1 << 26)) --gpu-n $((1 << 28)) --iters 15 --peer-json "$OUT/torch.json" \
  --json "$OUT/bench.json" 2>/dev/null

echo; echo "issue2.sh: $([ $status -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED)"
exit $status
