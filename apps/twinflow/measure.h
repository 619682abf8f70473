// Timed measurements shared by `twinflow bench` and the Google Benchmark programs: the CPU
// optimizer pass, the memory-bandwidth bound it is held to, and a naive in-process peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/optim/step_values.h"

namespace tf::app {

// One chunk of n elements for fused optimizer steps on the backend's workers: master, states, gradient
// and copy allocated by the backend, pages first-touched by the threads that update them, finite data
// as `values` says (random: every gradient in +-[0, 0.1], never subnormal). run() is one step. time_cpu_step times
// these; `twinflow calibrate` also keeps one running while it times PCIe copies (the copies' slowdown under the CPU
// pass).
class CpuStepPass {
 public:
  CpuStepPass(backend::cpu::CpuBackend& be, core::OptimizerKind k, core::DType grad, core::DType copy, size_t n,
              core::StepValues values = core::StepValues::kRandom);
  void run();
  size_t elems() const { return n_; }

 private:
  backend::cpu::CpuBackend& be_;
  core::OptimizerKind kind_;
  size_t n_;
  std::unique_ptr<backend::Buffer> p_, m_, v_, g_, c_;  // (n) fp32 x 3; (n) grad dtype; (n) copy dtype
  backend::OptimChunk chunk_;
  int64_t step_ = 0;
};

// Two measurements alternated `pairs` times, first then second, and each pair's ratio second / first. A
// drift of the host over the measurement moves both of a pair, so it cancels in the ratios where medians
// taken minutes apart read it as the effect measured (on the 2 x H200 host the rate moved 10-50% within
// minutes: docs/ARCHITECTURE.md). measure_footprint (cpu_footprint.h) and time_alone_and_under use it.
// Throws std::invalid_argument for pairs < 1.
struct Pairs {
  std::vector<double> first, second;  // each pair's two measurements
  std::vector<double> ratios;         // second[i] / first[i]
};
Pairs alternate(int pairs, const std::function<double()>& first, const std::function<double()>& second);

// A pass's slowdown under a background load: alternate() of one pass alone and one pass with
// start_load() before it and stop_load() after it (whose returns, e.g. the GB/s the load moved, are
// summed into load_sum). `pass` runs one pass and returns its seconds; `twinflow calibrate`'s DMA factors
// are the ratios' median. Stops the load when the pass under it throws, and rethrows the pass's failure.
struct PairedTimes {
  Pairs seconds;  // first: alone, second: under the load
  double load_sum = 0;
};
PairedTimes time_alone_and_under(int pairs, const std::function<double()>& pass,
                                 const std::function<void()>& start_load, const std::function<double()>& stop_load);

// Median seconds of `iters` fused steps over one chunk of n elements (random finite data, pages
// first-touched by the threads that update them). `samples`, when given, receives every timed step's
// seconds.
double time_cpu_step(backend::cpu::CpuBackend& be, core::OptimizerKind k, core::DType grad, core::DType copy, size_t n,
                     int iters, std::vector<double>* samples = nullptr,
                     core::StepValues values = core::StepValues::kRandom);

// All three run on the backend's own (possibly pinned) workers over memory from its allocator
// (2 MiB aligned, huge-page advised), so that the bound sees the same conditions as the kernels.
//
// Read-modify-write stream x[i] = x[i] + s*y[i] over n fp32 (static split, same as the optimizer's). Returns GB/s
// counting 12 bytes per element (8 read, 4 written). A read-modify-write pays no write-allocate, like the optimizer, so
// this is the bound to hold it to.
double measure_rmw_gbps(backend::cpu::CpuBackend& be, size_t n, int iters);

// The bytes per element of the same-streams pass: AdamW's with fp32 gradients and no copy
// (core::bytes_per_element: 4 + 12 read, 12 written = 28).
double same_streams_bytes();

// The optimizer's own memory traffic with no arithmetic (cpu::CpuBackend::stream_pass: the kernels'
// ISA, prefetching, unrolling and streaming stores, on the backend's workers with its split): read g
// (`grad`), read-modify-write p, m, v (fp32), write the copy (`copy`, kNone: none) over n elements of
// the backend's host memory, first touched by the threads that stream it. GB/s counting
// core::bytes_per_element(AdamW, grad, copy) per element: the bound the fused pass is held to.
// `samples`, when given, receives every timed pass's GB/s.
double measure_stream_gbps(backend::cpu::CpuBackend& be, core::DType grad, core::DType copy, size_t n, int iters,
                           std::vector<double>* samples = nullptr);
// measure_stream_gbps with fp32 gradients and no copy: same_streams_bytes() per element.
double measure_same_streams_gbps(backend::cpu::CpuBackend& be, size_t n, int iters,
                                 std::vector<double>* samples = nullptr);

// The obvious implementation, for comparison: a plain C++ AdamW loop over fp32 master/m/v with
// fp32 gradients, the compiler's own vectorization, same threads. Median seconds per step.
double time_naive_adamw(backend::cpu::CpuBackend& be, size_t n, int iters);

}  // namespace tf::app
