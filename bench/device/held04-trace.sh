#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried; about 1 minute.
# OPT-1.3B at ratio 0.4 with every speculation holding (gradient clipping 100) ran 155 ms a step against 137 ms
# predicted and 132 ms of GPU work (bench/results/2026-11-25-overlap-h100): where do the other 20 ms go? Ratio
# 0.4 and ratio 0, 7 steps each, with the last step's Chrome trace and timeline SVG, and the run JSON.
set -uo pipefail
W=/tmp/tf-held04
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs held04 held04.txt
SC=scenarios/real/opt-1.3b-h100.yaml
C100=${SC%.yaml}.held04.yaml  # beside it: the scenario names its token file relative to itself
sed -E "s/^(  gradient_clipping:) .*/\1 100/" $SC > "$C100"
for r in 0.4 0; do
  step "ratio $r, speculation holding"
  timeout 90 $B/twinflow run "$C100" --ratio $r --steps 7 --json "$LOG/r$r.json" --trace "$LOG/r$r-trace.json" \
    --timeline-svg "$LOG/r$r-timeline.svg" > "$LOG/r$r.log" 2>&1
  echo "rc $?"; grep -E "^ratio|summary" -A3 "$LOG/r$r.log" | tail -3
done
rm -f "$C100"
grep -h "step .*/7" "$LOG"/r*.log > "$LOG/held04.txt"
