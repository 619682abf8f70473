#!/usr/bin/env bash
# Run HERE (no GPU needed): builds the sm_90 binaries for the GPU machine and gathers them, with the
# shared libraries its image lacks (compiled Boost, Google Benchmark), into .devbin/ for `carry`.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/deps
cmake --preset device >/dev/null
cmake --build --preset device -j "$(nproc)" --target twinflow tf_unit_tests tf_conformance_tests bench_decoder_kernels \
  tf_reference_dump bench_optim_cpu cuda_optim_check tf_cuda_tests tf_ckpt_bench
rm -rf .devbin && mkdir -p .devbin
for b in twinflow tests/tf_unit_tests tests/tf_conformance_tests tests/tf_reference_dump \
         bench/bench_optim_cpu bench/cuda_optim_check tests/tf_cuda_tests bench/bench_decoder_kernels bench/tf_ckpt_bench; do
  cp "build-device/$b" .devbin/ && strip .devbin/"$(basename "$b")"
done
# non-system shared libraries the binaries need
ldd .devbin/* 2>/dev/null | awk '/=> \// {print $3}' | sort -u |
  grep -E 'libboost|libbenchmark|libyaml|libgtest|libgmock' | xargs -r -I{} cp -L {} .devbin/
du -sh .devbin && ls .devbin
