#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow and its libraries). GPT-350M s 2048 at
# ratio 0.3: where the carried CPU tail's copies wait. 8 steps, the last 3 traced on one time axis, so the next
# step's ops beside the carried H2Ds show. Everything lands in $OUT/tail-trace.tar.gz.
set -uo pipefail
W=/tmp/tail-trace
. bench/device/device_env.sh
pack() { tar czf "$OUT/tail-trace.tar.gz" -C "$W" .; }
LOG=$W machine_info
step "GPT-350M ratio 0.3, 8 steps, 3 traced"
timeout 150 $B/twinflow run --scenario scenarios/real/gpt-350m-h200.yaml --ratio 0.3 --steps 8 \
  --json "$W/run-350m-03.json" --trace "$W/trace-350m-03.json" --trace-steps 3 > "$W/run-350m-03.log" 2>&1
echo "rc $?"; grep -A3 "^summary" "$W/run-350m-03.log" | tail -n 1 | cut -c1-160
step done; pack
