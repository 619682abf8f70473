#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried (issue 20). At 8.05B ratio 1 the
# training CPU passes ran 9-16% longer than the engine's own probe of the same pages predicts
# (bench/results/2026-11-28-h200x2-pages). Is it the speculated layers (their out-of-place passes into the spare
# slot, pages the probe does not touch)? The same ratio twice on both GPUs, each with run --pages-probe and its
# trace: the scenario's speculation, then --speculation 0. Compare each run's CPU pass (cpu_opt_ms) with its probe
# (`python3 bench/device/cpu_pass_rates.py OUT/trace-spec` for the passes' rates). About 3 minutes.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=.devbin
for spec in default 0; do
  echo "=== speculation $spec ($(date -u +%T))"
  extra=()
  [ "$spec" = 0 ] && extra=(--speculation 0)
  timeout 200 $B/twinflow launch --nproc-per-node 2 -- run scenarios/real/mlp-8b-h200x2.yaml --ratio 1 --steps 7 \
    --pages-probe --json "$OUT/run-spec-$spec.json" --trace "$OUT/trace-spec-$spec.json" --trace-steps 4 \
    "${extra[@]}" > "$OUT/run-spec-$spec.log" 2>&1
  echo "rc $?"
  grep -E "^pages probe|^speculation" "$OUT/run-spec-$spec.log"
  grep -A3 "^summary" "$OUT/run-spec-$spec.log" | cut -c1-200
done
echo "=== end ($(date -u +%T))"
