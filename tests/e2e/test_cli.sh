#!/usr/bin/env bash
# End-to-end checks of the twinflow CLI: each command runs, writes what it says, and exits with the
# documented code. Usage: test_cli.sh path/to/twinflow SOURCE_DIR
set -uo pipefail
tf=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/e2e_lib.sh"

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
b = s["best"]["host_bytes_per_cpu_param"]
assert b["state"] in (0, 12) and abs(b["total"] - b["state"] - b["spare"] - b["staging"]) < 1e-9, b
t = json.load(open(sys.argv[2]))
assert any(e.get("ph") == "X" for e in t["traceEvents"])
PY
expect 0 "simulate one ratio of a shipped scenario" -- "$tf" simulate "$src/scenarios/toy-zero3-ratio0.4.yaml"
contains "$tmp/out" "0.4" "toy scenario at its ratio"
contains "$tmp/out" "host bytes per CPU-side parameter 12.00 (state) + " "simulate reports host bytes per CPU param"
contains "$tmp/out" "; host staging: full-size (the host holds it: " "simulate prints the staging auto chose"
expect 0 "staging slots given" -- "$tf" simulate "$src/scenarios/toy-zero3-ratio0.4.yaml" --staging-slots 2
contains "$tmp/out" "host staging: rings of 2 slots (as set)" "simulate prints the staging given"
expect 0 "staging slots auto" -- "$tf" simulate "$src/scenarios/toy-zero3-ratio0.4.yaml" --staging-slots AUTO
expect 2 "staging slots not a number" -- "$tf" simulate --staging-slots lots
contains "$tmp/err" "expected an integer in \[0, 1024\], or auto" "staging slots error names auto"
expect 2 "staging slots out of range" -- "$tf" simulate --staging-slots 2000
contains "$tmp/err" "staging-slots" "staging slots error names the option"
expect 0 "cpu order auto" -- "$tf" simulate "$src/scenarios/toy-zero3-ratio0.4.yaml" --cpu-order auto \
  --speculation max --json "$tmp/order.json"
contains "$tmp/out" "CPU pass order.*the cost model's choice of [0-9]* orders over" "simulate prints the order chosen"
python3 - "$tmp/order.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: cpu order JSON"; }
import json, sys
s = json.load(open(sys.argv[1]))
o = s["best"]["cpu_order"]
assert {"arrival", "before_norm", "chosen"} <= set(o) and o["chosen"]["passes"] >= 1, o
assert s["cpu_orders"] == [o], s["cpu_orders"]
PY
expect 0 "cpu order given" -- "$tf" simulate "$src/scenarios/toy-zero3-ratio0.4.yaml" --cpu-order 0,1 \
  --speculation max --json "$tmp/order.json"
python3 - "$tmp/order.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: cpu order given JSON"; }
import json, sys
assert json.load(open(sys.argv[1]))["best"]["cpu_order"] == {"arrival": 0, "before_norm": 1}
PY
# speculation auto (the default): the cost model's count of speculated layers, printed and in the JSON
expect 0 "speculation auto" -- "$tf" simulate "$src/scenarios/real/mlp-2b.yaml" --ratio 1 \
  --profile "$src/bench/results/2026-11-29-h200x2-out-of-place/call4-h200-1gpu/h200-cal-2b.yaml" --json "$tmp/spec.json"
contains "$tmp/out" "speculation: the cost model's choice of [0-9]* of 31 eligible CPU layer(s)" \
  "simulate prints the speculation chosen"
python3 - "$tmp/spec.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: speculation auto JSON"; }
import json, sys
s = json.load(open(sys.argv[1]))
c = s["best"]["speculation_choice"]
assert 0 < c["layers"] < c["eligible"] == 31 and s["best"]["speculation_layers"] == c["layers"], c
assert c["step_ms"] < c["every_layer_step_ms"] and c["step_ms"] < c["no_layer_step_ms"], c
assert s["speculation"] == [{"layers": c["layers"], "chosen": c}], s["speculation"]
PY
expect 0 "speculation max" -- "$tf" simulate "$src/scenarios/real/mlp-2b.yaml" --ratio 1 --speculation MAX \
  --profile "$src/bench/results/2026-11-29-h200x2-out-of-place/call4-h200-1gpu/h200-cal-2b.yaml" --json "$tmp/spec.json"
