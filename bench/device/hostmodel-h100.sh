#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h100-x1 from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing. The host model (issues 20 and 16), in one call:
#  1. `twinflow calibrate --scenario` OPT-1.3B (--reps 10): a fresh profile with the decoder terms, the
#     copies' slowdown under the CPU pass (pcie.h2d/d2h_slowdown_under_cpu_pass) and the rank curve on the
#     engine's op size (OPT-1.3B's median CPU layer piece) [~60 s];
#  2. the node check of issue 20: k = 1, 2, 4 rank processes at once through the engine's CPU path on
#     OPT-1.3B's own CPU ops at ratio 0.4 (`bench --cpu-ranks --scenario`), predicted (the fresh profile's
#     host model) against measured node time, ITERS passes per k, the whole check REPEATS times [~30 s];
#  3. `twinflow validate` OPT-1.3B (seq 1024, micro-batch 8, clip 1.0) at 5 ratios, 4 steps each, with the
#     fresh profile: step MAPE and worst, the H2D and D2H times predicted against measured [~50 s];
#  4. the same measured sweep with the fresh profile less the two copy terms (the term's effect alone),
#     and the committed 2026-11-24 sweep (10 ratios) re-simulated with the fresh profile [~5 s].
# About 150 s expected; every step under its own timeout (90 + 2 x 75 + 60 + 2 x 10 = 320 s at worst; NODE_ONLY=1 stops after the node check). Everything lands in $OUT: the
# profile, validate's JSON/CSV/SVG, the node checks' JSON, summary.txt; the logs in one archive.
# Without a GPU (a dry run here) calibrate and the measured sweep fail with their rc; the node check runs
# on OPT-1.3B at ratio 0.02 and step 4 re-simulates the committed sweep with the committed profile.
set -uo pipefail
OUT=${OUT:-out/hostmodel}
W=/tmp/tf-hostmodel
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build  # a dry run from a local build
archive_logs hostmodel summary.txt
TF=$B/twinflow
S13=scenarios/real/opt-1.3b-h100.yaml
COMMITTED=bench/results/2026-11-24-decval-h100
RATIOS=${RATIOS:-0,0.2,0.4,0.7,1}
STEPS=${STEPS:-5}  # a carried run's steady steps are 3..N-1 (apps/twinflow/steady_steps.h)
ITERS=${ITERS:-9}
REPEATS=${REPEATS:-2}
KS=${KS:-$(for k in 1 2 4; do [ "$k" -le "$(nproc)" ] && echo -n "$k,"; done | sed 's/,$//')}
GPU=0
nvidia-smi -L > /dev/null 2>&1 && GPU=1
NODE_RATIO=0.4
[ "$GPU" = 1 ] || NODE_RATIO=0.02  # this machine's memory: 26 M elements, not 526 M
PROFILE=$OUT/h100-hostmodel.yaml
SUM=$LOG/summary.txt
say() { echo "$*" | tee -a "$SUM"; }
verdicts() { grep -E "^(step time|peak GPU memory): MAPE|^validate: .* \| profile " "$1" | tee -a "$SUM"; }
table() { sed -n '/^ratio  actual/,/^step time/p' "$1" | tee -a "$SUM"; }

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null || echo "no GPU"
  nproc; free -g | head -2
  lscpu | grep -E "Model name|NUMA|Socket"; } 2>&1 | tee "$LOG/machine.txt"
say "hostmodel-h100 $(date -u +%F) $(git rev-parse --short HEAD 2>/dev/null || echo '?') GPU $GPU: $(head -1 "$LOG/machine.txt")"

step "1. calibrate --scenario OPT-1.3B --reps 10 [~60 s]"
timeout 90 $TF calibrate --out "$PROFILE" --scenario $S13 --reps 10 --force \
  > "$LOG/calibrate.log" 2> "$LOG/calibrate.err"
say "calibrate rc $?"
grep -E "under the CPU pass|rank process|while H2D\+D2H|slowdown while DMA|pcie pinned (H2D|D2H) 256" \
  "$LOG/calibrate.log" | tee -a "$SUM"
