// Launching the step kernel: grid sizing and the runtime (grad, copy, variant) -> template dispatch.
// Included by the step_<kind>.cu translation units only.
#pragma once

#include <algorithm>
#include <climits>
#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/optim_kernels.cuh"

namespace tf::backend::cuda::kern {

template <OptimizerKind K, DType G, DType C, int U, int MB, bool S>
void launch_one(const StepLaunch& l, bool persistent) {
  auto* kernel = &step_kernel<K, G, C, U, MB, S>;
  uint64_t blocks = (l.tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (persistent) {
    int per_sm = 0;
    TF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlockThreads, 0));
    blocks = std::min<uint64_t>(blocks, uint64_t(std::max(per_sm, 1)) * uint64_t(std::max(l.sm_count, 1)));
  }
  blocks = std::min<uint64_t>(blocks, INT_MAX);
  kernel<<<unsigned(blocks), kBlockThreads, 0, l.stream>>>(l.descs, l.count, l.tiles, l.s, l.tile_sums, l.nonfinite);
  TF_CUDA_CHECK_LAUNCH("step_kernel");
}

template <OptimizerKind K, DType G>
void launch_by_copy(const StepLaunch& l, bool persistent) {
  constexpr int U = kDefaultVariant.unroll;
  constexpr int MB = kDefaultVariant.min_blocks;
  constexpr bool S = kDefaultVariant.streaming;
  switch (l.copy) {
    case DType::kBF16: return launch_one<K, G, DType::kBF16, U, MB, S>(l, persistent);
    case DType::kF16: return launch_one<K, G, DType::kF16, U, MB, S>(l, persistent);
    case DType::kNone: return launch_one<K, G, DType::kNone, U, MB, S>(l, persistent);
    case DType::kF32: break;
  }
  throw core::InputError("cuda step: param_copy must be bf16, fp16 or none");
}

template <OptimizerKind K>
void launch_step_kind(const StepLaunch& l, const StepVariant& v) {
  if (l.tiles == 0) return;
  if (!is_default(v)) {
    if constexpr (K == OptimizerKind::kAdamW) {
      if (l.grad == DType::kF32 && l.copy == DType::kNone) {
        constexpr DType F = DType::kF32, N = DType::kNone;
        const int key = v.unroll * 100 + v.min_blocks * 10 + (v.streaming ? 1 : 0);
        switch (key) {
          case 220: return launch_one<K, F, N, 2, 2, false>(l, v.persistent);
          case 140: return launch_one<K, F, N, 1, 4, false>(l, v.persistent);
          case 141: return launch_one<K, F, N, 1, 4, true>(l, v.persistent);
          case 230: return launch_one<K, F, N, 2, 3, false>(l, v.persistent);
          case 231: return launch_one<K, F, N, 2, 3, true>(l, v.persistent);
          case 420: return launch_one<K, F, N, 4, 2, false>(l, v.persistent);
          case 421: return launch_one<K, F, N, 4, 2, true>(l, v.persistent);
          default: break;
        }
      }
    }
    throw core::InputError("cuda step: kernel variant unroll=" + std::to_string(v.unroll) +
                           " min_blocks=" + std::to_string(v.min_blocks) + (v.streaming ? " streaming" : "") +
                           " is not compiled (see kTuningVariants in backends/cuda/cuda_tuning.h)");
  }
  switch (l.grad) {
    case DType::kF32: return launch_by_copy<K, DType::kF32>(l, v.persistent);
    case DType::kBF16: return launch_by_copy<K, DType::kBF16>(l, v.persistent);
    case DType::kF16: return launch_by_copy<K, DType::kF16>(l, v.persistent);
    case DType::kNone: break;
  }
  throw core::InputError("cuda step: grad must be fp32, bf16 or fp16");
}

}  // namespace tf::backend::cuda::kern
