#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing. Issue 15's goal: `ratio: auto` picks a ratio whose
# measured step is within 5% of the best ratio of a measured sweep. For each scenario:
#  1. `twinflow run --ratio auto --profile h100-80gb-16core-calibrated` (the choice, its table and why);
#  2. a measured sweep of 6 ratios around the choice (the choice, +-0.1, +-0.2 and an end of the range
#     that fits, clipped to it), each trained from scratch for a few steps;
#  3. chosen against best: the median step (steps 2..N) at each ratio, the predicted one beside it, and
#     measured(chosen) / measured(best) against the 1.05 goal.
# About 5 minutes in all (each step has its own timeout, estimated in brackets). Logs and JSON land in $OUT.
set -uo pipefail
W=/tmp/tf-auto
OUT=${OUT:-out/auto-sweep}
. bench/device/device_env.sh
PROFILE=${PROFILE:-h100-80gb-16core-calibrated}
STEPS=${STEPS:-4}
TF=$B/twinflow

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; } \
  | tee "$OUT/machine.txt"

rc_all=0
for sc in scenarios/real/opt-1.3b-h100.yaml scenarios/real/mlp-2b.yaml; do
  name=$(basename "$sc" .yaml)
  step "$name: 1. run --ratio auto [~40 s]"
  timeout 150 $TF run "$sc" --ratio auto --profile "$PROFILE" --steps "$STEPS" --json "$OUT/$name-auto.json" \
    > "$OUT/$name-auto.log" 2>&1
  echo "rc $?"; grep -E "^ratio [0-9.]+: smallest|ratio auto|error" "$OUT/$name-auto.log" | head -5
  ratios=$(python3 - "$OUT/$name-auto.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["auto_ratio"]
lo, hi = a["fits"]
c = a["chosen"]["ratio"]
pts = [c]
for d in (0.1, -0.1, 0.2, -0.2, 0.3, -0.3, 0.4, -0.4, 0.6, -0.6, 1.0, -1.0):
    r = round(min(hi, max(lo, c + d)), 4)
    if all(abs(r - p) > 0.02 for p in pts):
        pts.append(r)
    if len(pts) == 6:
        break
print(",".join(f"{p:.4f}" for p in sorted(pts)))
PY
)
  if [ -z "$ratios" ]; then echo "no choice to sweep around (see $OUT/$name-auto.log)"; rc_all=1; continue; fi
  step "$name: 2. measured sweep over $ratios [~120 s]"
  timeout 300 $TF run "$sc" --ratios "$ratios" --profile "$PROFILE" --steps "$STEPS" --json "$OUT/$name-sweep.json" \
    > "$OUT/$name-sweep.log" 2>&1
  echo "rc $?"
  step "$name: 3. chosen against the best measured"
  python3 - "$OUT/$name-auto.json" "$OUT/$name-sweep.json" "$name" <<'PY' | tee "$OUT/$name-verdict.txt"
import json, statistics, sys
auto = json.load(open(sys.argv[1]))
sweep = json.load(open(sys.argv[2]))
a = auto["auto_ratio"]
pred = {round(p["requested"], 4): p["step_ms"] for p in a["table"]}
def median_ms(pt):
    steps = pt["steps"][1:] or pt["steps"]
    return statistics.median(s["step_ns"] for s in steps) / 1e6
rows = [(p["ratio"], median_ms(p)) for p in sweep["points"]]
chosen = a["chosen"]["ratio"]
best_r, best_ms = min(rows, key=lambda r: r[1])
chosen_r, chosen_ms = min(rows, key=lambda r: abs(r[0] - chosen))  # the sweep ran it rounded to 4 digits
print(f"{sys.argv[3]}: {a['why']}")
print(f"{'ratio':>8} {'measured ms':>12} {'predicted ms':>13}  (predicted: auto's table, where it has the ratio)")
for r, ms in rows:
    p = pred.get(round(r, 4))
    ptext = f"{p:13.2f}" if p is not None else f"{'-':>13}"
    print(f"{r:8.4f} {ms:12.2f} {ptext}{'  <- chosen' if r == chosen_r else ''}"
          f"{'  <- best measured' if r == best_r else ''}")
q = chosen_ms / best_ms
print(f"chosen {chosen_r:.4f}: {chosen_ms:.2f} ms; best measured {best_r:.4f}: {best_ms:.2f} ms; "
      f"chosen/best = {q:.4f} ({'within' if q <= 1.05 else 'OUTSIDE'} the 5% goal)")
sys.exit(0 if q <= 1.05 else 1)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc_all=1
done
exit $rc_all
