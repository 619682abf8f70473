#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried; about 3 minutes.
# Issue 15's CPU AdamW on a real step against torch: does the engine's pass lose to its own threads? Alone
# (`twinflow bench --cpu-ranks 1`, the engine's CPU path without the step around it) it ran at 5.50 Gparam/s, in
# a real step at 5.17 (bench/results/2026-11-25-cpupass-diag-h100). A real step also runs the engine's issuer
# threads (one per queue) and the CUDA driver's; with the pool on every core they share cores with the
# pass. ROUNDS rounds (default 2), each: the real step (mlp-2b, ratio 0.05, 6 steps) at --threads 16, 15 and
# 14 (THREADS_LIST), then torch's fused CPU AdamW on the same elements at TORCH_THREADS (default 16), then the
# engine's CPU path alone. The last column compares the engine and torch on the same threads. Summary in
# $OUT/adamw-threads.txt; logs in one archive.
set -uo pipefail
W=/tmp/tf-adamw-threads
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs adamw-threads adamw-threads.txt
ROUNDS=${ROUNDS:-2}
THREADS_LIST=${THREADS_LIST:-"16 15 14"}
TT=${TORCH_THREADS:-16}
SC=scenarios/real/mlp-2b.yaml
for r in $(seq 1 "$ROUNDS"); do
  for t in $THREADS_LIST; do
    step "round $r: real step, $t threads"
    timeout 60 $B/twinflow run $SC --ratio 0.05 --steps 6 --threads "$t" --json "$LOG/engine-$r-t$t.json" \
      > "$LOG/engine-$r-t$t.log" 2>&1
    echo "rc $?"
  done
  first=${THREADS_LIST%% *}
  N=$(python3 -c "import json; print(json.load(open('$LOG/engine-$r-t$first.json'))['points'][0]['cpu_elems'])" 2> /dev/null)
  step "round $r: torch, ${N:-?} elements, $TT threads"
  [ -n "$N" ] && timeout 40 python3 bench/peer/torch_adamw.py --cpu-only --threads "$TT" --n "$N" --iters 12 \
    --json "$LOG/torch-$r.json" > "$LOG/torch-$r.log" 2>&1
  echo "rc $?"
  step "round $r: the engine's CPU path alone"
  timeout 120 $B/twinflow bench --cpu-ranks 1 --scenario $SC --ratio 0.05 --optimizers adamw \
    > "$LOG/alone-$r.log" 2>&1
  echo "rc $?"
done
step "summary"
python3 - "$LOG" "$ROUNDS" "$THREADS_LIST" "$TT" > "$LOG/adamw-threads.txt" <<'PY'
import json, os, re, statistics, sys
sys.path.insert(0, "bench/device")
from cpu_report_common import engine_step, torch_cpu_row
log, rounds, tl, tt = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
def load(p):
    try:
        return json.load(open(os.path.join(log, p)))
    except Exception:
        return None
head = " | ".join(f"engine {t} thr" for t in tl)
print(f"| round | {head} | torch {tt} thr | engine path alone | engine {tt} thr / torch |")
print("|" + "---|" * (len(tl) + 4))
for r in range(1, rounds + 1):
    es = [engine_step(load(f"engine-{r}-t{t}.json")) for t in tl]
    eg = [e["median"] if e else None for e in es]
    t = load(f"torch-{r}.json")
    trow = torch_cpu_row(t)
    tg = trow["gparam_per_s"] if trow else None
    alone = None
    try:
        m = re.search(r"adamw/bf16/default/-/\w+: ([0-9.]+) Gparam/s", open(os.path.join(log, f"alone-{r}.log")).read())
        alone = float(m.group(1)) if m else None
    except OSError:
        pass
    best = eg[tl.index(tt)] if tt in tl else None
    cells = " | ".join(f"{x:.3f}" if x else "-" for x in eg)
    print(f"| {r} | {cells} | {tg if tg is None else f'{tg:.3f}'} | {alone if alone is None else f'{alone:.3f}'} | "
          f"{'-' if not (tg and best) else f'{best / tg:.3f}x'} |")
PY
cat "$LOG/adamw-threads.txt"
