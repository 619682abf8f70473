#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing; about 3 minutes. Issue 15, the speculated CPU passes' order
# (docs/ARCHITECTURE.md, "Order of the speculated passes"): OPT-1.3B with gradient clipping 100 (no step clips,
# every speculation holds; bench/results/2026-11-25-held04-trace-h100 ran ratio 0.4 at 0.889x ratio 0 in
# arrival order), 7 steps from the init per point:
#  1. the GPU tests of the order: every order keeps the engine's bits, the engine issues the simulator's
#     chosen order, the engine's plan and memory are the simulator's [~40 s];
#  2. ratio 0 (nothing to order: its one run is the base of both), ratios 0.4 and 1 with the cost model's
#     order (--cpu-order auto) and with today's (--cpu-order arrival), each with the run JSON (its cpu_order
#     record: m, k and the predicted steps), and at ratio 0.4 the last step's Chrome trace and timeline SVG;
#  3. the summary: tokens/s (a carried step's time is its period), x ratio 0, step ms, the CPU pass ms, the
#     order each ran and the step the cost model predicted for it, in $OUT/cpuorder.txt.
# The order is chosen with PROFILE (default: the profile calibrated in the 2026-11-24 host-model call, with
# which `twinflow simulate` predicts 137.3 -> 133.7 ms at ratio 0.4 and 322.0 -> 306.3 at ratio 1, ratio 0
# 138.4). Every step has its own timeout. DRY=1 prints the commands instead of running them (any machine).
set -uo pipefail
OUT=${OUT:-out/cpuorder}
W=/tmp/tf-cpuorder
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs cpuorder cpuorder.txt
export TWINFLOW_SOURCE_DIR=$PWD
TF=$B/twinflow
PROFILE=${PROFILE:-bench/results/2026-11-24-hostmodel-h100/call2/h100-hostmodel.yaml}
SC=scenarios/real/opt-1.3b-h100.yaml
CSC=${SC%.yaml}.cpuorder.yaml  # beside it: the scenario names its token file relative to itself

machine_info

step "1. GPU tests of the CPU pass order [~40 s]"
x timeout 240 $B/tf_cuda_tests \
  --gtest_filter='CudaEngineCarry.EveryCpuPassOrderKeepsTheBits:CudaEngine.IssuesTheSimulatorsOpsInItsOrderPerQueue:CudaEngineZero12.MemoryAndPlanAgreeWithTheSimulator' \
  > "$LOG/tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (FAILED|PASSED) |OK \]|Failure" "$LOG/tests.log" | head -20

step "2. OPT-1.3B clip 100: ratio 0, ratios 0.4 and 1 in the chosen and in today's order [~100 s]"
sed -E "s/^(  gradient_clipping:) .*/\1 100/" $SC > "$CSC"
# point ORDER RATIO [FILES...]: one run of 7 steps, its JSON in $LOG/ORDER-rRATIO.json
point() {
  local order=$1 r=$2
  shift 2
  x timeout 100 $TF run "$CSC" --ratio "$r" --steps 7 --profile "$PROFILE" --cpu-order "$order" \
    --json "$LOG/$order-r$r.json" "$@" > "$LOG/$order-r$r.log" 2>&1
  echo "$order ratio $r rc $?"; grep -E "CPU pass order|error" "$LOG/$order-r$r.log" | head -2
}
point arrival 0
for r in 0.4 1; do
  for order in auto arrival; do
    if [ "$r" = 0.4 ]; then
      point $order $r --trace "$LOG/$order-r$r-trace.json" --timeline-svg "$LOG/$order-r$r-timeline.svg"
    else
      point $order $r
    fi
  done
done
rm -f "$CSC"

step "3. summary"
[ -n "${DRY:-}" ] && exit 0
python3 - "$LOG" <<'PY' | tee "$LOG/cpuorder.txt"
import json, statistics, sys
log = sys.argv[1]
nan = float("nan")
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else nan
def point(name):
    try:
        return json.load(open(f"{log}/{name}.json"))["points"][0]
    except Exception as e:
        print(f"{name}: no run JSON ({e})")
        return None
def steady(p):
    return [s for s in p["steps"] if s.get("steady", s is not p["steps"][0])] or p["steps"]
base = point("arrival-r0")
r0 = med([s.get("tokens_per_s") for s in steady(base)]) if base else nan
print("OPT-1.3B, seq 1024, micro-batch 8, one H100, gradient clipping 100 (every speculation holds), 7 steps;")
print("medians of the steady steps (a carried step's time is its period); ratio 0 is the base of both orders")
print(f"{'order':>8} {'ratio':>5} {'tok/s':>7} {'x_r0':>5} {'step_ms':>8} {'cpu_pass_ms':>11} {'m,k of n':>9} "
      f"{'pred_ms':>8} {'pred_arrival_ms':>15} {'held':>5}")
for name, order, r in [("arrival-r0", "-", 0.0), ("auto-r0.4", "auto", 0.4), ("arrival-r0.4", "arrival", 0.4),
                       ("auto-r1", "auto", 1.0), ("arrival-r1", "arrival", 1.0)]:
    p = point(name)
    if not p:
        continue
    st = steady(p)
    t = med([s.get("tokens_per_s") for s in st])
    o = p.get("cpu_order", {})
    ch = o.get("chosen", {})
    mk = "arrival" if o.get("arrival", -1) == -1 else f"{o['arrival']},{o.get('before_norm')}/{ch.get('passes', '?')}"
    held = sum(1 for s in p["steps"] if s.get("speculated") and s.get("speculation_held"))
    print(f"{order:>8} {r:5.2f} {t:7.0f} {t / r0 if r0 else nan:5.3f} {med([s['step_ns'] for s in st]) / 1e6:8.1f} "
          f"{med([s['busy_ns']['cpu'] for s in st]) / 1e6:11.1f} {mk:>9} {ch.get('step_ms', nan):8.1f} "
          f"{ch.get('arrival_order_step_ms', nan):15.1f} {held:>2}/{len(p['steps'])}")
    print("       per step ms: " + " ".join(f"{s['step']}:{s['step_ns'] / 1e6:.1f}" for s in p["steps"]))
for order in ("auto", "arrival"):
    p = point(f"{order}-r0.4")
    if p and r0:
        print(f"{order}: ratio 0.4 / ratio 0 = {med([s.get('tokens_per_s') for s in steady(p)]) / r0:.3f} (goal >= 0.9)")
PY