python3 - "$tmp/spec.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: speculation max JSON"; }
import json, sys
b = json.load(open(sys.argv[1]))["best"]
assert b["speculation_layers"] == -1 and b["speculation_choice"] is None, b
assert b["host_bytes_per_cpu_param"]["spare"] > 11, b  # every layer but layer 0 of 32
PY
expect 2 "speculation neither auto, max nor bytes" -- "$tf" simulate --speculation most
contains "$tmp/err" "--speculation 'most': expected auto, max or a number of bytes" "speculation error names the forms"
expect 2 "speculation negative" -- "$tf" simulate --speculation -5
printf 'model: {type: mlp, dims: [64, 64]}\ncluster: {profile: h100-80gb-16core}\ntraining: {micro_batch: 4,\n  speculation: all}\n' \
  > "$tmp/spec.yaml"
expect 2 "speculation in a scenario neither auto, max nor bytes" -- "$tf" simulate "$tmp/spec.yaml"
contains "$tmp/err" "spec.yaml:4:.*training.speculation: expected .auto. (the cost model's choice), .max." \
  "the scenario's speculation error names the file, line, key and forms"
expect 2 "cpu order neither auto, arrival nor M,K" -- "$tf" simulate --cpu-order sideways
contains "$tmp/err" "--cpu-order 'sideways': expected auto, arrival or M,K" "cpu order error names the forms"
expect 2 "cpu order negative" -- "$tf" simulate --cpu-order 1,-1
contains "$tmp/err" "cpu-order" "cpu order error names the option"
expect 2 "ring order neither forward nor backward" -- "$tf" simulate --ring-order sideways
contains "$tmp/err" "--ring-order 'sideways': expected forward or backward" "ring order error names the forms"
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
# each row: the compared step is the slower of the held one and the one after a clipped step (clip 1.0 here)
assert all(p["step_ms"] == max(p["held_ms"], p["after_clip_ms"]) for p in a["table"]), a
PY
contains "$tmp/out" "^ratio .*step ms  held ms  after clip ms" "ratio auto table shows both cases"
contains "$tmp/out" "^step ms: the slower of held ms" "ratio auto table says which step it compares"
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
# an lr schedule: bit-identical to the plain loop, the last step's lr printed, echoed in --json's settings
cp "$tmp/tiny.yaml" "$tmp/sched.yaml"
printf 'scheduler: {type: WarmupDecayLR, params: {warmup_num_steps: 2, total_num_steps: 4, warmup_type: linear}}\n' \
  >>"$tmp/sched.yaml"
expect 0 "functional simulation with an lr schedule" -- "$tf" simulate "$tmp/sched.yaml" --functional \
  --sweep 0:1:0.5 --json "$tmp/sched.json"
contains "$tmp/out" "every ratio bit-identical" "scheduled functional verdict"
contains "$tmp/out" "last lr" "the functional table has the lr"
python3 - "$tmp/sched.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: schedule in --json"; }
import json, sys
s = json.load(open(sys.argv[1]))["settings"]
assert s["scheduler.type"] == "WarmupDecayLR" and s["scheduler.total_num_steps"] == 4, s
assert s["scheduler.warmup_max_lr"] == 0.001 and s["scheduler.warmup_type"] == "linear", s
PY
printf 'model: {type: mlp, dims: [256, 512, 256]}\ncluster: {profile: h200x2-32core}\ntraining: {micro_batch: 1}\n' \
  >"$tmp/badsched.yaml"
