#!/usr/bin/env bash
# Run ON THE GPU MACHINE with 2+ GPUs (nvidia-h200-x2 or -x4), .devbin/ carried. Issue 4 on several
# GPUs: bitwise parity 1 GPU vs 2 GPUs and vs the functional simulator, the 2-GPU ZeRO-3 ratio sweep
# with its 1-GPU comparison; with 4 GPUs also issue 7's 4-GPU sweep. Logs and JSON under $OUT.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=.devbin
NGPU=$(nvidia-smi -L | wc -l)
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
step "machine: $NGPU GPUs"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/machine.txt"; nproc | tee -a "$OUT/machine.txt"
nvidia-smi topo -m | head -6 | tee -a "$OUT/machine.txt"

step "parity: 1 GPU (grad_accum 2) vs 2 GPUs (grad_accum 1), same global batch, ratios 0, 0.3, 1"
timeout 80 $B/twinflow run scenarios/real/parity-mlp.yaml --ratios 0,0.3,1 --steps 5 --save-master /tmp/m1 \
  > "$OUT/parity-1gpu.log" 2>&1; echo "rc $?"
timeout 100 $B/twinflow launch --nproc-per-node 2 -- run scenarios/real/parity-mlp.yaml --grad-accum 1 \
  --ratios 0,0.3,1 --steps 5 --verify --save-master /tmp/m2 > "$OUT/parity-2gpu.log" 2>&1; echo "rc $?"
grep -E "parity" "$OUT/parity-2gpu.log"
for r in 0.000 0.300 1.000; do cmp /tmp/m1.r$r /tmp/m2.r$r && echo "ratio $r: 1 GPU and 2 GPUs bit-identical ($(stat -c %s /tmp/m1.r$r) bytes)"; done

for n in 2 4; do
  [ "$NGPU" -ge $n ] || continue
  step "ZeRO-3 MLP 2.15B: $n GPUs, ratio sweep"
  timeout 140 $B/twinflow launch --nproc-per-node $n -- run scenarios/real/mlp-2b.yaml --ratios 0,0.25,1 \
    --steps 4 --json "$OUT/sweep-2b-${n}gpu.json" > "$OUT/sweep-2b-${n}gpu.log" 2>&1; echo "rc $?"
  sed -n '/^summary/,$p' "$OUT/sweep-2b-${n}gpu.log"
done
step "ZeRO-3 MLP 2.15B: 1 GPU of the same machine (scaling)"
timeout 140 $B/twinflow run scenarios/real/mlp-2b.yaml --ratios 0,0.25,1 --steps 4 \
  --json "$OUT/sweep-2b-1gpu.json" > "$OUT/sweep-2b-1gpu.log" 2>&1; echo "rc $?"
sed -n '/^summary/,$p' "$OUT/sweep-2b-1gpu.log"
