#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow, tf_cuda_tests, bench_decoder_kernels and
# their libraries). The partials' fold with 32 lanes a column instead of 8 (backends/cuda/decoder_kernels.cu,
# kFoldLanes): the decoder kernels' tests, bench_decoder_kernels (the layer-norm backward and bias gradients include
# their folds; bench/results/2026-11-29-h200-decoder-calibrate call 2 has the 8-lane figures of the same bench), and
# GPT-350M s 2048 and GPT-2 124M at ratio 0 for 8 steps with traces, on the built-in calibrated profile.
# Everything lands in $OUT/fold-lanes.tar.gz.
set -uo pipefail
W=/tmp/fold-lanes
. bench/device/device_env.sh
pack() { tar czf "$OUT/fold-lanes.tar.gz" -C "$W" .; }
LOG=$W machine_info
step "decoder tests"
timeout 200 $B/tf_cuda_tests --gtest_filter='DecoderKernels.*:DecoderWorkload.*:DecoderEngine.*' > "$W/decoder-tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$W/decoder-tests.log" | head -n 12; pack
step "bench_decoder_kernels"
timeout 120 $B/bench_decoder_kernels > "$W/bench-kernels.log" 2>&1; echo "rc $?"
grep -E "^[a-z]|layer_norm|bias" "$W/bench-kernels.log"; pack
for m in "350m scenarios/real/gpt-350m-h200.yaml" "gpt2-124m scenarios/real/gpt2-124m-h100.yaml"; do
  set -- $m
  step "ours: $1"
  timeout 150 $B/twinflow run --scenario "$2" --profile h200-141gb-16core-calibrated --ratio 0 --steps 8 \
    --json "$W/run-$1.json" --trace "$W/trace-$1.json" > "$W/run-$1.log" 2>&1; echo "rc $?"
  grep -A4 "^summary" "$W/run-$1.log" | tail -n +3 | cut -c1-150; pack
done
step done; pack
