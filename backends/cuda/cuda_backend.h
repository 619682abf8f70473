// The CUDA optimizer backend (public header: no CUDA include, usable from plain C++).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"

namespace tf::backend::cuda {

// True when a CUDA device can be used; otherwise *why says what is missing (no driver, no device).
bool cuda_available(std::string* why = nullptr);

// Page-locks [p, p + bytes) in place for the copy engines (cudaHostRegister, portable, whole 4 KiB
// pages), as the engine pins its host buffers; false with CUDA's reason in *why when it cannot.
// host_unregister undoes it (never throws).
bool host_register(void* p, size_t bytes, std::string* why = nullptr);
void host_unregister(void* p) noexcept;

// A backend on `device`. Buffers are device memory (cudaMalloc); step() and grad_stats() are
// synchronous. Throws core::RuntimeFailure when no device can be used.
std::unique_ptr<OptimizerBackend> make_cuda_backend(int device = 0);

// --- measurements for `twinflow bench` (all timed with CUDA events, median of `iters`) ---------
struct GpuInfo {
  std::string name;
  int sm_count = 0;
  double hbm_bytes = 0;
};
GpuInfo gpu_info(int device = 0);

// Device-to-device cudaMemcpy of `bytes`; returns GB/s counting bytes read + written (1 GB = 1e9 B).
double measure_copy_gbps(size_t bytes, int iters, int device = 0);

// The values a timed step kernel updates. The kernel's IEEE division and square root are exact in
// every case; their hardware fast paths are not taken for every input, so the rate can depend on them.
enum class StepValues : uint8_t {
  kRandom,     // every element a finite, non-zero gradient of magnitude [0.5, 1) (calibrate's data)
  kHalfZero,   // half the elements (at random) hold g = m = v = 0: units that never had a gradient
  kSubnormal,  // every gradient +-1e-20: v = (1 - beta2) g^2 is subnormal
};
std::string_view step_values_name(StepValues v);  // "random", "half-zero", "subnormal"

// Times the fused step kernel over one chunk of n elements (finite data as `values` says, poisoned
// outputs checked once). Returns the median seconds per step; every step's seconds in *samples if given.
double time_step_seconds(OptimizerKind k, DType grad, DType copy, size_t n, int iters, int device = 0,
                         std::vector<double>* samples = nullptr, StepValues values = StepValues::kRandom);

}  // namespace tf::backend::cuda
