#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried: twinflow (the kernel whose division and square
# root keep their fast paths on zeros and tiny values), twinflow-old (the kernel before), tf_conformance_tests and
# tf_cuda_tests, and their libraries.
#   1. tf_conformance_tests (every backend bit for bit against the scalar path, zeros and subnormals included);
#   2. tf_cuda_tests (the engine's parity tests, the decoder's included);
#   3. `bench --values random,half-zero,subnormal`, old and new binaries alternating, ROUNDS rounds (default 2);
#   4. the 2.15B MLP at ratio 0, old and new alternating: the step kernel's rate inside the steps (traced);
#   5. OPT-13B at ratio 0.45 for 2 steps: the engine's set-up line (initial weights drawn and rounded in one pass).
# Everything lands in $OUT/gpu-opt-fix.tar.gz.
set -uo pipefail
W=/tmp/gpu-opt-fix
. bench/device/device_env.sh
pack() { tar czf "$OUT/gpu-opt-fix.tar.gz" -C "$W" .; }
LOG=$W machine_info

step "conformance"; timeout 200 $B/tf_conformance_tests > "$W/conformance.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$W/conformance.log" | head -n 8; pack
step "GPU tests"; timeout 200 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$W/cuda-tests.log" | head -n 8; pack

for r in $(seq 1 "${ROUNDS:-2}"); do
  for bin in twinflow-old twinflow; do
    step "bench $bin, round $r"
    timeout 120 $B/$bin bench --optimizers adamw --grads bf16 --values random,half-zero,subnormal --n 1048576 \
      --iters 20 --gpu on > "$W/bench-$bin-$r.log" 2>&1; echo "rc $?"; grep -E "adamw" "$W/bench-$bin-$r.log" | grep H200
  done
done
pack
for r in $(seq 1 "${ROUNDS:-2}"); do
  for bin in twinflow-old twinflow; do
    step "MLP 2.15B ratio 0, $bin, round $r"
    timeout 120 $B/$bin run --scenario scenarios/real/mlp-2b.yaml --ratio 0 --steps 8 --json "$W/run-mlp2b-$bin-$r.json" \
      --trace "$W/trace-mlp2b-$bin-$r.json" --trace-steps 3 > "$W/run-mlp2b-$bin-$r.log" 2>&1; echo "rc $?"
    grep -A3 "^summary" "$W/run-mlp2b-$bin-$r.log" | tail -n 1 | cut -c1-140
  done
done
pack
step "OPT-13B at 0.45, 2 steps: the set-up line"
timeout 300 $B/twinflow run --scenario scenarios/real/opt-13b-h200.yaml --ratio 0.45 --steps 2 \
  --json "$W/run-opt13b.json" > "$W/run-opt13b.log" 2>&1; echo "rc $?"
grep -E "engine built|engine freed|error" "$W/run-opt13b.log" | cut -c1-300
step done; pack
