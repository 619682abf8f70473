#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried; about 4 minutes.
# Where does the CPU pass lose its rate inside a real step? (issue 15: the standalone kernel moves ~5.6
# Gparam/s on the H100 host, the engine's pass on mlp-2b at ratio 0.05 ~5.1, OPT-1.3B's at ratio 1 5.2 when
# clipping and 4.2 when the speculation holds; bench/results/2026-11-24-carry-h100.)
#  1. mlp-2b ratio 0.05 real steps under CPU tuning variants (TUNINGS), each followed by torch's fused CPU
#     AdamW on the same elements and threads (alternated: host drift lands on both);
#  2. the kernel alone (`twinflow bench`, AdamW, bf16 gradient and copy, the same element count), and the
#     engine's CPU path over mlp-2b's CPU layers with the copy engines idle and busy (`bench --dma both`);
#  3. OPT-1.3B ratio 1, clip 1 (every step clips) and clip 100 (speculation holds), carry on, with the last
#     step's Chrome trace and timeline SVG.
# Summary in $OUT/cpupass-diag.txt; traces, SVGs, JSONs and logs in one archive.
set -uo pipefail
W=/tmp/tf-cpupass-diag
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs cpupass-diag cpupass-diag.txt
THREADS=$(nproc)
TUNINGS=${TUNINGS:-"default|prefetch=2048|level=1|block=0|spin=0"}
MLP=scenarios/real/mlp-2b.yaml
OPT=scenarios/real/opt-1.3b-h100.yaml
step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; } 2>&1 |
  tee "$LOG/machine.txt"

step "mlp-2b ratio 0.05 under tuning variants, each beside torch"
IFS='|' read -r -a variants <<< "$TUNINGS"
N=""
for v in "${variants[@]}"; do
  tag=$(echo "$v" | tr '=,' '--')
  timeout 60 $B/twinflow run $MLP --ratio 0.05 --steps 6 --cpu-tuning "$v" --json "$LOG/mlp-$tag.json" \
    > "$LOG/mlp-$tag.log" 2>&1
  echo "$v: rc $?"
  N=$(python3 -c "import json; print(json.load(open('$LOG/mlp-$tag.json'))['points'][0]['cpu_elems'])" 2> /dev/null)
  if [ -n "$N" ] && python3 -c "import torch" 2> /dev/null; then
    timeout 40 python3 bench/peer/torch_adamw.py --cpu-only --threads "$THREADS" --n "$N" --iters 12 \
      --json "$LOG/torch-$tag.json" > "$LOG/torch-$tag.log" 2>&1
  fi
done

step "the kernel alone on the same elements, and the engine's CPU path with and without copies"
if [ -n "$N" ]; then
  timeout 120 $B/twinflow bench --n "$N" --optimizers adamw --grads bf16 --gpu off --pin --iters 20 \
    --json "$LOG/bench-alone.json" > "$LOG/bench-alone.log" 2>&1
  echo "alone: rc $?"; tail -6 "$LOG/bench-alone.log"
  timeout 150 $B/twinflow bench --cpu-ranks 1 --scenario $MLP --ratio 0.05 --dma both --per-layer \
    --json "$LOG/bench-dma.json" > "$LOG/bench-dma.log" 2>&1
  echo "engine path, dma off/on: rc $?"; tail -12 "$LOG/bench-dma.log"
fi

step "OPT-1.3B ratio 1: clipping and speculation holding, with traces"
C100=${OPT%.yaml}.diag-clip100.yaml  # beside it: the scenario names its token file relative to itself
sed -E "s/^(  gradient_clipping:) .*/\1 100/" $OPT > "$C100"
for sc in "$OPT" "$C100"; do
  tag=$(basename "$sc" .yaml)
  timeout 90 $B/twinflow run "$sc" --ratio 1 --steps 7 --json "$LOG/$tag.json" --trace "$LOG/$tag-trace.json" \
    --timeline-svg "$LOG/$tag-timeline.svg" > "$LOG/$tag.log" 2>&1
  echo "$tag: rc $?"
done
rm -f "$C100"

step "summary"
python3 - "$LOG" > "$LOG/cpupass-diag.txt" <<'PY'
import glob, json, os, sys
sys.path.insert(0, "bench/device")
from cpu_report_common import engine_step, torch_cpu_row
log = sys.argv[1]
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
def steady(p):
    return [s for i, s in enumerate(p["steps"]) if s.get("steady", i > 0)]
print("## mlp-2b ratio 0.05: the engine's CPU pass (median of steady steps) beside torch's fused CPU AdamW")
print("| tuning | CPU elements | engine Gparam/s | engine GB/s (28 B) | torch Gparam/s | engine / torch |")
print("|---|---|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(log, "mlp-*.json"))):
    tag = os.path.basename(f)[4:-5]
    d = load(f)
    if not d:
        print(f"| {tag} | run failed | | | | |"); continue
    p = d["points"][0]
    e = engine_step(d)["median"]
    trow = torch_cpu_row(load(os.path.join(log, f"torch-{tag}.json")))
    tg = trow["gparam_per_s"] if trow else None
    print(f"| {tag} | {p['cpu_elems']} | {e:.3f} | {e * 28:.1f} | {tg if tg is None else f'{tg:.3f}'} | "
          f"{'-' if not tg else f'{e / tg:.3f}x'} |")
print()
print("## OPT-1.3B ratio 1 (carry on): per steady step")
print("| run | step | step ms | fwd ms | bwd ms | cpu_optimizer ms (sum of ops) | CPU busy ms | d2h ms | h2d ms | held |")
print("|---|---|---|---|---|---|---|---|---|---|")
for f in sorted([f for f in glob.glob(os.path.join(log, "opt-*.json")) if not f.endswith("-trace.json")]):
    d = load(f)
    if not d:
        print(f"| {os.path.basename(f)} | failed | | | | | | | | |"); continue
    for s in steady(d["points"][0]):
        k = s["kind_ns"]
        print(f"| {os.path.basename(f)[:-5]} | {s['step']} | {s['step_ns'] / 1e6:.1f} | {k.get('forward', 0) / 1e6:.1f} | "
              f"{k.get('backward', 0) / 1e6:.1f} | {k.get('cpu_optimizer', 0) / 1e6:.1f} | {s['busy_ns']['cpu'] / 1e6:.1f} | "
              f"{k.get('d2h', 0) / 1e6:.1f} | {k.get('h2d', 0) / 1e6:.1f} | {s.get('speculation_held')} |")
PY
cat "$LOG/cpupass-diag.txt"
cp "$LOG"/*-trace.json "$LOG"/*-timeline.svg "$OUT/" 2> /dev/null
true
