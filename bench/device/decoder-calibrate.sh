#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow, tf_cuda_tests, bench_decoder_kernels
# and their libraries). The decoder's simulator inputs, measured again, one call:
#   1. tf_cuda_tests, all of it (the token embedding gradient with its loads in flight, and the review mends);
#   2. bench_decoder_kernels' embedding and attention lines (the attention at GPT-2 124M's and OPT-1.3B's grids);
#   3. calibrate on GPT-350M, OPT-1.3B and GPT-2 124M: the attention per (head dim, seq, batch x heads), the
#      embedding's gradient on each scenario's own tokens; the profile the runs are validated with;
#   4. GPT-350M s 2048 (ratios 0 and 0.3), OPT-1.3B and GPT-2 124M (ratio 0), 8 steps each with traces, and the
#      tutorial (scenarios/gpt-350m-ratio0.3.yaml) for 4 steps with a trace;
# with the SM clock, power and throttle reasons every 100 ms (clocks.csv) and each phase's start (marks.txt).
# Everything lands in $OUT/decoder-calibrate.tar.gz.
set -uo pipefail
W=/tmp/decoder-calibrate
. bench/device/device_env.sh
pack() { tar czf "$OUT/decoder-calibrate.tar.gz" -C "$W" .; }
LOG=$W machine_info
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 100 > "$W/clocks.csv" 2>&1 &
SMI=$!

step "tf_cuda_tests"; mark tests
timeout 240 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$W/cuda-tests.log" | head -n 12; pack
step "bench_decoder_kernels"; mark bench
timeout 120 $B/bench_decoder_kernels > "$W/bench-kernels.log" 2>&1; echo "rc $?"
grep -E "^[a-z]|embedding|attention" "$W/bench-kernels.log" | head -n 40; pack
step "calibrate"; mark calibrate
timeout 240 $B/twinflow calibrate --out "$W/h200-cal.yaml" --scenario scenarios/real/gpt-350m-h200.yaml \
  --scenario scenarios/real/opt-1.3b-h100.yaml --scenario scenarios/real/gpt2-124m-h100.yaml \
  > "$W/calibrate.log" 2> "$W/calibrate.err"; echo "rc $?"
grep -E "decoder (attention|embedding)" "$W/calibrate.err" | cut -c1-160; tail -n 2 "$W/calibrate.err"; pack

ours() {  # NAME SCENARIO RATIOS STEPS
  step "ours: $1 (ratios $3)"; mark "$1"
  timeout 150 $B/twinflow run --scenario "$2" --profile "$W/h200-cal.yaml" --ratios "$3" --steps "$4" \
    --json "$W/run-$1.json" --trace "$W/trace-$1.json" > "$W/run-$1.log" 2>&1; echo "rc $?"
  grep -A4 "^summary" "$W/run-$1.log" | tail -n +3 | cut -c1-150; pack
}
ours 350m scenarios/real/gpt-350m-h200.yaml 0,0.3 8
ours opt1.3b scenarios/real/opt-1.3b-h100.yaml 0 8
ours gpt2-124m scenarios/real/gpt2-124m-h100.yaml 0 8
ours tutorial scenarios/gpt-350m-ratio0.3.yaml 0.3 4
kill $SMI; xz -T4 "$W"/trace-tutorial.json; step done; mark done; pack
