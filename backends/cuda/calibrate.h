// Microbenchmarks behind `twinflow calibrate` (public header: no CUDA include, usable from plain C++).
// Every function times `reps` repetitions after a warm-up and returns them with their median and
// spread; the device functions time with CUDA events, the host-driven ones with a steady clock.
// GB = 1e9 B, TFLOP = 1e12 FLOP. Every CUDA, cuBLAS and NCCL call is checked (core::RuntimeFailure
// naming the call, file:line and the status).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/gemm.h"

namespace tf::backend::cuda::calibrate {

// Repetitions of one measurement, in the unit the function names.
struct Stat {
  double median = 0;
  double spread = 0;  // (max - min) / median over the repetitions; 0 for one repetition
  std::vector<double> samples;
};
// Median and spread of samples (at least one, all finite).
Stat make_stat(std::vector<double> samples);

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int64_t hbm_bytes = 0;  // cudaDeviceProp::totalGlobalMem
  int64_t l2_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};
DeviceInfo device_info(int device);
// Visible CUDA devices.
int device_count();

// ---- GEMM (cuBLAS, fp32 accumulation, CUBLAS_COMPUTE_32F; the workload's handle settings) -----------
enum class GemmType { kBF16, kFP16, kFP32 };  // A, B and C in this type
// The product is timed in the cuBLAS layout of its pass (core::GemmPass), as the workload issues it
// (backends/cuda/cublas_gemm.cuh):
//   kForward:    Y (m, n) = X (m, k) . Wt, W (n, k): a linear layer's forward (TN in cuBLAS terms)
//   kInputGrad:  dX (m, n) = dY (m, k) . W, W (k, n): its input gradient (NN)
//   kWeightGrad: dW (m, n) = dYt (m, k) . X (k, n): its weight gradient, k = the batch (NT)
// kAny names no layout: core::InputError.
// The operands' values. A GPU's tensor cores draw less power, and so hold higher clocks, on operands
// with fewer toggling bits: the same GEMM on an H100 ran 7-35% faster on a ReLU MLP's data than on
// full-entropy random numbers (bench/results/h100-2026-11-23-validate.md).
//   kRandom:  uniform in [-1, 1) (every mantissa bit random), both operands;
//   kReluMlp: as the MLP workload's operands are: activations max(0, uniform [-1, 1)) (half exactly 0)
//             and ReLU-masked gradients alike, weights uniform in [-1, 1) (bf16 only).
enum class GemmData { kRandom, kReluMlp };
// A load kept running while a measurement is timed (BackgroundDma, NcclGroup's background
// collectives): started after the warm-up, stopped after the last repetition (stop returns what it
// moved, in GB/s).
struct BackgroundLoad {
  std::function<void()> start;
  std::function<double()> stop;
};
// TFLOP/s of C (m, n) = A (m, k) B (k, n), 2mnk FLOP per product; when one set of operands fits in
// twice the L2 cache, several sets rotate so that the timing is not of the cache. With `load`, timed
// while it runs (on other streams: the GEMM shares the GPU's SMs and HBM with it), and what its stop()
// returned (the load's own rate over the timed window) into *load_rate when given. out_stride > 0: the
// linear layer's Y and dY rows lie that many elements apart (core::LayerGemm::out_stride, the workload's
// layout), else packed.
Stat gemm_tflops(int device, GemmType type, core::GemmPass pass, int64_t m, int64_t n, int64_t k, int reps,
                 GemmData data = GemmData::kRandom, const BackgroundLoad* load = nullptr, int64_t out_stride = 0,
                 double* load_rate = nullptr);

// ---- the decoder's own kernels (decoder_kernels.cuh, attention.cu) -----------------------------------
// The shapes a decoder's embedding (e = h), blocks and head launch their kernels at, one micro-batch.
struct DecoderKernelShape {
  int64_t batch = 0, seq = 0, hidden = 0, heads = 0, ffn = 0, vocab = 0;
  int64_t pos_rows = 0, pos_offset = 0;  // P + off position rows; off
  bool relu = true;                      // OPT's ReLU, else GPT-2's GELU (tanh)
  bool pre_ln = true;                    // the head's final LayerNorm (pre-LN models)
  bool tied = true;                      // the embedding's gradient adds the tied head's fp32 dE_head
  // One micro-batch of the scenario's own data, (batch * seq) ids each: the embedding's gradient takes as
  // long as its most frequent token's row chain, so uniform ids would time another kernel. Empty: uniform.
  std::vector<int32_t> tokens, targets;
};
// Seconds per repetition of each class's launches (core::KernelClass) over the embedding, one block
// and the head, forward and backward, as backends/cuda/workload_decoder.cu issues them: LayerNorm
// forward 2 + LNf, backward 2 (with the residual gradient) + LNf's; QKV's bias and fc1's bias +
// activation; two bias + residual adds; du with db1; db2, dbo, dbqkv; the embedding's gather and its
// backward (dPos, dE with dE_head); the fused cross-entropy; the attention forward and backward. Each
// the median of `reps` repetitions of >= 2 ms after a warm-up; bf16 data uniform in [-1, 1), tokens and
// targets the shape's (else uniform in [0, V)).
struct DecoderKernelTimes {
  std::vector<std::pair<core::KernelClass, Stat>> class_seconds;
  Stat attention_fwd_s, attention_bwd_s;
};
DecoderKernelTimes decoder_kernel_seconds(int device, const DecoderKernelShape& shape, int reps);

