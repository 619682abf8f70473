// CUDA optimizer backend: device buffers, one fused multi-tensor step per call, canonical gradient
// statistics, and the copy / step timings for `twinflow bench`.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/cuda_tuning.h"
#include "backends/cuda/optim_kernels.cuh"

namespace tf::backend::cuda {
namespace {

constexpr size_t kAlignment = 16;  // float4 loads: every chunk pointer 16-byte aligned

// Chunks of one (grad, copy) dtype pair, launched together.
struct Group {
  DType grad, copy;
  uint32_t first, count;  // range of Plan::launch
  uint64_t tiles;
};

// The descriptors of one call. `fold` lists every chunk in call order (for the per-chunk fold);
// `launch` lists the non-empty chunks grouped by dtype pair, each group in call order.
struct Plan {
  std::vector<ChunkDesc> fold;
  std::vector<ChunkDesc> launch;
  std::vector<Group> groups;
  uint64_t tiles = 0;
  bool any_big = false;  // some chunk has more than kFoldShared tiles
};

Plan make_plan(std::vector<ChunkDesc> descs, const std::vector<std::pair<DType, DType>>& types) {
  Plan plan;
  uint64_t sum = 0;
  for (ChunkDesc& d : descs) {
    d.tiles = core::stats_tiles(d.n);
    d.sum_begin = sum;
    d.local_tile_begin = 0;
    sum += d.tiles;
    plan.any_big = plan.any_big || d.tiles > kFoldShared;
  }
  plan.tiles = sum;
  plan.fold = descs;
  static constexpr std::array<DType, 3> kGrads = {DType::kF32, DType::kBF16, DType::kF16};
  static constexpr std::array<DType, 3> kCopies = {DType::kNone, DType::kBF16, DType::kF16};
  for (DType g : kGrads)
    for (DType c : kCopies) {
      Group grp{g, c, uint32_t(plan.launch.size()), 0, 0};
      for (size_t i = 0; i < descs.size(); ++i) {
        if (types[i].first != g || types[i].second != c || descs[i].n == 0) continue;
        ChunkDesc d = descs[i];
        d.local_tile_begin = grp.tiles;
        grp.tiles += d.tiles;
        plan.launch.push_back(d);
        ++grp.count;
      }
      if (grp.count) plan.groups.push_back(grp);
    }
  return plan;
}

// Host and device memory of one call. Device layout (the pinned upload image is the same):
//   [nonfinite u64][chunk_sums: nchunks f64][fold descs: nchunks][launch descs]
// The download image holds [nonfinite][chunk_sums].
class Slot {
 public:
  void load(Plan plan) {
    plan_ = std::move(plan);
    const size_t n = plan_.fold.size();
    off_fold_ = (8 + 8 * n + 15) / 16 * 16;
    off_launch_ = off_fold_ + n * sizeof(ChunkDesc);
    bytes_up_ = off_launch_ + plan_.launch.size() * sizeof(ChunkDesc);
    bytes_down_ = 8 + 8 * n;
    up_.reserve(bytes_up_);
    down_.reserve(bytes_down_);
    dev_.reserve(bytes_up_);
    char* u = up_.as<char>();
    std::memset(u, 0, off_fold_);
    if (n) std::memcpy(u + off_fold_, plan_.fold.data(), n * sizeof(ChunkDesc));
    if (!plan_.launch.empty())
      std::memcpy(u + off_launch_, plan_.launch.data(), plan_.launch.size() * sizeof(ChunkDesc));
  }
  const Plan& plan() const { return plan_; }
  unsigned long long* dev_nonfinite() const { return dev_.as<unsigned long long>(); }
  double* dev_chunk_sums() const { return reinterpret_cast<double*>(dev_.as<char>() + 8); }
  const ChunkDesc* dev_fold() const { return reinterpret_cast<const ChunkDesc*>(dev_.as<char>() + off_fold_); }
  const ChunkDesc* dev_launch(uint32_t first) const {
    return reinterpret_cast<const ChunkDesc*>(dev_.as<char>() + off_launch_) + first;
  }
  void upload(cudaStream_t s) const {
    TF_CUDA_CHECK(cudaMemcpyAsync(dev_.get(), up_.get(), bytes_up_, cudaMemcpyHostToDevice, s));
  }
  void download(cudaStream_t s) const {
    TF_CUDA_CHECK(cudaMemcpyAsync(down_.get(), dev_.get(), bytes_down_, cudaMemcpyDeviceToHost, s));
  }
  // After the stream is synchronised: chunk sums combined in call order, as the CPU backend does.
  // A NaN sum is returned as the default quiet NaN (0x7FF8...): the GPU does not propagate NaN
  // payloads the way x86 does, so only "is NaN" is meaningful across backends.
  GradStats result() const {
    GradStats out;
    std::memcpy(&out.nonfinite, down_.get(), 8);
    const double* sums = reinterpret_cast<const double*>(down_.as<char>() + 8);
    for (size_t c = 0; c < plan_.fold.size(); ++c) out.sumsq = out.sumsq + sums[c];
    if (std::isnan(out.sumsq)) out.sumsq = std::numeric_limits<double>::quiet_NaN();
    return out;
  }

