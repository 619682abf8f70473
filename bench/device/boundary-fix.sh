#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow, tf_cuda_tests and their libraries). The
# step boundary after sort_token_rows stopped building its error message for every token: the decoder tests, then
# GPT-350M s 2048 at ratios 0 and 0.3 (host_boundary_ns in --json) and the tutorial (fp16, 32 micro-batches a step)
# for 6 steps. Everything lands in $OUT/boundary-fix.tar.gz.
set -uo pipefail
W=/tmp/boundary-fix
. bench/device/device_env.sh
pack() { tar czf "$OUT/boundary-fix.tar.gz" -C "$W" .; }
LOG=$W machine_info
step "decoder tests"
timeout 200 $B/tf_cuda_tests --gtest_filter='DecoderWorkload.*:DecoderEngine.*:DecoderKernels.*:TokenRowIndex.*' \
  > "$W/decoder-tests.log" 2>&1; echo "rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$W/decoder-tests.log"
for r in 0 0.3; do
  step "GPT-350M ratio $r"
  timeout 120 $B/twinflow run --scenario scenarios/real/gpt-350m-h200.yaml --ratio $r --steps 10 \
    --json "$W/run-350m-$r.json" > "$W/run-350m-$r.log" 2>&1; echo "rc $?"
  grep -A3 "^summary" "$W/run-350m-$r.log" | tail -n 1 | awk '{print "step_ms", $3, "opt_phase_ms", $6}'
done
step "the tutorial, 6 steps"
timeout 200 $B/twinflow run --scenario scenarios/gpt-350m-ratio0.3.yaml --profile h200-141gb-16core-calibrated --steps 6 \
  --json "$W/run-tutorial.json" > "$W/run-tutorial.log" 2>&1; echo "rc $?"
grep -E "step [0-9]+/" "$W/run-tutorial.log" | cut -c1-130
grep -A3 "^summary" "$W/run-tutorial.log" | tail -n 1 | awk '{print "step_ms", $3, "opt_phase_ms", $6}'
step done; pack
