#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h100-x1 from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing. Issue 16, "the simulator validated on decoders", in one call:
#  1. `twinflow calibrate --scenario` OPT-1.3B and OPT-6.7B: the machine's profile with the decoders' GEMM
#     shapes, their memory-bound kernels' rates by class (gpu.decoder_kernel_gbps) and the fused attention's
#     (gpu.attention_tflops_by_shape) [~80 s];
#  2. OPT-1.3B (scenarios/real/opt-1.3b-h100.yaml: seq 1024, micro-batch 8, clip 1.0) measured and validated
#     by `twinflow validate` over 10 ratios, 4 steps each, with each ratio's last step as an SVG timeline
#     (--timeline-svg: ratios 0, 0.4 and 1 are the issue's three) and its Chrome trace (in the archive: per
#     layer forward/backward against `simulate --trace`) [~100 s];
#  3. OPT-6.7B (scenarios/real/opt-6.7b-h100.yaml: seq 1024, micro-batch 4, checkpointing, clip 1.0) at 8
#     feasible ratios 0.35 .. 1 (speculation off: its `auto` budget fills the host at high ratios), one
#     `twinflow run` per ratio (each JSON kept if a later one runs out of time; the loop stops before the
#     time budget), merged and validated with `twinflow validate --measured` [~35 s a ratio];
#  4. the simulated timelines of OPT-1.3B at ratios 0, 0.4, 1 (`twinflow simulate --timeline-svg`) and the
#     same sweeps validated against the committed profile (h100-80gb-16core-calibrated: no decoder terms),
#     the before/after of the model [~5 s].
# About 8 minutes in all (budget 9: TF_BUDGET_S). Everything lands in $OUT: the profile, validate's
# JSON/CSV/SVG, the timelines, the measured sweeps, summary.txt; the logs in one archive.
set -uo pipefail
OUT=${OUT:-out/decval}
W=/tmp/tf-decval
. bench/device/device_env.sh
archive_logs decval summary.txt
TF=$B/twinflow
S13=scenarios/real/opt-1.3b-h100.yaml
S67=scenarios/real/opt-6.7b-h100.yaml
R13=${R13:-0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.8,1}
R67=${R67:-0.35 0.4 0.5 0.6 0.7 0.8 0.9 1}
STEPS13=${STEPS13:-4}
STEPS67=${STEPS67:-3}
BUDGET=${TF_BUDGET_S:-530}  # seconds of this script; a 6.7B ratio is not started with < 45 s left
PROFILE=$OUT/h100-decval.yaml
OLD=h100-80gb-16core-calibrated
SUM=$LOG/summary.txt
say() { echo "$*" | tee -a "$SUM"; }
# validate's verdict lines (and the point table) into the summary
verdicts() { grep -E "^(step time|peak GPU memory): MAPE|^validate: .* \| profile " "$1" | tee -a "$SUM"; }

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; } \
  | tee "$LOG/machine.txt"
say "decval-h100 $(date -u +%F) $(git rev-parse --short HEAD 2>/dev/null || echo '?'): $(head -1 "$LOG/machine.txt")"

step "1. calibrate --scenario OPT-1.3B, OPT-6.7B [~80 s]"
timeout 150 $TF calibrate --out "$PROFILE" --scenario $S13 --scenario $S67 > "$LOG/calibrate.log" 2> "$LOG/calibrate.err"
rc=$?; say "calibrate rc $rc"
grep -E "^decoder |gpu.hbm_gbps|kernel_launch" "$LOG/calibrate.log" | tee -a "$SUM"
[ -f "$PROFILE" ] || { say "no profile: validating with $OLD"; PROFILE=$OLD; }

step "2. OPT-1.3B: validate over $R13, $STEPS13 steps each, timelines [~100 s]"
timeout 200 $TF validate $S13 --profile "$PROFILE" --ratios "$R13" --steps "$STEPS13" \
  --run-json "$OUT/opt-1.3b-measured.json" --timeline-svg "$OUT/opt-1.3b-timeline-measured.svg" \
  --trace "$LOG/opt-1.3b-trace.json" \
  --json "$OUT/opt-1.3b-validate.json" --csv "$OUT/opt-1.3b-validate.csv" --svg "$OUT/opt-1.3b-validate.svg" \
  --memory-svg "$OUT/opt-1.3b-memory.svg" > "$LOG/opt-1.3b-validate.log" 2>&1