 private:
  Plan plan_;
  size_t off_fold_ = 0, off_launch_ = 0, bytes_up_ = 0, bytes_down_ = 0;
  PinnedMemory up_, down_;
  DeviceMemory dev_;
};

class CudaBuffer final : public Buffer {
 public:
  explicit CudaBuffer(size_t bytes) : mem_(bytes) {}
  void* data() override { return mem_.get(); }
  size_t bytes() const override { return mem_.bytes(); }

 private:
  DeviceMemory mem_;
};

void check_range(Buffer& b, size_t bytes, const char* what) {
  if (bytes > b.bytes())
    throw core::InputError(std::string(what) + ": " + std::to_string(bytes) + " bytes exceed the buffer's " +
                           std::to_string(b.bytes()));
}

void check_device_index(int device) {
  int count = 0;
  TF_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw core::RuntimeFailure("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                               " device(s) visible; check CUDA_VISIBLE_DEVICES)");
}

ChunkDesc to_desc(const OptimChunk& c) {
  ChunkDesc d{};
  d.p = static_cast<float*>(c.param.data);
  d.s1 = static_cast<float*>(c.state1.data);
  d.s2 = static_cast<float*>(c.state2.data);
  d.g = c.grad.data;
  d.copy = c.param_copy.dtype == DType::kNone ? nullptr : c.param_copy.data;
  d.n = c.param.count;
  return d;
}

class CudaBackend final : public OptimizerBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check_device_index(device);
    DeviceGuard guard(device_);
    const cudaError_t img = probe_kernel_image();
    cudaDeviceProp prop{};
    TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    if (img != cudaSuccess)
      cuda_fail(img,
                ("probe of the kernel image for " + std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                 std::to_string(prop.minor) + "; rebuild with CMAKE_CUDA_ARCHITECTURES including it)")
                    .c_str(),
                __FILE__, __LINE__);
    sm_count_ = prop.multiProcessorCount;
    caps_.name = "cuda:" + std::to_string(device_) + " " + prop.name;
    caps_.functional_math = true;
    caps_.device_memory = true;
    caps_.bitwise_contract = true;
    caps_.buffer_alignment = kAlignment;
    stream_.emplace();
  }
  ~CudaBackend() override {
    if (stream_) (void)cudaStreamSynchronize(stream_->get());
  }

