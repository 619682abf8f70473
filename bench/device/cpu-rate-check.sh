#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried, right after a sweep (issue 20): the node rate
# of the scenario's ranks measured by `bench --cpu-ranks` (the engine's CPU path in worker processes) on
# calibrate's small segments and on the scenario's own CPU layers at ratios 0.5 and 1, in two alternated
# rounds, with the host's steal time (/proc/stat) before and after each: is the rate calibrate measures the
# rate the engine's passes ran at minutes later, and does the hypervisor take time from the vCPUs?
# SCENARIO (default mlp-8b-h200x2), PROFILE (optional: the sim's node time beside each row), ROUNDS (default 2). Output in $OUT.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
SC=scenarios/real/${SCENARIO:-mlp-8b-h200x2}.yaml
PROF=${PROFILE:+--profile $PROFILE}
steal() { awk '/^cpu / {print "steal_jiffies " $9 " (user " $2 ", system " $4 ", idle " $5 ")"}' /proc/stat; }
for round in $(seq 1 "${ROUNDS:-2}"); do
  for what in flat 0.5 1; do
    echo "=== round $round, $what ($(date -u +%T)); $(steal)"
    if [ "$what" = flat ]; then
      $B/twinflow bench --cpu-ranks 2 --n 268435456 --layers 4 --iters 10 --optimizers adamw --grads bf16 $PROF \
        --json "$OUT/r${round}-flat.json" 2>&1 | grep -E "^ *2 |Gparam" | tail -3
    else
      $B/twinflow bench --cpu-ranks 2 --scenario "$SC" --ratio "$what" --iters 5 --optimizers adamw --grads bf16 $PROF \
        --json "$OUT/r${round}-ratio${what}.json" 2>&1 | grep -E "^ *2 |Gparam" | tail -3
    fi
  done
done
echo "=== end ($(date -u +%T)); $(steal)"