say "validate OPT-1.3B rc $? (0: goals met, 1: missed)"; verdicts "$LOG/opt-1.3b-validate.log"
sed -n '/^ratio  actual/,/^step time/p' "$LOG/opt-1.3b-validate.log" | tee -a "$SUM"
# keep only the issue's three measured timelines in $OUT (the rest in the archive)
for f in "$OUT"/opt-1.3b-timeline-measured-r*.svg; do
  [ -e "$f" ] || continue
  case "$f" in *-r0.000.svg|*-r0.400.svg|*-r1.000.svg) ;; *) mv "$f" "$LOG/" ;; esac
done

step "3. OPT-6.7B: one run per ratio ($R67), $STEPS67 steps, speculation off [~35 s a ratio]"
parts=()
for r in $R67; do
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt 45 ]; then say "OPT-6.7B: stopped before ratio $r (${left} s left of the budget)"; break; fi
  t=$((left - 20 < 120 ? left - 20 : 120))
  timeout "$t" $TF run $S67 --ratio "$r" --steps "$STEPS67" --speculation 0 --json "$W/opt-6.7b-r$r.json" \
    > "$LOG/opt-6.7b-r$r.log" 2>&1
  rc=$?; echo "ratio $r rc $rc ($SECONDS s)"
  grep -E "^memory:|^  step [0-9]+/" "$LOG/opt-6.7b-r$r.log" | tail -2
  [ "$rc" -eq 0 ] && [ -f "$W/opt-6.7b-r$r.json" ] && parts+=("$W/opt-6.7b-r$r.json")
done
say "OPT-6.7B: ${#parts[@]} ratios measured"
if [ "${#parts[@]}" -gt 0 ]; then
  # one sweep document: the first run's header with every run's point
  python3 - "$OUT/opt-6.7b-measured.json" "${parts[@]}" <<'PY'
import json, sys
docs = [json.load(open(f)) for f in sys.argv[2:]]
out = docs[0]
out["points"] = [p for d in docs for p in d["points"]]
json.dump(out, open(sys.argv[1], "w"), indent=1)
PY
  timeout 60 $TF validate $S67 --profile "$PROFILE" --measured "$OUT/opt-6.7b-measured.json" \
    --json "$OUT/opt-6.7b-validate.json" --csv "$OUT/opt-6.7b-validate.csv" --svg "$OUT/opt-6.7b-validate.svg" \
    --memory-svg "$OUT/opt-6.7b-memory.svg" > "$LOG/opt-6.7b-validate.log" 2>&1
  say "validate OPT-6.7B rc $?"; verdicts "$LOG/opt-6.7b-validate.log"
  sed -n '/^ratio  actual/,/^step time/p' "$LOG/opt-6.7b-validate.log" | tee -a "$SUM"
fi

step "4. simulated timelines of OPT-1.3B; the sweeps against the committed profile ($OLD)"
for r in 0 0.4 1; do
  timeout 30 $TF simulate $S13 --profile "$PROFILE" --ratio $r --previous-step-clipped \
    --timeline-svg "$OUT/opt-1.3b-timeline-simulated-r$r.svg" > "$LOG/simulate-r$r.log" 2>&1
  echo "simulate ratio $r rc $?"
done
for m in opt-1.3b opt-6.7b; do
  [ -f "$OUT/$m-measured.json" ] || continue
  sc=$S13; [ $m = opt-6.7b ] && sc=$S67
  timeout 60 $TF validate $sc --profile $OLD --measured "$OUT/$m-measured.json" --json "$W/$m-validate-old.json" \
    > "$LOG/$m-validate-old.log" 2>&1
  say "$m against $OLD (before the decoder terms): rc $?"; verdicts "$LOG/$m-validate-old.log"
done
say "done in $SECONDS s"