printf 'optimizer: {type: adamw}\nzero: {stage: 3}\nscheduler: {type: OneCycle}\n' >>"$tmp/badsched.yaml"
expect 2 "an unknown scheduler type" -- "$tf" simulate "$tmp/badsched.yaml"
contains "$tmp/err" "scheduler.type: 'OneCycle' is not supported; allowed: constant, WarmupLR" "the types are listed"
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
expect 2 "bench --cpu-ranks --threads -1" -- "$tf" bench --cpu-ranks 1 --threads -1
contains "$tmp/err" "--threads -1: expected a thread count in \[1, " "bench --cpu-ranks --threads names the range"
expect 2 "bench --tuning unroll=3" -- "$tf" bench --tuning unroll=3 --gpu off
contains "$tmp/err" "--tuning: unroll 3 is not implemented (1, 2 or 4)" "bench --tuning names the knob and its values"
expect 2 "bench --variants with an unknown knob" -- "$tf" bench --cpu-ranks 1 --variants "nt=1;foo=1"
contains "$tmp/err" "--variants: unknown knob 'foo=1'" "bench --variants names the pair"
expect 0 "bench --cpu-ranks with variants (small)" -- "$tf" bench --cpu-ranks 1 --n 65536 --layers 2 --iters 1 \
  --optimizers adamw --grads bf16 --variants "unroll=2;interleave=2,nt=1" --json "$tmp/v.json"
contains "$tmp/v.json" "interleave=2,nt=1" "bench --cpu-ranks JSON names each variant"
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
# out of place (the speculative update into the spare slot) beside in place, and the variants alternating
expect 0 "bench --out-of-place --alternate" -- "$tf" bench --cpu-ranks 1,2 --n 65536 --layers 2 --iters 2 \
  --optimizers adamw --grads bf16 --out-of-place --alternate --variants "unroll=2" --json "$tmp/oop.json"
python3 - "$tmp/oop.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: bench --out-of-place JSON"; }
import json, sys
rows = json.load(open(sys.argv[1]))
# per k: the main row in place, out of place (paired), then the alternation: the main and unroll=2, both out of place
assert [r["ranks"] for r in rows] == [1] * 4 + [2] * 4, rows
for k in (0, 4):
    ip, oop, main, var = rows[k:k + 4]
    assert ip["update"] == "in place" and oop["update"].startswith("out of place, x"), (ip, oop)
    assert main["update"] == "out of place, the main" and main["tuning"] == "default (alternating)", main
    assert var["update"].startswith("out of place, x") and var["tuning"] == "unroll=2 (alternating)", var
    assert all(r["Gparam/s"] > 0 for r in (ip, oop, main, var))
PY
expect 2 "bench --alternate without variants" -- "$tf" bench --cpu-ranks 1 --alternate
contains "$tmp/err" "--alternate needs --variants" "bench --alternate names what is missing"
expect 0 "bench: the engine's CPU ops of a scenario, per layer" -- "$tf" bench --cpu-ranks 1 \
  --scenario "$src/scenarios/real/mlp-2b.yaml" --ratio 0.001 --iters 1 --optimizers adamw --grads bf16 --per-layer
contains "$tmp/out" "rank 0's CPU ops at 1 rank(s)" "bench --per-layer prints the ops"
expect 2 "bench --cpu-ranks beyond the cores" -- "$tf" bench --cpu-ranks 1,100000
# calibrate's footprint curve without a GPU: the toy's two ranks holding what it pins at ratios 0.5 and 1
expect 0 "bench --footprints: the node rate at a scenario's host memory" -- "$tf" bench --footprints \
  --scenario "$src/scenarios/toy-zero3-ratio0.4.yaml" --n 262144 --layers 4 --iters 2 \
  --profile h100-80gb-16core-calibrated --json "$tmp/fp.json"
contains "$tmp/err" "placing .* GB of host memory for toy-zero3-ratio0.4 at ratio 1 (2 rank processes" \
  "bench --footprints says what it places"
