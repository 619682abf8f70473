#!/usr/bin/env bash
# Run ON THE GPU MACHINE (an H100 or H200) from the repo root with .devbin/ carried (tf_cuda_tests,
# bench_decoder_kernels and their libraries). The first run of the wgmma dK/dV kernel (BackwardKernel::kWgmma,
# backends/cuda/attention_wgmma_bwd.cu; bench/results/attention-notes.md "v4"), about 2 minutes:
#   1. tf_cuda_tests DecoderKernels.*: the wgmma dK/dV against the reference bounds, run to run, its bits against the
#      mma.sync backward's (a NOTE line), and fed by the wgmma forward;
#   2. bench_decoder_kernels attention: the whole backward with each dK/dV kernel;
#   3. compute-sanitizer memcheck on DecoderKernels.AttentionBackwardWgmma.
# Logs land in $OUT; the key lines print here.
set -uo pipefail
W=/tmp/wgmma-backward
. bench/device/device_env.sh
unpack_devbin
LOG=$OUT machine_info
step "tf_cuda_tests DecoderKernels.*"
timeout 90 $B/tf_cuda_tests --gtest_filter='DecoderKernels.*' > "$OUT/tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |NOTE|Failure|tests ran" "$OUT/tests.log" | head -n 40
grep -E "wgmma" "$OUT/tests.log" | grep -E "backward" | head -n 12
step "bench_decoder_kernels attention"
timeout 50 $B/bench_decoder_kernels attention > "$OUT/bench.log" 2>&1; echo "rc $?"
grep -E "attention" "$OUT/bench.log"
step "memcheck on DecoderKernels.AttentionBackwardWgmma"
timeout 40 compute-sanitizer --tool memcheck --print-limit 20 $B/tf_cuda_tests \
  --gtest_filter='DecoderKernels.AttentionBackwardWgmma' > "$OUT/memcheck.log" 2>&1; echo "rc $? (124: out of time)"
tail -n 4 "$OUT/memcheck.log"
step done
