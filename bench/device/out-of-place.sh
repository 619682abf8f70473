#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (bench/device/build-for-device.sh): the CPU
# optimizer's pass out of place (the engine's speculative update into a speculated layer's spare state slot:
# every CPU layer's update in a step whose speculation holds) against in place (what calibrate's rates and the
# engine's pages probe time), `bench --cpu-ranks --out-of-place`: the two alternating pass by pass, each rank's
# CPU layers of the scenario at world k, its memory page-locked as the engine's; the variant ntoop=0 without
# streaming stores for the out-of-place update. SCENARIOS "name:ratio ..." (default the 2 x H200 MLPs at the
# ratios whose CPU passes the 2026-11-29 tables missed), RANKS (default 2), ITERS (default 10), VARIANTS (default
# ntoop=0: ';'-separated tuning specs, each a pair of rows).
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
for sr in ${SCENARIOS:-mlp-2b-h200x2:0.6 mlp-8b-h200x2:0.8}; do
  s=${sr%%:*} r=${sr##*:}
  echo "=== $s ratio $r ($(date -u +%H:%M:%S))"
  .devbin/twinflow bench --cpu-ranks "${RANKS:-2}" --scenario "scenarios/real/$s.yaml" --ratio "$r" --out-of-place \
    --optimizers adamw --grads bf16 --variants "${VARIANTS:-ntoop=0}" --register --iters "${ITERS:-10}" \
    --json "$OUT/oop-$s-$r.json" > "$OUT/oop-$s-$r.txt" 2> "$OUT/oop-$s-$r.err"
  echo "rc $?"; cat "$OUT/oop-$s-$r.txt"; tail -n 3 "$OUT/oop-$s-$r.err"
done
