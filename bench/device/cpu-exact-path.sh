#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow, tf_unit_tests, tf_conformance_tests
# and their libraries). No GPU is used: this measures the host's CPU optimizer.
# The CPU kernels' exact path (backends/cpu/exact_ops.h: vectors near the subnormals take the update rules in
# double, rounded once per operation to fp32: the same bits without the processor's subnormal assists):
#   1. tf_unit_tests ExactPath* and tf_conformance_tests (every ISA with the exact path forced on, and as this
#      CPU's probe decides) on this CPU;
#   2. `bench --gpu off --pin --values random,half-zero,subnormal,decayed` with the exact path off (exact=0), on
#      (exact=1) and as the probe decides (default), alternating, ROUNDS rounds (default 2), N elements (2^28).
# Everything lands in $OUT/cpu-exact-path.tar.gz.
set -uo pipefail
W=/tmp/cpu-exact-path
. bench/device/device_env.sh
pack() { tar czf "$OUT/cpu-exact-path.tar.gz" -C "$W" .; }
LOG=$W machine_info

step "unit tests: ExactPath"; timeout 120 $B/tf_unit_tests --gtest_filter='ExactPath*' > "$W/unit.log" 2>&1; echo "rc $?"
grep -E "OK|FAILED" "$W/unit.log" | head -n 4
step "conformance"; timeout 300 $B/tf_conformance_tests > "$W/conformance.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran" "$W/conformance.log" | head -n 4; pack

for r in $(seq 1 "${ROUNDS:-2}"); do
  for tune in exact=0 exact=1 default; do
    step "CPU bench --tuning $tune, round $r"
    timeout 300 $B/twinflow bench --gpu off --pin --optimizers adamw --grads bf16,fp32 \
      --values random,half-zero,subnormal,decayed --n "${N:-268435456}" --iters 8 --tuning $tune \
      > "$W/cpu-$tune-$r.log" 2>&1; echo "rc $?"; grep -E "^cpu-|^cpu:" "$W/cpu-$tune-$r.log"
    pack
  done
done
step done; pack
