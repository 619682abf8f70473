#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow, tf_cuda_tests, bench_decoder_kernels
# and their libraries). The decoder's head with its logits' rows padded to 16-byte alignment
# (core::decoder_layout::logits_stride), one call:
#   1. bench_decoder_kernels: every decoder kernel, and the logits' three GEMMs with the rows packed (ld = V),
#      padded to 8 (the workload's) and to 64;
#   2. tf_cuda_tests (the decoder kernels' and workloads' tests included);
#   3. calibrate on GPT-350M (the tutorial's shape) and OPT-1.3B: the profile the runs below are validated with;
#   4. GPT-350M s 2048 (ratios 0 and 0.3), OPT-1.3B and GPT-2 124M (ratio 0), each beside transformers (hf_decoder.py
#      speed, same model, batch and sequence).
# Everything lands in $OUT/decoder-head.tar.gz.
set -uo pipefail
W=/tmp/decoder-head
. bench/device/device_env.sh
pack() { tar czf "$OUT/decoder-head.tar.gz" -C "$W" .; }
LOG=$W machine_info
export PYTHONUNBUFFERED=1

step "bench_decoder_kernels"; timeout 150 $B/bench_decoder_kernels > "$W/bench-kernels.log" 2>&1; echo "rc $?"
grep -E "^[a-z]|logits|dz =|dE_head|cross" "$W/bench-kernels.log"; pack
step "tf_cuda_tests"; timeout 300 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$W/cuda-tests.log" | head -n 12; pack
step "calibrate"
timeout 200 $B/twinflow calibrate --out "$W/h200-cal.yaml" --scenario scenarios/real/gpt-350m-h200.yaml \
  --scenario scenarios/real/opt-1.3b-h100.yaml > "$W/calibrate.log" 2> "$W/calibrate.err"; echo "rc $?"
tail -n 2 "$W/calibrate.err"; pack

ours() {  # NAME SCENARIO RATIOS
  step "ours: $1 (ratios $3)"
  timeout 150 $B/twinflow run --scenario "$2" --profile "$W/h200-cal.yaml" --ratios "$3" --steps 8 \
    --json "$W/run-$1.json" --trace "$W/trace-$1.json" > "$W/run-$1.log" 2>&1; echo "rc $?"
  grep -A4 "^summary" "$W/run-$1.log" | tail -n +3 | cut -c1-150; pack
}
ours 350m scenarios/real/gpt-350m-h200.yaml 0,0.3; hf_speed 350m gpt2-350m 2048
ours opt1.3b scenarios/real/opt-1.3b-h100.yaml 0; hf_speed opt1.3b opt-1.3b 1024
ours gpt2-124m scenarios/real/gpt2-124m-h100.yaml 0; hf_speed gpt2-124m gpt2-124m 1024
step done; pack
