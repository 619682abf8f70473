#!/usr/bin/env bash
# Run ON THE GPU MACHINE (a freshly started one) from the repo root with .devbin/ carried (issue 20): does the
# host's CPU optimizer rate rise with the machine's uptime, and does touching the host's memory once make it
# rise? Three calls of 2026-11-28 on nvidia-h200-x2 each measured 5.5-6.0 Gparam/s (2 ranks) in calibrate
# right after the start and 6.4-7.9 minutes later. N1 (default 12) times: `bench --cpu-ranks 2` on 2^28
# elements (calibrate's rank-curve segments), SLEEP (default 5) s apart; then `bench --footprints` of the
# 8.05B MLP (112.8 and 224.7 GB placed and written); then N2 (default 6) more. Each line: uptime, node
# Gparam/s, the host's steal and system jiffies. Output in $OUT.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
row() {
  local tag=$1
  $B/twinflow bench --cpu-ranks 2 --n 268435456 --layers 4 --iters 10 --optimizers adamw --grads bf16 \
    --json "$OUT/$tag.json" > /dev/null 2>&1
  python3 - "$OUT/$tag.json" "$tag" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
up = float(open("/proc/uptime").read().split()[0])
st = open("/proc/stat").readline().split()
print(f"{sys.argv[2]:10} uptime {up:7.1f} s  node {r['Gparam/s']:6.3f} Gparam/s  bound {r['bound GB/s']:6.1f} GB/s  "
      f"steal {st[8]} system {st[3]} jiffies", flush=True)
PY
}
echo "machine: $(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB; uptime $(cut -d' ' -f1 /proc/uptime) s"
for i in $(seq 1 "${N1:-12}"); do row "a$i"; sleep "${SLEEP:-5}"; done
echo "=== placing the 8.05B MLP's footprints ($(date -u +%T))"
$B/twinflow bench --footprints --scenario scenarios/real/mlp-8b-h200x2.yaml --iters 3 --json "$OUT/footprints.json" 2>&1 |
  grep -E "placing|at ratio" | tail -4
for i in $(seq 1 "${N2:-6}"); do row "b$i"; sleep "${SLEEP:-5}"; done
