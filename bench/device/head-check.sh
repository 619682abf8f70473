#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow, tf_cuda_tests and their libraries): the
# session's last binaries checked once more. tf_cuda_tests, then the tutorial (fp16) for 3 steps, whose MFU line now
# divides by the peak of the dtype its GEMMs run in (bf16). Everything lands in $OUT/head-check.tar.gz.
set -uo pipefail
W=/tmp/head-check
. bench/device/device_env.sh
pack() { tar czf "$OUT/head-check.tar.gz" -C "$W" .; }
LOG=$W machine_info
step "tf_cuda_tests"; timeout 300 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$W/cuda-tests.log" | head -n 12; pack
step "the tutorial, 3 steps"
timeout 200 $B/twinflow run --scenario scenarios/gpt-350m-ratio0.3.yaml --profile h200-141gb-16core-calibrated --steps 3 \
  --json "$W/run-tutorial.json" > "$W/run-tutorial.log" 2>&1; echo "rc $?"
grep -E "step [0-9]+/|MFU:|error" "$W/run-tutorial.log" | cut -c1-230
step done; pack
