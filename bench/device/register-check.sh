#!/usr/bin/env bash
# Run ON THE GPU MACHINE (a freshly started one) from the repo root with .devbin/ carried (issue 20): is the host's
# CPU optimizer rate different on page-locked memory (cudaHostRegister in place, as the engine pins its host
# buffers) than on the pageable memory calibrate's rank processes used? On 2026-11-28 calibrate measured 5.5-6.0
# Gparam/s (2 ranks) on a fresh nvidia-h200-x2 machine, the engine's passes ran at 5.7-6.9 and the same
# processes after a GPU sweep at 6.4-7.9; on a fresh machine with no GPU work the rate stayed at 5.2-6.0 for
# 3 minutes (host-warmup.sh). `bench --cpu-ranks 2` on 2^28 elements, pageable then page-locked, ROUNDS (default
# 3) times; then the 8.05B MLP's CPU layers at ratio 0.5 (56 GB of segments) both ways. Output in $OUT.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
row() {  # TAG, bench arguments...
  local tag=$1
  shift
  $B/twinflow bench --cpu-ranks 2 --optimizers adamw --grads bf16 "$@" --json "$OUT/$tag.json" \
    > "$OUT/$tag.log" 2>&1 || { echo "$tag: failed"; tail -3 "$OUT/$tag.log"; return; }
  python3 - "$OUT/$tag.json" "$tag" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
up = float(open("/proc/uptime").read().split()[0])
print(f"{sys.argv[2]:16} uptime {up:7.1f} s  node {r['Gparam/s']:6.3f} Gparam/s  bound {r['bound GB/s']:6.1f} GB/s",
      flush=True)
PY
}
for i in $(seq 1 "${ROUNDS:-3}"); do
  row "pageable-$i" --n 268435456 --layers 4 --iters 10
  row "locked-$i" --n 268435456 --layers 4 --iters 10 --register
done
row "8b-r0.5-pageable" --scenario scenarios/real/mlp-8b-h200x2.yaml --ratio 0.5 --iters 5
row "8b-r0.5-locked" --scenario scenarios/real/mlp-8b-h200x2.yaml --ratio 0.5 --iters 5 --register
row "pageable-after" --n 268435456 --layers 4 --iters 10
