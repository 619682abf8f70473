#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing. Issue 15, "the CPU half starts during backward"
# (docs/ARCHITECTURE.md, "Speculation"), in one call:
#  1. the GPU parity tests: the engine speculating against the engine not speculating and the functional
#     simulator, bit for bit (steps that clip, an fp16 overflow, four optimizers), and the current-slot
#     accessor;
#  2. OPT-1.3B (scenarios/real/opt-1.3b-h100.yaml: seq 1024, micro-batch 8, clip 1.0, real tokens) at
#     ratios 0, 0.2, 0.4, 0.6, 0.8, 1 with speculation on (auto) and off, 6 steps each: tokens/s, the
#     overlap fraction (the CPU optimizer's busy time under compute), the speculation hit rate, and the
#     bound max(GPU work, CPU pass at host memory bandwidth); the issue's goals (ratio 0.4 >= 0.9 x ratio 0,
#     ratio 1 >= 24,000 tokens/s) checked on the speculating sweep.
# Every step has its own timeout (seconds, estimated in brackets; about 7 minutes in all). Logs land in
# $OUT (packed into one archive: a call returns few files), the summary in $OUT/overlap.txt.
set -uo pipefail
OUT=${OUT:-out/issue15}
mkdir -p "$OUT"
FINAL=$OUT
LOG=/tmp/tf-issue15-logs
rm -rf "$LOG" && mkdir -p "$LOG"
pack() { tar czf "$FINAL/issue15-logs.tar.gz" -C "$LOG" . 2>/dev/null; cp "$LOG/overlap.txt" "$FINAL/" 2>/dev/null; true; }
trap pack EXIT
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
export TWINFLOW_SOURCE_DIR=$PWD
B=.devbin
TF=$B/twinflow
SC=scenarios/real/opt-1.3b-h100.yaml
RATIOS=0,0.2,0.4,0.6,0.8,1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; } \
  | tee "$LOG/machine.txt"

step "1. GPU parity: speculating vs not, vs the functional simulator [~40 s]"
timeout 120 $B/tf_cuda_tests --gtest_filter='CudaEngineSpeculation.*:CudaEngine.BitIdentical*:CudaEngine.Fp16*' \
  > "$LOG/parity.log" 2>&1
echo "rc $?"; grep -E "^\[  (FAILED|PASSED) |OK \]|Failure" "$LOG/parity.log" | head -30

step "2. OPT-1.3B sweep, speculation on (auto) [~170 s]"
timeout 240 $TF run $SC --ratios $RATIOS --steps 6 --speculation auto --json "$LOG/opt-on.json" \
  > "$LOG/opt-on.log" 2>&1
echo "rc $?"; grep -E "speculation:|ratio [0-9.]+ \(|error" "$LOG/opt-on.log" | head -20

step "3. OPT-1.3B sweep, speculation off [~150 s]"
timeout 220 $TF run $SC --ratios $RATIOS --steps 6 --speculation 0 --json "$LOG/opt-off.json" \
  > "$LOG/opt-off.log" 2>&1
echo "rc $?"; grep -E "ratio [0-9.]+ \(|error" "$LOG/opt-off.log" | head -20

step "summary"
python3 - "$LOG" <<'PY' | tee "$LOG/overlap.txt"
import json, statistics, sys
out = sys.argv[1]
def med(xs): return statistics.median(xs) if xs else float("nan")
runs = {}
for name in ("on", "off"):
    try:
        runs[name] = {round(p["ratio"], 3): p for p in json.load(open(f"{out}/opt-{name}.json"))["points"]}
    except Exception as e:
        print(f"speculation {name}: no run JSON ({e})")
print("OPT-1.3B, seq 1024, micro-batch 8, clip 1.0, one H100; medians of steps 2..6")
print(f"{'ratio':>5} {'spec':>4} {'tok/s':>7} {'step_ms':>8} {'cpu_hid':>7} {'bound_ms':>8} {'gpu_ms':>7} "
      f"{'cpu_bound_ms':>12} {'exp_cpu_ms':>10} {'held':>5} {'spec_layers':>11} {'spare_GB':>8}")
tps = {}
for name, pts in runs.items():
    for r, p in sorted(pts.items()):
        st = p["steps"][1:] or p["steps"]
        ov = lambda k: med([s["overlap"][k] for s in st if "overlap" in s])
        t = med([s.get("tokens_per_s", float("nan")) for s in st])
        tps[(name, r)] = t
        held = sum(1 for s in p["steps"] if s.get("speculated") and s.get("speculation_held"))
        print(f"{r:5.2f} {name:>4} {t:7.0f} {med([s['step_ns'] for s in st]) / 1e6:8.1f} "
              f"{ov('cpu_overlap_fraction'):7.3f} {ov('bound_ms'):8.1f} {ov('gpu_work_ms'):7.1f} "
              f"{ov('cpu_pass_bound_ms'):12.1f} {med([s['exposed_cpu_optimizer_ns'] for s in st]) / 1e6:10.1f} "
              f"{held:>2}/{len(p['steps'])} {p.get('speculated_layers', 0):11d} "
              f"{p.get('spare_slot_bytes', 0) / 1e9:8.2f}")
        if name == "on":
            print("       per step: " + " ".join(
                f"{s['step']}:{'held' if s.get('speculation_held') else ('failed' if s.get('speculated') else 'off')}"
                f"(norm {s['grad_norm'] if s['grad_norm'] is not None else float('nan'):.3g})" for s in p["steps"]))
for name in runs:
    r0, r4, r1 = tps.get((name, 0.0)), tps.get((name, 0.4)), tps.get((name, 1.0))
    if r0 and r4: print(f"speculation {name}: ratio 0.4 / ratio 0 = {r4 / r0:.3f} (goal >= 0.9)")
    if r1: print(f"speculation {name}: ratio 1 = {r1:.0f} tokens/s (goal >= 24000)")
PY
step "done"
ls -la "$LOG"; pack
