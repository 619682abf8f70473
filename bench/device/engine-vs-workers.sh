#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried (issue 20). Is the engine's CPU
# pass at ratio 1 slower than the same CPU layers run by calibrate's worker processes, minutes apart on one host?
# Alternates, ROUNDS times (default 2): `bench --cpu-ranks 2` on calibrate's small segments (flat) and on the
# scenario's own CPU layers at ratio 1 (the engine's host footprint), then the engine itself at ratio 1 over both
# GPUs (`run --host-probe --trace`: its passes with every rank busy, from the traces). SCENARIO (default
# mlp-8b-h200x2). Output in $OUT.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=.devbin
SC=scenarios/real/${SCENARIO:-mlp-8b-h200x2}.yaml
for round in $(seq 1 "${ROUNDS:-2}"); do
  echo "=== round $round, flat ($(date -u +%T))"
  $B/twinflow bench --cpu-ranks 2 --n 268435456 --layers 4 --iters 10 --optimizers adamw --grads bf16 \
    --json "$OUT/r${round}-flat.json" 2>&1 | grep -E "^2 " | tail -1
  echo "=== round $round, workers on the ratio-1 layers ($(date -u +%T))"
  $B/twinflow bench --cpu-ranks 2 --scenario "$SC" --ratio 1 --iters 5 --optimizers adamw --grads bf16 \
    --json "$OUT/r${round}-layers1.json" 2>&1 | grep -E "^2 " | tail -1
  echo "=== round $round, the engine at ratio 1 ($(date -u +%T))"
  timeout 200 $B/twinflow launch --nproc-per-node 2 -- run "$SC" --ratios 1 --steps 6 --host-probe \
    --json "$OUT/r${round}-engine.json" --trace "$OUT/r${round}-engine-trace.json" --trace-steps 3 \
    > "$OUT/r${round}-engine.log" 2>&1
  echo "rc $?"; grep -E "^host probe|^1\.000 " "$OUT/r${round}-engine.log" | head -4
done
echo "=== end ($(date -u +%T))"
