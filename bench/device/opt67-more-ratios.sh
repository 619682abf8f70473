#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); about 150 s. Issue 16 asks `validate` over >= 8 ratios of OPT-6.7B; the
# decval call (bench/results/2026-11-24-decval-h100) measured 6 (0.35-0.8) before its time ran out. This
# measures the missing ones (RATIOS, default 0.9 and 1) the same way (scenarios/real/opt-6.7b-h100.yaml,
# STEPS=3 steps, speculation off) and merges them with the 6 committed points (opt-6.7b-measured-recovered.json,
# recovered from that call's logs by run_log_to_json.py), then validates the 8 points against the profile
# calibrated in that call (h100-decval.yaml). The new points run with this build's defaults (carry_tail on:
# `run --json` records it and validate simulates each point as it ran). Results in $OUT: the new runs' JSON,
# the merged sweep, validate's table, summary.txt; logs in one archive.
set -uo pipefail
OUT=${OUT:-out/opt67}
W=/tmp/tf-opt67
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build  # a dry run from a local build
archive_logs opt67 summary.txt
TF=$B/twinflow
S67=scenarios/real/opt-6.7b-h100.yaml
COMMITTED=bench/results/2026-11-24-decval-h100
RATIOS=${RATIOS:-0.9 1}
STEPS=${STEPS:-3}
say() { echo "$*" | tee -a "$LOG/summary.txt"; }
say "opt67-more-ratios $(date -u +%F) $(git rev-parse --short HEAD 2>/dev/null || echo '?'): ratios $RATIOS, $STEPS steps"
parts=("$COMMITTED/opt-6.7b-measured-recovered.json")
for r in $RATIOS; do
  step "OPT-6.7B ratio $r"
  timeout 110 $TF run $S67 --ratio "$r" --steps "$STEPS" --speculation 0 --json "$OUT/opt-6.7b-r$r.json" \
    > "$LOG/opt-6.7b-r$r.log" 2>&1
  rc=$?; say "ratio $r rc $rc ($SECONDS s)"
  grep -E "^memory:|^  step [0-9]+/|error" "$LOG/opt-6.7b-r$r.log" | tail -3 | tee -a "$LOG/summary.txt"
  [ "$rc" -eq 0 ] && [ -f "$OUT/opt-6.7b-r$r.json" ] && parts+=("$OUT/opt-6.7b-r$r.json")
done
step "merge and validate (${#parts[@]} documents)"
python3 - "$OUT/opt-6.7b-measured-8.json" "${parts[@]}" <<'PY'
import json, sys
docs = [json.load(open(f)) for f in sys.argv[2:]]
out = docs[0]
out["points"] = sorted((p for d in docs for p in d["points"]), key=lambda p: p["ratio"])
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(f"{len(out['points'])} points: " + ", ".join(str(p["ratio"]) for p in out["points"]))
PY
timeout 60 $TF validate $S67 --profile "$COMMITTED/h100-decval.yaml" --measured "$OUT/opt-6.7b-measured-8.json" \
  --json "$OUT/opt-6.7b-validate-8.json" --svg "$OUT/opt-6.7b-validate-8.svg" > "$LOG/validate.log" 2>&1
say "validate rc $? (0: goals met, 1: missed)"
sed -n '/^ratio  actual/,$p' "$LOG/validate.log" | tee -a "$LOG/summary.txt"