python3 - "$tmp/fp.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: bench --footprints JSON"; }
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["footprint"] for r in rows] == ["toy-zero3-ratio0.4 at ratio 0.5", "toy-zero3-ratio0.4 at ratio 1"], rows
for r in rows:
    # held: the plan's bytes, or the workers' segments alone where the plan pins less (few speculated layers)
    assert r["ranks"] == 2 and r["held GB"] >= r["planned GB"] > r["small GB"] > 0, r
    assert r["factor"] > 0 and r["Gparam/s"] > 0 and r["small Gparam/s"] > 0, r
    assert r["profile factor"] == 1.0, r  # that profile has no footprint curve
assert rows[0]["planned GB"] < rows[1]["planned GB"], rows
PY
expect 2 "bench --footprints needs a scenario" -- "$tf" bench --footprints
contains "$tmp/err" "--footprints needs --scenario" "bench --footprints names what is missing"
expect 2 "bench --footprints with --cpu-ranks" -- "$tf" bench --footprints --cpu-ranks 1 \
  --scenario "$src/scenarios/toy-zero3-ratio0.4.yaml"
expect 0 "bench: the old identical pinning, for comparison" -- "$tf" bench --cpu-ranks 2 --n 65536 --layers 2 \
  --iters 1 --optimizers adamw --grads bf16 --pinning identical
expect 2 "bench --pinning bad" -- "$tf" bench --cpu-ranks 1 --pinning shared
expect 2 "calibrate needs --out" -- "$tf" calibrate
expect 2 "calibrate bad --reps" -- "$tf" calibrate --out "$tmp/p.yaml" --reps 1
expect 2 "calibrate --footprints without a scenario" -- "$tf" calibrate --out "$tmp/p.yaml" --footprints
contains "$tmp/err" "--footprints needs --scenario" "calibrate --footprints names what is missing"
expect 3 "calibrate without a visible GPU" -- env CUDA_VISIBLE_DEVICES= "$tf" calibrate --out "$tmp/p.yaml" --quick
contains "$tmp/err" "no CUDA device: calibrate measures a GPU machine" "calibrate says why it cannot run"

not_contains() {  # not_contains FILE TEXT DESCRIPTION
  if grep -q -- "$2" "$1"; then fails=$((fails + 1)); echo "FAIL: $3: '$2' in $1"; else pass=$((pass + 1)); fi
}

# ---- what a run resolved: --json records settings, defaults and warnings; defaults printed once ----
toy="$src/scenarios/toy-zero3-ratio0.4.yaml"
expect 0 "simulate records the resolved settings" -- "$tf" simulate "$toy" --json "$tmp/toy.json"
contains "$tmp/err" "^default: gradient_clipping = 1 (" "the clipping default is printed"
[ "$(grep -c '^default: gradient_clipping = ' "$tmp/err")" -eq 1 ] && pass=$((pass + 1)) ||
  { fails=$((fails + 1)); echo "FAIL: the clipping default is printed once"; }
python3 - "$tmp/toy.json" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: simulate --json record"; }
import json, sys
d = json.load(open(sys.argv[1]))
s = d["settings"]
assert s["zero.stage"] == 3 and isinstance(s["zero.stage"], int), s
assert s["zero.offload_optimizer.ratio"] == 0.4 and s["training.precision"] == "fp16", s
assert s["training.gradient_clipping"] == 1 and s["training.global_batch"] == 256, s
assert {"key": "gradient_clipping", "value": "1"}.items() <= next(x for x in d["defaults"] if x["key"] == "gradient_clipping").items(), d["defaults"]
assert any("reduce_bucket_size" in w for w in d["warnings"]), d["warnings"]
PY
expect 0 "validate --measured records the resolved settings" -- "$tf" validate "$src/scenarios/real/mlp-2b.yaml" \
  --profile "$src/bench/results/2026-11-23-validate-h100/h100-cal-a.yaml" \
  --measured "$src/bench/results/2026-11-23-validate-h100/sweep-mlp-2b.json" --json "$tmp/val.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["settings"]["zero.stage"] == 3 and "defaults" in d and "warnings" in d, d' \
  "$tmp/val.json" && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: validate --json record"; }