  const Capabilities& caps() const override { return caps_; }

  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    return std::make_unique<CudaBuffer>(bytes);
  }
  void upload(Buffer& dst, const void* src, size_t bytes) override {
    check_range(dst, bytes, "cuda upload");
    if (!bytes) return;
    DeviceGuard guard(device_);
    TF_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyDefault, stream_->get()));
    stream_->sync();
  }
  void download(void* dst, Buffer& src, size_t bytes) override {
    check_range(src, bytes, "cuda download");
    if (!bytes) return;
    DeviceGuard guard(device_);
    TF_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDefault, stream_->get()));
    stream_->sync();
  }

  GradStats step(OptimizerKind k, std::span<const OptimChunk> chunks, const StepScalars& s) override {
    if (chunks.empty()) return {};
    DeviceGuard guard(device_);
    prepare_step(k, chunks, slot_);
    enqueue_step(k, slot_, s, kDefaultVariant);
    stream_->sync();
    return slot_.result();
  }

  GradStats grad_stats(std::span<const BufferView> grads) override {
    if (grads.empty()) return {};
    DeviceGuard guard(device_);
    std::vector<ChunkDesc> descs;
    std::vector<std::pair<DType, DType>> types;
    for (size_t i = 0; i < grads.size(); ++i) {
      const BufferView& g = grads[i];
      const std::string where = "cuda grad_stats, grad " + std::to_string(i);
      if (g.dtype != DType::kF32 && g.dtype != DType::kBF16 && g.dtype != DType::kF16)
        throw core::InputError(where + ": dtype must be fp32, bf16 or fp16");
      if (g.count > 0 && g.data == nullptr) throw core::InputError(where + ": null data");
      if (reinterpret_cast<uintptr_t>(g.data) % kAlignment != 0)
        throw core::InputError(where + ": pointer is not aligned to " + std::to_string(kAlignment) +
                               " bytes; allocate with the backend or align the chunk start");
      ChunkDesc d{};
      d.g = g.data;
      d.n = g.count;
      descs.push_back(d);
      types.emplace_back(g.dtype, DType::kNone);
    }
    slot_.load(make_plan(std::move(descs), types));
    const cudaStream_t st = stream_->get();
    const Plan& plan = slot_.plan();
    tile_sums_.reserve(std::max<uint64_t>(plan.tiles, 1) * sizeof(double));
    slot_.upload(st);
    for (const Group& g : plan.groups)
      launch_stats(slot_.dev_launch(g.first), g.count, g.tiles, g.grad, tile_sums_.as<double>(), slot_.dev_nonfinite(),
                   st);
    finish_enqueue(slot_);
    stream_->sync();
    return slot_.result();
  }

  // --- used by the timing functions below --------------------------------------------------------
  void prepare_step(OptimizerKind k, std::span<const OptimChunk> chunks, Slot& slot) const {
    std::vector<ChunkDesc> descs;
    std::vector<std::pair<DType, DType>> types;
    descs.reserve(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      validate_chunk(k, chunks[i], kAlignment, "cuda step, chunk " + std::to_string(i));
      if (chunks[i].from.param)  // the speculative update into a spare slot is the CPU segment's alone
        throw core::InputError("cuda step, chunk " + std::to_string(i) +
                               ": an out-of-place update (OptimChunk::from) runs on the CPU backend only");
      descs.push_back(to_desc(chunks[i]));
      types.emplace_back(chunks[i].grad.dtype, chunks[i].param_copy.dtype);
    }
    slot.load(make_plan(std::move(descs), types));
  }

  // H2D descriptors, the step kernel per dtype group, the fold, D2H results. No synchronisation.
  void enqueue_step(OptimizerKind k, const Slot& slot, const StepScalars& s, const StepVariant& v) {
    const cudaStream_t st = stream_->get();
    const Plan& plan = slot.plan();
    tile_sums_.reserve(std::max<uint64_t>(plan.tiles, 1) * sizeof(double));
    slot.upload(st);
    for (const Group& g : plan.groups) {
      StepLaunch l;
      l.descs = slot.dev_launch(g.first);
      l.count = g.count;
      l.tiles = g.tiles;
      l.grad = g.grad;
      l.copy = g.copy;
      l.s = s;
      l.tile_sums = tile_sums_.as<double>();
      l.nonfinite = slot.dev_nonfinite();
      l.sm_count = sm_count_;
      l.stream = st;
      switch (k) {
        case OptimizerKind::kAdamW: launch_step_adamw(l, v); break;
        case OptimizerKind::kAdam: launch_step_adam(l, v); break;
        case OptimizerKind::kAdagrad: launch_step_adagrad(l, v); break;
        case OptimizerKind::kLion: launch_step_lion(l, v); break;
      }
    }
    finish_enqueue(slot);
  }

  cudaStream_t stream() const { return stream_->get(); }

 private:
  void finish_enqueue(const Slot& slot) {
    const Plan& plan = slot.plan();
    launch_fold(slot.dev_fold(), uint32_t(plan.fold.size()), plan.any_big, tile_sums_.as<double>(),
                slot.dev_chunk_sums(), stream_->get());
    slot.download(stream_->get());
  }

  int device_;
  int sm_count_ = 0;
  Capabilities caps_;
  std::optional<Stream> stream_;
  DeviceMemory tile_sums_;  // (tiles) f64, reused across calls
  Slot slot_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

