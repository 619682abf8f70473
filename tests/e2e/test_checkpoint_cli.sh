#!/usr/bin/env bash
# End-to-end checks of checkpoints on the CLI without a GPU: `simulate --functional` saves, resumes and
# stops on SIGTERM as `run` does (docs/ARCHITECTURE.md, "Checkpoints"); --resume's errors name what to
# do; `export` writes Hugging Face weights. Usage: test_checkpoint_cli.sh path/to/twinflow SOURCE_DIR
set -uo pipefail
tf=$1
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/e2e_lib.sh"

scenario() {  # scenario FILE STEPS [CHECKPOINT-SECTION]
  cat >"$1" <<YAML
name: ckpt-e2e
model: {type: mlp, dims: [256, 512, 256]}
cluster: {profile: h200x2-32core, gpus_per_node: 2}
training: {micro_batch: 1, steps: $2, precision: bf16, gradient_clipping: 1.0}
optimizer: {type: adamw, params: {lr: 0.001}}
zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}
${3:-}
YAML
}

# ---- saves every 2 steps, keeps 2; resume continues bit for bit, also at another world and ratio ----
scenario "$tmp/mlp.yaml" 6 "checkpoint: {dir: ck, every_steps: 2, keep: 2}"
expect 0 "functional run with checkpoints" -- "$tf" simulate "$tmp/mlp.yaml" --functional
contains "$tmp/out" "bit-identical to the single-process loop" "functional verdict with checkpoints"
contains "$tmp/err" "checkpoint $tmp/ck/step-6: " "the last save is reported"
check "keep 2: step-4 and step-6 kept, step-2 pruned" -- test -d "$tmp/ck/step-4" -a -d "$tmp/ck/step-6" -a ! -e "$tmp/ck/step-2"
expect 0 "resume latest to step 9" -- "$tf" simulate "$tmp/mlp.yaml" --functional --steps 9 --resume latest
contains "$tmp/err" "resuming from $tmp/ck/step-6" "resume names the checkpoint"
contains "$tmp/out" "7\.\.9" "the resumed run trains steps 7..9"
contains "$tmp/out" "bit-identical to the single-process loop" "resumed run equals the uninterrupted loop"
expect 0 "resume at world 4 and ratio 0.25" -- "$tf" simulate "$tmp/mlp.yaml" --functional --steps 11 --world 4 \
  --ratio 0.25 --resume "$tmp/ck/step-9"
contains "$tmp/out" "bit-identical to the single-process loop" "resharded resume equals the uninterrupted loop"

# ---- --resume's errors ----
expect 2 "resume with nothing left" -- "$tf" simulate "$tmp/mlp.yaml" --functional --steps 11 --resume latest
contains "$tmp/err" "nothing is left to train; raise training.steps" "no steps left says what to do"
expect 2 "--resume without --functional" -- "$tf" simulate "$tmp/mlp.yaml" --resume latest
contains "$tmp/err" "it needs --functional" "--resume names --functional"
scenario "$tmp/plain.yaml" 6
expect 2 "--resume latest without checkpoint.dir" -- "$tf" simulate "$tmp/plain.yaml" --functional --resume latest
contains "$tmp/err" "has no \`checkpoint: {dir: ...}\`" "--resume latest needs checkpoint.dir"
mkdir -p "$tmp/empty/step-3.tmp"
expect 2 "--resume of a directory without checkpoints" -- "$tf" simulate "$tmp/plain.yaml" --functional --resume "$tmp/empty"
contains "$tmp/err" "holds no complete checkpoint" "no checkpoint: says so"
contains "$tmp/err" "start without --resume" "no checkpoint: says what to do"
sed 's/^name: ckpt-e2e/name: ckpt-e2e\nworkload: {seed: 9}/' "$tmp/mlp.yaml" >"$tmp/seed.yaml"
expect 2 "--resume with another seed" -- "$tf" simulate "$tmp/seed.yaml" --functional --steps 12 --resume latest
contains "$tmp/err" "set workload.seed: 1 to continue that run" "another seed names the fix"
# a flipped bit in the newest checkpoint's data (step-11; keep 2 left step-10 beside it): the file, the
# checksum, and the earlier checkpoint to use
python3 - "$tmp/ck/step-11/rank-00000.data" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(100)
    b = f.read(1)
    f.seek(100)
    f.write(bytes([b[0] ^ 0x10]))
