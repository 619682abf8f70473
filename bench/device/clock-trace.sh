#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried (bench/device/build-for-device.sh).
# Does the SM clock drop where the GPU-bound steps' ops slow down? In the committed 8.05B MLP traces on two H200s
# (ratio 0) every backward op, all-gather and reduce-scatter ran 7-25% longer from about the 25th backward layer on,
# on both ranks at once, while the simulator (and the first layers) kept the GEMM table's time: the 2-6% the
# simulator is short at ratios 0-0.2 in every 8.05B table. `run --trace` now carries the GPU's SM clock, the power
# cap's hold, power and temperature as counters beside the ops (bench/device/clock_vs_ops.py reads them).
# Runs: the 8.05B MLP on both GPUs at ratios 0 and 0.1; the 2.15B MLP on one GPU at ratio 0; the ZeRO-Offload++
# tutorial (GPT-350M, 3.3 s steps) on one GPU. About 4 minutes. Output: $OUT/clock.tar.gz and $OUT/clock-summary.txt.
set -uo pipefail
W=/tmp/clock
rm -rf "$W"
. bench/device/device_env.sh
unpack_devbin
chmod +x "$B"/twinflow "$B"/tf_cuda_tests 2> /dev/null
export NCCL_NVLS_ENABLE=0
S=$OUT/clock-summary.txt
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader; nproc; cat .devbin/COMMIT; } | tee "$S"
pack() { tar czf "$OUT/clock.tar.gz" -C "$W" .; }
report() {  # NAME TRACES...
  local name=$1; shift
  python3 bench/device/clock_vs_ops.py "$@" --json "$W/$name-clock.json" 2>&1 | tee -a "$S"
}

step "8.05B MLP, two GPUs, ratios 0 and 0.1"
timeout 300 $B/twinflow launch --nproc-per-node 2 -- run scenarios/real/mlp-8b-h200x2.yaml --ratios 0,0.1 --steps 6 \
  --trace "$W/trace-8b.json" --trace-steps 3 --json "$W/run-8b.json" > "$W/run-8b.log" 2>&1
echo "8b rc $?" | tee -a "$S"; grep -E "^(ratio|summary)|^[01]\.[0-9]+ +[01]\." "$W/run-8b.log" | head -8 | tee -a "$S"
report 8b "$W"/trace-8b-r0.000.json "$W"/trace-8b-r0.000.json.rank1 "$W"/trace-8b-r0.100.json
pack

step "2.15B MLP, one GPU, ratio 0"
timeout 200 $B/twinflow run scenarios/real/mlp-2b.yaml --ratios 0 --steps 8 --trace "$W/trace-2b.json" --trace-steps 3 \
  --json "$W/run-2b.json" > "$W/run-2b.log" 2>&1
echo "2b rc $?" | tee -a "$S"
report 2b "$W/trace-2b.json"
pack

step "the ZeRO-Offload++ tutorial (GPT-350M), one GPU"
timeout 200 $B/twinflow run scenarios/gpt-350m-ratio0.3.yaml --steps 4 --trace "$W/trace-350m.json" --trace-steps 2 \
  --json "$W/run-350m.json" > "$W/run-350m.log" 2>&1
echo "350m rc $?" | tee -a "$S"
report 350m "$W/trace-350m.json" --kinds forward,backward,gpu_optimizer
pack
ls -la "$OUT"

if [ -z "${SKIP_TESTS:-}" ] && [ -f "$B/tf_cuda_tests" ]; then
  step "tf_cuda_tests"
  timeout 240 "$B/tf_cuda_tests" > "$W/tf_cuda_tests.log" 2>&1; echo "tf_cuda_tests rc $?" | tee -a "$S"
  tail -n 3 "$W/tf_cuda_tests.log" | tee -a "$S"; pack
fi