contains "$tmp/out" "measured_ms  spread_%  steps" "validate prints each point's compared steps"
v2b=("$src/scenarios/real/mlp-2b.yaml" --profile "$src/bench/results/2026-11-23-validate-h100/h100-cal-a.yaml")
expect 2 "validate --trace-steps without --trace" -- "$tf" validate "${v2b[@]}" --trace-steps 2
contains "$tmp/err" "--trace-steps: applies to --trace FILE" "validate --trace-steps names what it needs"
expect 2 "validate --trace-steps beyond --steps" -- "$tf" validate "${v2b[@]}" --trace "$tmp/t.json" --trace-steps 9
contains "$tmp/err" "--trace-steps 9: must be in \[1, 8\]" "validate --trace-steps names the range"
# the host check on this host: the sweep's two rank processes on calibrate's rank-curve segments against the
# profile's rate at 2 ranks (5.835 Gparam/s on the 2 x H200 host)
hc=$src/bench/results/2026-11-28-h200x2-footprints/call6-2b-default
expect 0 "validate --measured --host-check on" -- "$tf" validate "$src/scenarios/real/mlp-2b-h200x2.yaml" \
  --profile "$hc/h200x2-cal-2b.yaml" --measured "$hc/sweep-2b.json" --host-check on --json "$tmp/hc.json"
contains "$tmp/out" "host check: 2 rank processes on calibrate's rank-curve segments after the sweep: .* Gparam/s, the profile 5.835" \
  "validate --host-check prints the host's rate against the profile's"
python3 -c "import json,sys; h=json.load(open(sys.argv[1]))['host_check']; assert h['ranks']==2 and h['now_gparam_s']>0 \
  and h['profile_gparam_s']==5.835, h" "$tmp/hc.json" && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: host_check JSON"; }
expect 0 "validate --measured: no host check unless asked" -- "$tf" validate "$src/scenarios/real/mlp-2b-h200x2.yaml" \
  --profile "$hc/h200x2-cal-2b.yaml" --measured "$hc/sweep-2b.json"
check "validate --measured skips the host check" -- bash -c "! grep -q 'host check' '$tmp/out'"
# a sweep measured with run --host-probe (validate passes it when measuring): the node rate before and after
# every point beside each row (host_%), each point also simulated with it (tracked_%), the host check from the
# run's last probe instead of a measurement here
hp=$src/bench/results/2026-11-28-h200x2-probes/callB-8b-probes
expect 1 "validate --measured: a sweep with host probes" -- "$tf" validate "$src/scenarios/real/mlp-8b-h200x2.yaml" \
  --profile "$hp/h200x2-cal-8b.yaml" --measured "$hp/sweep-8b.json" --host-check on --json "$tmp/hp.json"
contains "$tmp/out" "gpu_err_%  host_%  tracked_%" "validate prints the host probes' columns"
contains "$tmp/out" "host-tracked (each point re-simulated .*: MAPE 14.2[0-9]% over 10 points, worst 27.8[0-9]% at ratio 0.800" \
  "validate prints the host-tracked MAPE beside the goals"
contains "$tmp/out" "after the sweep (the run's last probe): 6.648 Gparam/s, the profile 6.949" \
  "validate's host check reads the run's last probe"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['host_tracked']; p=d['points']; \
  assert t['points']==10 and abs(t['worst_pct']-27.80)<0.05 and d['host_check']['from_run'] and \
  all('host' in x for x in p) and abs(p[0]['host']['moved_pct']-(-4.08))<0.05, (t, p[0])" "$tmp/hp.json" \
  && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: validate host-tracked JSON"; }
# a sweep measured with run --pages-probe: each engine's pass over its own pages (pages_%), each point also simulated
# with it (placed_%), ratio 0 without (no CPU part)
pp=$src/bench/results/2026-11-28-h200x2-pages/callI-8b-values-probe
expect 1 "validate --measured: a sweep with pages probes" -- "$tf" validate "$src/scenarios/real/mlp-8b-h200x2.yaml" \
  --profile "$pp/h200x2-cal-8b.yaml" --measured "$pp/sweep-8b.json" --json "$tmp/pp.json"
