#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it). First contact of the decoder's kernels with a GPU:
#  1. tf_cuda_tests: the decoder kernels against their double references, then everything else;
#  2. compute-sanitizer racecheck/memcheck on the attention tests (small shapes);
#  3. bench_decoder_kernels at GPT-2-124M and OPT-1.3B shapes;
#  4. the transformers peer: make GPT-2-124M and OPT-125M, and the no-offload speed of OPT-1.3B and GPT-2-124M.
# Logs land in $OUT; the tables print here.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2;
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
  | tee "$OUT/machine.txt"
step "decoder kernel tests"
timeout 200 $B/tf_cuda_tests --gtest_filter='DecoderKernels.*:TokenRowIndex.*:Attention*' > "$OUT/kernel_tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (FAILED|PASSED) |OK \]|tests ran|Failure|error|ratio" "$OUT/kernel_tests.log" | head -60
step "bench_decoder_kernels"
timeout 120 $B/bench_decoder_kernels > "$OUT/bench_kernels.log" 2>&1; echo "rc $?"; tail -40 "$OUT/bench_kernels.log"
step "racecheck on attention"
timeout 150 compute-sanitizer --tool racecheck --print-limit 20 $B/tf_cuda_tests --gtest_filter='DecoderKernels.Attention*' \
  > "$OUT/racecheck.log" 2>&1; echo "rc $?"; tail -8 "$OUT/racecheck.log"
step "memcheck on the decoder kernels"
timeout 150 compute-sanitizer --tool memcheck --print-limit 20 $B/tf_cuda_tests --gtest_filter='DecoderKernels.*' \
  > "$OUT/memcheck.log" 2>&1; echo "rc $?"; tail -8 "$OUT/memcheck.log"
step "peer: make + speed"
export PYTHONUNBUFFERED=1
timeout 60 python3 bench/peer/hf_decoder.py make --preset gpt2-124m --out /tmp/hf-gpt2 2>&1 | tail -3
timeout 90 python3 bench/peer/hf_decoder.py speed --preset opt-1.3b --seq 1024 --micro-batch 8 --steps 10 > "$OUT/peer-opt-1.3b.json" 2>"$OUT/peer.err"
echo "rc $?"; python3 -c "import json;d=json.load(open('$OUT/peer-opt-1.3b.json'));print({k:d[k] for k in ('median_step_ms','tokens_per_s','tflops')})"
timeout 60 python3 bench/peer/hf_decoder.py speed --preset gpt2-124m --seq 1024 --micro-batch 8 --steps 10 > "$OUT/peer-gpt2-124m.json" 2>>"$OUT/peer.err"
echo "rc $?"; python3 -c "import json;d=json.load(open('$OUT/peer-gpt2-124m.json'));print({k:d[k] for k in ('median_step_ms','tokens_per_s','tflops')})"
tail -3 "$OUT/peer.err"
step "all other CUDA tests"
timeout 120 $B/tf_cuda_tests --gtest_filter='-DecoderKernels.*:TokenRowIndex.*:Attention*' > "$OUT/cuda_tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (FAILED|PASSED) |tests ran" "$OUT/cuda_tests.log"
step "engine parity (synthetic workload, --verify against the functional simulator)"
timeout 90 $B/twinflow run scenarios/real/parity-mlp.yaml --ratios 0,0.3,1 --verify --steps 5 > "$OUT/parity.log" 2>&1
echo "rc $?"; grep -E "parity|bit-identical|differ" "$OUT/parity.log"
