#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow). Does the node's CPU optimizer rate
# depend on how long a pass runs? calibrate's rank curve times isolated passes of 2^28 elements over the ranks
# (~45 ms on two H200s' host), while the engine's passes run back to back for seconds; on that host the engine's
# passes ran 8-25% faster than calibrate read (bench/results/2026-11-29-h200x2-opt30b). `bench --cpu-ranks`
# (calibrate's CpuRankGroup) short, long, short again, to bracket drift. About 90 s. Output: $OUT/pass-length.txt.
set -uo pipefail
W=/tmp/pass-length
rm -rf "$W"
. bench/device/device_env.sh
unpack_devbin
R=${RANKS:-2}
S=$OUT/pass-length.txt
{ nproc; free -g | head -2; lscpu | grep -E "^Model name"; cat .devbin/COMMIT; } | tee "$S"
one() {  # NAME N LAYERS ITERS
  step "$1: --n $2 over $R ranks, --layers $3, --iters $4"
  timeout 150 $B/twinflow bench --cpu-ranks "$R" --n "$2" --layers "$3" --iters "$4" --optimizers adamw --grads bf16 \
    > "$W/$1.log" 2>&1
  echo "$1 rc $?" | tee -a "$S"
  grep -E "^[0-9]+ +adamw|huge pages|threads on" "$W/$1.log" | cut -c1-200 | tee -a "$S"
}
one short-a 268435456 1 20
one long 4294967296 16 6
one short-b 268435456 1 20
