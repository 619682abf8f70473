#!/usr/bin/env bash
# Run ON THE GPU MACHINE (one H200) from the repo root with .devbin/ carried (twinflow, tf_cuda_tests,
# bench_decoder_kernels and their libraries, xz-packed). One call, about 8 minutes:
#   1. bench/device/wgmma-forward.sh: the wgmma attention forward's tests, its rate beside torch's SDPA backends,
#      memcheck (logs in $OUT/wgmma/);
#   2. the rest of tf_cuda_tests (the world-1 path after the ranks-per-node change of 4361c97);
#   3. calibrate on GPT-350M: the profile now records the SM clock its GEMM table ran at (gpu.gemm_sm_clock_mhz);
#   4. GPT-350M s 2048 at ratios 0 and 0.3 (8 steps) and the ZeRO-Offload++ tutorial (4 steps of 32 micro-batches)
#      with the GPU telemetry per step (run --json steps[].gpu), then validate of both against that profile, which
#      prints each point's clock beside calibrate's.
# Everything lands in $OUT (session13.tar.gz plus the wgmma logs).
set -uo pipefail
W=/tmp/session13
. bench/device/device_env.sh
unpack_devbin
pack() { tar czf "$OUT/session13.tar.gz" -C "$W" .; }
LOG=$W machine_info

step "wgmma forward (bench/device/wgmma-forward.sh)"
mkdir -p "$OUT/wgmma"
OUT="$OUT/wgmma" bash bench/device/wgmma-forward.sh 2>&1 | tail -n 60

step "tf_cuda_tests, all but DecoderKernels.*"
timeout 150 $B/tf_cuda_tests --gtest_filter='-DecoderKernels.*' > "$W/cuda-tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|Failure" "$W/cuda-tests.log" | head -n 20; pack

step "calibrate on GPT-350M (with the GEMM table's SM clock)"
timeout 220 $B/twinflow calibrate --out "$W/h200-cal.yaml" --scenario scenarios/real/gpt-350m-h200.yaml \
  > "$W/calibrate.log" 2> "$W/calibrate.err"; echo "rc $?"
grep -E "telemetry|SM clock" "$W/calibrate.err"; grep -E "gemm_sm_clock_mhz" "$W/h200-cal.yaml" | cut -c1-400
tail -n 2 "$W/calibrate.err"; pack

ours() {  # NAME SCENARIO RATIOS STEPS
  step "ours: $1 (ratios $3, $4 steps)"
  timeout 120 $B/twinflow run --scenario "$2" --profile "$W/h200-cal.yaml" --ratios "$3" --steps "$4" \
    --json "$W/run-$1.json" --metrics-port 9464 --metrics-linger 15 > "$W/run-$1.log" 2> "$W/run-$1.err" &
  local pid=$! i
  for i in $(seq 120); do grep -q "^summary" "$W/run-$1.log" 2> /dev/null && break; kill -0 $pid 2> /dev/null || break; sleep 1; done
  curl -s localhost:9464/metrics | grep -E "^twinflow_gpu_" > "$W/metrics-$1.txt"  # the last step's gauges
  wait $pid; echo "rc $?"
  grep -E "step [0-9]+/" "$W/run-$1.err" | cut -c1-200 | tail -n 6
  grep -A4 "^summary" "$W/run-$1.log" | cut -c1-260; cat "$W/metrics-$1.txt"
  timeout 60 $B/twinflow validate --scenario "$2" --profile "$W/h200-cal.yaml" --measured "$W/run-$1.json" \
    > "$W/validate-$1.log" 2>&1; echo "validate rc $?"
  grep -E "step time|SM clock|^ *[0-9]" "$W/validate-$1.log" | cut -c1-300; pack
}
ours 350m scenarios/real/gpt-350m-h200.yaml 0,0.3 8
ours tutorial scenarios/gpt-350m-ratio0.3.yaml 0.3 4
step done; pack
