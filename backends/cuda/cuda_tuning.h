// Internal: code-generation variants of the CUDA step kernel, for the tuning table of
// bench/device/cuda_optim_check (plain C++, no CUDA include). The backend always runs the default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/cuda_backend.h"

namespace tf::backend::cuda {

struct StepVariant {
  int unroll = 2;           // iterations (of 16 per tile) whose loads are issued together: 1, 2 or 4
  int min_blocks = 2;       // resident 256-thread blocks per SM the registers are budgeted for
  bool streaming = false;   // ld/st.global.cs (evict-first) instead of the default caching
  bool persistent = false;  // grid = SMs x resident blocks, grid-stride; else one block per 8 tiles
};
inline constexpr StepVariant kDefaultVariant{};

// The variants compiled for AdamW with fp32 grads and no copy (the default first). Other kernels
// exist in the default variant only; `persistent` is a launch choice and works for all.
inline constexpr StepVariant kTuningVariants[] = {{2, 2, false, false}, {1, 4, false, false}, {1, 4, true, false},
                                                  {2, 3, false, false}, {2, 3, true, false},  {4, 2, false, false},
                                                  {4, 2, true, false},  {2, 2, false, true}};

static_assert(kTuningVariants[0].unroll == kDefaultVariant.unroll &&
                  kTuningVariants[0].min_blocks == kDefaultVariant.min_blocks &&
                  kTuningVariants[0].streaming == kDefaultVariant.streaming &&
                  kTuningVariants[0].persistent == kDefaultVariant.persistent,
              "the tuning table lists the default first");

// time_step_seconds with a chosen variant (core::InputError for one that is not compiled).
double time_step_variant_seconds(OptimizerKind k, DType grad, DType copy, size_t n, int iters, int device,
                                 const StepVariant& v, std::vector<double>* samples = nullptr,
                                 StepValues values = StepValues::kRandom);

// Self-checks of the step kernels' division and square root (CudaOps) against the IEEE instructions, bit
// for bit (backends/cuda/ieee_check.cu): the number of inputs that differ and the first one found.
struct OpsMismatch {
  uint64_t count = 0;
  uint32_t a = 0, b = 0, got = 0, want = 0;  // the operands' and results' bits
};
OpsMismatch check_step_sqrt_every_float(int device);                   // all 2^32 inputs
OpsMismatch check_step_div_every_dividend(float divisor, int device);  // all 2^32 dividends
OpsMismatch check_step_div_random_pairs(uint64_t pairs, int device);   // every magnitude, zeros, subnormals

}  // namespace tf::backend::cuda