PY
expect 2 "damaged checkpoint" -- "$tf" simulate "$tmp/mlp.yaml" --functional --steps 12 --resume latest
contains "$tmp/err" "ck/step-11/rank-00000.data" "damage names the file"
contains "$tmp/err" "fails its checksum" "damage names the check"
contains "$tmp/err" "resume from the earlier checkpoint $tmp/ck/step-10" "damage says what to do"

# ---- SIGTERM: finish the step, save, exit 0; the resume continues bit for bit ----
scenario "$tmp/long.yaml" 100000 "checkpoint: {dir: long, every_steps: 25, keep: 1}"
"$tf" simulate "$tmp/long.yaml" --functional --steps 100000 >"$tmp/long.out" 2>"$tmp/long.err" &
pid=$!
for _ in $(seq 200); do  # the handlers are installed once a checkpoint exists
  ls "$tmp/long" 2>/dev/null | grep -q '^step-[0-9]*$' && break
  sleep 0.05
done
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
check "SIGTERM: exit 0 (got $rc)" -- test "$rc" -eq 0
contains "$tmp/long.out" "stopped after step" "SIGTERM: the stop is reported"
contains "$tmp/long.out" "bit-identical to the single-process loop" "SIGTERM: the weights reached are the loop's"
stop=$(grep -o 'stopped after step [0-9]*' "$tmp/long.out" | grep -o '[0-9]*$')
check "SIGTERM: step-$stop saved" -- test -f "$tmp/long/step-${stop:-x}/manifest.json"
expect 0 "resume after SIGTERM" -- "$tf" simulate "$tmp/long.yaml" --functional --steps $((${stop:-0} + 3)) --resume latest
contains "$tmp/out" "bit-identical to the single-process loop" "resume after SIGTERM equals the uninterrupted loop"

# ---- export: Hugging Face names from a decoder's checkpoint ----
cat >"$tmp/gpt.yaml" <<'YAML'
name: ckpt-export
model: {preset: gpt-tiny, seq: 32}
cluster: {profile: h200x2-32core, gpus_per_node: 2}
training: {micro_batch: 1, steps: 2, precision: bf16, gradient_clipping: 1.0}
optimizer: {type: adamw, params: {lr: 0.001}}
zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}
checkpoint: {dir: gck}
YAML
expect 0 "functional decoder run with a checkpoint" -- "$tf" simulate "$tmp/gpt.yaml" --functional
expect 0 "export fp32" -- "$tf" export "$tmp/gck" --safetensors "$tmp/g.safetensors" --dtype fp32
contains "$tmp/out" "export: $tmp/gck/step-2 (step 2, model gpt-tiny" "export names the checkpoint"
python3 - "$tmp/g.safetensors" <<'PY' && pass=$((pass + 1)) || { fails=$((fails + 1)); echo "FAIL: export header"; }
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
assert h["transformer.wte.weight"]["dtype"] == "F32", h["transformer.wte.weight"]
assert "transformer.h.0.attn.c_attn.weight" in h and "lm_head.weight" not in h, sorted(h)
PY
expect 0 "export bf16 (the default)" -- "$tf" export "$tmp/gck/step-2" --safetensors "$tmp/g16.safetensors"
expect 2 "export of an MLP checkpoint" -- "$tf" export "$tmp/ck" --safetensors "$tmp/x.safetensors"
contains "$tmp/err" "Hugging Face names exist for GPT-2 and OPT decoders only" "export refuses an MLP"
expect 2 "export --dtype fp16" -- "$tf" export "$tmp/gck" --safetensors "$tmp/x.safetensors" --dtype fp16
expect 2 "export of a directory without checkpoints" -- "$tf" export "$tmp/empty" --safetensors "$tmp/x.safetensors"
expect 2 "export without --safetensors" -- "$tf" export "$tmp/gck"
# run --host-probe measures between a sweep's points: a checkpointed run (one training run) refuses it before
# it needs a GPU
if ! "$tf" run --help | grep -q "needs the CUDA backend"; then  # a CPU-only build has no `run` to parse
  expect 2 "run --host-probe with checkpoints" -- "$tf" run "$tmp/mlp.yaml" --host-probe
  contains "$tmp/err" "--host-probe measures the host between the points of a sweep" "run names the clash"
fi

echo "checkpoint cli: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
