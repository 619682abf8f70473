// Microbenchmarks behind `twinflow calibrate`: cuBLAS GEMMs, device memory, PCIe, launch and event
// overheads, NCCL collectives, and a background DMA load for the CPU measurements.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "backends/cpu/host_region.h"
#include "backends/cuda/calibrate.h"
#include "backends/cuda/cublas_gemm.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/decoder_kernels.cuh"
#include "backends/cuda/nccl_comm.cuh"
#include "backends/cuda/reduce_scatter.h"
#include "core/decoder_layout.h"
#include "core/error.h"
#include "core/local_kernels.h"

namespace tf::backend::cuda::calibrate {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void check_reps(int reps, const char* what) {
  if (reps < 1) throw core::InputError(std::string(what) + ": reps must be >= 1, got " + std::to_string(reps));
}

void check_device(int device) {
  int count = 0;
  TF_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw core::InputError("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                           " visible)");
}

// Seconds between two events.
double elapsed_s(const Event& a, const Event& b) { return 1e-3 * double(elapsed_ms(a, b)); }

std::vector<Event> make_events(size_t n) {
  std::vector<Event> ev;
  ev.reserve(n);
  for (size_t i = 0; i < n; ++i) ev.emplace_back();
  return ev;
}

// An event the host can sleep on (no spinning) and that records no time.
class BlockingEvent {
 public:
  BlockingEvent() { TF_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventBlockingSync | cudaEventDisableTiming)); }
  ~BlockingEvent() {
    if (e_) (void)cudaEventDestroy(e_);
  }
  BlockingEvent(const BlockingEvent&) = delete;
  BlockingEvent& operator=(const BlockingEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// ---- kernels ---------------------------------------------------------------------------------------

__device__ float uniform_pm1(uint64_t i, uint64_t seed) {  // SplitMix64 of (i, seed) -> [-1, 1)
  uint64_t x = i + seed * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return float(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(uniform_pm1(i, seed));
}
// ReLU'd activations and ReLU-masked gradients: max(0, uniform [-1, 1)), half of the values exactly 0.
__global__ void fill_bf16_relu(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(fmaxf(uniform_pm1(i, seed), 0.0f));
}
__global__ void fill_f16(__half* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2half_rn(uniform_pm1(i, seed));
}
__global__ void fill_f32(float* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = uniform_pm1(i, seed);
}

// out = in + 1, 16 bytes per thread: reads and writes every byte once.
__global__ void rw_stream(const float4* __restrict__ in, float4* __restrict__ out, size_t n4) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n4) {
    float4 v = in[i];
    v.x += 1.0f;
    v.y += 1.0f;
    v.z += 1.0f;
    v.w += 1.0f;
    out[i] = v;
  }
}

__global__ void empty_kernel() {}

void fill_random(GemmType t, void* p, size_t n, uint64_t seed, cudaStream_t s, bool relu = false) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned(std::min<size_t>((n + kThreads - 1) / kThreads, 65535));
  switch (t) {
    case GemmType::kBF16:
      if (relu) {
        fill_bf16_relu<<<blocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed);
        TF_CUDA_CHECK_LAUNCH("fill_bf16_relu");
        break;
      }
      fill_bf16<<<blocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed);
      TF_CUDA_CHECK_LAUNCH("fill_bf16");
      break;
    case GemmType::kFP16:
      fill_f16<<<blocks, kThreads, 0, s>>>(static_cast<__half*>(p), n, seed);
      TF_CUDA_CHECK_LAUNCH("fill_f16");
      break;
    case GemmType::kFP32:
      fill_f32<<<blocks, kThreads, 0, s>>>(static_cast<float*>(p), n, seed);
      TF_CUDA_CHECK_LAUNCH("fill_f32");
      break;
  }
}

