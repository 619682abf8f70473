// The engine's small kernels: initial weights, the deterministic reduce-scatter's sum, the
// non-finite count of the norm all-reduce.
#include <algorithm>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/launch.h"
#include "core/optim/dtype.h"
#include "core/synthetic_workload.h"

namespace tf::backend::cuda {
namespace {

__global__ void init_weights(float* master, uint16_t* lp, int64_t n, uint64_t seed, int64_t model_first, float scale) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const float w = core::synthetic_initial_weight(seed, model_first + j) * scale;
    if (master) master[j] = w;
    lp[j] = core::f32_to_bf16(w);
  }
}

__device__ __forceinline__ float lp_to_f32(bool f16, uint16_t h) {
  return f16 ? core::f16_to_f32(h) : core::bf16_to_f32(h);
}

// acc (or 0 on the first micro-batch) + every rank's slice in rank order, in fp32; rounded to the
// gradient dtype on the last micro-batch. Rank r's slice is recv + r*slice, or own + r*slice for
// this rank's own part (never sent).
__global__ void sum_slices(const uint16_t* recv, const uint16_t* own, int rank, int world, int64_t slice, float* acc,
                           bool first, bool last, uint16_t* out, bool f16) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < slice; j += int64_t(gridDim.x) * blockDim.x) {
    float a = first ? 0.f : acc[j];
    for (int r = 0; r < world; ++r) {
      const uint16_t* src = r == rank ? own : recv;
      a = __fadd_rn(a, lp_to_f32(f16, src[int64_t(r) * slice + j]));
    }
    if (acc) acc[j] = a;
    if (last) out[j] = f16 ? core::f32_to_f16(a) : core::f32_to_bf16(a);
  }
}

__global__ void store_nonfinite(double* slot, const unsigned long long* gpu_count, unsigned long long host_count) {
  *slot = double(*gpu_count) + double(host_count);
}

unsigned grid_for(int64_t n) { return unsigned(std::clamp<int64_t>((n + 255) / 256, 1, 132 * 16)); }

}  // namespace

void launch_init_weights(float* master, uint16_t* lp, int64_t n, uint64_t seed, int64_t model_first, float scale,
                         cudaStream_t s) {
  if (n <= 0) return;
  init_weights<<<grid_for(n), 256, 0, s>>>(master, lp, n, seed, model_first, scale);
  TF_CUDA_CHECK_LAUNCH("init_weights");
}

void launch_sum_slices(const uint16_t* recv, const uint16_t* own, int rank, int world, int64_t slice, float* acc,
                       bool first, bool last, uint16_t* out, DType grad, cudaStream_t s) {
  if (slice <= 0) return;
  sum_slices<<<grid_for(slice), 256, 0, s>>>(recv, own, rank, world, slice, acc, first, last, out, grad == DType::kF16);
  TF_CUDA_CHECK_LAUNCH("sum_slices");
}

void launch_store_nonfinite(double* slot, const unsigned long long* gpu_count, unsigned long long host_count,
                            cudaStream_t s) {
  store_nonfinite<<<1, 1, 0, s>>>(slot, gpu_count, host_count);
  TF_CUDA_CHECK_LAUNCH("store_nonfinite");
}

}  // namespace tf::backend::cuda
