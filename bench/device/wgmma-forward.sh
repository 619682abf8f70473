#!/usr/bin/env bash
# Run ON THE GPU MACHINE (an H100 or H200: the wgmma forward runs on compute capability 9.0 only) from the repo
# root with .devbin/ carried (tf_cuda_tests, bench_decoder_kernels and their libraries; bench/device/
# build-for-device.sh makes it). The first run of the wgmma attention forward (ForwardTiles::kWgmma,
# backends/cuda/attention_wgmma.cu; bench/results/attention-notes.md "v3"), one call, about 2-3 minutes:
#   1. tf_cuda_tests DecoderKernels.*: the wgmma forward against the double reference and run to run
#      (AttentionForward), the mma.sync backward fed its o and lse (AttentionBackwardFromWgmmaForward), the rest of
#      the decoder kernels unchanged;
#   2. bench_decoder_kernels attention: the forward per tile shape (4 x 32, 8 x 16, wgmma) and the backward at
#      GPT-2-124M, OPT-1.3B and GPT-350M shapes;
#   3. torch's causal SDPA (flash, cuDNN, efficient) at the same shapes (bench/peer/sdpa_attention.py);
#   4. compute-sanitizer memcheck on the forward test (small shapes), if time is left.
# Logs land in $OUT (tests.log, bench.log, sdpa.log, sdpa.json, memcheck.log); the key lines print here.
set -uo pipefail
W=/tmp/wgmma-forward
. bench/device/device_env.sh
unpack_devbin
LOG=$OUT machine_info
export PYTHONUNBUFFERED=1

step "tf_cuda_tests DecoderKernels.*"
timeout 80 $B/tf_cuda_tests --gtest_filter='DecoderKernels.*' > "$OUT/tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |OK \] DecoderKernels.Attention|NOTE|tests ran|Failure|wgmma|error" \
  "$OUT/tests.log" | head -n 40

step "bench_decoder_kernels attention"
timeout 50 $B/bench_decoder_kernels attention > "$OUT/bench.log" 2>&1; echo "rc $?"
grep -E "^[a-z]|attention" "$OUT/bench.log"

step "torch SDPA (flash, cuDNN) at the same shapes"
timeout 50 python3 bench/peer/sdpa_attention.py --json "$OUT/sdpa.json" > "$OUT/sdpa.log" 2>&1; echo "rc $?"
cat "$OUT/sdpa.log"

step "memcheck on DecoderKernels.AttentionForward"
timeout 25 compute-sanitizer --tool memcheck --print-limit 20 $B/tf_cuda_tests \
  --gtest_filter='DecoderKernels.AttentionForward' > "$OUT/memcheck.log" 2>&1; echo "rc $? (124: out of time, not a failure)"
tail -n 6 "$OUT/memcheck.log"
step done