contains "$tmp/out" "tracked_%  pages_%  placed_%" "validate prints the pages probes' columns"
contains "$tmp/out" "pages-tracked (each point re-simulated .*: MAPE 6.8[0-9]% over 9 points, worst 15.9[0-9]% at ratio 0.800" \
  "validate prints the pages-tracked MAPE beside the goals"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['pages_tracked']; p=d['points']; \
  assert t['points']==9 and abs(t['mape_pct']-6.83)<0.05 and 'pages' not in p[0] and \
  all('pages' in x for x in p[1:]) and abs(p[9]['pages']['moved_pct']-(-14.3))<0.1, (t, p[9])" "$tmp/pp.json" \
  && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: validate pages-tracked JSON"; }
expect 2 "validate --host-check bad" -- "$tf" validate "${v2b[@]}" --host-check sometimes --measured "$tmp/none.json"
contains "$tmp/err" "--host-check 'sometimes': allowed on, off, auto" "validate --host-check names the choices"
expect 2 "validate --measured with --trace-steps" -- "$tf" validate "${v2b[@]}" --trace-steps 2 \
  --measured "$src/bench/results/2026-11-23-validate-h100/sweep-mlp-2b.json"
# ---- issue 19: bad input gets a clear error (2), a failed write a runtime failure (3) ----
expect 2 "verify --n -1 is a range error" -- "$tf" verify --n -1
contains "$tmp/err" "--n '-1': expected an integer in \[1, 2147483648\]" "verify --n names its range"
expect 2 "verify --n 2^64 is a range error" -- "$tf" verify --n 18446744073709551616
expect 2 "bench --n -1 is a range error" -- "$tf" bench --n -1 --gpu off
expect 2 "--metrics-linger 1e10 is a range error" -- "$tf" simulate "$toy" --metrics-port 0 --metrics-linger 1e10
contains "$tmp/err" "--metrics-linger 1e+10: allowed -1 (serve until interrupted) or \[0, 1e+06\] seconds" \
  "linger names its range"
expect 2 "--world beyond the simulator's bound" -- "$tf" simulate --world 65536
contains "$tmp/err" "^twinflow simulate: error: --world 65536: ranks (65536) x grad_accum" "--world is named"
expect 2 "--world out of range" -- "$tf" simulate --world 0
expect 3 "--json /dev/full" -- "$tf" simulate "$toy" --json /dev/full
contains "$tmp/err" "--json /dev/full: cannot write: No space left on device" "/dev/full names the file and errno"
# A write that fails half-way (a file-size limit: EFBIG) leaves the old file and no partial one.
printf 'old\n' >"$tmp/keep.json"
expect 3 "a trace that cannot be written whole" -- bash -c 'trap "" XFSZ; ulimit -f 64; exec "$0" simulate --trace "$1"' \
  "$tf" "$tmp/keep.json"
contains "$tmp/err" "--trace $tmp/keep.json: cannot write: File too large" "the failed write is named"
[ "$(cat "$tmp/keep.json")" = old ] && [ -z "$(ls "$tmp" | grep 'keep.json.tmp')" ] && pass=$((pass + 1)) ||
  { fails=$((fails + 1)); echo "FAIL: a failed write left a partial file: $(ls "$tmp")"; }