grep -E "_slowdown_under_cpu_pass|dma_slowdown_factor" "$PROFILE" 2> /dev/null | cut -c1-400 | tee -a "$SUM"
[ -f "$PROFILE" ] || { PROFILE=$COMMITTED/h100-decval.yaml; say "no fresh profile: using $PROFILE"; }

step "2. the node check: k = $KS on OPT-1.3B's CPU ops at ratio $NODE_RATIO, $ITERS passes, $REPEATS times [~30 s]"
for rep in $(seq 1 "$REPEATS"); do
  timeout 75 $TF bench --cpu-ranks "$KS" --scenario $S13 --ratio $NODE_RATIO --iters "$ITERS" --optimizers adamw \
    --grads bf16 --profile "$PROFILE" --json "$OUT/node-check-$rep.json" > "$LOG/node-check-$rep.log" \
    2> "$LOG/node-check-$rep.err"
  say "node check $rep rc $?"
  sed -n '/^ranks /,/^$/p' "$LOG/node-check-$rep.log" | tee -a "$SUM"
done
python3 - "$OUT"/node-check-*.json <<'PY' 2>&1 | tee -a "$SUM"
import json, statistics, sys
rows = {}
for f in sys.argv[1:]:
    try:
        doc = json.load(open(f))
    except (OSError, ValueError):
        continue
    for r in doc if isinstance(doc, list) else doc.get("rows", []):
        if r.get("dma", "off") == "off" and r.get("tuning", "default") == "default" and "sim error %" in r:
            rows.setdefault(int(r["ranks"]), []).append(r["sim error %"])
for k in sorted(rows):
    e = rows[k]
    print(f"node check k {k}: sim error % over {len(e)} checks: {', '.join(f'{x:.1f}' for x in e)}; "
          f"median {statistics.median(e):.1f}, spread {max(e) - min(e):.1f} points (goal |error| <= 5)")
PY

if [ -n "${NODE_ONLY:-}" ]; then say "NODE_ONLY: the validate steps are left out"; exit 0; fi
step "3. validate OPT-1.3B at $RATIOS, $STEPS steps, the fresh profile [~50 s]"
timeout 60 $TF validate $S13 --profile "$PROFILE" --ratios "$RATIOS" --steps "$STEPS" \
  --run-json "$OUT/opt-1.3b-measured.json" --json "$OUT/opt-1.3b-validate.json" \
  --csv "$OUT/opt-1.3b-validate.csv" --svg "$OUT/opt-1.3b-validate.svg" > "$LOG/opt-1.3b-validate.log" 2>&1
say "validate OPT-1.3B rc $? (0: goals met, 1: missed)"; verdicts "$LOG/opt-1.3b-validate.log"
table "$LOG/opt-1.3b-validate.log"

step "4. the copy terms' effect alone; the committed sweep re-simulated with the fresh profile [~5 s]"
grep -v "_slowdown_under_cpu_pass" "$PROFILE" > "$W/no-copy-term.yaml"
if [ -f "$OUT/opt-1.3b-measured.json" ]; then
  timeout 10 $TF validate $S13 --profile "$W/no-copy-term.yaml" --measured "$OUT/opt-1.3b-measured.json" \
    > "$LOG/opt-1.3b-validate-no-copy-term.log" 2>&1
  say "the same sweep, the fresh profile less the copy terms: rc $?"
  verdicts "$LOG/opt-1.3b-validate-no-copy-term.log"; table "$LOG/opt-1.3b-validate-no-copy-term.log"
fi
timeout 10 $TF validate $S13 --profile "$PROFILE" --measured "$COMMITTED/opt-1.3b-measured.json" \
  > "$LOG/committed-sweep-resimulated.log" 2>&1
say "the committed 2026-11-24 sweep (10 ratios) with $PROFILE: rc $?"
verdicts "$LOG/committed-sweep-resimulated.log"; table "$LOG/committed-sweep-resimulated.log"
say "done in $SECONDS s"
