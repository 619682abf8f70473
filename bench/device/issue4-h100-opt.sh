#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1), .devbin/ carried. Issue 4 part B: Twin-Flow's optimizer
# step against the PyTorch peer on the same 2.15B split, plus the microbenchmarks that give the
# overlap bound max(GPU share time, CPU share time). Logs and JSON under $OUT.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
step "Twin-Flow: synthetic 2.15B shard, ratios 0.1 0.25 0.5 1"
timeout 240 $B/twinflow run scenarios/real/synthetic-2b-h100.yaml --ratios 0.1,0.25,0.5,1 --steps 5 \
  --json "$OUT/tf-opt-2b.json" > "$OUT/tf-opt-2b.log" 2>&1; echo "rc $?"
sed -n '/^summary/,$p' "$OUT/tf-opt-2b.log"
step "microbenchmarks for the bound: AdamW bf16 grad + bf16 copy, GPU and CPU (16 pinned threads)"
timeout 120 $B/twinflow bench --optimizers adamw --grads bf16 --pin --n 268435456 --iters 5 \
  --json "$OUT/bench-adamw-bf16.json" 2>&1 | tail -12
step "torch peer (plain and chunked), same split"
timeout 300 python3 bench/peer/torch_offload_step.py --params 2147745792 --layers 32 --ratios 0.1,0.25,0.5,1 \
  --threads 16 --iters 5 --warmup 1 --variants plain,chunked --json "$OUT/torch-opt-2b.json" 2>&1 | tail -14
