#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (issue 20). Does the CPU optimizer's rate on this
# host depend on where its pages land? One rank process (16 threads) over N elements (default 2^32, the most --n takes: 77 GB of
# the host's 251) cut into 128 layers, each layer's rate (median of 3 passes) by `bench --cpu-ranks 1
# --per-layer`, twice in fresh processes (the second gets the pages the first freed), then small segments three
# times. Layers that are slow in both runs at the same place while the small runs agree = placement, not time.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
N=${N:-4294967296}
for run in 1 2; do
  echo "=== big run $run ($(date -u +%T))"
  $B/twinflow bench --cpu-ranks 1 --n "$N" --layers 128 --iters 3 --per-layer --optimizers adamw --grads bf16 \
    --threads 16 > "$OUT/big$run.txt" 2>&1
  echo "rc $?"; grep -E "^1 " "$OUT/big$run.txt" | head -2
done
for run in 1 2 3; do
  echo "=== small run $run ($(date -u +%T))"
  $B/twinflow bench --cpu-ranks 1 --n 134217728 --layers 4 --iters 10 --optimizers adamw --grads bf16 --threads 16 \
    2>&1 | grep -E "^1 " | head -1
done
echo "=== end ($(date -u +%T))"
