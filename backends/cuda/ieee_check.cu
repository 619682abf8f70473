// A self-check of the step kernels' IEEE division and square root (CudaOps in optim_kernels.cuh maps zeros,
// subnormal dividends and tiny square-root inputs onto the instructions' fast paths) against the
// instructions themselves, bit for bit. tests/cuda/test_ieee_ops.cpp runs it.
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/cuda_tuning.h"
#include "backends/cuda/optim_kernels.cuh"
#include "core/random.h"

namespace tf::backend::cuda {
namespace {

using Mismatch = OpsMismatch;
using Ops = kern::CudaOps;

__device__ bool same(float x, float y) {
  return __float_as_uint(x) == __float_as_uint(y) || (x != x && y != y);  // NaN payloads may differ
}

__device__ void record(Mismatch* m, float a, float b, float got, float want) {
  if (atomicAdd(reinterpret_cast<unsigned long long*>(&m->count), 1ull) == 0ull) {
    m->a = __float_as_uint(a), m->b = __float_as_uint(b);
    m->got = __float_as_uint(got), m->want = __float_as_uint(want);
  }
}

__global__ void sqrt_all(Mismatch* m) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t(1) << 32);
       i += uint64_t(gridDim.x) * blockDim.x) {
    const float a = __uint_as_float(unsigned(i));
    const float got = Ops::sqrt(a), want = __fsqrt_rn(a);
    if (!same(got, want)) record(m, a, 0.f, got, want);
  }
}

__global__ void div_all_dividends(float b, Mismatch* m) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t(1) << 32);
       i += uint64_t(gridDim.x) * blockDim.x) {
    const float a = __uint_as_float(unsigned(i));
    const float got = Ops::div(a, b), want = __fdiv_rn(a, b);
    if (!same(got, want)) record(m, a, b, got, want);
  }
}

// Random pairs: the dividend's and the divisor's bits each uniform over all floats half the time, else a
// random significand with an exponent field in [0, 40) (zeros, subnormals and the smallest normals).
__global__ void div_random_pairs(uint64_t pairs, Mismatch* m) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = core::splitmix64(i), k = core::splitmix64(h);
    auto pick = [](uint64_t r) {
      const unsigned bits = unsigned(r);
      if (r >> 63) return __uint_as_float(bits);
      const unsigned exponent = unsigned((r >> 40) % 40u);
      return __uint_as_float((bits & 0x807FFFFFu) | (exponent << 23));
    };
    const float a = pick(h), b = pick(k);
    const float got = Ops::div(a, b), want = __fdiv_rn(a, b);
    if (!same(got, want)) record(m, a, b, got, want);
  }
}

constexpr unsigned kBlocks = 132 * 16, kThreads = 256;

template <class Launch>
OpsMismatch run_check(int device, Launch&& launch) {
  TF_CUDA_CHECK(cudaSetDevice(device));
  OpsMismatch* d = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&d, sizeof(OpsMismatch)));
  OpsMismatch h{};
  try {
    TF_CUDA_CHECK(cudaMemset(d, 0, sizeof(OpsMismatch)));
    launch(d);
    TF_CUDA_CHECK_LAUNCH("ieee ops check");
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    TF_CUDA_CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  } catch (...) {
    cudaFree(d);
    throw;
  }
  TF_CUDA_CHECK(cudaFree(d));
  return h;
}

}  // namespace

OpsMismatch check_step_sqrt_every_float(int device) {
  return run_check(device, [](OpsMismatch* m) { sqrt_all<<<kBlocks, kThreads>>>(m); });
}
OpsMismatch check_step_div_every_dividend(float divisor, int device) {
  return run_check(device, [divisor](OpsMismatch* m) { div_all_dividends<<<kBlocks, kThreads>>>(divisor, m); });
}
OpsMismatch check_step_div_random_pairs(uint64_t pairs, int device) {
  return run_check(device, [pairs](OpsMismatch* m) { div_random_pairs<<<kBlocks, kThreads>>>(pairs, m); });
}

}  // namespace tf::backend::cuda
