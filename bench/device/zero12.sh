#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h100-x1 from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing. Issue 15, ZeRO stages 1 and 2 on the CUDA engine (~3 min):
#  1. tf_cuda_tests' CudaEngineZero12 tests (stages 1/2 against the functional simulator bit for bit at
#     ratios 0, 0.3, 1; fp16 overflow; PCIe bytes equal to stage 3's; the MLP's and the decoder's bits
#     equal to stage 3's; memory and plan equal to the simulator's; two GPUs: skipped on one) and
#     CudaEngine.* (stage 3 unchanged);
#  2. `twinflow run --verify --workload synthetic` at stages 1 and 2 on parity-mlp (MLP) and a small
#     decoder (gpt-tiny, the tied head), ratios 0, 0.3, 1;
#  3. tokens/s of OPT-1.3B at ratio 0.3 (real tokens, 5 steps), stage 2 against stage 3.
# Each stage's scenario is the committed one with `stage:` rewritten, written beside it (its relative
# paths hold) and removed at exit. Logs land in $OUT (summary.txt: the lines that matter).
set -uo pipefail
W=/tmp/tf-zero12
. bench/device/device_env.sh
TF=$B/twinflow
SUM=$OUT/summary.txt
: > "$SUM"
made=()
cleanup() { rm -f "${made[@]}"; }
trap cleanup EXIT
# stage_copy SCENARIO STAGE: the scenario at ZeRO STAGE, beside the original; prints its path
stage_copy() {
  local out="${1%.yaml}.zero$2.yaml"
  sed -E "s/^(  stage:) [0-9]+/\1 $2/" "$1" > "$out"
  grep -q "^  stage: $2\$" "$out" || { echo "stage_copy: no '  stage:' line in $1" >&2; return 1; }
  made+=("$out")
  echo "$out"
}

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; } \
  | tee "$W/machine.txt"

step "1. GPU tests [~60 s]" | tee -a "$SUM"
timeout 150 $B/tf_cuda_tests --gtest_filter='CudaEngineZero12.*:CudaEngine.*' > "$OUT/cuda_tests.log" 2>&1
echo "rc $?" | tee -a "$SUM"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED  \]|Failure|GPU in use" "$OUT/cuda_tests.log" | tee -a "$SUM"

step "2. run --verify at stages 1 and 2 [~40 s]" | tee -a "$SUM"
cat > scenarios/real/zero12-gpt-tiny.yaml <<'YAML'
# bench/device/zero12.sh's small decoder (written and removed by the script): gpt-tiny on one H100
name: zero12-gpt-tiny
model: {preset: gpt-tiny, seq: 32}
cluster: {profile: h100-80gb-16core, gpus_per_node: 1, cpu_cores_per_gpu: 8}
training: {micro_batch: 2, grad_accum: 2, steps: 5, precision: bf16, gradient_clipping: 1.0}
optimizer:
  type: adamw
  params: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}
zero:
  stage: 3
  offload_optimizer: {device: cpu, ratio: 0.3}
workload: {type: decoder, seed: 1}
YAML
made+=(scenarios/real/zero12-gpt-tiny.yaml)
for base in scenarios/real/parity-mlp.yaml scenarios/real/zero12-gpt-tiny.yaml; do
  for stage in 1 2; do
    sc=$(stage_copy "$base" $stage) || continue
    name=$(basename "$base" .yaml)-zero$stage
    timeout 60 $TF run "$sc" --workload synthetic --ratios 0,0.3,1 --verify --steps 5 > "$OUT/$name.log" 2>&1
    echo "$name rc $?" | tee -a "$SUM"
    grep -E "parity" "$OUT/$name.log" | tee -a "$SUM"
  done
done

step "3. OPT-1.3B tokens/s at ratio 0.3: stage 2 against stage 3 [~90 s]" | tee -a "$SUM"
for stage in 3 2; do
  sc=$(stage_copy scenarios/real/opt-1.3b-h100.yaml $stage) || continue
  timeout 100 $TF run "$sc" --ratio 0.3 --steps 5 --json "$OUT/opt-1.3b-zero$stage.json" > "$OUT/opt-1.3b-zero$stage.log" 2>&1
  echo "opt-1.3b stage $stage rc $?" | tee -a "$SUM"
  grep -E -A3 "^summary" "$OUT/opt-1.3b-zero$stage.log" | tee -a "$SUM"
  grep -E "GPU segment|memory" "$OUT/opt-1.3b-zero$stage.log" | head -3 | tee -a "$SUM"
done
