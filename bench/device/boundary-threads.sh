#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow and its libraries). GPT-350M s 2048 at
# ratio 0.3: does the step-boundary gap (the next step's first forward ~4.5 ms after the GPU optimizer, while the
# carried CPU pass runs; bench/results/2026-11-29-h200-decoder-head call 10) shrink when the CPU optimizer leaves
# cores to the issuing threads? --threads 16 (the default here), 15, 14 and 12, alternated over two rounds,
# and ratio 0 for the period without a CPU pass; 8 steps each, 3 traced. Everything lands in $OUT/boundary.tar.gz.
set -uo pipefail
W=/tmp/boundary
. bench/device/device_env.sh
pack() { tar czf "$OUT/boundary.tar.gz" -C "$W" .; }
LOG=$W machine_info
one() {  # NAME RATIO THREADS
  timeout 120 $B/twinflow run --scenario scenarios/real/gpt-350m-h200.yaml --ratio "$2" --threads "$3" --steps 8 \
    --json "$W/run-$1.json" --trace "$W/trace-$1.json" --trace-steps 3 > "$W/run-$1.log" 2>&1
  echo "$1: rc $? $(grep -A3 '^summary' "$W/run-$1.log" | tail -n 1 | awk '{print "step_ms", $3, "opt_phase_ms", $6}')"
}
for round in 1 2; do
  step "round $round"
  one r0-$round 0 16
  for t in 16 15 14 12; do one t$t-$round 0.3 $t; done
  pack
done
step done; pack
