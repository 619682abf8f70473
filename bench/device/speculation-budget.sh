#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (bench/device/build-for-device.sh, or a
# stripped build/twinflow with its libraries). The speculation budget against the step time: how many CPU
# layers should update speculatively (into their spare state slot, out of place) before the norm is known.
# calibrate on the scenario first (the profile the runs are re-simulated with: `twinflow validate SCENARIO
# --profile cal.yaml --measured run-B-N.json`), then `twinflow run` over RATIOS once per budget of BUDGETS
# (`--speculation` values: auto, 0 or bytes), the budgets in turn and ROUNDS rounds of them, so the host's
# drift in time falls on every budget alike. SCENARIO (default scenarios/real/mlp-2b.yaml), RATIOS (default
# 0.3,0.8,1), BUDGETS (default "auto 3221618688 0": every eligible layer the host holds, 4 of the 2.15B MLP's
# layers (4 x 8192 x 8193 x 12 B), none), ROUNDS (default 2), STEPS (default 8). RUN_PROFILE=1 runs with the
# call's profile (`run --profile`: the cost model's choices, cpu_order auto, from this host's calibration, not
# the scenario's), TRACE_STEPS=N writes each run's last N steps per ratio (`run --trace`, trace-B-N.json.rR),
# HOST_PROBE=1 probes the host's CPU rate before every ratio and after the last (`run --host-probe`). Everything
# lands in $OUT/speculation-budget.tar.gz.
set -uo pipefail
W=/tmp/speculation-budget
. bench/device/device_env.sh
export NCCL_NVLS_ENABLE=0
SC=${SCENARIO:-scenarios/real/mlp-2b.yaml}
pack() { tar czf "$OUT/speculation-budget.tar.gz" -C "$W" .; }

LOG=$W machine_info

step "calibrate on $SC"
timeout 200 $B/twinflow calibrate --out "$W/cal.yaml" --scenario "$SC" > "$W/calibrate.log" 2> "$W/calibrate.err"
echo "rc $?"; tail -n 4 "$W/calibrate.err"; pack

for round in $(seq 1 "${ROUNDS:-2}"); do
  for b in ${BUDGETS:-auto 3221618688 0}; do
    step "round $round: --speculation $b, ratios ${RATIOS:-0.3,0.8,1}"
    timeout 150 $B/twinflow run "$SC" --ratios "${RATIOS:-0.3,0.8,1}" --steps "${STEPS:-8}" --speculation "$b" \
      ${RUN_PROFILE:+--profile "$W/cal.yaml"} ${HOST_PROBE:+--host-probe} \
      ${TRACE_STEPS:+--trace "$W/trace-$b-$round.json" --trace-steps "$TRACE_STEPS"} \
      --json "$W/run-$b-$round.json" > "$W/run-$b-$round.log" 2>&1
    echo "rc $?"; grep -E "^speculation:|^CPU pass order|^host probe" "$W/run-$b-$round.log" | cut -c1-200
    grep -A5 "^summary" "$W/run-$b-$round.log" | cut -c1-60
    pack
  done
done