// ---- device memory -------------------------------------------------------------------------------
// cudaMemcpy device-to-device of `bytes`; GB/s counting bytes read + written (2 x bytes).
Stat d2d_copy_gbps(int device, size_t bytes, int reps);
// A streaming kernel reading `bytes` and writing `bytes` (16-byte vectors, grid-stride); GB/s of both.
Stat rw_kernel_gbps(int device, size_t bytes, int reps);

// ---- GPU memory beyond a process's own allocations (gpu.context_bytes, ...) -------------------------------
// Device 0's used bytes (cudaMemGetInfo: total - free) now.
int64_t device_used_bytes(int device);
// Device 0's used bytes after each stage of a process's set-up as the engine does it, every buffer of our
// own freed before the reading: the CUDA context (cudaSetDevice, cudaFree(0)); a cuBLAS handle with the
// engine's workspace setting that ran one bf16 GEMM (cuBLAS loads its kernel); the engine's 4 streams; and
// with gpus >= 2 a NCCL communicator over devices 0..gpus-1 (ncclCommInitAll, one process) after the
// engine's collectives ran once: an all-gather, its send/recv reduce-scatter and an f64 all-reduce (NCCL
// connects its peers at first use). Meant for a fresh process: its first CUDA call creates the context.
struct ProcessMemory {
  int64_t after_context = 0, after_cublas = 0, after_streams = 0;
  int64_t after_nccl = 0;  // gpus >= 2; the communicator's own buffers and the probe's messages excluded
};
ProcessMemory process_memory_stages(int gpus);
// What `count` cudaMallocs of `bytes` each cost on `device`: its used bytes with them minus without, per buffer
// (the allocations are freed before returning).
struct AllocCost {
  int64_t bytes = 0;
  int count = 0;
  int64_t total_bytes = 0;  // the used bytes they added together
};
AllocCost alloc_cost(int device, int64_t bytes, int count);
// The device bytes that page-locking `bytes` of host memory costs on `device`, as the engine pins its CPU
// segment (cpu::HostRegion, then cudaHostRegister in place, portable): the device's mapping of those pages.
int64_t pinned_host_map_bytes(int device, size_t bytes);