void check_iters(int iters, const char* what) {
  if (iters < 1) throw core::InputError(std::string(what) + ": iters must be >= 1, got " + std::to_string(iters));
}

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

bool host_register(void* p, size_t bytes, std::string* why) {
  const cudaError_t e = cudaHostRegister(p, round_up(bytes, 4096), cudaHostRegisterPortable);
  if (e == cudaSuccess) return true;
  (void)cudaGetLastError();
  if (why) *why = std::string("cudaHostRegister of ") + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e);
  return false;
}

void host_unregister(void* p) noexcept {
  if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

bool cuda_available(std::string* why) {
  try {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      if (why) *why = std::string("no usable CUDA driver or device: ") + cudaGetErrorString(e);
      return false;
    }
    if (count < 1) {
      if (why) *why = "no CUDA device visible";
      return false;
    }
    DeviceGuard guard(0);
    const cudaError_t img = probe_kernel_image();
    if (img != cudaSuccess) {
      (void)cudaGetLastError();
      cudaDeviceProp prop{};
      (void)cudaGetDeviceProperties(&prop, 0);
      if (why)
        *why = "this build has no kernel image for device 0 (" + std::string(prop.name) + ", sm_" +
               std::to_string(prop.major) + std::to_string(prop.minor) + "): " + cudaGetErrorString(img);
      return false;
    }
    return true;
  } catch (const std::exception& ex) {
    if (why) *why = ex.what();
    return false;
  }
}

std::unique_ptr<OptimizerBackend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

