// The CUDA optimizer backend (public header: no CUDA include, usable from plain C++).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/optim/step_values.h"

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
// The device's PCI bus id ("0000:3B:00.0"): how NVML finds the same GPU (metrics/gpu_telemetry.h).
std::string pci_bus_id(int device = 0);

// Device-to-device cudaMemcpy of `bytes`; returns GB/s counting bytes read + written (1 GB = 1e9 B).
double measure_copy_gbps(size_t bytes, int iters, int device = 0);

using core::StepValues;  // the data a timed step kernel updates (core/optim/step_values.h)

// Times the fused step kernel over one chunk of n elements (finite data as `values` says, poisoned
// outputs checked once). Returns the median seconds per step; every step's seconds in *samples if given.
double time_step_seconds(OptimizerKind k, DType grad, DType copy, size_t n, int iters, int device = 0,
                         std::vector<double>* samples = nullptr, StepValues values = StepValues::kRandom);

}  // namespace tf::backend::cuda
