#!/usr/bin/env bash
# End-to-end checks of the twinflow CLI: each command runs, writes what it says, and exits with the
# documented code. Usage: test_cli.sh path/to/twinflow SOURCE_DIR
set -uo pipefail
tf=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
expect() {  # expect CODE DESCRIPTION -- command...
  local want=$1 what=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then
    pass=$((pass + 1))
  else
    fails=$((fails + 1))
    echo "FAIL: $what: exit $got, expected $want"
    tail -5 "$tmp/err"
  fi
}
contains() {  # contains FILE TEXT DESCRIPTION
  if grep -q -- "$2" "$1"; then pass=$((pass + 1)); else fails=$((fails + 1)); echo "FAIL: $3: '$2' not in $1"; fi
}

expect 0 "help" -- "$tf" --help
expect 2 "unknown command" -- "$tf" frobnicate
expect 2 "unknown option" -- "$tf" simulate --no-such-option
expect 0 "simulate sweep of the default scenario" -- "$tf" simulate --sweep 0:1:0.25 --csv "$tmp/s.csv" \
  --json "$tmp/s.json" --svg "$tmp/s.svg" --trace "$tmp/t.json"
contains "$tmp/out" "best feasible ratio" "simulate prints the best ratio"
contains "$tmp/s.csv" "^ratio,step ms" "simulate CSV header"
contains "$tmp/s.svg" "<svg" "simulate SVG"
contains "$tmp/t.json" "traceEvents" "simulate trace"
python3 - "$tmp/s.json" "$tmp/t.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: JSON outputs"; }
import json, sys
s = json.load(open(sys.argv[1]))
assert len(s["points"]) == 5 and s["best"]["ratio"] >= 0 and s["world"] == 8, s
t = json.load(open(sys.argv[2]))
assert any(e.get("ph") == "X" for e in t["traceEvents"])
PY
expect 0 "simulate one ratio of a shipped scenario" -- "$tf" simulate "$src/scenarios/toy-zero3-ratio0.4.yaml"
contains "$tmp/out" "0.4" "toy scenario at its ratio"
expect 2 "ratio out of range" -- "$tf" simulate --ratio 1.5
contains "$tmp/err" "expected a number in \[0, 1\] or auto" "ratio error message"
expect 2 "ratio neither a number nor auto" -- "$tf" simulate --ratio half
contains "$tmp/err" "--ratio 'half': expected a number in \[0, 1\] or auto" "ratio word error message"
expect 0 "simulate ratio auto" -- "$tf" simulate "$src/scenarios/real/mlp-2b.yaml" --ratio auto \
  --profile h100-80gb-16core-calibrated --json "$tmp/auto.json" --svg "$tmp/auto.svg"
contains "$tmp/out" "smallest that fits is .*, fastest predicted is .* s/step" "ratio auto says why"
contains "$tmp/auto.svg" "chosen ratio" "ratio auto SVG marks the chosen point"
python3 - "$tmp/auto.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: ratio auto JSON"; }
import json, sys
a = json.load(open(sys.argv[1]))["auto_ratio"]
lo, hi = a["fits"]
assert lo <= a["chosen"]["ratio"] <= hi and len(a["table"]) >= 41, a
assert min(p["step_ms"] for p in a["table"]) == a["chosen"]["step_ms"], a
PY
expect 0 "simulate ratio auto on an uncalibrated profile warns" -- "$tf" simulate "$src/scenarios/real/mlp-2b.yaml" \
  --ratio auto
contains "$tmp/err" "lacks the measured figures" "uncalibrated profile warning"
expect 0 "simulate --fit" -- "$tf" simulate "$src/scenarios/real/mlp-2b.yaml" --fit
contains "$tmp/out" "fits at ratios \[" "fit names the range"
expect 1 "simulate --fit of what does not fit" -- "$tf" simulate --world 1 --fit
contains "$tmp/out" "GPU memory is short by .* GB per rank at ratio 1" "fit names the shortfall"
contains "$tmp/out" "change: 2 ranks" "fit names a change that fits"
expect 0 "simulate --largest-preset" -- "$tf" simulate "$src/scenarios/real/opt-1.3b-h100.yaml" --largest-preset opt- \
  --at-ratio 1
