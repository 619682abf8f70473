#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200 from the repo root with .devbin/ carried (twinflow, tf_cuda_tests,
# bench_decoder_kernels and their libraries, xz-packed). With both wgmma attention kernels as the d-64 defaults
# (forward and dK/dV), one call, about 3 minutes:
#   1. tf_cuda_tests, all of it;
#   2. bench_decoder_kernels attention;
#   3. GPT-350M s 2048 (ratios 0, 0.3) and OPT-1.3B (ratio 0), 8 steps, validated against the built-in profile, and
#      transformers' GPT-350M in the same call; the tutorial for 4 steps.
# Everything in $OUT/session13-bwd.tar.gz.
set -uo pipefail
W=/tmp/session13-bwd
rm -rf "$W"
. bench/device/device_env.sh
unpack_devbin
pack() { pack_small session13-bwd; }
LOG=$W machine_info

step "tf_cuda_tests"
timeout 150 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|Failure|NOTE.*(dkdv|wgmma)" "$W/cuda-tests.log" | head -n 20; pack

step "bench_decoder_kernels attention"
timeout 50 $B/bench_decoder_kernels attention > "$W/bench.log" 2>&1; echo "rc $?"
grep -E "attention_(forward|backward) (\(causal\)|wgmma)" "$W/bench.log"; pack

ours() {  # NAME SCENARIO RATIOS STEPS
  step "ours: $1 (ratios $3)"
  timeout 150 $B/twinflow run --scenario "$2" --profile h200-141gb-16core-calibrated --ratios "$3" --steps "$4" \
    --json "$W/run-$1.json" \
    > "$W/run-$1.log" 2> "$W/run-$1.err"; echo "rc $?"
  grep -A4 "^summary" "$W/run-$1.log" | tail -n +3 | cut -c1-250; grep -E "error" "$W/run-$1.err" | head -3
  timeout 60 $B/twinflow validate --scenario "$2" --profile h200-141gb-16core-calibrated --measured "$W/run-$1.json" \
    > "$W/validate-$1.log" 2>&1
  grep -E "step time|SM clock|^ *[0-9]\." "$W/validate-$1.log" | cut -c1-250; pack
}
ours 350m scenarios/real/gpt-350m-h200.yaml 0,0.3 8
hf_speed 350m gpt2-350m 2048
ours opt1.3b scenarios/real/opt-1.3b-h100.yaml 0 8
ours tutorial scenarios/gpt-350m-ratio0.3.yaml 0.3 4
step done; pack