GpuInfo gpu_info(int device) {
  check_device_index(device);
  cudaDeviceProp prop{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  GpuInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.hbm_bytes = double(prop.totalGlobalMem);
  return info;
}

std::string pci_bus_id(int device) {
  check_device_index(device);
  char id[32] = {};
  TF_CUDA_CHECK(cudaDeviceGetPCIBusId(id, int(sizeof id), device));
  return id;
}

double measure_copy_gbps(size_t bytes, int iters, int device) {
  check_iters(iters, "measure_copy_gbps");
  if (bytes == 0) throw core::InputError("measure_copy_gbps: bytes must be > 0");
  check_device_index(device);
  DeviceGuard guard(device);
  DeviceMemory src(bytes), dst(bytes);
  Stream stream;
  TF_CUDA_CHECK(cudaMemsetAsync(src.get(), 0x3C, bytes, stream.get()));
  for (int i = 0; i < 2; ++i)  // warm-up
    TF_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
  std::vector<Event> ev;
  ev.reserve(size_t(2 * iters));
  for (int i = 0; i < 2 * iters; ++i) ev.emplace_back();
  for (int i = 0; i < iters; ++i) {
    ev[size_t(2 * i)].record(stream.get());
    TF_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
    ev[size_t(2 * i + 1)].record(stream.get());
  }
  stream.sync();
  std::vector<double> sec;
  for (int i = 0; i < iters; ++i) sec.push_back(1e-3 * elapsed_ms(ev[size_t(2 * i)], ev[size_t(2 * i + 1)]));
  return 2.0 * double(bytes) / median(sec) / 1e9;
}

double time_step_variant_seconds(OptimizerKind k, DType grad, DType copy, size_t n, int iters, int device,
                                 const StepVariant& v, std::vector<double>* samples, StepValues values) {
  check_iters(iters, "time_step_seconds");
  if (n == 0) throw core::InputError("time_step_seconds: n must be > 0");
  if (grad == DType::kNone) throw core::InputError("time_step_seconds: grad must be fp32, bf16 or fp16");
  if (copy == DType::kF32) throw core::InputError("time_step_seconds: copy must be bf16, fp16 or none");
  CudaBackend be(device);
  DeviceGuard guard(device);
  const cudaStream_t st = be.stream();

  // Buffer sets: rotate when one set would fit in L2, so that the timing is not of the cache.
  const bool two = core::state_count(k) == 2;
  const size_t a32 = round_up(n * 4, 256), a16 = round_up(n * 2, 256);
  const size_t a_grad = grad == DType::kF32 ? a32 : a16;
  const size_t set_bytes = a32 * (two ? 3 : 2) + a_grad + (copy == DType::kNone ? 0 : a16);
  int l2 = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  size_t sets = 1;
  if (set_bytes < 2 * size_t(l2)) sets = std::clamp<size_t>((3 * size_t(l2) + set_bytes - 1) / set_bytes, 2, 256);

  std::vector<DeviceMemory> mem;
  std::vector<Slot> slots(sets);
  std::vector<OptimChunk> chunks(sets);
  mem.reserve(sets);
  for (size_t i = 0; i < sets; ++i) {
    mem.emplace_back(set_bytes);
    char* b = mem.back().as<char>();
    OptimChunk& c = chunks[i];
    size_t off = 0;
    auto take = [&](BufferView& view, DType t, size_t bytes) {
      view = {b + off, n, t};
      off += bytes;
    };
    take(c.param, DType::kF32, a32);
    take(c.state1, DType::kF32, a32);
    if (two) take(c.state2, DType::kF32, a32);
    take(c.grad, grad, a_grad);
    if (copy != DType::kNone) take(c.param_copy, copy, a16);
    launch_fill_random(to_desc(c), grad, copy, 0x5EEDull + i, st, values);
    be.prepare_step(k, std::span<const OptimChunk>(&c, 1), slots[i]);
  }
  const StepScalars s = core::make_step_scalars(k, core::default_hyper_params(k), 10, 1.0);

  // First step on set 0, checked: every element written, no non-finite gradient.
  be.enqueue_step(k, slots[0], s, v);
  TF_CUDA_CHECK(cudaStreamSynchronize(st));
  const GradStats first = slots[0].result();
  DeviceMemory counter(sizeof(unsigned long long));
  TF_CUDA_CHECK(cudaMemsetAsync(counter.get(), 0, sizeof(unsigned long long), st));
  launch_count_unwritten(to_desc(chunks[0]), grad, copy, counter.as<unsigned long long>(), st);
  unsigned long long unwritten = 0;
  TF_CUDA_CHECK(cudaMemcpyAsync(&unwritten, counter.get(), sizeof unwritten, cudaMemcpyDeviceToHost, st));
  TF_CUDA_CHECK(cudaStreamSynchronize(st));
  if (first.nonfinite != 0 || unwritten != 0)
    throw core::RuntimeFailure("time_step_seconds: the checked first step left " + std::to_string(unwritten) + " of " +
                               std::to_string(n) + " elements unwritten and counted " +
                               std::to_string(first.nonfinite) + " non-finite gradients (expected 0 and 0)");

  for (size_t i = 0; i < std::max<size_t>(sets, 3); ++i) be.enqueue_step(k, slots[i % sets], s, v);  // warm-up
  std::vector<Event> ev;
  ev.reserve(size_t(2 * iters));
  for (int i = 0; i < 2 * iters; ++i) ev.emplace_back();
  for (int i = 0; i < iters; ++i) {
    ev[size_t(2 * i)].record(st);
    be.enqueue_step(k, slots[size_t(i) % sets], s, v);
    ev[size_t(2 * i + 1)].record(st);
  }
  TF_CUDA_CHECK(cudaStreamSynchronize(st));
  std::vector<double> sec;
  for (int i = 0; i < iters; ++i) sec.push_back(1e-3 * elapsed_ms(ev[size_t(2 * i)], ev[size_t(2 * i + 1)]));
  if (samples) *samples = sec;
  return median(sec);
}

double time_step_seconds(OptimizerKind k, DType grad, DType copy, size_t n, int iters, int device,
                         std::vector<double>* samples, StepValues values) {
  return time_step_variant_seconds(k, grad, copy, n, iters, device, kDefaultVariant, samples, values);
}

}  // namespace tf::backend::cuda