contains "$tmp/out" "answer: opt-" "largest preset answer"
expect 2 "--largest-preset of no preset" -- "$tf" simulate --largest-preset bert
expect 2 "infeasible single ratio is refused" -- "$tf" simulate "$src/scenarios/h100-single.yaml" --ratio 0.1
contains "$tmp/err" "the ratios that fit are" "infeasible ratio names the feasible range"
expect 2 "bad sweep" -- "$tf" simulate --sweep 1:0:0.1
printf 'model: {preset: opt-13b}\ncluster: {profile: no-such-profile}\n' >"$tmp/bad.yaml"
expect 2 "unknown profile" -- "$tf" simulate "$tmp/bad.yaml"
contains "$tmp/err" "bad.yaml" "error names the file"
expect 2 "missing scenario file" -- "$tf" simulate "$tmp/missing.yaml"
cat >"$tmp/tiny.yaml" <<'YAML'
name: tiny-functional
model: {type: mlp, dims: [256, 512, 256]}
cluster: {profile: h200x2-32core, gpus_per_node: 2}
training: {micro_batch: 1, steps: 3, precision: bf16, gradient_clipping: 1.0}
optimizer: {type: adamw, params: {lr: 0.001}}
zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}
YAML
expect 0 "functional simulation of a tiny scenario" -- "$tf" simulate "$tmp/tiny.yaml" --functional --sweep 0:1:0.5
contains "$tmp/out" "every ratio bit-identical" "functional verdict"
cat >"$tmp/gpt.yaml" <<'YAML'
name: tiny-gpt
model: {preset: gpt-tiny, seq: 32}
cluster: {profile: h200x2-32core, gpus_per_node: 2}
training: {micro_batch: 1, steps: 2, precision: bf16, gradient_clipping: 1.0}
optimizer: {type: adamw, params: {lr: 0.001}}
zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}
YAML
expect 0 "functional simulation of a tiny decoder" -- "$tf" simulate "$tmp/gpt.yaml" --functional --sweep 0:1:0.5
contains "$tmp/out" "every ratio bit-identical" "decoder functional verdict"
contains "$tmp/err" "the CPU reference decoder" "decoder functional uses the reference decoder"
printf 'data: {train: %s/data/tokens/pydocs-licenses-gpt2.bin}\n' "$src" >>"$tmp/gpt.yaml"
expect 2 "token ids beyond the vocabulary" -- "$tf" simulate "$tmp/gpt.yaml"
contains "$tmp/err" "data.train: token file: .*pydocs-licenses-gpt2.bin': byte" "the bad id's file and byte"
expect 0 "verify (small)" -- "$tf" verify --n 3001 --steps 3
contains "$tmp/out" "all backends bitwise equal" "verify verdict"
expect 0 "bench (small, CPU only)" -- "$tf" bench --n 20000 --iters 1 --optimizers adamw --grads bf16 --gpu off \
  --json "$tmp/b.json"
contains "$tmp/b.json" "same-streams bound" "bench JSON has the bound row"
expect 2 "bench bad dtype" -- "$tf" bench --grads int8 --gpu off
for t in 0 -1 99999; do
  expect 2 "bench --threads $t" -- "$tf" bench --threads "$t" --gpu off
  contains "$tmp/err" "expected a thread count in \[1, " "bench --threads $t names the range"
done
if ! "$tf" run --help | grep -q "needs the CUDA backend"; then  # a CPU-only build has no `run` to parse
  expect 2 "run --threads -1 (before any GPU is needed)" -- "$tf" run --threads -1
  contains "$tmp/err" "--threads -1: expected a thread count in \[1, " "run --threads names the range"
  expect 2 "run --ratio auto needs a calibrated profile (before any GPU is needed)" -- "$tf" run \
    "$src/scenarios/real/mlp-2b.yaml" --ratio auto
  contains "$tmp/err" "h100-80gb-16core-calibrated" "run --ratio auto names the calibrated profile"
  contains "$tmp/err" "twinflow calibrate --out" "run --ratio auto says how to make one"
  expect 3 "run --ratio auto chooses before it needs a GPU" -- env CUDA_VISIBLE_DEVICES= "$tf" run \
    "$src/scenarios/real/mlp-2b.yaml" --ratio auto --profile h100-80gb-16core-calibrated
  contains "$tmp/out" "smallest that fits is .*, fastest predicted is" "run --ratio auto says why"
fi
expect 0 "bench: 1 and 2 ranks at once through the engine's CPU path" -- "$tf" bench --cpu-ranks 1,2 --n 65536 \
  --layers 4 --iters 2 --optimizers adamw --grads bf16 --profile h100-80gb-16core-calibrated --json "$tmp/r.json"
python3 - "$tmp/r.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: bench --cpu-ranks JSON"; }
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["ranks"] for r in rows] == [1, 2], rows
for r in rows:
    assert r["Gparam/s"] > 0 and r["bound GB/s"] > 0 and r["sim ms"] > 0, r
assert rows[0]["vs 1 process"] == "100.0%", rows[0]
PY
expect 0 "bench: the engine's CPU ops of a scenario, per layer" -- "$tf" bench --cpu-ranks 1 \
  --scenario "$src/scenarios/real/mlp-2b.yaml" --ratio 0.001 --iters 1 --optimizers adamw --grads bf16 --per-layer
contains "$tmp/out" "rank 0's CPU ops at 1 rank(s)" "bench --per-layer prints the ops"
expect 2 "bench --cpu-ranks beyond the cores" -- "$tf" bench --cpu-ranks 1,100000
expect 0 "bench: the old identical pinning, for comparison" -- "$tf" bench --cpu-ranks 2 --n 65536 --layers 2 \
  --iters 1 --optimizers adamw --grads bf16 --pinning identical
expect 2 "bench --pinning bad" -- "$tf" bench --cpu-ranks 1 --pinning shared
expect 2 "calibrate needs --out" -- "$tf" calibrate
expect 2 "calibrate bad --reps" -- "$tf" calibrate --out "$tmp/p.yaml" --reps 1
expect 3 "calibrate without a visible GPU" -- env CUDA_VISIBLE_DEVICES= "$tf" calibrate --out "$tmp/p.yaml" --quick
contains "$tmp/err" "no CUDA device: calibrate measures a GPU machine" "calibrate says why it cannot run"

echo "cli: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