expect 3 "--csv into a missing directory" -- "$tf" simulate "$toy" --csv "$tmp/no/such/dir/x.csv"
[ ! -e "$tmp/no" ] && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: a directory appeared"; }
base='name: x\nmodel: toy-mlp\ncluster: {profile: h200x2-32core, gpus_per_node: 2}\ntraining: {micro_batch: 1}\n'
printf "$base"'optimizer: {type: adamw}\nzero: {stage: 3}\n\033[31mbad\007: 1\n' >"$tmp/esc.yaml"
expect 2 "control characters in a key" -- "$tf" simulate "$tmp/esc.yaml"
contains "$tmp/err" '\\x1b\[31mbad\\x07' "control characters are escaped"
not_contains "$tmp/err" $'\x1b' "no raw ESC reaches the terminal"
not_contains "$tmp/err" $'\a' "no raw BEL reaches the terminal"
printf "$base"'optimizer: {type: adamw}\nzero: {stage: 3, offload_optimizer: {device: cpu, raito: 0.3}}\n' >"$tmp/raito.yaml"
expect 2 "a misspelt scenario key" -- "$tf" simulate "$tmp/raito.yaml"
contains "$tmp/err" "raito.yaml:6:51: zero.offload_optimizer.raito: unknown key \`raito\` at 6:51; did you mean \`ratio\`?" \
  "the misspelt key names its place and the nearest key"
printf "$base"'optimizer: {type: adamw, params: {betas: [1.5, 0.9]}}\nzero: {stage: 3}\n' >"$tmp/betas.yaml"
expect 2 "bad Adam betas" -- "$tf" simulate "$tmp/betas.yaml"
contains "$tmp/err" "betas.yaml:5:43: optimizer.params.betas\[0\]: 1.5 is out of range; allowed \[0, 1\]" \
  "betas name key, value, interval"
printf 'model: toy-mlp\ncluster: {profile: ../hardware/h100-80gb-16core}\n' >"$tmp/dotdot.yaml"
expect 2 "a profile name with ../" -- "$tf" simulate "$tmp/dotdot.yaml"
contains "$tmp/err" "is neither a profile name nor a .yaml path" "a profile name is a name only"
expect 2 "validate --profile ../x" -- "$tf" validate "$toy" --profile ../x --measured "$tmp/none.json"
expect 2 "a bare ds_config given as the scenario" -- "$tf" simulate "$src/scenarios/ds_config/gpt-350m.json"
contains "$tmp/err" "this is a DeepSpeed config" "core's message for a bare ds_config"
contains "$tmp/err" "  ds_config: gpt-350m.json" "it says how to reference the ds_config"

# ---- what the simulator's compute rests on: a note when a decoder's profile lacks the measured terms ----
g350="$src/scenarios/real/gpt-350m-h200.yaml"
expect 0 "a decoder on a profile without decoder terms" -- "$tf" simulate "$g350" --ratio 0 --profile h200-141gb-16core
contains "$tmp/out" "^note: profile 'h200-141gb-16core' has no measured GEMM rates by shape" \
  "the note names the missing terms"
expect 0 "a decoder on the profile calibrated on it" -- "$tf" simulate "$g350" --ratio 0
not_contains "$tmp/out" "^note:" "no note where every term and shape was measured"
expect 0 "a decoder whose shapes the profile did not measure" -- "$tf" simulate \
  "$src/scenarios/real/opt-13b-h200.yaml" --ratio 0.5 --profile h200-141gb-16core-calibrated
contains "$tmp/out" "^note: 15 of this model's 15 GEMM shapes are not in profile 'h200-141gb-16core-calibrated''s table" \
  "the note counts the shapes the profile did not measure"
contains "$tmp/out" "^note: profile 'h200-141gb-16core-calibrated' did not measure the fused attention at head dim 128, seq 1024, 160 (micro-batch x heads) pairs" \
  "the note names the attention point the profile lacks"
contains "$tmp/out" "it runs at the rate of the nearest measured point, head dim 64, seq 1024, 256 pairs" \
  "and the point whose rate stands in"
expect 0 "a decoder the profile was calibrated on among others" -- "$tf" simulate \
  "$src/scenarios/real/gpt2-124m-h100.yaml" --ratio 0 --profile h200-141gb-16core-calibrated
not_contains "$tmp/out" "^note:" "GPT-2 124M's shapes and attention grid are in the calibrated profile"

echo "cli: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
