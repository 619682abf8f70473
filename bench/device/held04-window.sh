#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing; about 4 minutes. Issue 15, OPT-1.3B (seq 1024,
# micro-batch 8) at ratio 0.4 against ratio 0 with more steady steps than a 7-step run gives (one H100 host's
# steps spread by +-10%), and the steady steps' carried tails in one trace:
#  1. gradient clipping 100 (every speculation holds), 16 steps a run, alternated twice: ratio 0, ratio 0.4
#     in the cost model's CPU pass order (--cpu-order auto, the default) and in arrival order; the second
#     round's ratio-0.4 auto run also writes the last 4 steps' trace on one time axis (--trace-steps 4: what
#     a step's forward waits for among the previous step's carried ops);
#  2. gradient clipping 1.0 (every step clips), 12 steps: ratios 0, 0.4 and 1;
#  3. the summary (bench/device/run_summary.py): per run the median tokens/s of the steady steps (neither
#     the first two nor the drained last), x the same round's ratio 0, the CPU pass ms, and for the traced
#     run the compute queue's idle gaps over 1 ms per steady step with the ops that ended just before each
#     gap's end (what the GPU waited for), in $OUT/held04-window.txt.
# DRY=1 prints the commands instead of running them (any machine).
set -uo pipefail
OUT=${OUT:-out/held04-window}
W=/tmp/tf-held04-window
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs held04-window held04-window.txt
export TWINFLOW_SOURCE_DIR=$PWD
TF=$B/twinflow
SC=scenarios/real/opt-1.3b-h100.yaml
CSC=${SC%.yaml}.held04w.yaml  # beside it: the scenario names its token file relative to itself

machine_info

# point NAME SCENARIO STEPS RATIO [ARGS...]: one run, its JSON in $LOG/NAME.json
point() {
  local name=$1 sc=$2 steps=$3 r=$4
  shift 4
  x timeout 150 $TF run "$sc" --ratio "$r" --steps "$steps" --json "$LOG/$name.json" "$@" > "$LOG/$name.log" 2>&1
  echo "$name rc $?"; grep -E "CPU pass order|error" "$LOG/$name.log" | head -2
}

step "1. clip 100, 16 steps, two rounds: ratio 0, 0.4 auto, 0.4 arrival [~150 s]"
sed -E "s/^(  gradient_clipping:) .*/\1 100/" $SC > "$CSC"
for round in 1 2; do
  point "c100-$round-r0" "$CSC" 16 0
  if [ $round = 2 ]; then
    point "c100-$round-r0.4-auto" "$CSC" 16 0.4 --cpu-order auto --trace "$LOG/c100-r0.4-auto-trace4.json" --trace-steps 4
  else
    point "c100-$round-r0.4-auto" "$CSC" 16 0.4 --cpu-order auto
  fi
  point "c100-$round-r0.4-arrival" "$CSC" 16 0.4 --cpu-order arrival
done
rm -f "$CSC"

step "2. clip 1.0, 12 steps: ratios 0, 0.4, 1 [~60 s]"
for r in 0 0.4 1; do point "c1-r$r" $SC 12 $r; done

step "3. summary"
[ -n "${DRY:-}" ] && exit 0
rows=()
for k in 1 2; do for v in r0 r0.4-auto r0.4-arrival; do rows+=(--row "c100-$k-$v=c100-$k-r0"); done; done
for r in 0 0.4 1; do rows+=(--row "c1-r$r=c1-r0"); done
python3 bench/device/run_summary.py "$LOG" "${rows[@]}" --trace "$LOG/c100-r0.4-auto-trace4.json" \
  --title "OPT-1.3B, seq 1024, micro-batch 8, one H100; medians of the steady steps (a carried step's time is its period)" \
  | tee "$LOG/held04-window.txt"