// ---- PCIe ----------------------------------------------------------------------------------------
enum class Direction { kH2D, kD2H };
// One pinned copy of `bytes` at a time; GB/s (PinnedCopy, `reps` copies).
Stat pinned_copy_gbps(int device, Direction dir, size_t bytes, int reps);
// One pinned copy of `bytes` on a stream of its own, again and again: pinned host and device buffers allocated
// and two warm-up copies at construction; seconds() runs one copy and returns its event-timed seconds. For
// copies interleaved with other work (calibrate's copies alone and under the CPU pass, pair by pair).
class PinnedCopy {
 public:
  PinnedCopy(int device, Direction dir, size_t bytes);
  ~PinnedCopy();
  PinnedCopy(const PinnedCopy&) = delete;
  PinnedCopy& operator=(const PinnedCopy&) = delete;
  double seconds();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// ns of one pinned copy of `bytes` (for the fixed cost per copy: use a small size).
Stat pinned_copy_ns(int device, Direction dir, size_t bytes, int reps);
// An H2D and a D2H of `bytes` each, on two streams, started together: GB/s of both directions added
// (2 x bytes over the time until both end), and of each direction over its own time.
struct BidirStat {
  Stat total_gbps, h2d_gbps, d2h_gbps;
};
BidirStat pinned_bidir_gbps(int device, size_t bytes, int reps);
// cudaMemcpy from pageable (malloc'd, touched) host memory; GB/s, timed on the host.
Stat pageable_h2d_gbps(int device, size_t bytes, int reps);
// Every listed device copies `bytes` H2D at once from its own pinned buffer; per repetition the
// slowest device's GB/s.
Stat concurrent_h2d_gbps(const std::vector<int>& devices, size_t bytes, int reps);

// Makes this process's threads sleep while they wait for devices 0 .. devices-1
// (cudaDeviceScheduleBlockingSync, the other flags kept), as `twinflow run --cuda-sync block`, the
// default, has the engine's: a thread that spins while it waits takes a core from the CPU optimizer's
// workers, which run below it (backends/cpu/cpu_tuning.h, pool_nice), so a CPU pass measured beside a
// spinning wait is slowed by the wait (2 x H200, 2026-11-28: 37.7 GB/s of optimizer traffic against 174
// alone), not by what the measurement is of.
void wait_by_sleeping(int devices);

// Which copies a BackgroundDma keeps in flight.
enum class DmaCopies { kBoth, kH2D, kD2H };
// Keeps an H2D and a D2H (or only one of them) of `bytes` in flight on `device` from a host thread that
// sleeps on blocking-sync events (it takes no core from what is measured meanwhile), until stopped.
class BackgroundDma {
 public:
  BackgroundDma(int device, size_t bytes, DmaCopies copies = DmaCopies::kBoth);
  ~BackgroundDma();  // stops; never throws
  BackgroundDma(const BackgroundDma&) = delete;
  BackgroundDma& operator=(const BackgroundDma&) = delete;
  void start();
  // Stops and returns the GB/s its directions moved together while it ran; rethrows a failure of
  // the copy thread.
  double stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- launch and event overheads --------------------------------------------------------------------
struct LaunchStat {
  Stat per_kernel_ns;  // empty kernels launched back to back on one stream, timed by events / count
  Stat host_call_ns;   // the host's time per launch call in the same loop
};
LaunchStat kernel_launch(int device, int launches, int reps);
struct EventStat {
  Stat record_ns;         // host cost of one cudaEventRecord on an idle stream
  Stat elapsed_floor_ns;  // cudaEventElapsedTime of two events recorded back to back
  Stat sync_ns;           // record on an idle stream then cudaEventSynchronize: the host's round trip
};
EventStat event_overheads(int device, int reps);

// ---- NCCL ----------------------------------------------------------------------------------------
// What the engine runs: its all-gather (ncclAllGather), and its reduce-scatter (backends/cuda/
// reduce_scatter.h: an all-to-all of slices with ncclSend/ncclRecv, then the rank-ordered sum), timed
// through the engine's own function, whole or its sum alone.
enum class Collective { kAllGather, kReduceScatter, kReduceScatterSum };
// One process driving devices 0..gpus-1 (ncclCommInitAll, one stream per device), bf16 data.
// NCCL_NVLS_ENABLE defaults to 0 (NVLink multicast off) unless the environment sets it.
class NcclGroup {
 public:
  NcclGroup(int gpus, size_t max_message_bytes);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  int ranks() const;
  // Rounds the message down to a whole number of bf16 elements per rank (nccl-tests' "size": the
  // gathered output of an all-gather, the input of a reduce-scatter).
  int64_t message_bytes_for(int64_t requested) const;
  // Bus bandwidth (nccl-tests' busbw: size x (N-1)/N / time) of one collective over all ranks,
  // timed on the host over enough back-to-back calls to last a few ms per repetition.
  Stat bus_gbps(Collective kind, int64_t message_bytes, int reps);
  // The engine's reduce-scatter of `message_bytes` (one micro-batch: every slice summed and rounded):
  // per repetition the seconds of the whole call and of its sum alone, and the bus bandwidth of the
  // exchange, size x (N-1)/N / (whole - sum): what the simulator's collective term stands for (it adds
  // the sum itself from gpu.hbm_gbps, core/local_kernels.h).
  struct ReduceScatterStat {
    Stat whole_us, sum_us, exchange_bus_gbps;
  };
  ReduceScatterStat engine_reduce_scatter(int64_t message_bytes, int reps);
  // Runs the engine's collectives once each (an all-gather, the send/recv reduce-scatter, an f64 all-reduce)
  // over `message_bytes` and waits: NCCL sets up what they need at first use.
  void run_engine_collectives_once(int64_t message_bytes);
  // The device memory this group allocated for its messages on each device (send, receive, reduced slice).
  int64_t message_buffer_bytes_per_device() const;
  // `kind` of `message_bytes` on every rank, back to back from a host thread, while the load runs
  // (its stop returns the bus GB/s moved; it rethrows a failure of that thread).
  BackgroundLoad background(Collective kind, int64_t message_bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::backend::cuda::calibrate
