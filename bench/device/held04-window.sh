#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing; about 4 minutes. Issue 15, OPT-1.3B (seq 1024,
# micro-batch 8) at ratio 0.4 against ratio 0 with more steady steps than a 7-step run gives (one H100 host's
# steps spread by +-10%), and the steady steps' carried tails in one trace:
#  1. gradient clipping 100 (every speculation holds), 16 steps a run, alternated twice: ratio 0, ratio 0.4
#     in the cost model's CPU pass order (--cpu-order auto, the default) and in arrival order; the second
#     round's ratio-0.4 auto run also writes the last 4 steps' trace on one time axis (--trace-steps 4: what
#     a step's forward waits for among the previous step's carried ops);
#  2. gradient clipping 1.0 (every step clips), 12 steps: ratios 0, 0.4 and 1;
#  3. the summary: per run the median tokens/s of the steady steps (apps/twinflow/steady_steps.h: neither
#     the first two nor the drained last), x the same round's ratio 0, the CPU pass ms, and for the traced
#     run the compute queue's idle gaps over 1 ms per steady step with the ops that ended just before each
#     gap's end (what the GPU waited for), in $OUT/held04-window.txt.
# DRY=1 prints the commands instead of running them (any machine).
set -uo pipefail
OUT=${OUT:-out/held04-window}
W=/tmp/tf-held04-window
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs held04-window held04-window.txt
export TWINFLOW_SOURCE_DIR=$PWD
TF=$B/twinflow
SC=scenarios/real/opt-1.3b-h100.yaml
CSC=${SC%.yaml}.held04w.yaml  # beside it: the scenario names its token file relative to itself
x() { if [ -n "${DRY:-}" ]; then echo "+ $*"; else "$@"; fi; }

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; } \
  | tee "$LOG/machine.txt"

# point NAME SCENARIO STEPS RATIO [ARGS...]: one run, its JSON in $LOG/NAME.json
point() {
  local name=$1 sc=$2 steps=$3 r=$4
  shift 4
  x timeout 150 $TF run "$sc" --ratio "$r" --steps "$steps" --json "$LOG/$name.json" "$@" > "$LOG/$name.log" 2>&1
  echo "$name rc $?"; grep -E "CPU pass order|error" "$LOG/$name.log" | head -2
}

step "1. clip 100, 16 steps, two rounds: ratio 0, 0.4 auto, 0.4 arrival [~150 s]"
sed -E "s/^(  gradient_clipping:) .*/\1 100/" $SC > "$CSC"
for round in 1 2; do
  point "c100-$round-r0" "$CSC" 16 0
  if [ $round = 2 ]; then
    point "c100-$round-r0.4-auto" "$CSC" 16 0.4 --cpu-order auto --trace "$LOG/c100-r0.4-auto-trace4.json" --trace-steps 4
  else
    point "c100-$round-r0.4-auto" "$CSC" 16 0.4 --cpu-order auto
  fi
  point "c100-$round-r0.4-arrival" "$CSC" 16 0.4 --cpu-order arrival
done
rm -f "$CSC"

step "2. clip 1.0, 12 steps: ratios 0, 0.4, 1 [~60 s]"
for r in 0 0.4 1; do point "c1-r$r" $SC 12 $r; done

step "3. summary"
[ -n "${DRY:-}" ] && exit 0
python3 - "$LOG" <<'PY' | tee "$LOG/held04-window.txt"
import json, statistics, sys
log = sys.argv[1]
nan = float("nan")
def load(name):
    try:
        return json.load(open(f"{log}/{name}.json"))["points"][0]
    except Exception as e:
        print(f"{name}: no run JSON ({e})")
        return None
def steady(p):
    return [s for s in p["steps"] if s.get("steady")] or p["steps"]
def tok(p):
    return statistics.median(s["tokens_per_s"] for s in steady(p)) if p else nan
print("OPT-1.3B, seq 1024, micro-batch 8, one H100; medians of the steady steps (a carried step's time is its period)")
print(f"{'run':>24} {'tok/s':>7} {'x_r0':>6} {'step_ms':>8} {'cpu_pass_ms':>11} {'held':>6}  steady steps' ms")
rows = [(f"c100-{k}-{v}", f"c100-{k}-r0") for k in (1, 2) for v in ("r0", "r0.4-auto", "r0.4-arrival")]
rows += [(f"c1-r{r}", "c1-r0") for r in ("0", "0.4", "1")]
ratios = {}
for name, base in rows:
    p, b = load(name), load(base)
    if not p:
        continue
    t = tok(p)
    ratios[name] = t / tok(b) if b else nan
    st = steady(p)
    held = sum(1 for s in p["steps"] if s.get("speculated") and s.get("speculation_held"))
    print(f"{name:>24} {t:7.0f} {ratios[name]:6.3f} {statistics.median(s['step_ns'] for s in st) / 1e6:8.1f} "
          f"{statistics.median(s['busy_ns']['cpu'] for s in st) / 1e6:11.1f} {held:>3}/{len(p['steps']):<2}  "
          + " ".join(f"{s['step_ns'] / 1e6:.0f}" for s in st))
for v in ("auto", "arrival"):
    rs = [ratios.get(f"c100-{k}-r0.4-{v}", nan) for k in (1, 2)]
    print(f"clip 100, ratio 0.4 {v}: x ratio 0 per round {rs[0]:.3f}, {rs[1]:.3f} (goal >= 0.9)")
# The traced window: per steady step, the compute queue's idle gaps over 1 ms and what ended right before
try:
    tr = json.load(open(f"{log}/c100-r0.4-auto-trace4.json"))
except Exception as e:
    print(f"no window trace ({e})")
    sys.exit(0)
steps = tr["otherData"]["steps"]
ev = sorted((e for e in tr["traceEvents"] if e.get("ph") == "X"), key=lambda e: e["ts"])
compute = [e for e in ev if e["tid"] == 0]
print("\ntrace of the last 4 steps of c100-2-r0.4-auto (ms from the window's start): compute idle gaps > 1 ms")
for s in steps[:-1]:
    lo, hi = s["offset_ns"] / 1e6, (s["offset_ns"] + s["step_ns"]) / 1e6
    print(f" step {s['step']}: {lo:.1f} - {hi:.1f} ms (period {s['step_ns'] / 1e6:.1f})")
    busy = [(e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3, e["name"]) for e in compute]
    end_prev = lo
    for a, b, name in busy:
        if b <= lo or a >= hi:
            continue
        if a - end_prev > 1.0:
            before = [e["name"] for e in ev if e["tid"] != 0 and abs((e["ts"] + e["dur"]) / 1e3 - a) < 0.3]
            print(f"   idle {end_prev:.1f} - {a:.1f} ({a - end_prev:.1f} ms) before '{name}'; ended at its start: "
                  f"{', '.join(before[:4]) or '-'}")
        end_prev = max(end_prev, b)
    cpu = [e for e in ev if e["tid"] == 4 and lo <= e["ts"] / 1e3 < hi and e["dur"] > 0]
    print("   cpu queue: " + " ".join(f"{e['name']}@{e['ts'] / 1e3 - lo:.0f}+{e['dur'] / 1e3:.0f}" for e in cpu))
PY
