#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow and its libraries). Is the tutorial's
# residual against the simulator (-6.9%, bench/results/2026-11-29-h200-decoder-calibrate) the GPU's power limit or
# fp16? And how much does an 8-step run depend on what the GPU ran just before? One call, in this order:
#   A. GPT-350M s 2048 ratio 0, 8 steps, after the GPU idled;
#   B. the tutorial as written (fp16, 32 micro-batches a step, ratio 0.3), 4 steps;
#   C. GPT-350M again, 8 steps, right after B;
#   D. the tutorial in bf16 (its ds_config with bf16 on and fp16 off, generated here), 4 steps;
#   E. GPT-350M, 8 steps, right after D;
#   F. 30 s of rest, then GPT-350M, 8 steps;
# with the SM clock, power, temperature and throttle reasons every 100 ms (clocks.csv) and each run's start and end
# (marks.txt). The runs use the built-in h200-141gb-16core-calibrated profile. Everything lands in
# $OUT/power-state.tar.gz.
set -uo pipefail
W=/tmp/power-state
. bench/device/device_env.sh
pack() { tar czf "$OUT/power-state.tar.gz" -C "$W" .; }
LOG=$W machine_info
P=h200-141gb-16core-calibrated
# the bf16 tutorial: the same scenario and ds_config but for the precision (files in this copy of the tree only)
sed 's/"enabled": false/"enabled": TRUE_/; s/"enabled": true/"enabled": false/; s/TRUE_/true/' \
  scenarios/ds_config/gpt-350m.json > scenarios/ds_config/gpt-350m-bf16-probe.json
sed 's|ds_config: ds_config/gpt-350m.json|ds_config: ds_config/gpt-350m-bf16-probe.json|; s|^name: .*|name: gpt-350m-ratio0.3-bf16|' \
  scenarios/gpt-350m-ratio0.3.yaml > scenarios/gpt-350m-ratio0.3-bf16-probe.yaml
grep -A1 '"bf16"\|"fp16"' scenarios/ds_config/gpt-350m-bf16-probe.json | tr -d '\n'; echo
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 100 > "$W/clocks.csv" 2>&1 &
SMI=$!
sleep 3

one() {  # NAME SCENARIO RATIO STEPS
  step "$1"; mark "$1"
  timeout 150 $B/twinflow run --scenario "$2" --profile $P --ratio "$3" --steps "$4" --json "$W/run-$1.json" \
    > "$W/run-$1.log" 2>&1; echo "rc $?"; mark "$1-end"
  python3 -c "
import json;p=json.load(open('$W/run-$1.json'))['points'][0]
print('$1 steps ms', [round(s['step_ns']/1e6,1) for s in p['steps']])"
  pack
}
one A-350m-cold scenarios/real/gpt-350m-h200.yaml 0 8
one B-tutorial-fp16 scenarios/gpt-350m-ratio0.3.yaml 0.3 4
one C-350m-after-fp16 scenarios/real/gpt-350m-h200.yaml 0 8
one D-tutorial-bf16 scenarios/gpt-350m-ratio0.3-bf16-probe.yaml 0.3 4
one E-350m-after-bf16 scenarios/real/gpt-350m-h200.yaml 0 8
step "rest 30 s"; sleep 30
one F-350m-rested scenarios/real/gpt-350m-h200.yaml 0 8
kill $SMI
python3 - "$W" <<'EOF'
import csv, statistics, sys
w = sys.argv[1]
rows = list(csv.reader(open(f"{w}/clocks.csv")))[1:]
def t(s):
    h, m, x = s.split()[1].split(":"); return int(h) * 3600 + int(m) * 60 + float(x)
marks = {}
for l in open(f"{w}/marks.txt"):
    ts, name = l.split()
    marks[name] = int(ts[:2]) * 3600 + int(ts[3:5]) * 60 + float(ts[6:])
print(f"{'run':22s} {'s':>5s} {'busy':>5s} {'MHz':>6s} {'W':>5s} {'degC':>5s}")
for name in [n for n in marks if not n.endswith("-end")]:
    a, b = marks[name], marks.get(name + "-end", marks[name])
    sel = [r for r in rows if a <= t(r[0]) <= b and float(r[2].split()[0]) > 300]
    if sel:
        print(f"{name:22s} {b - a:5.1f} {len(sel):5d} {statistics.median(int(r[1].split()[0]) for r in sel):6.0f} "
              f"{statistics.median(float(r[2].split()[0]) for r in sel):5.0f} "
              f"{statistics.median(int(r[3]) for r in sel):5.0f}")
EOF
step done; pack
