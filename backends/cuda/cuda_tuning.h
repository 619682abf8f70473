// Internal: code-generation variants of the CUDA step kernel, for the tuning table of
// bench/device/cuda_optim_check (plain C++, no CUDA include). The backend always runs the default.
#pragma once

#include <cstddef>

#include "backends/backend.h"

namespace tf::backend::cuda {

struct StepVariant {
  int unroll = 2;           // iterations (of 16 per tile) whose loads are issued together: 1, 2 or 4
  bool streaming = false;   // ld/st.global.cs (evict-first) instead of the default caching
  bool persistent = false;  // grid = SMs x resident blocks, grid-stride; else one block per 8 tiles
};
inline constexpr StepVariant kDefaultVariant{};

// time_step_seconds with a chosen variant. Non-default unroll/streaming exist only for AdamW with
// fp32 grads and no copy (core::InputError otherwise); `persistent` works for every kernel.
double time_step_variant_seconds(OptimizerKind k, DType grad, DType copy, size_t n, int iters, int device,
                                 const StepVariant& v);

}  // namespace tf::backend::cuda