cudaDataType cuda_type(GemmType t) {
  switch (t) {
    case GemmType::kBF16: return CUDA_R_16BF;
    case GemmType::kFP16: return CUDA_R_16F;
    case GemmType::kFP32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

// Times `reps` repetitions of `inner` calls of fn(call index) between events on stream s.
template <class Fn>
std::vector<double> event_timed(cudaStream_t s, int reps, int inner, Fn&& fn) {
  std::vector<Event> ev = make_events(size_t(2 * reps));
  int call = 0;
  for (int r = 0; r < reps; ++r) {
    ev[size_t(2 * r)].record(s);
    for (int i = 0; i < inner; ++i) fn(call++);
    ev[size_t(2 * r + 1)].record(s);
  }
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> sec;
  for (int r = 0; r < reps; ++r) sec.push_back(elapsed_s(ev[size_t(2 * r)], ev[size_t(2 * r + 1)]) / inner);
  return sec;
}

// Calls per repetition so that one lasts about target_s, from the time of a few calls.
template <class Fn>
int calls_for(cudaStream_t s, double target_s, Fn&& fn) {
  const double one = event_timed(s, 1, 3, fn).front();
  return int(std::clamp(std::ceil(target_s / std::max(one, 1e-9)), 1.0, 10000.0));
}

}  // namespace

// ---- common ------------------------------------------------------------------------------------------

Stat make_stat(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("calibrate::make_stat: no samples");
  Stat st;
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  st.median = v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  st.spread = st.median > 0 ? (v.back() - v.front()) / st.median : 0.0;
  st.samples = std::move(samples);
  return st;
}

int device_count() {
  int count = 0;
  TF_CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}

DeviceInfo device_info(int device) {
  check_device(device);
  cudaDeviceProp prop{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo d;
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.hbm_bytes = int64_t(prop.totalGlobalMem);
  d.l2_bytes = prop.l2CacheSize;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  return d;
}

// ---- GEMM --------------------------------------------------------------------------------------------

Stat gemm_tflops(int device, GemmType type, core::GemmPass pass, int64_t m, int64_t n, int64_t k, int reps,
                 GemmData data, const BackgroundLoad* load, int64_t out_stride, double* load_rate) {
  check_reps(reps, "gemm_tflops");
  if (pass == core::GemmPass::kAny)
    throw core::InputError("gemm_tflops: a GEMM is timed in the layout of its pass; 'any' names none");
  if (m < 1 || n < 1 || k < 1 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
    throw core::InputError("gemm_tflops: dimensions " + std::to_string(m) + " x " + std::to_string(n) + " x " +
                           std::to_string(k) + " must be in [1, 2^31)");
  // The workload's own column-major arguments (cublas_gemm.cuh): forward with (batch, in, out) =
  // (m, k, n), input gradient with (batch, in, out) = (m, n, k), weight gradient with (k, n, m).
  const LinearDims ld = pass == core::GemmPass::kForward     ? LinearDims{int(m), int(k), int(n), int(out_stride)}
                        : pass == core::GemmPass::kInputGrad ? LinearDims{int(m), int(n), int(k), int(out_stride)}
                                                             : LinearDims{int(k), int(n), int(m), int(out_stride)};
  if (out_stride != 0 && (out_stride < ld.out || out_stride > INT_MAX))
    throw core::InputError("gemm_tflops: out_stride " + std::to_string(out_stride) + " must be 0 or in [" +
                           std::to_string(ld.out) + ", 2^31)");
  const GemmArgs g = pass == core::GemmPass::kForward     ? forward_gemm(ld)
                     : pass == core::GemmPass::kInputGrad ? data_grad_gemm(ld)
                                                          : weight_grad_gemm(ld);
  const DeviceInfo info = device_info(device);
  DeviceGuard guard(device);
  const size_t eb = type == GemmType::kFP32 ? 4 : 2;
  // cuBLAS operand "a" is W (n, k) for the forward, W (k, n) for the input gradient and X (k, n) for
  // the weight gradient: n*k elements each way; operand "b" is X (m, k), dY (m, k) or dY (k, m): m*k.
  // Y (the forward's c) and dY (the gradients' b) hold batch rows of out_ld(ld) elements.
  // Sets rotate when one fits in 2x L2.
  const size_t y_elems = size_t(ld.batch) * size_t(out_ld(ld));
  const bool fwd = pass == core::GemmPass::kForward;
  const size_t a_elems = size_t(n) * size_t(k), b_elems = fwd ? size_t(m) * size_t(k) : y_elems,
               c_elems = fwd ? y_elems : size_t(m) * size_t(n);
  const size_t a_bytes = (a_elems * eb + 255) / 256 * 256, b_bytes = (b_elems * eb + 255) / 256 * 256;
  const size_t set_bytes = a_bytes + b_bytes;
  const int sets = int(std::clamp<size_t>((2 * size_t(info.l2_bytes) + set_bytes - 1) / set_bytes, 1, 8));
  DeviceMemory a(a_bytes * size_t(sets)), b(b_bytes * size_t(sets)), c(c_elems * eb);
  Stream stream;
  for (int i = 0; i < sets; ++i) {
    // kReluMlp: operand "b" (X or dY) is always an activation or its ReLU-masked gradient, operand
    // "a" is one too for the weight gradient (X) and a weight otherwise
    const bool relu = data == GemmData::kReluMlp && type == GemmType::kBF16;
    fill_random(type, a.as<char>() + size_t(i) * a_bytes, a_elems, 2 * uint64_t(i) + 1, stream.get(),
                relu && pass == core::GemmPass::kWeightGrad);
    fill_random(type, b.as<char>() + size_t(i) * b_bytes, b_elems, 2 * uint64_t(i) + 2, stream.get(), relu);
  }
  TF_CUDA_CHECK(cudaMemsetAsync(c.get(), 0, c.bytes(), stream.get()));
  CublasHandle h;
  h.set_stream(stream.get());
  const cudaDataType dt = cuda_type(type);
  const float alpha = 1.0f, beta = 0.0f;
  auto call = [&](int i) {
    const int set = i % sets;
    TF_CUBLAS_CHECK(cublasGemmEx(h.get(), g.ta, g.tb, g.m, g.n, g.k, &alpha, a.as<char>() + size_t(set) * a_bytes, dt,
                                 g.lda, b.as<char>() + size_t(set) * b_bytes, dt, g.ldb, &beta, c.get(), dt, g.ldc,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < 3; ++i) call(i);  // warm-up: cuBLAS picks and loads its kernel
  stream.sync();
  const int inner = calls_for(stream.get(), 2e-3, call);
  const double flops = 2.0 * double(m) * double(n) * double(k);
  std::vector<double> tflops;
  if (load) load->start();
  std::vector<double> secs;
  try {
    secs = event_timed(stream.get(), reps, inner, call);
  } catch (...) {
    if (load) (void)load->stop();
    throw;
  }
  if (load) {
    const double rate = load->stop();
    if (load_rate) *load_rate = rate;
  }
  for (double s : secs) tflops.push_back(flops / s / 1e12);
  return make_stat(std::move(tflops));
}

// ---- device memory -----------------------------------------------------------------------------------

Stat d2d_copy_gbps(int device, size_t bytes, int reps) {
  check_reps(reps, "d2d_copy_gbps");
  check_device(device);
  DeviceGuard guard(device);
  DeviceMemory src(bytes), dst(bytes);
  Stream stream;
  TF_CUDA_CHECK(cudaMemsetAsync(src.get(), 0x3C, bytes, stream.get()));
  auto call = [&](int) {
    TF_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
  };
  for (int i = 0; i < 2; ++i) call(i);
  std::vector<double> gbps;
  for (double s : event_timed(stream.get(), reps, 1, call)) gbps.push_back(2.0 * double(bytes) / s / 1e9);
  return make_stat(std::move(gbps));
}

Stat rw_kernel_gbps(int device, size_t bytes, int reps) {
  check_reps(reps, "rw_kernel_gbps");
  check_device(device);
  bytes = bytes / 16 * 16;
  if (bytes == 0) throw core::InputError("rw_kernel_gbps: bytes must be >= 16");
  DeviceGuard guard(device);
  DeviceMemory src(bytes), dst(bytes);
  Stream stream;
  TF_CUDA_CHECK(cudaMemsetAsync(src.get(), 0, bytes, stream.get()));
  const size_t n4 = bytes / 16;
  constexpr unsigned kThreads = 256;
  const size_t blocks = (n4 + kThreads - 1) / kThreads;
  if (blocks > size_t(INT_MAX)) throw core::InputError("rw_kernel_gbps: too many bytes");
  auto call = [&](int) {
    rw_stream<<<unsigned(blocks), kThreads, 0, stream.get()>>>(src.as<const float4>(), dst.as<float4>(), n4);
    TF_CUDA_CHECK_LAUNCH("rw_stream");
  };
  for (int i = 0; i < 2; ++i) call(i);
  std::vector<double> gbps;
  for (double s : event_timed(stream.get(), reps, 1, call)) gbps.push_back(2.0 * double(bytes) / s / 1e9);
  return make_stat(std::move(gbps));
}

// ---- GPU memory beyond a process's own allocations -----------------------------------------------------

int64_t device_used_bytes(int device) {
  DeviceGuard guard(device);
  size_t free_b = 0, total_b = 0;
  TF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return int64_t(total_b - free_b);
}

namespace {
// A cuBLAS handle with the engine's workspace setting (core::kCublasWorkspaceBytes of our own, freed after)
// that ran one bf16 forward GEMM of 1024^3 on `s`, then its operands freed: what stays is cuBLAS's.
std::unique_ptr<CublasHandle> cublas_after_one_gemm(cudaStream_t s) {
  constexpr int kN = 1024;
  auto workspace = std::make_unique<DeviceMemory>(size_t(core::kCublasWorkspaceBytes));
  auto h = std::make_unique<CublasHandle>(workspace->get(), workspace->bytes());
  h->set_stream(s);
  {
    DeviceMemory a(size_t(kN) * kN * 2), b(size_t(kN) * kN * 2), c(size_t(kN) * kN * 2);  // (1024, 1024) bf16
    fill_random(GemmType::kBF16, a.get(), size_t(kN) * kN, 1, s);
    fill_random(GemmType::kBF16, b.get(), size_t(kN) * kN, 2, s);
    const GemmArgs g = forward_gemm(LinearDims{kN, kN, kN});
    const float alpha = 1.0f, beta = 0.0f;
    TF_CUBLAS_CHECK(cublasGemmEx(h->get(), g.ta, g.tb, g.m, g.n, g.k, &alpha, a.get(), CUDA_R_16BF, g.lda, b.get(),
                                 CUDA_R_16BF, g.ldb, &beta, c.get(), CUDA_R_16BF, g.ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    TF_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  workspace.reset();  // the plan names it (buf::kCublasWorkspace): not part of what is measured
  return h;
}
}  // namespace

ProcessMemory process_memory_stages(int gpus) {
  check_device(0);
  ProcessMemory m;
  TF_CUDA_CHECK(cudaSetDevice(0));
  TF_CUDA_CHECK(cudaFree(nullptr));  // the primary context
  m.after_context = device_used_bytes(0);
  Stream first;
  const std::unique_ptr<CublasHandle> cublas = cublas_after_one_gemm(first.get());
  m.after_cublas = device_used_bytes(0);
  Stream more[3];  // the engine's compute, comm, d2h and h2d streams: `first` and these
  m.after_streams = device_used_bytes(0);
  if (gpus >= 2) {
    constexpr int64_t kMessage = int64_t(4) << 20;
    NcclGroup group(gpus, size_t(kMessage));
    group.run_engine_collectives_once(group.message_bytes_for(kMessage));
    m.after_nccl = device_used_bytes(0) - group.message_buffer_bytes_per_device();
  }
  return m;
}

AllocCost alloc_cost(int device, int64_t bytes, int count) {
  if (bytes < 1 || count < 1) throw core::InputError("alloc_cost: bytes and count must be >= 1");
  check_device(device);
  DeviceGuard guard(device);
  const int64_t before = device_used_bytes(device);
  std::vector<DeviceMemory> bufs;
  bufs.reserve(size_t(count));
  for (int i = 0; i < count; ++i) bufs.emplace_back(size_t(bytes));
  const int64_t with = device_used_bytes(device);
  return {bytes, count, with - before};
}

int64_t pinned_host_map_bytes(int device, size_t bytes) {
  check_device(device);
  DeviceGuard guard(device);
  cpu::HostRegion region(bytes);
  const size_t pages = (bytes + 4095) / 4096 * 4096;
  const int64_t before = device_used_bytes(device);
  TF_CUDA_CHECK(cudaHostRegister(region.data(), pages, cudaHostRegisterPortable));
  const int64_t with = device_used_bytes(device);
  TF_CUDA_CHECK(cudaHostUnregister(region.data()));
  return with - before;
}

// ---- PCIe --------------------------------------------------------------------------------------------

namespace {
struct CopyBuffers {
  PinnedMemory host;
  DeviceMemory dev;
  CopyBuffers(size_t bytes, cudaStream_t s) : host(bytes), dev(bytes) {
    std::memset(host.get(), 0x5A, bytes);
    TF_CUDA_CHECK(cudaMemsetAsync(dev.get(), 0x3C, bytes, s));
  }
  void copy(Direction dir, size_t bytes, cudaStream_t s) {
    if (dir == Direction::kH2D)
      TF_CUDA_CHECK(cudaMemcpyAsync(dev.get(), host.get(), bytes, cudaMemcpyHostToDevice, s));
    else
      TF_CUDA_CHECK(cudaMemcpyAsync(host.get(), dev.get(), bytes, cudaMemcpyDeviceToHost, s));
  }
};
}  // namespace

Stat pinned_copy_gbps(int device, Direction dir, size_t bytes, int reps) {
  check_reps(reps, "pinned_copy_gbps");
  PinnedCopy copy(device, dir, bytes);
  std::vector<double> gbps;
  for (int i = 0; i < reps; ++i) gbps.push_back(double(bytes) / copy.seconds() / 1e9);
  return make_stat(std::move(gbps));
}

struct PinnedCopy::Impl {
  int device;
  Stream stream;
  CopyBuffers buf;
  Direction dir;
  size_t bytes;
  Impl(int dev, Direction d, size_t n) : device(dev), buf(n, stream.get()), dir(d), bytes(n) {}
  void copy() { buf.copy(dir, bytes, stream.get()); }
};

PinnedCopy::PinnedCopy(int device, Direction dir, size_t bytes) {
  check_device(device);
  DeviceGuard guard(device);
  impl_ = std::make_unique<Impl>(device, dir, bytes);
  for (int i = 0; i < 2; ++i) impl_->copy();  // warm-up
  impl_->stream.sync();
}

PinnedCopy::~PinnedCopy() {  // frees on its device; never throws
  int prev = -1;
  const bool switched =
      cudaGetDevice(&prev) == cudaSuccess && prev != impl_->device && cudaSetDevice(impl_->device) == cudaSuccess;
  impl_.reset();
  if (switched) (void)cudaSetDevice(prev);
}

double PinnedCopy::seconds() {
  DeviceGuard guard(impl_->device);
  return event_timed(impl_->stream.get(), 1, 1, [&](int) { impl_->copy(); }).front();
}

Stat pinned_copy_ns(int device, Direction dir, size_t bytes, int reps) {
  check_reps(reps, "pinned_copy_ns");
  check_device(device);
  DeviceGuard guard(device);
  Stream stream;
  CopyBuffers buf(bytes, stream.get());
  auto call = [&](int) { buf.copy(dir, bytes, stream.get()); };
  for (int i = 0; i < 10; ++i) call(i);
  // Copies on one stream run one after another: each pays its fixed cost. 100 per repetition.
  std::vector<double> ns;
  for (double s : event_timed(stream.get(), reps, 100, call)) ns.push_back(s * 1e9);
  return make_stat(std::move(ns));
}

BidirStat pinned_bidir_gbps(int device, size_t bytes, int reps) {
  check_reps(reps, "pinned_bidir_gbps");
  check_device(device);
  DeviceGuard guard(device);
  Stream sh, sd;
  CopyBuffers up(bytes, sh.get()), down(bytes, sd.get());
  for (int i = 0; i < 2; ++i) {
    up.copy(Direction::kH2D, bytes, sh.get());
    down.copy(Direction::kD2H, bytes, sd.get());
  }
  sh.sync();
  sd.sync();
  std::vector<double> total, h2d, d2h;
  Event start, end_h, end_d;
  for (int r = 0; r < reps; ++r) {
    start.record(sh.get());
    TF_CUDA_CHECK(cudaStreamWaitEvent(sd.get(), start.get(), 0));
    up.copy(Direction::kH2D, bytes, sh.get());
    down.copy(Direction::kD2H, bytes, sd.get());
    end_h.record(sh.get());
    end_d.record(sd.get());
    sh.sync();
    sd.sync();
    const double th = elapsed_s(start, end_h), td = elapsed_s(start, end_d);
    total.push_back(2.0 * double(bytes) / std::max(th, td) / 1e9);
    h2d.push_back(double(bytes) / th / 1e9);
    d2h.push_back(double(bytes) / td / 1e9);
  }
  return {make_stat(std::move(total)), make_stat(std::move(h2d)), make_stat(std::move(d2h))};
}

Stat pageable_h2d_gbps(int device, size_t bytes, int reps) {
  check_reps(reps, "pageable_h2d_gbps");
  check_device(device);
  DeviceGuard guard(device);
  std::unique_ptr<char[]> host(new char[bytes]);
  std::memset(host.get(), 0x5A, bytes);  // touch every page
  DeviceMemory dev(bytes);
  TF_CUDA_CHECK(cudaMemcpy(dev.get(), host.get(), bytes, cudaMemcpyHostToDevice));  // warm-up
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    TF_CUDA_CHECK(cudaMemcpy(dev.get(), host.get(), bytes, cudaMemcpyHostToDevice));
    gbps.push_back(double(bytes) / seconds_since(t0) / 1e9);
  }
  return make_stat(std::move(gbps));
}

Stat concurrent_h2d_gbps(const std::vector<int>& devices, size_t bytes, int reps) {
  check_reps(reps, "concurrent_h2d_gbps");
  if (devices.empty()) throw core::InputError("concurrent_h2d_gbps: no devices");
  struct PerDevice {
    int device;
    Stream stream;
    CopyBuffers buf;
    Event start, end;
    PerDevice(int d, size_t bytes) : device(d), buf(bytes, stream.get()) {}
  };
  std::vector<std::unique_ptr<PerDevice>> per;
  for (int d : devices) {
    check_device(d);
    DeviceGuard guard(d);
    per.push_back(std::make_unique<PerDevice>(d, bytes));
    per.back()->buf.copy(Direction::kH2D, bytes, per.back()->stream.get());  // warm-up
  }
  std::vector<double> slowest;
  for (int r = 0; r < reps; ++r) {
    for (auto& p : per) {
      DeviceGuard guard(p->device);
      p->start.record(p->stream.get());
      p->buf.copy(Direction::kH2D, bytes, p->stream.get());
      p->end.record(p->stream.get());
    }
    double worst = 0;
    for (auto& p : per) {
      DeviceGuard guard(p->device);
      p->stream.sync();
      const double gbps = double(bytes) / elapsed_s(p->start, p->end) / 1e9;
      worst = worst == 0 ? gbps : std::min(worst, gbps);
    }
    slowest.push_back(worst);
  }
  for (auto& p : per) {  // free each device's memory with its device current
    DeviceGuard guard(p->device);
    p.reset();
  }
  return make_stat(std::move(slowest));
}

void wait_by_sleeping(int devices) {
  for (int d = 0; d < devices; ++d) {
    check_device(d);
    DeviceGuard guard(d);
    set_device_schedule(cudaDeviceScheduleBlockingSync);  // as the engine's --cuda-sync block
  }
}

// ---- background DMA ----------------------------------------------------------------------------------

struct BackgroundDma::Impl {
  int device;
  size_t bytes;
  bool h2d, d2h;  // the directions kept in flight
  std::optional<Stream> s_h2d, s_d2h;
  std::optional<CopyBuffers> up, down;
  std::optional<BlockingEvent> e_h2d, e_d2h;
  std::thread worker;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> moved{0};
  std::exception_ptr error;
  Clock::time_point t0;

  Impl(int d, size_t b, DmaCopies copies)
      : device(d), bytes(b), h2d(copies != DmaCopies::kD2H), d2h(copies != DmaCopies::kH2D) {
    check_device(d);
    DeviceGuard guard(d);
    s_h2d.emplace();
    s_d2h.emplace();
    up.emplace(b, s_h2d->get());
    down.emplace(b, s_d2h->get());
    e_h2d.emplace();
    e_d2h.emplace();
    s_h2d->sync();
    s_d2h->sync();
  }
  ~Impl() {
    halt();
    DeviceGuard guard(device);
    up.reset();
    down.reset();
  }
  void run() {
    try {
      DeviceGuard guard(device);
      while (!stopping.load(std::memory_order_relaxed)) {
        if (h2d) {
          up->copy(Direction::kH2D, bytes, s_h2d->get());
          TF_CUDA_CHECK(cudaEventRecord(e_h2d->get(), s_h2d->get()));
        }
        if (d2h) {
          down->copy(Direction::kD2H, bytes, s_d2h->get());
          TF_CUDA_CHECK(cudaEventRecord(e_d2h->get(), s_d2h->get()));
        }
        if (h2d) TF_CUDA_CHECK(cudaEventSynchronize(e_h2d->get()));
        if (d2h) TF_CUDA_CHECK(cudaEventSynchronize(e_d2h->get()));
        moved.fetch_add((h2d && d2h ? 2 : 1) * uint64_t(bytes), std::memory_order_relaxed);
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  void halt() noexcept {
    stopping.store(true);
    if (worker.joinable()) worker.join();
  }
};

BackgroundDma::BackgroundDma(int device, size_t bytes, DmaCopies copies)
    : impl_(std::make_unique<Impl>(device, bytes, copies)) {}
BackgroundDma::~BackgroundDma() = default;

void BackgroundDma::start() {
  if (impl_->worker.joinable()) throw std::logic_error("BackgroundDma::start: already running");
  impl_->stopping.store(false);
  impl_->moved.store(0);
  impl_->error = nullptr;
  impl_->t0 = Clock::now();
  impl_->worker = std::thread([this] { impl_->run(); });
}

double BackgroundDma::stop() {
  impl_->halt();
  const double s = seconds_since(impl_->t0);
  if (impl_->error) std::rethrow_exception(impl_->error);
  return double(impl_->moved.load()) / s / 1e9;
}

// ---- launch and event overheads ----------------------------------------------------------------------

LaunchStat kernel_launch(int device, int launches, int reps) {
  check_reps(reps, "kernel_launch");
  if (launches < 1) throw core::InputError("kernel_launch: launches must be >= 1");
  check_device(device);
  DeviceGuard guard(device);
  Stream stream;
  for (int i = 0; i < 100; ++i) empty_kernel<<<1, 1, 0, stream.get()>>>();
  TF_CUDA_CHECK_LAUNCH("empty_kernel");
  stream.sync();
  std::vector<double> per_kernel, host_call;
  Event a, b;
  for (int r = 0; r < reps; ++r) {
    a.record(stream.get());
    const auto t0 = Clock::now();
    for (int i = 0; i < launches; ++i) empty_kernel<<<1, 1, 0, stream.get()>>>();
    const double host_s = seconds_since(t0);
    TF_CUDA_CHECK_LAUNCH("empty_kernel");
    b.record(stream.get());
    stream.sync();
    per_kernel.push_back(elapsed_s(a, b) * 1e9 / launches);
    host_call.push_back(host_s * 1e9 / launches);
  }
  return {make_stat(std::move(per_kernel)), make_stat(std::move(host_call))};
}

EventStat event_overheads(int device, int reps) {
  check_reps(reps, "event_overheads");
  check_device(device);
  DeviceGuard guard(device);
  Stream stream;
  Event a, b;
  for (int i = 0; i < 10; ++i) {  // warm-up
    a.record(stream.get());
    TF_CUDA_CHECK(cudaEventSynchronize(a.get()));
  }
  constexpr int kRecords = 1000;
  std::vector<double> record, floor, sync;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kRecords; ++i) a.record(stream.get());
    record.push_back(seconds_since(t0) * 1e9 / kRecords);
    stream.sync();

    a.record(stream.get());
    b.record(stream.get());
    stream.sync();
    floor.push_back(elapsed_s(a, b) * 1e9);

    const auto t1 = Clock::now();
    a.record(stream.get());
    TF_CUDA_CHECK(cudaEventSynchronize(a.get()));
    sync.push_back(seconds_since(t1) * 1e9);
  }
  return {make_stat(std::move(record)), make_stat(std::move(floor)), make_stat(std::move(sync))};
}

// ---- NCCL --------------------------------------------------------------------------------------------

struct NcclGroup::Impl {
  struct Rank {
    int device;
    Stream stream;
    DeviceMemory send, recv, out;  // out: the reduce-scatter's reduced slice
    Rank(int d, size_t bytes) : device(d), send(bytes), recv(bytes), out(bytes) {
      TF_CUDA_CHECK(cudaMemsetAsync(send.get(), 0, bytes, stream.get()));
      TF_CUDA_CHECK(cudaMemsetAsync(recv.get(), 0, bytes, stream.get()));
      stream.sync();
    }
  };
  struct Comms {  // destroyed before the ranks' memory (declared after it)
    std::vector<ncclComm_t> c;
    ~Comms() {
      for (ncclComm_t x : c)
        if (x) (void)ncclCommDestroy(x);
    }
  };
  std::vector<std::unique_ptr<Rank>> ranks;
  Comms comms;
  size_t max_bytes;

  Impl(int gpus, size_t max_message_bytes) : max_bytes(max_message_bytes) {
    if (gpus < 2) throw core::InputError("NcclGroup: needs >= 2 GPUs, got " + std::to_string(gpus));
    const int count = device_count();
    if (gpus > count)
      throw core::InputError("NcclGroup: " + std::to_string(gpus) + " GPUs asked, " + std::to_string(count) +
                             " visible");
    ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    std::vector<int> devs(static_cast<size_t>(gpus));
    for (int d = 0; d < gpus; ++d) {
      devs[size_t(d)] = d;
      DeviceGuard guard(d);
      ranks.push_back(std::make_unique<Rank>(d, max_bytes));
    }
    comms.c.assign(size_t(gpus), nullptr);
    TF_NCCL_CHECK(ncclCommInitAll(comms.c.data(), gpus, devs.data()));
  }
  ~Impl() {
    for (ncclComm_t& x : comms.c) {
      if (x) (void)ncclCommDestroy(x);
      x = nullptr;
    }
    for (auto& r : ranks) {
      DeviceGuard guard(r->device);
      r.reset();
    }
  }

  int n() const { return int(ranks.size()); }

  // The engine's reduce-scatter of a message of `message_bytes` on every rank (one micro-batch).
  std::pair<std::vector<SliceReduceRank>, SliceReduce> reduce_scatter_args(int64_t message_bytes) {
    SliceReduce r{n(), message_bytes / (2 * n()), core::DType::kBF16, core::slice_sum_io(1, 0)};
    std::vector<SliceReduceRank> args;
    for (int i = 0; i < n(); ++i) {
      Rank& k = *ranks[size_t(i)];
      args.push_back(SliceReduceRank{i, k.send.as<uint16_t>(), k.recv.as<uint16_t>(), nullptr, k.out.as<uint16_t>(),
                                     comms.c[size_t(i)], k.stream.get(), k.device});
    }
    return {std::move(args), r};
  }

  // One all-gather on every rank (one group call).
  void all_gather(int64_t message_bytes) {
    const size_t count = size_t(message_bytes) / (2 * size_t(n()));  // bf16 elements per rank
    TF_NCCL_CHECK(ncclGroupStart());
    ncclResult_t first = ncclSuccess;
    for (int r = 0; r < n() && first == ncclSuccess; ++r) {
      Rank& k = *ranks[size_t(r)];
      first = ncclAllGather(k.send.get(), k.recv.get(), count, ncclBfloat16, comms.c[size_t(r)], k.stream.get());
    }
    const ncclResult_t end = ncclGroupEnd();  // always closes the group
    if (first != ncclSuccess) nccl_fail(first, "ncclAllGather(...)", __FILE__, __LINE__);
    if (end != ncclSuccess) nccl_fail(end, "ncclGroupEnd()", __FILE__, __LINE__);
  }

  void launch(Collective kind, int64_t message_bytes) {
    if (kind == Collective::kAllGather) return all_gather(message_bytes);
    const auto [args, r] = reduce_scatter_args(message_bytes);
    if (kind == Collective::kReduceScatter) return reduce_scatter_slices(args, r);
    for (const SliceReduceRank& k : args) sum_slices(k, r);
  }
  void sync() {
    for (auto& r : ranks) {
      DeviceGuard guard(r->device);
      r->stream.sync();
    }
  }
  // Seconds per call over `calls` back-to-back calls, host-timed (the way nccl-tests times).
  double timed(Collective kind, int64_t bytes, int calls) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) launch(kind, bytes);
    sync();
    return seconds_since(t0) / calls;
  }
  // Back-to-back calls of `kind` that last about 3 ms, after a warm-up (connections and buffers).
  int calls_for(Collective kind, int64_t bytes) {
    timed(kind, bytes, 5);
    const double one = timed(kind, bytes, 3);
    return int(std::clamp(std::ceil(3e-3 / std::max(one, 1e-9)), 1.0, 1000.0));
  }
  void check_size(int64_t message_bytes, const char* who) const {
    const int64_t unit = 2 * int64_t(n());
    if (message_bytes <= 0 || message_bytes % unit != 0 || size_t(message_bytes) > max_bytes)
      throw core::InputError(std::string(who) + ": message_bytes " + std::to_string(message_bytes) +
                             " must be a positive multiple of 2 x ranks and at most " + std::to_string(max_bytes));
  }
};

void NcclGroup::run_engine_collectives_once(int64_t message_bytes) {
  impl_->check_size(message_bytes, "NcclGroup::run_engine_collectives_once");
  impl_->launch(Collective::kAllGather, message_bytes);
  impl_->launch(Collective::kReduceScatter, message_bytes);
  const size_t doubles = size_t(message_bytes) / 8;  // the statistics table's all-reduce (engine.cpp)
  TF_NCCL_CHECK(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  for (int r = 0; r < impl_->n() && first == ncclSuccess; ++r) {
    Impl::Rank& k = *impl_->ranks[size_t(r)];
    first = ncclAllReduce(k.send.get(), k.recv.get(), doubles, ncclFloat64, ncclSum, impl_->comms.c[size_t(r)],
                          k.stream.get());
  }
  const ncclResult_t end = ncclGroupEnd();  // always closes the group
  if (first != ncclSuccess) nccl_fail(first, "ncclAllReduce(...)", __FILE__, __LINE__);
  if (end != ncclSuccess) nccl_fail(end, "ncclGroupEnd()", __FILE__, __LINE__);
  impl_->sync();
}

int64_t NcclGroup::message_buffer_bytes_per_device() const { return 3 * int64_t(impl_->max_bytes); }

BackgroundLoad NcclGroup::background(Collective kind, int64_t message_bytes) {
  impl_->check_size(message_bytes, "NcclGroup::background");
  struct State {
    std::thread worker;
    std::atomic<bool> stopping{false};
    std::atomic<int64_t> calls{0};
    std::exception_ptr error;
    Clock::time_point t0;
    ~State() {  // a load dropped while running: stop it (the worker may hold the last reference)
      stopping = true;
      if (!worker.joinable()) return;
      if (worker.get_id() == std::this_thread::get_id())
        worker.detach();
      else
        worker.join();
    }
  };
  auto st = std::make_shared<State>();
  Impl* impl = impl_.get();
  BackgroundLoad load;
  load.start = [st, impl, kind, message_bytes] {
    if (st->worker.joinable()) throw std::logic_error("NcclGroup::background: already running");
    st->stopping = false;
    st->calls = 0;
    st->error = nullptr;
    st->t0 = Clock::now();
    st->worker = std::thread([st, impl, kind, message_bytes] {
      try {
        while (!st->stopping.load(std::memory_order_relaxed)) {
          impl->launch(kind, message_bytes);
          impl->sync();
          st->calls.fetch_add(1, std::memory_order_relaxed);
        }
      } catch (...) {
        st->error = std::current_exception();
      }
    });
  };
  load.stop = [st, impl, message_bytes] {
    st->stopping = true;
    if (st->worker.joinable()) st->worker.join();
    if (st->error) std::rethrow_exception(st->error);
    const double n = impl->n();
    return double(message_bytes) * (n - 1) / n * double(st->calls.load()) / seconds_since(st->t0) / 1e9;
  };
  return load;
}

NcclGroup::NcclGroup(int gpus, size_t max_message_bytes) : impl_(std::make_unique<Impl>(gpus, max_message_bytes)) {}
NcclGroup::~NcclGroup() = default;

int NcclGroup::ranks() const { return impl_->n(); }

int64_t NcclGroup::message_bytes_for(int64_t requested) const {
  const int64_t unit = 2 * int64_t(impl_->n());
  return requested / unit * unit;
}

Stat NcclGroup::bus_gbps(Collective kind, int64_t message_bytes, int reps) {
  check_reps(reps, "NcclGroup::bus_gbps");
  impl_->check_size(message_bytes, "NcclGroup::bus_gbps");
  const int calls = impl_->calls_for(kind, message_bytes);
  const double n = impl_->n();
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r)
    gbps.push_back(double(message_bytes) * (n - 1) / n / impl_->timed(kind, message_bytes, calls) / 1e9);
  return make_stat(std::move(gbps));
}

NcclGroup::ReduceScatterStat NcclGroup::engine_reduce_scatter(int64_t message_bytes, int reps) {
  check_reps(reps, "NcclGroup::engine_reduce_scatter");
  impl_->check_size(message_bytes, "NcclGroup::engine_reduce_scatter");
  const int whole_calls = impl_->calls_for(Collective::kReduceScatter, message_bytes);
  const int sum_calls = impl_->calls_for(Collective::kReduceScatterSum, message_bytes);
  const double n = impl_->n();
  std::vector<double> whole_us, sum_us, gbps;
  // A small message's exchange can drown in the noise of one repetition (2 x H200, 2 MiB: the whole call
  // timed below its sum once in a 125-figure calibrate): that repetition is timed again, both halves, a few
  // times before calibrate gives up on the size.
  constexpr int kAttempts = 5;
  for (int r = 0; r < reps; ++r) {
    double whole = 0, sum = 0;
    for (int a = 0; a < kAttempts && !(whole > sum); ++a) {
      whole = impl_->timed(Collective::kReduceScatter, message_bytes, whole_calls);
      sum = impl_->timed(Collective::kReduceScatterSum, message_bytes, sum_calls);
    }
    if (!(whole > sum))
      throw core::RuntimeFailure("calibrate: the reduce-scatter of " + std::to_string(message_bytes) +
                                 " bytes took no longer than its sum alone in " + std::to_string(kAttempts) +
                                 " attempts of repetition " + std::to_string(r + 1) +
                                 ": the timing is noise here (another process on the GPUs? rerun calibrate)");
    whole_us.push_back(whole * 1e6);
    sum_us.push_back(sum * 1e6);
    gbps.push_back(double(message_bytes) * (n - 1) / n / (whole - sum) / 1e9);
  }
  return {make_stat(std::move(whole_us)), make_stat(std::move(sum_us)), make_stat(std::move(gbps))};
}

}  // namespace tf::backend::cuda::calibrate

// ---- the decoder's own kernels -----------------------------------------------------------------------

namespace tf::backend::cuda::calibrate {
namespace {

// Uniform ids in [0, n) from a fixed LCG (the timing does not depend on which ids).
std::vector<int32_t> uniform_ids(int64_t count, int64_t n, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int32_t& id : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = int32_t((x >> 33) % uint64_t(n));
  }
  return v;
}

using core::decoder_layout::logits_stride;

// The buffers one embedding, block and head launch their kernels on (T = B s rows), filled once.
struct DecoderBuffers {
  explicit DecoderBuffers(const DecoderKernelShape& d, cudaStream_t s)
      : t(d.batch * d.seq),
        part_floats(std::max(layer_norm_partial_floats(t, d.hidden),
                             bias_grad_partial_floats(t, std::max(3 * d.hidden, d.ffn)))),
        x(bf16s(t * d.hidden)),                     // (T, h) bf16: a block's input
        y(bf16s(t * d.hidden)),                     // (T, h) bf16: a LayerNorm's output, a GEMM's
        r(bf16s(t * d.hidden)),                     // (T, h) bf16: a residual, dresid
        dy(bf16s(t * d.hidden)),                    // (T, h) bf16: an incoming gradient
        dx(bf16s(t * d.hidden)),                    // (T, h) bf16: LayerNorm backward's output
        w(bf16s(d.hidden)),                         // (h) bf16: a LayerNorm's weight, a bias
        b(bf16s(d.hidden)),                         // (h) bf16
        b3(bf16s(3 * d.hidden)),                    // (3h) bf16: QKV's bias
        bf(bf16s(d.ffn)),                           // (f) bf16: fc1's bias
        dw(bf16s(3 * d.hidden)),                    // (3h) bf16: a weight or bias gradient
        db(bf16s(std::max(3 * d.hidden, d.ffn))),   // (max(3h, f)) bf16
        stats(size_t(2 * t) * 4),                   // (2, T) fp32: mean, rstd
        partials(size_t(part_floats) * 4),          // fp32 row-sum partials
        qkv(bf16s(3 * t * d.hidden)),               // (T, 3h) bf16
        dqkv(bf16s(3 * t * d.hidden)),              // (T, 3h) bf16
        o(bf16s(t * d.hidden)),                     // (T, h) bf16: the attention's output
        lse(size_t(t * d.heads) * 4),               // (B, H, s) fp32
        delta(size_t(t * d.heads) * 4),             // (B, H, s) fp32
        u(bf16s(t * d.ffn)),                        // (T, f) bf16: fc1's pre-activation
        g(bf16s(t * d.ffn)),                        // (T, f) bf16: the activation
        du(bf16s(t * d.ffn)),                       // (T, f) bf16
        logits(bf16s(t * logits_stride(d.vocab))),  // (T, V) bf16, rows padded as the workload's
        targets(size_t(t) * 4),                     // (T) int32
        tokens(size_t(t) * 4),                      // (T) int32
        row_loss(size_t(t) * 4),                    // (T) fp32
        loss_sum(4),                                // (1) fp32
        embed(bf16s(d.vocab * d.hidden)),           // (V, h) bf16
        dembed(bf16s(d.vocab * d.hidden)),          // (V, h) bf16
        head_grad(size_t(d.vocab * d.hidden) * 4),  // (V, h) fp32: the tied head's dE_head
        pos(bf16s(d.pos_rows * d.hidden)),          // (P + off, h) bf16
        dpos(bf16s(d.pos_rows * d.hidden)),         // (P + off, h) bf16
        starts(size_t(d.vocab + 1) * 4),            // (V + 1) int32: sort_token_rows
        rows_by_token(size_t(t) * 4) {              // (T) int32
    uint64_t seed = 11;
    for (DeviceMemory* m : {&x, &y, &r, &dy, &dx, &w, &b, &b3, &bf, &qkv, &o, &u, &g, &logits, &embed, &pos})
      fill_random(GemmType::kBF16, m->get(), m->bytes() / 2, seed++, s);
    fill_random(GemmType::kFP32, head_grad.get(), head_grad.bytes() / 4, seed++, s);
    const std::vector<int32_t> tok = d.tokens.empty() ? uniform_ids(t, d.vocab, 1) : d.tokens;
    const std::vector<int32_t> tgt = d.targets.empty() ? uniform_ids(t, d.vocab, 2) : d.targets;
    if (int64_t(tok.size()) != t || int64_t(tgt.size()) != t)
      throw std::invalid_argument("decoder_kernel_seconds: " + std::to_string(tok.size()) + " tokens and " +
                                  std::to_string(tgt.size()) +
                                  " targets for a micro-batch of B * s = " + std::to_string(t) + " rows");
    const TokenRowIndex index = sort_token_rows(tok.data(), t, d.vocab);
    TF_CUDA_CHECK(cudaMemcpyAsync(tokens.get(), tok.data(), tokens.bytes(), cudaMemcpyHostToDevice, s));
    TF_CUDA_CHECK(cudaMemcpyAsync(targets.get(), tgt.data(), targets.bytes(), cudaMemcpyHostToDevice, s));
    TF_CUDA_CHECK(cudaMemcpyAsync(starts.get(), index.starts.data(), starts.bytes(), cudaMemcpyHostToDevice, s));
    TF_CUDA_CHECK(
        cudaMemcpyAsync(rows_by_token.get(), index.rows.data(), rows_by_token.bytes(), cudaMemcpyHostToDevice, s));
    TF_CUDA_CHECK(cudaStreamSynchronize(s));  // the host vectors go out of scope
  }
  static size_t bf16s(int64_t n) { return size_t(n) * 2; }
  template <class T = uint16_t>
  T* p(const DeviceMemory& m) const {
    return m.as<T>();
  }

  int64_t t, part_floats;
  DeviceMemory x, y, r, dy, dx, w, b, b3, bf, dw, db, stats, partials, qkv, dqkv, o, lse, delta, u, g, du, logits,
      targets, tokens, row_loss, loss_sum, embed, dembed, head_grad, pos, dpos, starts, rows_by_token;
};

// Each class's launches over the embedding, one block and the head (workload_decoder.cu's calls).
std::vector<std::pair<core::KernelClass, std::function<void()>>> class_launches(const DecoderKernelShape& d,
                                                                                DecoderBuffers& m, cudaStream_t s) {
  using K = core::KernelClass;
  const int64_t T = m.t, h = d.hidden, f = d.ffn;
  const float eps = 1e-5f;
  const Activation act = d.relu ? Activation::kRelu : Activation::kGeluTanh;
  const auto bf = core::DType::kBF16;
  float* mean = m.p<float>(m.stats);
  float* rstd = mean + T;
  const EmbeddingDims ed{d.batch, d.seq, h, d.vocab, d.pos_rows, d.pos_offset};
  const int ln_fwd = 2 + (d.pre_ln ? 1 : 0);
  return {
      {K::kLayerNormForward,
       [=, &m] {
         for (int i = 0; i < ln_fwd; ++i)
           layer_norm_forward(m.p(m.x), m.p(m.w), m.p(m.b), T, h, eps, m.p(m.y), mean, rstd, s);
       }},
      {K::kLayerNormBackward,
       [=, &m] {
         for (int i = 0; i < 2; ++i)
           layer_norm_backward(m.p(m.dy), m.p(m.x), mean, rstd, m.p(m.w), m.p(m.r), T, h, m.p(m.dx),
                               m.p<float>(m.partials), bf, m.p(m.dw), m.p(m.db), s);
         if (d.pre_ln)
           layer_norm_backward(m.p(m.dy), m.p(m.x), mean, rstd, m.p(m.w), nullptr, T, h, m.p(m.dx),
                               m.p<float>(m.partials), bf, m.p(m.dw), m.p(m.db), s);
       }},
      {K::kBiasActForward,
       [=, &m] {
         bias_act_forward(m.p(m.qkv), m.p(m.b3), T, 3 * h, Activation::kNone, nullptr, s);
         bias_act_forward(m.p(m.u), m.p(m.bf), T, f, act, m.p(m.g), s);
       }},
      {K::kBiasResidualForward,
       [=, &m] {
         for (int i = 0; i < 2; ++i) bias_residual_forward(m.p(m.y), m.p(m.b), m.p(m.r), T, h, m.p(m.dx), s);
       }},
      {K::kBiasActBackward,
       [=, &m] {
         bias_act_backward(m.p(m.g), m.p(m.u), T, f, act, m.p(m.du), m.p<float>(m.partials), bf, m.p(m.db), s);
       }},
      {K::kBiasGrad,
       [=, &m] {
         for (int i = 0; i < 2; ++i) bias_grad(m.p(m.dy), T, h, m.p<float>(m.partials), bf, m.p(m.db), s);
         bias_grad(m.p(m.qkv), T, 3 * h, m.p<float>(m.partials), bf, m.p(m.db), s);
       }},
      {K::kEmbeddingForward,
       [=, &m] { embedding_forward(m.p<int32_t>(m.tokens), m.p(m.embed), m.p(m.pos), ed, m.p(m.y), s); }},
      {K::kEmbeddingBackward,
       [=, &m] {
         position_grad(m.p(m.dy), ed, bf, m.p(m.dpos), s);
         token_embedding_grad(m.p(m.dy), m.p<int32_t>(m.starts), m.p<int32_t>(m.rows_by_token),
                              d.tied ? m.p<float>(m.head_grad) : nullptr, T, d.vocab, h, bf, m.p(m.dembed), s);
       }},
      {K::kCrossEntropy,
       [=, &m] {
         cross_entropy_forward_backward(m.p(m.logits), m.p<int32_t>(m.targets), T, d.vocab,
                                        core::decoder_layout::logits_stride(d.vocab), 1.0f / float(T),
                                        m.p<float>(m.row_loss), m.p<float>(m.loss_sum), s);
       }},
  };
}

// Seconds per call of fn: warm-up, then `reps` repetitions of >= 2 ms.
Stat seconds_per_call(cudaStream_t s, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
  const auto call = [&](int) { fn(); };
  return make_stat(event_timed(s, reps, calls_for(s, 2e-3, call), call));
}

}  // namespace

DecoderKernelTimes decoder_kernel_seconds(int device, const DecoderKernelShape& d, int reps) {
  check_reps(reps, "decoder_kernel_seconds");
  check_device(device);
  if (d.batch < 1 || d.seq < 1 || d.hidden < 1 || d.heads < 1 || d.hidden % d.heads != 0 || d.ffn < 1 || d.vocab < 1 ||
      d.pos_rows < d.seq + d.pos_offset)
    throw core::InputError("decoder_kernel_seconds: a decoder shape needs B, s, h, H (dividing h), f, V >= 1 and " +
                           std::string("P + off >= s + off position rows"));
  DeviceGuard guard(device);
  Stream stream;
  const cudaStream_t s = stream.get();
  DecoderBuffers m(d, s);
  DecoderKernelTimes out;
  for (const auto& [kind, fn] : class_launches(d, m, s))
    out.class_seconds.emplace_back(kind, seconds_per_call(s, reps, fn));
  const AttentionDims ad{d.batch, d.seq, d.heads, d.hidden / d.heads};
  // QKV's bias timing above added to qkv in place: fresh values for the attention
  fill_random(GemmType::kBF16, m.qkv.get(), m.qkv.bytes() / 2, 101, s);
  out.attention_fwd_s =
      seconds_per_call(s, reps, [&] { attention_forward(m.p(m.qkv), ad, m.p(m.o), m.p<float>(m.lse), s); });
  // the backward reads the forward's log-sum-exp: the last forward above left it in lse
  out.attention_bwd_s = seconds_per_call(s, reps, [&] {
    attention_backward(m.p(m.qkv), m.p(m.o), m.p(m.dy), m.p<float>(m.lse), ad, m.p<float>(m.delta), m.p(m.dqkv), s);
  });
  return out;
}

}  // namespace tf::backend::cuda::calibrate
