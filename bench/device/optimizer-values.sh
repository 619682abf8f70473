#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried: twinflow (the step kernel with every mapped
# input: zeros, subnormal dividends, tiny square roots), twinflow-nodiv (the same without the subnormal dividend's
# mapping), tf_cuda_tests, tf_conformance_tests, and their libraries.
# Do the optimizers' rates depend on the values they update, on the GPU and on this host's CPU?
#   1. tf_cuda_tests (CudaIeeeOps: the kernel's division and square root against the instructions on every float)
#      and tf_conformance_tests (every backend bit for bit, zeros and subnormals included);
#   2. GPU: `bench --values random,half-zero,subnormal,decayed`, twinflow-nodiv and twinflow alternating;
#   3. CPU: the same kinds of data through the CPU optimizer on all cores (pinned), ROUNDS rounds (default 2);
#   4. the peer: torch's fused AdamW on each kind of data, on the CPU and on CUDA (bench/peer/torch_adamw_values.py).
# Everything lands in $OUT/optimizer-values.tar.gz.
set -uo pipefail
W=/tmp/optimizer-values
. bench/device/device_env.sh
pack() { tar czf "$OUT/optimizer-values.tar.gz" -C "$W" .; }
LOG=$W machine_info
V=random,half-zero,subnormal,decayed

step "GPU tests"; timeout 200 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"
grep -E "CudaIeeeOps.*(OK|FAILED)|^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$W/cuda-tests.log" | head -n 10
step "conformance"; timeout 200 $B/tf_conformance_tests > "$W/conformance.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran" "$W/conformance.log" | head -n 4; pack

for r in $(seq 1 "${ROUNDS:-2}"); do
  for bin in twinflow-nodiv twinflow; do
    step "GPU bench $bin, round $r"
    timeout 120 $B/$bin bench --gpu on --optimizers adamw --grads bf16,fp32 --values $V --n 1048576 --iters 20 \
      > "$W/gpu-$bin-$r.log" 2>&1; echo "rc $?"; grep -E "H200 .*adamw" "$W/gpu-$bin-$r.log"
  done
done
pack
for r in $(seq 1 "${ROUNDS:-2}"); do
  step "CPU bench, all cores pinned, round $r"
  timeout 240 $B/twinflow bench --gpu off --pin --optimizers adamw --grads bf16,fp32 --values $V --n 268435456 \
    --iters 8 > "$W/cpu-$r.log" 2>&1; echo "rc $?"; grep -E "^cpu" "$W/cpu-$r.log"
  pack
done
step "torch fused AdamW on each kind of data"
timeout 240 python3 bench/peer/torch_adamw_values.py --cpu-n 67108864 --cuda-n 268435456 --json "$W/torch-values.json" \
  2>&1 | tee "$W/torch-values.log"
step done; pack
