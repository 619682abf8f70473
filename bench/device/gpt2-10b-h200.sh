#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow and its libraries). GPT-2 10B on one H200
# (scenarios/real/gpt2-10b-h200.yaml: micro-batch 8, checkpointing, ratio auto with the committed calibrated
# profile, speculation auto), 6 steps, traced: the step time against the simulator's, memory against the plan.
# Everything lands in $OUT/gpt2-10b-h200.tar.gz.
set -uo pipefail
W=/tmp/gpt2-10b-h200
. bench/device/device_env.sh
pack() { tar czf "$OUT/gpt2-10b-h200.tar.gz" -C "$W" .; }
LOG=$W machine_info
step "GPT-2 10B, ratio auto"
timeout 400 $B/twinflow run --scenario scenarios/real/gpt2-10b-h200.yaml --json "$W/run-gpt2-10b.json" \
  --trace "$W/trace-gpt2-10b.json" > "$W/run-gpt2-10b.log" 2>&1; echo "rc $?"
grep -E "ratio auto|engine built|step [0-9]+/|memory:|error" "$W/run-gpt2-10b.log" | cut -c1-200
grep -A4 "^summary" "$W/run-gpt2-10b.log" | tail -n +3 | cut -c1-170
step done; pack
