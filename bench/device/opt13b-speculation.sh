#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (a stripped build/twinflow and its libraries).
# OPT-13B on one H200 (scenarios/real/opt-13b-h200.yaml: ~208 GB without offload, the host caps the ratio):
# the cost model's count of speculated CPU layers (`--speculation auto`) against none (`0`), and the simulator
# on this model with a profile calibrated in the same call.
#   1. calibrate on the scenario (its GEMM shapes, the host's CPU rates, the copies), or take CAL (a profile);
#   2. gradient_clipping 100 (no step clips, so every speculation holds: the regime once training settles),
#      RATIOS (default 0.45,0.6) once per budget of BUDGETS (default "auto 0"), ROUNDS rounds (default 1);
#   3. the scenario as written (clip 1.0 from a random init: every step clips, so no step after the first
#      speculates) at CLIP1_RATIOS (default 0.45) with `--speculation auto`: what the choice costs when it misses.
# Every run: STEPS steps (default 6), the call's profile (`run --profile`), the host probed before every ratio
# and after the last (`run --host-probe`). Tables afterwards, here:
#   twinflow validate scenarios/real/opt-13b-h200.yaml --profile DIR/cal.yaml --measured DIR/run-B-N.json
# Everything lands in $OUT/opt13b-speculation.tar.gz (packed after every step).
set -uo pipefail
W=/tmp/opt13b-speculation
. bench/device/device_env.sh
SC=scenarios/real/opt-13b-h200.yaml
pack() { tar czf "$OUT/opt13b-speculation.tar.gz" -C "$W" .; }

LOG=$W machine_info
cp "$SC" "$W/"
CSC=$W/opt-13b-h200.clip100.yaml
sed -E "s/^(  gradient_clipping:) .*/\1 100/; s#\.\./\.\./data/#$PWD/data/#" "$SC" > "$CSC"

if [ -n "${CAL:-}" ]; then  # an earlier call's profile: the runs' host probes track the host's drift since
  cp "$CAL" "$W/cal.yaml"
else
  step "calibrate on $SC"
  timeout 200 $B/twinflow calibrate --out "$W/cal.yaml" --scenario "$SC" > "$W/calibrate.log" 2> "$W/calibrate.err"
  echo "rc $?"; tail -n 3 "$W/calibrate.err"; pack
fi

run_one() {  # NAME SCENARIO RATIOS BUDGET
  step "$1: --speculation $4, ratios $3"
  timeout 240 $B/twinflow run "$2" --ratios "$3" --steps "${STEPS:-6}" --speculation "$4" --profile "$W/cal.yaml" \
    --host-probe --json "$W/run-$1.json" > "$W/run-$1.log" 2>&1
  echo "rc $?"; grep -E "^speculation:|^host probe|^memory:" "$W/run-$1.log" | cut -c1-220
  grep -A4 "^summary" "$W/run-$1.log" | cut -c1-120
  free -g | sed -n 2p
  pack
}

for round in $(seq 1 "${ROUNDS:-1}"); do
  for b in ${BUDGETS:-auto 0}; do run_one "clip100-$b-$round" "$CSC" "${RATIOS:-0.45,0.6}" "$b"; done
done
[ -n "${CLIP1_RATIOS-0.45}" ] && run_one "clip1-auto" "$SC" "${CLIP1_RATIOS:-0.45}" auto
step done
