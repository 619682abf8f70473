#!/usr/bin/env bash
# Issue 16: the committed decoder measurements of 2026-11-24 against the simulator with the committed
# calibrated H100 profile (no decoder terms), through `twinflow validate --measured` (no GPU).
# Usage, from the repo root: bench/results/2026-11-24-decval-committed/run.sh [path/to/twinflow]
# opt-6.7b-measured.json merges bench/results/2026-11-24-opt6.7b-h100/{sweep/r0.35,sweep/r0.4,r1}.json
# (one `twinflow run --json` document, the three points); opt-1.3b-warm-spec-{off,on}-measured.json merge
# bench/results/2026-11-24-overlap-h100/warm30-clip1/opt-{off,on}-R.json (R = 0, 0.2, ..., 1: resumed from a
# 30-step checkpoint, every step clipped; speculation off, and on but off after each clipped step).
set -uo pipefail
TF=${1:-build/twinflow}
D=bench/results/2026-11-24-decval-committed
P=h100-80gb-16core-calibrated
{ echo "\$ twinflow validate scenarios/real/opt-1.3b-h100.yaml --profile $P --measured bench/results/2026-11-24-auto-sweep-h100/opt-1.3b-h100-sweep.json"
  "$TF" validate scenarios/real/opt-1.3b-h100.yaml --profile $P \
    --measured bench/results/2026-11-24-auto-sweep-h100/opt-1.3b-h100-sweep.json --json "$D/opt-1.3b-validate.json" \
    --csv "$D/opt-1.3b-validate.csv" --svg "$D/opt-1.3b-validate.svg" --memory-svg "$D/opt-1.3b-memory.svg" 2>&1
  echo "(exit $?)"; } > "$D/opt-1.3b-validate.txt"
{ echo "\$ twinflow validate scenarios/real/opt-6.7b-h100.yaml --profile $P --measured $D/opt-6.7b-measured.json"
  "$TF" validate scenarios/real/opt-6.7b-h100.yaml --profile $P --measured "$D/opt-6.7b-measured.json" \
    --json "$D/opt-6.7b-validate.json" --csv "$D/opt-6.7b-validate.csv" --svg "$D/opt-6.7b-validate.svg" \
    --memory-svg "$D/opt-6.7b-memory.svg" 2>&1
  echo "(exit $?)"; } > "$D/opt-6.7b-validate.txt"
for f in off on; do
  { echo "\$ twinflow validate scenarios/real/opt-1.3b-h100.yaml --profile $P --measured $D/opt-1.3b-warm-spec-$f-measured.json"
    "$TF" validate scenarios/real/opt-1.3b-h100.yaml --profile $P --measured "$D/opt-1.3b-warm-spec-$f-measured.json" \
      --json "$D/opt-1.3b-warm-spec-$f-validate.json" 2>&1
    echo "(exit $?)"; } > "$D/opt-1.3b-warm-spec-$f-validate.txt"
done
tail -n 4 "$D"/*.txt
