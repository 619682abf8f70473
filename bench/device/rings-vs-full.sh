#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried (twinflow).
# Do staging rings make the engine's CPU pass faster than full-size staging? The engine's passes (rings of 3 on
# OPT-30B) ran 5-15% faster than calibrate's rank group (full-size gradient and copy) on every machine, also at
# comparable footprints (bench/results/2026-11-30-h200x2-threads). The 8.05B MLP at world 2, ratio 0.5, each
# engine's pages probe (run --pages-probe: its own CPU pass over its own pages before step 1, no GPU work beside
# it) with --staging-slots 0 (full-size) and 3 (rings), alternating, REPS times each (new processes: new pages).
# About 40 s a run. Output: $OUT/rings-vs-full.txt and the logs in $OUT/rings-vs-full.tar.gz.
set -uo pipefail
W=/tmp/rings-vs-full
rm -rf "$W"
. bench/device/device_env.sh
export NCCL_NVLS_ENABLE=0
unpack_devbin
SC=scenarios/real/mlp-8b-h200x2.yaml
S=$OUT/rings-vs-full.txt
{ nproc; free -g | head -2; cat .devbin/COMMIT; } | tee "$S"
for rep in $(seq 1 "${REPS:-3}"); do
  for slots in 0 3; do
    step "rep $rep, --staging-slots $slots"
    timeout 150 $B/twinflow launch --nproc-per-node 2 -- run "$SC" --ratio 0.5 --steps 2 --pages-probe \
      --staging-slots "$slots" --json "$W/run-$rep-$slots.json" > "$W/run-$rep-$slots.log" 2>&1
    echo "rc $? rep $rep slots $slots: $(grep -E '^pages probe' "$W/run-$rep-$slots.log" | grep -oE 'node [0-9.]+ Gparam/s')" |
      tee -a "$S"
    grep -E "host staging|engine built" "$W/run-$rep-$slots.log" | cut -c1-200
  done
done
pack_small rings-vs-full
