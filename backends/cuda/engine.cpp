// The real backend's engine: executes one rank's step plan on CUDA streams and the CPU optimizer's
// threads. One issuing thread per queue walks that queue's ops in plan order (core::plan_queue_order)
// and honours the plan's dependencies, and nothing else: GPU after GPU through cudaStreamWaitEvent, GPU
// after CPU by waiting on the host for the CPU op to finish, CPU after GPU through
// cudaEventSynchronize. Each GPU op is bracketed by two timing events, each CPU op by two host clock
// reads: that is the timeline. Buffers are core::plan_allocations', allocated by name.
#include "backends/cuda/engine.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <utility>

#include "backends/cpu/cpu_segment.h"
#include "backends/cpu/host_region.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/cuda_tuning.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/nccl_comm.cuh"
#include "backends/cuda/reduce_scatter.h"
#include "backends/cuda/workload.cuh"
#include "core/error.h"
#include "core/hf_names.h"
#include "core/init.h"
#include "core/local_kernels.h"
#include "core/optim/dtype.h"
#include "core/optim/grad_stats.h"
#include "core/plan_hazards.h"
#include "core/rank_plan.h"
#include "core/speculation.h"
#include "core/synthetic_workload.h"
#include "core/thread_priority.h"

namespace tf::backend::cuda {

NcclId make_nccl_id() {
  ncclUniqueId id;
  TF_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclId out{};
  static_assert(sizeof(id.internal) == sizeof(NcclId));
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

namespace {

constexpr int64_t kTile = int64_t(core::kStatsTile);
using Clock = std::chrono::steady_clock;
namespace buf = core::buf;

// Wall seconds from `a` to `b`.
double seconds(Clock::time_point a, Clock::time_point b = Clock::now()) {
  return std::chrono::duration<double>(b - a).count();
}

// ---- host memory for the CPU segment ---------------------------------------------------------------

// Untouched huge-page memory (cpu::HostRegion) first, so that the CPU optimizer's pinned threads place
// its pages by first touch; then page-locked in place (cudaHostRegister). cudaHostAlloc would fault
// every page in on the allocating thread, in small pages, before any optimizer thread touched it: it is
// the fallback when registering fails, and when that fails too the buffer stays pageable (the owner
// warns once).
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t bytes) : region_(bytes), bytes_(bytes) {}
  ~HostBuffer() { release(); }
  HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      release();
      region_ = std::move(o.region_);
      alloc_ = std::exchange(o.alloc_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      registered_ = std::exchange(o.registered_, false);
    }
    return *this;
  }
  // Page-locks the buffer for the copy engines: registered in place, else replaced by zeroed
  // cudaHostAlloc memory (its address changes: the result says so), else left pageable.
  enum class Pinned { kInPlace, kMoved, kNo };
  Pinned pin() {
    if (!bytes_) return Pinned::kNo;
    if (registered_ || alloc_) return Pinned::kInPlace;
    const size_t pages = (bytes_ + 4095) / 4096 * 4096;  // whole pages: within the region's 2 MiB mapping
    registered_ = cudaHostRegister(region_.data(), pages, cudaHostRegisterPortable) == cudaSuccess;
    if (registered_) return Pinned::kInPlace;
    (void)cudaGetLastError();
    if (cudaHostAlloc(&alloc_, bytes_, cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();
      alloc_ = nullptr;
      return Pinned::kNo;
    }
    std::memset(alloc_, 0, bytes_);
    region_ = cpu::HostRegion();
    return Pinned::kMoved;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(alloc_ ? alloc_ : region_.data());
  }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return registered_ || alloc_; }

 private:
  void release() noexcept {
    if (registered_) (void)cudaHostUnregister(region_.data());
    if (alloc_) (void)cudaFreeHost(alloc_);
    registered_ = false;
    alloc_ = nullptr;
  }
  cpu::HostRegion region_;
  void* alloc_ = nullptr;  // the cudaHostAlloc fallback
  size_t bytes_ = 0;
  bool registered_ = false;
};

DeviceMemory device_alloc(size_t bytes, const std::string& name) {
  try {
    return DeviceMemory(bytes);
  } catch (const core::RuntimeFailure& e) {
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw core::RuntimeFailure("GPU allocation of " + core::format_gb(int64_t(bytes)) + " for buffer '" + name +
                               "' failed with " + core::format_gb(int64_t(free_b)) +
                               " free: the memory model under-estimated this run; raise the ratio (" + e.what() + ")");
  }
}

// Raised inside issuing threads when another thread failed: unwinds without a second report.
struct Aborted {};

class EngineImpl final : public Engine {
 public:
  explicit EngineImpl(EngineConfig cfg) : cfg_(std::move(cfg)), s_(cfg_.settings) {
    const Clock::time_point t0 = Clock::now();
    Clock::time_point t = t0;
    const auto lap = [&t] {  // seconds since the previous lap
      const Clock::time_point now = Clock::now();
      return seconds(std::exchange(t, now), now);
    };
    validate_config();
    DeviceGuard guard(cfg_.device);
    set_sync_flag();
    plan_rank();
    check_memory();
    load_hf_weights();
    build_tables();
    setup_.plan_s = lap();
    allocate_device();
    upload_descriptors();
    init_optimizer_state();
    setup_.gpu_s = lap();
    allocate_host();
    make_cpu_backend();  // times its touch and pin phases into setup_
    make_queues();
    make_workload();
    if (s_.world > 1) {
      ncclUniqueId id;
      std::memcpy(id.internal, cfg_.nccl_id.data(), sizeof id.internal);
      comm_.emplace(s_.world, id, cfg_.rank);
    }
    (void)lap();
    init_weights_all();
    fill_replica();
    setup_.weights_s = lap();
    size_t free_b = 0, total_b = 0;
    TF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    mem_.gpu_used_by_process = int64_t(total_b - free_b);
    setup_.total_s = seconds(t0);
  }

  ~EngineImpl() override {
    // A carried tail still runs on the last step's threads: let it finish (or, after a failure, abort
    // it) and join them before anything they use is freed; after a failure, abort NCCL rather than wait.
    if (!failed_) {
      try {
        finish_tail();
      } catch (...) {
        failed_ = true;
      }
    }
    if (failed_ && comm_) comm_->abort();
    join_issuers(failed_);
    (void)cudaSetDevice(cfg_.device);
    (void)cudaDeviceSynchronize();
  }

  const Capabilities& caps() const override { return caps_; }
  const core::StepPlan& plan() const override { return plan_; }
  const core::Partition& partition() const override { return part_; }
  const core::TwinFlowSplit& split() const override { return split_; }
  const EngineMemory& memory() const override { return mem_; }
  const CpuPassProbe& cpu_pass_probe() const override { return probe_; }
  const SetupTimes& setup_times() const override { return setup_; }

  std::optional<StepReport> step() override;
  std::optional<StepReport> drain() override;
  std::vector<std::pair<int64_t, float>> master_weights() override;
  cpu::LayerState cpu_layer_state(size_t layer) override {
    finish_tail();  // a drain point: the state the carried tail writes
    return current_state(layer);
  }
  int64_t speculated_steps() const override { return spec_->speculated_steps(); }
  int64_t failed_speculations() const override { return spec_->failed_steps(); }
  std::vector<std::pair<int64_t, float>> last_gradients() override;
  core::TrainingPosition position() const override { return {step_, opt_step_, scaler_}; }
  void snapshot_optimizer(std::span<const std::span<float>> arrays) override;
  void restore_optimizer(std::span<const std::vector<float>> arrays, const core::TrainingPosition& pos) override;
  int64_t gpu_bytes_in_use() override {
    DeviceGuard guard(cfg_.device);
    size_t free_b = 0, total_b = 0;
    TF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return int64_t(total_b - free_b);
  }

 private:
  // --- set-up -------------------------------------------------------------------------------------
  // The device's scheduling flag: how this process's threads wait for it (auto: CUDA's choice, untouched).
  void set_sync_flag() {
    if (cfg_.cuda_sync == CudaSync::kAuto) return;
    set_device_schedule(cfg_.cuda_sync == CudaSync::kSpin    ? cudaDeviceScheduleSpin
                        : cfg_.cuda_sync == CudaSync::kYield ? cudaDeviceScheduleYield
                                                             : cudaDeviceScheduleBlockingSync);
  }

  void validate_config() {
    const EngineConfig& c = cfg_;
    if (s_.world < 1 || c.rank < 0 || c.rank >= s_.world)
      throw core::InputError("engine: rank " + std::to_string(c.rank) + " is outside world " +
                             std::to_string(s_.world));
    if (s_.partition.world != s_.world)
      throw core::InputError("engine: the partition's world does not match the settings' world");
    if (!(c.ratio >= 0 && c.ratio <= 1)) throw core::InputError("engine: ratio must be in [0, 1]");
    if (s_.step.grad_dtype != core::DType::kBF16 && s_.step.grad_dtype != core::DType::kF16)
      throw core::InputError("engine: gradients must be bf16 or fp16 (fp32 training runs in the simulator only)");
    if (s_.step.param_dtype != core::DType::kBF16) throw core::InputError("engine: parameters must be bf16");
    if (s_.step.optimizer != s_.policy.kind)
      throw core::InputError("engine: the step's optimizer does not match the policy's");
    if (s_.workload != core::WorkloadType::kSynthetic && s_.workload != core::WorkloadType::kMlp &&
        s_.workload != core::WorkloadType::kDecoder)
      throw core::InputError("engine: the workload must be synthetic, mlp or decoder (resolve it against the model)");
    if (c.overflow_at_step > 0 && s_.workload != core::WorkloadType::kSynthetic)
      throw core::InputError("engine: overflow_at_step needs the synthetic workload");
    if (c.cpu_probe_passes < 0 || c.cpu_probe_passes > 100)
      throw core::InputError("engine: cpu_probe_passes " + std::to_string(c.cpu_probe_passes) + " is outside [0, 100]");
    core::validate(s_.policy.kind, s_.policy.hp);
    int count = 0;
    TF_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (c.device < 0 || c.device >= count)
      throw core::RuntimeFailure("engine: CUDA device " + std::to_string(c.device) + " does not exist (" +
                                 std::to_string(count) + " visible; check CUDA_VISIBLE_DEVICES and LOCAL_RANK)");
    cudaDeviceProp prop{};
    TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, c.device));
    sm_count_ = prop.multiProcessorCount;
    caps_.name = "cuda:" + std::to_string(c.device) + " " + prop.name + " rank " + std::to_string(c.rank) + "/" +
                 std::to_string(s_.world);
    caps_.functional_math = true;
    caps_.device_memory = true;
    caps_.bitwise_contract = true;
    caps_.buffer_alignment = 16;
    total_gpu_bytes_ = int64_t(prop.totalGlobalMem);
  }

  // The rank's split, step plan and allocation plan: core::plan_rank, as the simulator builds its ranks
  // (`speculation: max`, auto's ceiling, fills the host memory beyond the plan; auto's count caps it).
  void plan_rank() {
    part_ = core::make_partition(s_.model, s_.partition);
    shard_ = part_.ranks[size_t(cfg_.rank)];
    core::MemoryOptions mo = s_.memory_options();
    mo.host_bytes_per_rank = host_limit();
    core::RankPlan rp = core::plan_rank(s_.model, part_, cfg_.rank, cfg_.ratio, mo);
    split_ = std::move(rp.split);
    plan_ = std::move(rp.step);
    mem_.plan = std::move(rp.alloc);
    mem_.planned = core::sum_by_kind(mem_.plan);
    mem_.staging = rp.staging;
    spec_.emplace(plan_);
    spare_ = core::spare_range(split_, spec_->layers());
    carrying_ = core::carries(plan_);
    const std::vector<std::string> hazards = core::check_plan_hazards(plan_);
    if (!hazards.empty())
      throw std::logic_error("engine: the step plan leaves " + std::to_string(hazards.size()) +
                             " buffer reuse(s) unordered, e.g. " + hazards.front());
  }

  // What this rank may pin: the caller's limit, else the machine's memory less training.host_reserve as if
  // this rank were alone on it (core::pinnable_host_bytes_per_rank).
  int64_t host_limit() const {
    if (cfg_.host_bytes_limit > 0) return cfg_.host_bytes_limit;
    return core::pinnable_host_bytes_per_rank(int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)), 1,
                                              s_.host_reserve);
  }

  // The ratio is checked without the GPU headroom (`ratio: auto` chose it with the headroom kept, an explicit
  // ratio is the caller's), and warned about when it eats into it.
  void check_memory() {
    const int64_t gpu_limit = cfg_.gpu_bytes_limit > 0 ? cfg_.gpu_bytes_limit : total_gpu_bytes_;
    core::check_ratio_fits(s_.model, part_, s_.memory_options(), cfg_.ratio, gpu_limit, host_limit());
    const std::string w = core::headroom_warning(cfg_.ratio, mem_.planned.gpu_total, gpu_limit,
                                                 core::margin_bytes(s_.gpu_headroom, gpu_limit));
    if (w.empty()) return;
    if (cfg_.warn)
      cfg_.warn("warning: " + w);
    else
      std::fprintf(stderr, "warning: %s\n", w.c_str());
  }

  // A decoder's init.from, read and checked (names, shapes: core::load_hf_weights) before anything is
  // allocated. The whole file is read into host memory (4 B a parameter, freed after the weights are
  // set): Hugging Face's layouts (GPT-2's transposed Conv1D weights, OPT's separate q/k/v) scatter a
  // rank's contiguous slice over the file, and a model whose optimizer state fits this rank's memory
  // fits the host as fp32 too.
  void load_hf_weights() {
    if (s_.workload != core::WorkloadType::kDecoder || s_.init_from.empty()) return;
    hf_weights_ = core::load_hf_weights(s_.model, s_.init_from);
  }

  // Canonical element indexes, per-layer CPU ranges, the queues' op lists.
  void build_tables() {
    const size_t L = s_.model.layers.size();
    layer_first_.assign(L + 1, 0);
    for (size_t l = 0; l < L; ++l) layer_first_[l + 1] = layer_first_[l] + part_.layer_params[l];
    total_tiles_ = core::stats_table_tiles(part_);
    piece_of_layer_.assign(L, -1);
    for (size_t i = 0; i < shard_.pieces.size(); ++i) piece_of_layer_[shard_.pieces[i].layer] = int(i);
    cpu_begin_.assign(L, 0);
    cpu_end_.assign(L, 0);
    for (const core::ShardPiece& p : split_.cpu) {
      cpu_begin_[p.layer] = p.shard_offset;
      cpu_end_[p.layer] = p.shard_offset + p.count;
    }
    replica_off_ = core::replica_layer_offsets(part_);
    queue_ops_ = core::plan_queue_order(plan_);
    for (const core::Op& op : plan_.ops) {
      if (op.kind == core::OpKind::kNormAllReduce) norm_op_ = op.id;
      (op.carried ? tail_ops_ : body_ops_) += 1;
    }
    for (size_t q = 0; q < queue_ops_.size(); ++q)
      for (uint32_t id : queue_ops_[q]) (plan_.ops[id].carried ? last_tail_op_ : last_body_op_)[q] = int64_t(id);
  }

  // One buffer of the allocation plan, by name; recorded as allocated.
  DeviceMemory gpu_buffer(std::string_view name) {
    const core::BufferSpec& b = mem_.plan.at(name);
    DeviceMemory m = device_alloc(size_t(b.bytes), b.name);
    mem_.allocated.push_back(b);
    mem_.gpu_allocated += b.bytes;
    return m;
  }
  HostBuffer host_buffer(std::string_view name) {
    const core::BufferSpec& b = mem_.plan.at(name);
    HostBuffer h(size_t(b.bytes));
    mem_.allocated.push_back(b);
    return h;
  }

  void allocate_device() {
    const core::AllocPlan& ap = mem_.plan;
    d_lp_ = gpu_buffer(buf::kParams);
    if (ap.has(buf::kReplica)) d_replica_ = gpu_buffer(buf::kReplica);
    d_master_ = gpu_buffer(buf::kGpuMaster);
    d_s1_ = gpu_buffer(buf::kGpuState1);
    if (ap.has(buf::kGpuState2)) d_s2_ = gpu_buffer(buf::kGpuState2);
    d_grad_ = gpu_buffer(buf::kGrads);
    if (ap.has(buf::kGradAccum)) d_acc_ = gpu_buffer(buf::kGradAccum);
    for (int i = 0; ap.has(core::buffer_name(buf::kGather, i)); ++i)
      d_ag_.push_back(gpu_buffer(core::buffer_name(buf::kGather, i)));
    if (ap.has(buf::kGatherShared)) d_ag_shared_ = gpu_buffer(buf::kGatherShared);
    for (int i = 0; i < core::kGradSlots; ++i) {
      d_layer_grad_[size_t(i)] = gpu_buffer(core::buffer_name(buf::kLayerGrad, i));
      if (ap.has(core::buffer_name(buf::kRecv, i))) d_recv_[size_t(i)] = gpu_buffer(core::buffer_name(buf::kRecv, i));
    }
    d_tiles_ = gpu_buffer(buf::kStatsTable);
    d_fold_ = gpu_buffer(buf::kFoldScratch);
    d_counters_ = gpu_buffer(buf::kCounters);
    d_opt_tiles_ = gpu_buffer(buf::kOptimizerTileSums);
    d_descs_ = gpu_buffer(buf::kDescriptors);
  }

  // GPU descriptors: [0] the optimizer's chunk, [1..] the statistics pass over the whole shard's
  // reduced gradients (core::shard_stats_ranges).
  void upload_descriptors() {
    const uint64_t g = uint64_t(split_.gpu_elems);
    std::vector<ChunkDesc> descs(1);
    descs[0] = ChunkDesc{d_master_.as<float>(),
                         d_s1_.as<float>(),
                         d_s2_.as<float>(),
                         d_grad_.get(),
                         d_lp_.get(),
                         g,
                         0,
                         0,
                         uint64_t(core::stats_tiles(size_t(g)))};
    uint64_t local = 0;
    for (const core::StatsRange& r : core::shard_stats_ranges(part_, shard_)) {
      ChunkDesc c{};
      c.g = d_grad_.as<uint16_t>() + r.shard_offset;
      c.n = uint64_t(r.tiles * kTile);
      c.tiles = uint64_t(r.tiles);
      c.local_tile_begin = local;
      c.sum_begin = uint64_t(r.table_index);
      local += uint64_t(r.tiles);
      descs.push_back(c);
    }
    if (descs.size() * sizeof(ChunkDesc) != d_descs_.bytes())
      throw std::logic_error("engine: the allocation plan sized the descriptors for another shard");
    stats_chunks_ = uint32_t(descs.size() - 1);
    stats_tiles_ = local;
    TF_CUDA_CHECK(cudaMemcpy(d_descs_.get(), descs.data(), d_descs_.bytes(), cudaMemcpyHostToDevice));
  }

  float initial_state1() const {
    return s_.policy.kind == core::OptimizerKind::kAdagrad ? float(s_.policy.hp.initial_accumulator_value) : 0.f;
  }

  void init_optimizer_state() {
    const size_t g = size_t(split_.gpu_elems);
    if (g) {
      TF_CUDA_CHECK(cudaMemset(d_s1_.get(), 0, g * 4));
      if (initial_state1() != 0.f) {
        std::vector<float> v(g, initial_state1());
        TF_CUDA_CHECK(cudaMemcpy(d_s1_.get(), v.data(), g * 4, cudaMemcpyHostToDevice));
      }
      if (d_s2_.get()) TF_CUDA_CHECK(cudaMemset(d_s2_.get(), 0, g * 4));
    }
    TF_CUDA_CHECK(cudaMemset(d_grad_.get(), 0, d_grad_.bytes()));
  }

  // Host: the CPU segment (master, states, the gradient and copy staging rings) and the norm's result, untouched
  // until make_cpu_backend places and pins them.
  void allocate_host() {
    h_master_ = host_buffer(buf::kHostMaster);
    h_s1_ = host_buffer(buf::kHostState1);
    if (mem_.plan.has(buf::kHostState2)) h_s2_ = host_buffer(buf::kHostState2);
    h_grad_ = host_buffer(buf::kHostGrad);
    h_copy_ = host_buffer(buf::kHostCopy);
    h_norm_ = host_buffer(buf::kHostNorm);
    if (mem_.plan.has(buf::kHostMasterSpare)) {
      h_master_spare_ = host_buffer(buf::kHostMasterSpare);
      h_s1_spare_ = host_buffer(buf::kHostState1Spare);
      if (mem_.plan.has(buf::kHostState2Spare)) h_s2_spare_ = host_buffer(buf::kHostState2Spare);
    }
  }

  // Page-locks the host buffers (after the first touch placed them), or warns once that they stay
  // pageable. Returns whether one moved (the cudaHostAlloc fallback).
  bool pin_host() {
    bool moved = false;
    for (HostBuffer* h :
         {&h_master_, &h_s1_, &h_s2_, &h_grad_, &h_copy_, &h_norm_, &h_master_spare_, &h_s1_spare_, &h_s2_spare_}) {
      const HostBuffer::Pinned p = cfg_.pin_memory ? h->pin() : HostBuffer::Pinned::kNo;
      moved = moved || p == HostBuffer::Pinned::kMoved;
      (h->pinned() ? mem_.host_pinned : mem_.host_pageable) += int64_t(h->bytes());
    }
    if (mem_.host_pageable <= 0) return moved;
    const std::string msg =
        "warning: " + core::format_gb(mem_.host_pageable) + " of the CPU segment could not be page-locked" +
        (cfg_.pin_memory ? " (cudaHostRegister failed: raise `ulimit -l` or free memory)" : " (pin_memory is off)") +
        "; PCIe copies from pageable memory run at ~8-16 GB/s instead of ~55 GB/s, so the D2H/H2D of the CPU "
        "segment will take 3-7x longer";
    if (cfg_.warn)
      cfg_.warn(msg);
    else
      std::fprintf(stderr, "%s\n", msg.c_str());
    return moved;
  }

  // The CPU half (cpu::CpuSegment, the code the CPU measurements run): the rank's threads on its CPUs,
  // the segment's pages first touched by the threads that update each layer, then pinned, then the
  // optimizer's initial state.
  void make_cpu_backend() {
    cpu::CpuOptions co;
    co.threads = cfg_.cpu_threads;
    co.pin_threads = cfg_.pin_threads;
    co.cpus = cfg_.cpu_cpus;
    cpu::apply_tuning_spec(co, cfg_.cpu_tuning, "cpu tuning");
    const auto segment = [&] {
      const cpu::SegmentBuffers bufs{h_master_.as<float>(), h_s1_.as<float>(),     h_s2_.as<float>(),
                                     h_grad_.as<void>(),    h_copy_.as<void>(),    s_.step.grad_dtype,
                                     core::DType::kBF16,    plan_.staging.offsets, plan_.staging.slot_of};
      cpu_ = std::make_unique<cpu::CpuSegment>(co, s_.policy.kind, bufs, cpu::segment_ranges(split_));
      cpu_->first_touch();
      for (int32_t l : spec_->layers()) cpu_->first_touch(size_t(l), state_in_slot(size_t(l), 1));
    };
    const Clock::time_point t0 = Clock::now();
    segment();
    const Clock::time_point t1 = Clock::now();
    const bool moved = pin_host();
    const Clock::time_point t2 = Clock::now();
    if (moved) segment();  // a buffer moved to cudaHostAlloc memory: the segment's views follow
    setup_.host_touch_s = seconds(t0, t1) + seconds(t2);
    setup_.host_pin_s = seconds(t1, t2);
    probe_cpu_pages();
    const size_t n = size_t(split_.cpu_elems);
    if (n && initial_state1() != 0.f) std::fill(h_s1_.as<float>(), h_s1_.as<float>() + n, initial_state1());
  }

  // EngineConfig::cpu_probe_passes: the CPU pass over this rank's own pages before the state is written
  // (cpu::CpuSegment::fill_measurement_data, then every byte zeroed again). Every rank calls the barrier equally
  // often (the passes are the same on every rank, and ratio 0's are empty).
  void probe_cpu_pages() {
    if (cfg_.cpu_probe_passes <= 0) return;
    const auto barrier = [&] {
      if (cfg_.cpu_probe_barrier) cfg_.cpu_probe_barrier();
    };
    probe_.elems = split_.cpu_elems;
    cpu_->fill_measurement_data();
    barrier();
    cpu_->probe_pass(1);  // warm-up
    for (int i = 0; i < cfg_.cpu_probe_passes; ++i) {
      barrier();
      const Clock::time_point t0 = Clock::now();
      probe_.own_s.push_back(cpu_->probe_pass(i + 2));
      barrier();
      probe_.all_s.push_back(seconds(t0));
    }
    cpu_->first_touch();  // every byte zero again, as before the probe
  }

  void make_queues() {
    for (auto& st : streams_) st.emplace();
    for (StepRun& r : runs_) {
      r.events.reserve(plan_.ops.size() * 2);  // owning: a constructor that fails later frees them
      for (size_t i = 0; i < plan_.ops.size() * 2; ++i) r.events.emplace_back(cudaEventBlockingSync);
      r.t0.emplace();
    }
  }

  // The workload allocates core::workload_buffers' list: it must be the plan's.
  void make_workload() {
    WorkloadContext wc;
    wc.model = &s_.model;
    wc.rank = cfg_.rank;
    wc.world = s_.world;
    wc.device = cfg_.device;
    wc.seed = s_.seed;
    wc.grad_dtype = s_.step.grad_dtype;
    wc.grad_accum = s_.step.grad_accum;
    wc.micro_batch = s_.step.micro_batch;
    wc.checkpointing = s_.step.checkpointing;
    wc.data = s_.data_train;
    for (size_t l = 0; l < s_.model.layers.size(); ++l) wc.layer_padded.push_back(part_.layer_slice[l] * s_.world);
    wc.overflow_at_step = cfg_.overflow_at_step;
    switch (s_.workload) {
      case core::WorkloadType::kMlp: workload_ = make_mlp_workload(wc); break;
      case core::WorkloadType::kDecoder: workload_ = make_decoder_workload(wc); break;
      default: workload_ = make_synthetic_workload(wc); break;
    }
    for (const core::BufferSpec& b : workload_->allocated()) {
      if (!mem_.plan.has(b.name) || !(mem_.plan.at(b.name) == b))
        throw std::logic_error("engine: the " + std::string(workload_->name()) + " workload allocated '" + b.name +
                               "' outside the allocation plan");
      mem_.allocated.push_back(b);
      (b.place == core::MemPlace::kGpu ? mem_.gpu_allocated : mem_.host_pinned) += b.bytes;
    }
  }

  // Initial weights: each (piece, tensor) range of the shard, scaled per tensor by the workload; a
  // decoder's from GPT-2's initialisation or its init.from file.
  void init_weights_all() {
    TF_CUDA_CHECK(cudaMemset(d_lp_.get(), 0, d_lp_.bytes()));
    if (split_.gpu_elems) TF_CUDA_CHECK(cudaMemset(d_master_.get(), 0, d_master_.bytes()));
    // The host master is zero already: untouched mappings read as zero and make_cpu_backend's first touch
    // (cpu::CpuSegment::first_touch, again after --pages-probe) zeroes every CPU layer's range.
    if (s_.workload == core::WorkloadType::kDecoder) return init_decoder_weights();
    for (const core::ShardPiece& p : shard_.pieces) {
      const core::LayerDesc& ld = s_.model.layers[p.layer];
      int64_t tensor_begin = 0;  // within the layer
      for (size_t t = ld.first_tensor; t < ld.first_tensor + ld.tensor_count; ++t) {
        const int64_t tn = s_.model.tensors[t].numel;
        const int64_t lo = std::max(tensor_begin, p.layer_offset);
        const int64_t hi = std::min(tensor_begin + tn, p.layer_offset + p.real_count);
        tensor_begin += tn;
        if (lo < hi) init_weights(t, layer_first_[p.layer] + lo, p.shard_offset + (lo - p.layer_offset), hi - lo);
      }
    }
    TF_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // The decoder's shard, a piece (one layer's contiguous run of model elements) at a time in chunks: fp32
  // values (core::init_weights from the seed, or the loaded file) and their bf16 copy on the host, the CPU
  // segment's straight into its master; then the GPU segment's master and every bf16 copy on the device.
  // From the seed, the draws, their bf16 rounding and the CPU segment's writes run on all the init's threads
  // (OPT-13B on one H200 spent 72-84 s here with them serial after the draws:
  // bench/results/2026-11-29-h200-opt13b-speculation).
  void init_decoder_weights() {
    constexpr int64_t kChunk = int64_t(1) << 24;
    std::vector<float> values;  // (chunk) fp32: the GPU segment's part (from the file: the whole chunk)
    std::vector<uint16_t> lp;   // (chunk) bf16
    for (const core::ShardPiece& p : shard_.pieces)
      for (int64_t c0 = 0; c0 < p.real_count; c0 += kChunk) {
        const int64_t n = std::min(kChunk, p.real_count - c0);
        const int64_t model_first = layer_first_[p.layer] + p.layer_offset + c0;
        const int64_t off = p.shard_offset + c0;
        const int64_t gpu_n = std::clamp<int64_t>(split_.gpu_elems - off, 0, n);
        float* const host_master =  // the chunk's CPU part in the host master (none: every element on the GPU)
            gpu_n < n ? h_master_.as<float>() + (off + gpu_n - split_.gpu_elems) : nullptr;
        lp.resize(size_t(n));
        const Clock::time_point t0 = Clock::now();
        if (hf_weights_.empty()) {
          const int threads = int(cfg_.cpu_threads);  // 0: all cores
          values.resize(size_t(gpu_n));
          if (gpu_n > 0)
            core::init_weights(s_.model, s_.seed, model_first, values, std::span(lp).first(size_t(gpu_n)), threads);
          if (gpu_n < n)
            core::init_weights(s_.model, s_.seed, model_first + gpu_n, std::span(host_master, size_t(n - gpu_n)),
                               std::span(lp).subspan(size_t(gpu_n)), threads);
        } else {
          values.resize(size_t(n));
          std::copy_n(hf_weights_.begin() + model_first, n, values.begin());
          for (int64_t j = 0; j < n; ++j) lp[size_t(j)] = core::f32_to_bf16(values[size_t(j)]);
          if (gpu_n < n) std::copy(values.begin() + gpu_n, values.begin() + n, host_master);
        }
        const Clock::time_point t1 = Clock::now();
        if (gpu_n > 0)
          TF_CUDA_CHECK(
              cudaMemcpy(d_master_.as<float>() + off, values.data(), size_t(gpu_n) * 4, cudaMemcpyHostToDevice));
        TF_CUDA_CHECK(cudaMemcpy(d_lp_.as<uint16_t>() + off, lp.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
        setup_.weights_host_s += seconds(t0, t1);
        setup_.weights_upload_s += seconds(t1);
      }
    hf_weights_.clear();
    hf_weights_.shrink_to_fit();
    TF_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // `count` elements of tensor t from model element `model_first`, at shard offset `off`: the GPU
  // segment's part (master + bf16 on the device), then the CPU segment's (master on the host, the
  // bf16 copy to the device shard).
  void init_weights(size_t t, int64_t model_first, int64_t off, int64_t count) {
    const float scale = workload_->init_scale(t);
    const int64_t gpu_hi = std::min<int64_t>(off + count, split_.gpu_elems);
    if (off < gpu_hi)
      launch_init_weights(d_master_.as<float>() + off, d_lp_.as<uint16_t>() + off, gpu_hi - off, s_.seed, model_first,
                          scale, nullptr);
    const int64_t cpu_lo = std::max<int64_t>(off, split_.gpu_elems);
    if (cpu_lo >= off + count) return;
    const int64_t m = off + count - cpu_lo;
    std::vector<uint16_t> host_lp(static_cast<size_t>(m));
    float* master = h_master_.as<float>() + (cpu_lo - split_.gpu_elems);
    const int64_t mf = model_first + (cpu_lo - off);
    cpu::ThreadPool& pool = cpu_->backend().pool();
    const size_t parts = std::max<size_t>(1, std::min<size_t>(pool.size(), size_t(m / 65536) + 1));
    pool.run(parts, [&](size_t w) {
      size_t b = 0, e = 0;
      cpu::ThreadPool::split(size_t(m), parts, w, b, e);
      for (size_t j = b; j < e; ++j) {
        master[j] = core::synthetic_initial_weight(s_.seed, mf + int64_t(j)) * scale;
        host_lp[j] = core::f32_to_bf16(master[j]);
      }
    });
    TF_CUDA_CHECK(cudaMemcpy(d_lp_.as<uint16_t>() + cpu_lo, host_lp.data(), size_t(m) * 2, cudaMemcpyHostToDevice));
  }

  // --- the step -----------------------------------------------------------------------------------
  struct OpState {
    bool issued = false;  // GPU op: its end event is recorded; CPU op: finished
    int64_t host_start_ns = 0, host_end_ns = 0;
  };

  // One step's execution state, by step parity (docs/ARCHITECTURE.md, "Carrying the optimizer tail into
  // the next step"): step t's carried ops run on step t's issuer threads while step t + 1 runs on its own
  // set, so what a carried op reads of "its step" (its decision, events, op states, counters) lives here
  // and survives step t + 1's begin. Ownership: the main thread writes a run in begin_step (step t + 2's
  // begin reuses step t's run only after step t's report was built and its threads were handed on, so
  // none of them reads it any more); queue q's issuer thread of the run alone writes issued[q], the
  // bytes of its copies and (cpu) cpu_nonfinite and host times, each before mark_issued, under mu_,
  // publishes the op; states[].issued is read and written under mu_; the main thread reads the rest only
  // after waiting (under mu_) for the ops that wrote it.
  struct StepRun {
    int step = 0;
    double scale = 1;                  // the loss scale the step's gradients carry
    int64_t opt_step = 0;              // optimizer steps taken before the step
    bool after_tail = false;           // the previous step's carried ops were pending at the begin: honour carried_deps
    std::vector<OpState> states;       // (ops)
    std::vector<Event> events;         // (2 x ops): each op's start and end
    std::optional<Event> t0;           // the step's start on the compute stream
    Clock::time_point host_t0;         // ... on the host clock
    int64_t host_begin_ns = 0;         // begin_step's host time (StepReport::HostTimes::begin_ns) ...
    int64_t host_begin_wait_ns = 0;    // ... of it waiting for the start event (begin_wait_ns)
    Clock::time_point host_body_done;  // when the main thread saw its body (and the previous tail) complete
    std::unique_ptr<std::once_flag> decision_once;
    std::optional<core::StepDecision> decision;
    core::QueueOrder issued;                   // op ids in the order each queue's thread issued them
    int64_t body_issued = 0, tail_issued = 0;  // ops issued that are not carried / carried (under mu_)
    uint64_t cpu_nonfinite = 0;                // non-finite elements the CPU passes masked (no norm wait)
    uint64_t gpu_nonfinite = 0;                // ... the GPU optimizer masked, read at the body's end
    int64_t d2h_bytes = 0, h2d_bytes = 0;
    double loss = 0;                                     // the workload's loss, read at the body's end
    core::Speculation::Outcome spec;                     // read at the body's end
    std::array<std::thread, core::kQueueCount> threads;  // the issuers (each joins the previous run's first)
  };
  StepRun& run_of(int step) { return runs_[size_t(step) & 1]; }

  cudaStream_t stream_of(core::Queue q) const { return streams_[size_t(q)]->get(); }
  static bool on_gpu(core::Queue q) { return q != core::Queue::kCpu; }
  static cudaEvent_t start_ev(const StepRun& r, uint32_t id) { return r.events[2 * id].get(); }
  static cudaEvent_t end_ev(const StepRun& r, uint32_t id) { return r.events[2 * id + 1].get(); }

  void wait_issued(const StepRun& r, uint32_t id) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return r.states[id].issued || abort_; });
    if (abort_) throw Aborted{};
  }
  void mark_issued(StepRun& r, uint32_t id) {
    {
      std::lock_guard lk(mu_);
      r.states[id].issued = true;
      (plan_.ops[id].carried ? r.tail_issued : r.body_issued) += 1;
    }
    cv_.notify_all();
  }

  // Op `dep` of run `r` (this step's, or the previous step's for a carried dependency) must be done
  // before queue q's next op.
  void wait_dep(const StepRun& r, core::Queue q, uint32_t dep) {
    const core::Queue dq = plan_.ops[dep].queue;
    if (dq == q) return;  // same queue: FIFO (across steps too: each issuer joins the previous step's first)
    wait_issued(r, dep);
    if (on_gpu(q) && on_gpu(dq)) TF_CUDA_CHECK(cudaStreamWaitEvent(stream_of(q), end_ev(r, dep), 0));
    if (!on_gpu(q) && on_gpu(dq)) TF_CUDA_CHECK(cudaEventSynchronize(end_ev(r, dep)));
    // GPU after CPU: wait_issued already waited for the CPU op to finish.
  }

  void issue_queue(StepRun& r, core::Queue q) {
    TF_CUDA_CHECK(cudaSetDevice(cfg_.device));
    StepRun& prev = run_of(r.step - 1);
    for (uint32_t id : queue_ops_[size_t(q)]) {
      const core::Op& op = plan_.ops[id];
      try {
        if (r.after_tail)
          for (uint32_t dep : op.carried_deps) wait_dep(prev, q, dep);
        for (uint32_t dep : op.deps) wait_dep(r, q, dep);
        if (needs_decision(op)) decision(r);  // host data the op needs (scalars, skip)
        if (on_gpu(q)) {
          const cudaStream_t s = stream_of(q);
          TF_CUDA_CHECK(cudaEventRecord(start_ev(r, id), s));
          execute_gpu(r, op, s);
          TF_CUDA_CHECK(cudaEventRecord(end_ev(r, id), s));
        } else {
          r.states[id].host_start_ns = host_now_ns(r);
          execute_cpu(r, op);
          r.states[id].host_end_ns = host_now_ns(r);
        }
      } catch (const Aborted&) {
        throw;
      } catch (const core::RuntimeFailure& e) {
        if (!op.carried) throw;
        throw core::RuntimeFailure(carried_failure(r, op, e.what()));
      } catch (const std::exception& e) {
        if (!op.carried) throw;
        throw std::runtime_error(carried_failure(r, op, e.what()));
      }
      r.issued[size_t(q)].push_back(id);  // this queue's thread alone writes its list
      mark_issued(r, id);
    }
  }
  // A carried op's failure surfaces at the next step() or drain(): it names its own step.
  static std::string carried_failure(const StepRun& r, const core::Op& op, const char* what) {
    return "step " + std::to_string(r.step) + ", carried op " + op.label() + ": " + what;
  }

  // Every optimizer-side op but a speculative update, which runs before the step is decided.
  static bool needs_decision(const core::Op& op) {
    const core::OpKind k = op.kind;
    return k == core::OpKind::kGpuOptimizer || (k == core::OpKind::kCpuOptimizer && op.state_slot < 0) ||
           k == core::OpKind::kCpuCommit || k == core::OpKind::kH2DParam;
  }

  static int64_t host_now_ns(const StepRun& r) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - r.host_t0).count();
  }

  const core::ShardPiece& piece(size_t layer) const { return shard_.pieces[size_t(piece_of_layer_[layer])]; }
  // The layer's parameters as forward/backward read them: one rank computes on its shard directly;
  // stages 1/2 read the replicated model.
  const uint16_t* gathered(const core::Op& op) const {
    if (s_.world == 1) return d_lp_.as<uint16_t>() + piece(size_t(op.layer)).shard_offset;
    if (d_replica_.get()) return d_replica_.as<uint16_t>() + replica_off_[size_t(op.layer)];
    return d_ag_.at(size_t(op.gather_slot)).as<uint16_t>();
  }
  // The layer the op's layer shares a tensor with (Op::shared_layer), as gathered for it; null if none.
  const uint16_t* shared(const core::Op& op) const {
    if (op.shared_layer < 0) return nullptr;
    if (s_.world == 1) return d_lp_.as<uint16_t>() + piece(size_t(op.shared_layer)).shard_offset;
    if (d_replica_.get()) return d_replica_.as<uint16_t>() + replica_off_[size_t(op.shared_layer)];
    return d_ag_shared_.as<uint16_t>();
  }

  void execute_gpu(StepRun& r, const core::Op& op, cudaStream_t s) {
    switch (op.kind) {
      case core::OpKind::kAllGather:
        return op.micro_batch < 0 ? refresh_replica(size_t(op.layer), s) : all_gather(op, s);
      case core::OpKind::kForward: return workload_->forward(op.layer, op.micro_batch, {gathered(op), shared(op)}, s);
      case core::OpKind::kBackward:
        return workload_->backward(op.layer, op.micro_batch, {gathered(op), shared(op)},
                                   d_layer_grad_.at(size_t(op.grad_slot)).as<uint16_t>(), s);
      case core::OpKind::kReduceScatter: return reduce_scatter(op, s);
      case core::OpKind::kD2HGrad: return d2h(r, op, s);
      case core::OpKind::kAllReduce: return all_reduce(op, s);
      case core::OpKind::kGradStats: return grad_stats(s);
      case core::OpKind::kNormAllReduce: return norm_all_reduce(s);
      case core::OpKind::kGpuOptimizer: return gpu_optimizer(*r.decision, s);
      case core::OpKind::kH2DParam: return h2d(r, op, s);
      case core::OpKind::kCpuOptimizer:
      case core::OpKind::kCpuCommit: break;
    }
    throw core::RuntimeFailure(std::string("engine: op ") + op.label() + " cannot run on a GPU stream");
  }

  // The layer into its prefetch buffer and, for a layer that shares a tensor (Op::shared_layer), the
  // owner layer into the shared buffer, in one NCCL group.
  void all_gather(const core::Op& op, cudaStream_t s) {
    if (s_.world == 1) return;
    const size_t l = size_t(op.layer);
    NcclGroup group;
    TF_NCCL_CHECK(ncclAllGather(d_lp_.as<uint16_t>() + piece(l).shard_offset, d_ag_.at(size_t(op.gather_slot)).get(),
                                size_t(part_.layer_slice[l]), ncclBfloat16, comm_->get(), s));
    if (op.shared_layer >= 0) {
      const size_t o = size_t(op.shared_layer);
      TF_NCCL_CHECK(ncclAllGather(d_lp_.as<uint16_t>() + piece(o).shard_offset, d_ag_shared_.get(),
                                  size_t(part_.layer_slice[o]), ncclBfloat16, comm_->get(), s));
    }
    group.end();
  }

  // The deterministic reduce-scatter (reduce_scatter.h) of the layer gradient backward wrote into
  // op.grad_slot; its sum lands in the shard's reduced gradients on the last micro-batch.
  void reduce_scatter(const core::Op& op, cudaStream_t s) {
    const size_t l = size_t(op.layer);
    const core::ShardPiece& p = piece(l);
    SliceReduceRank k;
    k.rank = cfg_.rank;
    k.send = d_layer_grad_.at(size_t(op.grad_slot)).as<uint16_t>();
    k.recv = d_recv_.at(size_t(op.grad_slot)).as<uint16_t>();
    k.acc = d_acc_.get() ? d_acc_.as<float>() + p.shard_offset : nullptr;
    k.out = d_grad_.as<uint16_t>() + p.shard_offset;
    k.comm = comm_ ? comm_->get() : nullptr;
    k.stream = s;
    const SliceReduce r{s_.world, part_.layer_slice[l], s_.step.grad_dtype,
                        core::slice_sum_io(s_.step.grad_accum, op.micro_batch)};
    reduce_scatter_slices(std::span<const SliceReduceRank>(&k, 1), r);
  }

  // Element 0 of staging slot `slot` of a host ring ("host_grad" or "host_copy", 2-byte elements).
  uint16_t* staging_slot(const HostBuffer& ring, int32_t slot) const {
    if (slot < 0 || slot >= plan_.staging.slots)
      throw std::logic_error("engine: staging slot " + std::to_string(slot) + " outside the plan's rings");
    return ring.as<uint16_t>() + plan_.staging.offsets[size_t(slot)];
  }

  // ZeRO stages 1/2 (docs/ARCHITECTURE.md, "The real backend"): every rank's updated slice of layer l,
  // from its shard into the replicated model (core::plan_step's all-gather after the optimizers).
  // Nothing with one rank: its shard is the model.
  void refresh_replica(size_t l, cudaStream_t s) {
    if (!d_replica_.get()) return;
    TF_NCCL_CHECK(ncclAllGather(d_lp_.as<uint16_t>() + piece(l).shard_offset,
                                d_replica_.as<uint16_t>() + replica_off_[l], size_t(part_.layer_slice[l]), ncclBfloat16,
                                comm_->get(), s));
  }
  // The replicated model from the initial shards, before the first step (on the comm stream).
  void fill_replica() {
    if (!d_replica_.get()) return;
    for (size_t l = 0; l < s_.model.layers.size(); ++l) refresh_replica(l, stream_of(core::Queue::kComm));
    TF_CUDA_CHECK(cudaStreamSynchronize(stream_of(core::Queue::kComm)));
  }

  // ZeRO stage 1's all-reduce: the deterministic reduce-scatter (the same sums, in the same order, as
  // stages 2/3), then on the last micro-batch every rank's reduced slice of the layer into the whole
  // model's gradients (core::stage1_grad_block: this rank's shard is block 0, where the optimizers,
  // the statistics and the D2H read it).
  void all_reduce(const core::Op& op, cudaStream_t s) {
    reduce_scatter(op, s);
    if (s_.world == 1 || !core::slice_sum_io(s_.step.grad_accum, op.micro_batch).write_out) return;
    const size_t l = size_t(op.layer);
    const int64_t at = piece(l).shard_offset, n = part_.layer_slice[l];  // the same on every rank
    const ncclDataType_t type = s_.step.grad_dtype == core::DType::kF16 ? ncclFloat16 : ncclBfloat16;
    uint16_t* grads = d_grad_.as<uint16_t>();
    NcclGroup group;
    for (int peer = 0; peer < s_.world; ++peer) {
      if (peer == cfg_.rank) continue;
      const int64_t block = core::stage1_grad_block(cfg_.rank, peer, s_.world) * shard_.elems;
      TF_NCCL_CHECK(ncclSend(grads + at, size_t(n), type, peer, comm_->get(), s));
      TF_NCCL_CHECK(ncclRecv(grads + block + at, size_t(n), type, peer, comm_->get(), s));
    }
    group.end();
  }

  void d2h(StepRun& r, const core::Op& op, cudaStream_t s) {
    const int64_t b = cpu_begin_[size_t(op.layer)], e = cpu_end_[size_t(op.layer)];
    TF_CUDA_CHECK(cudaMemcpyAsync(staging_slot(h_grad_, op.staging_slot), d_grad_.as<uint16_t>() + b, size_t(e - b) * 2,
                                  cudaMemcpyDeviceToHost, s));
    r.d2h_bytes += (e - b) * 2;
  }

  // The shard's tiles, at their canonical indexes.
  void grad_stats(cudaStream_t s) {
    if (stats_chunks_)
      launch_stats(d_descs_.as<ChunkDesc>() + 1, stats_chunks_, stats_tiles_, s_.step.grad_dtype, d_tiles_.as<double>(),
                   d_counters_.as<unsigned long long>(), s);
  }

  // Every tile is nonzero on exactly one rank, so the sum over ranks is exact in any order. Then the
  // fold on the device (core::fold_tile_sums' order): 16 bytes cross PCIe, not the table.
  void norm_all_reduce(cudaStream_t s) {
    launch_store_nonfinite(d_tiles_.as<double>() + total_tiles_, d_counters_.as<unsigned long long>(), 0, s);
    if (s_.world > 1)
      TF_NCCL_CHECK(ncclAllReduce(d_tiles_.get(), d_tiles_.get(), size_t(total_tiles_ + 1), ncclFloat64, ncclSum,
                                  comm_->get(), s));
    double* result = d_fold_.as<double>() + core::norm_fold_scratch_elems(total_tiles_);
    launch_fold_tiles(d_tiles_.as<double>(), total_tiles_, d_fold_.as<double>(), d_tiles_.as<double>() + total_tiles_,
                      result, s);
    TF_CUDA_CHECK(
        cudaMemcpyAsync(h_norm_.as<double>(), result, size_t(core::kNormResultBytes), cudaMemcpyDeviceToHost, s));
  }

  void gpu_optimizer(const core::StepDecision& d, cudaStream_t s) {
    if (d.skip || split_.gpu_elems == 0) return;
    StepLaunch lc;
    lc.descs = d_descs_.as<ChunkDesc>();
    lc.count = 1;
    lc.tiles = core::stats_tiles(size_t(split_.gpu_elems));
    lc.grad = s_.step.grad_dtype;
    lc.copy = core::DType::kBF16;
    lc.s = d.scalars;
    lc.tile_sums = d_opt_tiles_.as<double>();
    lc.nonfinite = d_counters_.as<unsigned long long>() + 1;
    lc.sm_count = sm_count_;
    lc.stream = s;
    switch (s_.policy.kind) {
      case core::OptimizerKind::kAdamW: launch_step_adamw(lc, kDefaultVariant); break;
      case core::OptimizerKind::kAdam: launch_step_adam(lc, kDefaultVariant); break;
      case core::OptimizerKind::kAdagrad: launch_step_adagrad(lc, kDefaultVariant); break;
      case core::OptimizerKind::kLion: launch_step_lion(lc, kDefaultVariant); break;
    }
  }

  void h2d(StepRun& r, const core::Op& op, cudaStream_t s) {
    if (r.decision->skip) return;
    const int64_t b = cpu_begin_[size_t(op.layer)], e = cpu_end_[size_t(op.layer)];
    TF_CUDA_CHECK(cudaMemcpyAsync(d_lp_.as<uint16_t>() + b, staging_slot(h_copy_, op.staging_slot), size_t(e - b) * 2,
                                  cudaMemcpyHostToDevice, s));
    r.h2d_bytes += (e - b) * 2;
  }

  // The CPU part of `layer` in state slot `slot` (0: the segment's own buffers; 1: the spare slot of a
  // speculated layer, the tail of the CPU segment that core::spare_range gives).
  cpu::LayerState state_in_slot(size_t layer, int slot) const {
    if (slot == 0) return cpu_->layer_state(layer);
    const int64_t o = cpu_begin_[layer] - split_.gpu_elems - spare_.begin;
    return {h_master_spare_.as<float>() + o, h_s1_spare_.as<float>() + o,
            h_s2_spare_.bytes() ? h_s2_spare_.as<float>() + o : nullptr};
  }

  // The layer's state in its current slot (no drain: the cpu queue's own accessor).
  cpu::LayerState current_state(size_t layer) const { return state_in_slot(layer, spec_->slot(int32_t(layer))); }

  // CPU optimizer ops, in their own step's context (its decision and speculation bet: a carried op may
  // run after the next step began): an update in place of the layer's current slot; a speculated
  // layer's speculative update (out of place into its other slot, before the step is decided) and its
  // commit (adopt the other slot, or update in place: core::Speculation).
  void execute_cpu(StepRun& r, const core::Op& op) {
    const auto l = size_t(op.layer);
    if (op.kind == core::OpKind::kCpuOptimizer && op.state_slot == 1) {
      const core::Speculation::Bet& bet = spec_->bet(r.step);
      if (!bet.active) return;
      const int cur = spec_->slot(op.layer);
      const cpu::LayerState from = state_in_slot(l, cur);
      r.cpu_nonfinite +=
          cpu_->update_layer(l, bet.scalars, state_in_slot(l, 1 - cur), &from, op.staging_slot).nonfinite;
      return;
    }
    const core::StepDecision& d = *r.decision;
    if (op.kind == core::OpKind::kCpuCommit) {
      if (spec_->commit(op.layer, d, r.step) == core::Speculation::Commit::kUpdate)
        r.cpu_nonfinite += cpu_->update_layer(l, d.scalars, current_state(l), nullptr, op.staging_slot).nonfinite;
      return;
    }
    if (op.kind != core::OpKind::kCpuOptimizer)
      throw core::RuntimeFailure(std::string("engine: op ") + op.label() + " cannot run on the cpu queue");
    if (d.skip) return;
    r.cpu_nonfinite += cpu_->update_layer(l, d.scalars, current_state(l), nullptr, op.staging_slot).nonfinite;
  }

  // The step decision: known up front without a norm wait; else once the norm all-reduce landed. With
  // the scale and optimizer step of the step's begin (the previous step's update of both happened then).
  const core::StepDecision& decision(StepRun& r) {
    std::call_once(*r.decision_once, [&] {
      if (norm_op_ < 0) {
        r.decision = core::decide_step(s_.policy, r.step, 0.0, 0, r.scale, r.opt_step + 1);
        return;
      }
      wait_issued(r, uint32_t(norm_op_));
      TF_CUDA_CHECK(cudaEventSynchronize(end_ev(r, uint32_t(norm_op_))));
      const double* t = h_norm_.as<double>();  // [0] the folded sum of squares, [1] the non-finite count
      const uint64_t nonfinite = uint64_t(t[1]);
      const double sumsq = core::canonical_nan(t[0]);
      r.decision = core::decide_step(s_.policy, r.step, sumsq, nonfinite, r.scale, r.opt_step + 1);
    });
    if (!r.decision) throw Aborted{};
    return *r.decision;
  }

  // Checkpoints: the optimizer's arrays as (GPU segment, CPU segment) pairs in core::checkpoint_arrays'
  // order, and the checks and copies of snapshot_optimizer / restore_optimizer.
  std::vector<std::pair<DeviceMemory*, HostBuffer*>> optimizer_segments();
  void check_checkpoint_arrays(size_t count, const std::function<size_t(size_t)>& size_of);
  // The CPU segment's array `a` (cpu_elems fp32), copied out by the optimizer's threads / copied in:
  // the only places a checkpoint touches the host state.
  void cpu_segment_to(size_t a, float* dst);
  void cpu_segment_from(size_t a, const float* src);
  void restore_bf16_copy(std::span<const float> master);
  static std::array<int64_t, core::kQueueCount> filled(int64_t v) {
    std::array<int64_t, core::kQueueCount> a;
    a.fill(v);
    return a;
  }
  void begin_step(StepRun& r, bool after_tail);
  void start_issuers(StepRun& r, StepRun& prev);
  void wait_issued_parts(const StepRun& r, const StepRun* prev);
  void sync_part(const StepRun& r, const std::array<int64_t, core::kQueueCount>& last);
  void end_body(StepRun& r);
  [[noreturn]] void fail();
  void join_issuers(bool abort);
  void finish_tail();
  std::vector<OpInterval> intervals(const StepRun& r, const StepRun& origin) const;
  std::vector<std::pair<int64_t, float>> owned(const std::function<float(int64_t)>& value_of) const;
  StepReport report(const StepRun& r, const StepRun* next);
  void check_masked_nonfinite(const StepRun& r);

  EngineConfig cfg_;
  const core::RunSettings& s_;  // cfg_.settings
  Capabilities caps_;
  int sm_count_ = 0;
  int64_t total_gpu_bytes_ = 0;
  core::Partition part_;
  core::RankShard shard_;
  core::TwinFlowSplit split_;
  core::StepPlan plan_;
  EngineMemory mem_;
  SetupTimes setup_;
  CpuPassProbe probe_;                                      // EngineConfig::cpu_probe_passes' passes
  std::vector<int64_t> layer_first_, cpu_begin_, cpu_end_;  // (L + 1) model index of each layer; (L) CPU ranges
  std::vector<int> piece_of_layer_;
  int64_t total_tiles_ = 0;
  core::QueueOrder queue_ops_;  // core::plan_queue_order(plan_)
  int64_t norm_op_ = -1;

  // The allocation plan's buffers (core/alloc_plan.h names their shapes and dtypes):
  DeviceMemory d_lp_;                    // "params": (shard) bf16
  DeviceMemory d_replica_;               // "replica": (world x shard) bf16, stages 1/2 with several ranks
  std::vector<int64_t> replica_off_;     // (L + 1) element offset of each layer in "replica"
  DeviceMemory d_master_, d_s1_, d_s2_;  // "gpu_master", "gpu_state1/2": (gpu_elems) fp32
  DeviceMemory d_grad_, d_acc_;    // "grads": (shard) grad dtype (stage 1: (world x shard), this rank's shard first);
                                   // "grad_accum": (shard) fp32
  DeviceMemory d_tiles_, d_fold_;  // "stats_table": (tiles + 1) f64; "fold_scratch": f64 + the result
  DeviceMemory d_counters_, d_opt_tiles_;  // "counters": (2) u64; "optimizer_tile_sums": (gpu tiles) f64
  DeviceMemory d_descs_;                   // "descriptors": (1 + statistics ranges) ChunkDesc
  std::vector<DeviceMemory> d_ag_;         // "gather.i": (padded layer) bf16, by Op::gather_slot
  DeviceMemory d_ag_shared_;               // "gather_shared": (padded owner layer) bf16, Op::shared_layer
  // "layer_grad.i", "recv.i": (world x slice of the largest layer) grad dtype, by Op::grad_slot
  std::array<DeviceMemory, core::kGradSlots> d_layer_grad_, d_recv_;
  uint32_t stats_chunks_ = 0;
  uint64_t stats_tiles_ = 0;
  HostBuffer h_master_, h_s1_, h_s2_;  // "host_master", "host_state1/2": (cpu_elems) fp32
  // the staging rings, slot s from element plan_.staging.offsets[s] (Op::staging_slot):
  HostBuffer h_grad_, h_copy_;  // "host_grad": (ring elems) grad dtype; "host_copy": (ring elems) bf16
  HostBuffer h_norm_;           // "host_norm": (2) f64, the folded norm and the non-finite count
  // "host_master_spare", "host_state1/2_spare": (spare elems) fp32, the speculated layers' second slot
  HostBuffer h_master_spare_, h_s1_spare_, h_s2_spare_;
  core::SpareRange spare_;                 // where the spare slot sits in the CPU segment
  std::optional<core::Speculation> spec_;  // the per-step rule and each layer's current slot
  std::unique_ptr<cpu::CpuSegment> cpu_;
  std::array<std::optional<Stream>, 4> streams_;  // compute, comm, d2h, h2d (core::Queue order)
  std::optional<NcclComm> comm_;
  std::unique_ptr<Workload> workload_;
  std::vector<float> hf_weights_;  // (total_params) fp32 init.from, model order, until the weights are set

  // the steps' execution (StepRun says who owns what)
  bool carrying_ = false;                // core::carries(plan_): the plan has carried ops
  int64_t body_ops_ = 0, tail_ops_ = 0;  // ops that are not carried / carried
  // per queue: the last op that is not carried / carried (-1: none); its end event ends the queue's part
  std::array<int64_t, core::kQueueCount> last_body_op_ = filled(-1), last_tail_op_ = filled(-1);
  std::array<StepRun, 2> runs_;  // by step parity
  std::mutex mu_;
  std::condition_variable cv_;
  bool abort_ = false;               // under mu_: every issuer of both runs unwinds
  std::exception_ptr error_;         // under mu_: the first failure of an issuer
  int pending_ = 0;                  // the step whose carried tail may still run (0: none)
  std::optional<StepReport> ready_;  // a drained step's report, not returned yet
  bool failed_ = false;
  int step_ = 0;
  double last_scale_ = 1;  // the loss scale the last step's gradients carry
  int64_t opt_step_ = 0;
  core::LossScaler scaler_ = s_.loss_scaler;
};

// Clears run r for its step and starts every stream at its start event. Step t - 1's carried ops may
// still run: nothing here touches what they read or write (the counters and the statistics table are
// the norm's and the GPU optimizer's, done with step t - 1's body; the workload's batch is read by the
// forward and backward only).
void EngineImpl::begin_step(StepRun& r, bool after_tail) {
  const Clock::time_point entry = Clock::now();
  {
    std::lock_guard lk(mu_);
    r.states.assign(plan_.ops.size(), OpState{});
    r.body_issued = r.tail_issued = 0;
  }
  r.step = step_;
  r.scale = scaler_.scale;
  r.opt_step = opt_step_;
  r.after_tail = after_tail;
  for (auto& q : r.issued) q.clear();
  r.decision_once = std::make_unique<std::once_flag>();
  r.decision.reset();
  r.cpu_nonfinite = r.gpu_nonfinite = 0;
  r.d2h_bytes = r.h2d_bytes = 0;
  r.loss = 0;
  r.spec = {};
  workload_->begin_step(step_, scaler_.scale);
  const cudaStream_t cs = stream_of(core::Queue::kCompute);
  TF_CUDA_CHECK(cudaMemsetAsync(d_counters_.get(), 0, d_counters_.bytes(), cs));
  if (norm_op_ >= 0) TF_CUDA_CHECK(cudaMemsetAsync(d_tiles_.get(), 0, d_tiles_.bytes(), cs));
  TF_CUDA_CHECK(cudaEventRecord(r.t0->get(), cs));
  for (size_t q = 1; q < streams_.size(); ++q) TF_CUDA_CHECK(cudaStreamWaitEvent(streams_[q]->get(), r.t0->get(), 0));
  const Clock::time_point prepared = Clock::now();
  TF_CUDA_CHECK(cudaEventSynchronize(r.t0->get()));
  r.host_t0 = Clock::now();
  r.host_begin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(r.host_t0 - entry).count();
  r.host_begin_wait_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(r.host_t0 - prepared).count();
}

// One issuing thread per queue. Queue q's thread first joins the previous step's thread of queue q (its
// carried ops: ops on one queue run in plan order across steps), so each step's threads hand the
// previous ones on and the main thread joins only the latest step's. The first failure of any thread
// aborts every thread of both steps.
void EngineImpl::start_issuers(StepRun& r, StepRun& prev) {
  for (int q = 0; q < core::kQueueCount; ++q)
    r.threads[size_t(q)] = std::thread([this, &r, q, before = std::move(prev.threads[size_t(q)])]() mutable {
      core::name_this_thread((std::string("tf-") + core::queue_name(core::Queue(q))).c_str());
      if (before.joinable()) before.join();
      try {
        issue_queue(r, core::Queue(q));
      } catch (const Aborted&) {
      } catch (...) {
        {
          std::lock_guard lk(mu_);
          if (!error_) error_ = std::current_exception();
          abort_ = true;
        }
        cv_.notify_all();
      }
    });
}

// Until r's ops that are not carried are issued and, with `prev`, prev's carried ones; or an abort.
void EngineImpl::wait_issued_parts(const StepRun& r, const StepRun* prev) {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return abort_ || (r.body_issued == body_ops_ && (!prev || prev->tail_issued == tail_ops_)); });
  if (abort_) {
    lk.unlock();
    fail();
  }
}

// The GPU work of one part (the last ops in `last`, per queue) has completed: in-order streams.
void EngineImpl::sync_part(const StepRun& r, const std::array<int64_t, core::kQueueCount>& last) {
  for (int q = 0; q < core::kQueueCount; ++q)
    if (on_gpu(core::Queue(q)) && last[size_t(q)] >= 0)
      TF_CUDA_CHECK(cudaEventSynchronize(end_ev(r, uint32_t(last[size_t(q)]))));
}

// At the end of r's body (its ops that are not carried have completed): what the next step's begin
// would overwrite or needs (the decision: the next norm overwrites the host result; the workload's
// loss; the GPU optimizer's masked count), the speculation's outcome, the loss scaler and the
// optimizer step.
void EngineImpl::end_body(StepRun& r) {
  const core::StepDecision* decided = nullptr;
  try {
    decided = &decision(r);  // the main thread may be the first to need it (ratio 1: every user is carried)
  } catch (...) {
    {
      std::lock_guard lk(mu_);
      if (!error_) error_ = std::current_exception();
      abort_ = true;
    }
    cv_.notify_all();
    fail();
  }
  const core::StepDecision& d = *decided;
  r.loss = workload_->step_loss();
  if (norm_op_ < 0) {
    const cudaStream_t cs = stream_of(core::Queue::kCompute);
    unsigned long long gpu_bad = 0;
    TF_CUDA_CHECK(cudaMemcpyAsync(&gpu_bad, d_counters_.as<unsigned long long>() + 1, 8, cudaMemcpyDeviceToHost, cs));
    TF_CUDA_CHECK(cudaStreamSynchronize(cs));
    r.gpu_nonfinite = gpu_bad;
  }
  r.spec = spec_->end_step(d);
  scaler_.update(d.skip);
  if (!d.skip) ++opt_step_;
}

// Aborts and joins every issuer (the latest step's threads join the previous step's), then rethrows the
// first failure. A stop before any update (non-finite gradients) leaves the state as it was: the queues
// only held reads of it, and the previous step's tail had finished before the norm (the forward waited for
// it). A runtime failure, or any failure with a carried tail, leaves the engine unusable.
void EngineImpl::fail() {
  join_issuers(true);
  (void)cudaDeviceSynchronize();
  (void)cudaGetLastError();
  std::exception_ptr error;
  {
    std::lock_guard lk(mu_);
    error = std::exchange(error_, nullptr);
    abort_ = false;
  }
  pending_ = 0;
  if (carrying_) failed_ = true;
  if (!error) throw std::logic_error("engine: the issuers aborted without an error");
  try {
    std::rethrow_exception(error);
  } catch (const core::RuntimeFailure&) {
    failed_ = true;
    throw;
  }
}

void EngineImpl::join_issuers(bool abort) {
  if (abort) {
    {
      std::lock_guard lk(mu_);
      abort_ = true;
    }
    cv_.notify_all();
  }
  for (StepRun& r : runs_)
    for (std::thread& t : r.threads)
      if (t.joinable()) t.join();
}

// The drain point (docs/ARCHITECTURE.md, "Carrying the optimizer tail into the next step"): the pending
// tail runs to its end, its threads are joined and its report (the tail timed standalone) waits in
// ready_ for the next step() or drain(). Every reader of the state between steps calls it first.
void EngineImpl::finish_tail() {
  if (!pending_) return;
  if (failed_) throw core::RuntimeFailure("engine: an earlier step failed; the engine cannot continue");
  DeviceGuard guard(cfg_.device);
  StepRun& r = run_of(pending_);
  wait_issued_parts(r, &r);
  join_issuers(false);
  bool failed_thread = false;
  {
    std::lock_guard lk(mu_);
    failed_thread = error_ != nullptr;
  }
  if (failed_thread) fail();
  sync_part(r, last_tail_op_);
  pending_ = 0;
  StepReport rep = report(r, nullptr);
  check_masked_nonfinite(r);
  ready_ = std::move(rep);
}

// Op intervals of run r in ns from `origin`'s start (r itself, or the previous step for the next step's
// intervals, where r's carried ops, still running, are empty intervals at 0).
std::vector<OpInterval> EngineImpl::intervals(const StepRun& r, const StepRun& origin) const {
  const bool next = &r != &origin;
  const int64_t host_shift_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(r.host_t0 - origin.host_t0).count();
  std::vector<OpInterval> iv(plan_.ops.size());
  for (const core::Op& op : plan_.ops) {
    OpInterval& o = iv[op.id];
    o.op = op.id;
    if (next && op.carried) continue;
    if (on_gpu(op.queue)) {
      float a = 0, b = 0;
      TF_CUDA_CHECK(cudaEventElapsedTime(&a, origin.t0->get(), start_ev(r, op.id)));
      TF_CUDA_CHECK(cudaEventElapsedTime(&b, origin.t0->get(), end_ev(r, op.id)));
      o.start_ns = int64_t(double(a) * 1e6);
      o.end_ns = std::max(o.start_ns, int64_t(double(b) * 1e6));
    } else {
      o.start_ns = r.states[op.id].host_start_ns + host_shift_ns;
      o.end_ns = r.states[op.id].host_end_ns + host_shift_ns;
    }
  }
  return iv;
}

// Run r's report once all of its ops have completed. With `next` (the step after it, its body done):
// its step time is the period to the next step's start, and the next step's GPU work counts as hiding
// r's tail (backend::NextStep).
StepReport EngineImpl::report(const StepRun& r, const StepRun* next) {
  StepReport rep;
  rep.step = r.step;
  rep.loss_scale = r.scale;
  const core::StepDecision& d = *r.decision;
  rep.skipped = d.skip;
  rep.clipped = d.clipped;
  rep.lr = d.lr;
  rep.grad_norm = norm_op_ >= 0 ? d.norm : std::numeric_limits<double>::quiet_NaN();
  if (next) {
    float period_ms = 0;
    TF_CUDA_CHECK(cudaEventElapsedTime(&period_ms, r.t0->get(), next->t0->get()));
    const NextStep ns{int64_t(double(period_ms) * 1e6), intervals(*next, r)};
    rep.timeline = summarize_timeline(plan_, intervals(r, r), &ns);
  } else {
    rep.timeline = summarize_timeline(plan_, intervals(r, r));
  }
  rep.loss = r.loss;
  rep.d2h_bytes = r.d2h_bytes;
  rep.h2d_bytes = r.h2d_bytes;
  rep.issued = r.issued;
  rep.host.begin_ns = r.host_begin_ns;
  rep.host.begin_wait_ns = r.host_begin_wait_ns;
  rep.host.t0_steady_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(r.host_t0.time_since_epoch()).count();
  if (next)
    rep.host.body_done_to_next_start_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(next->host_t0 - r.host_body_done).count();
  rep.speculated = r.spec.speculated;
  rep.speculation_held = r.spec.held;
  return rep;
}

// Without a norm wait the fused passes masked non-finite elements one by one (they kept their
// values); the step cannot be undone, so say so and stop (once the step's tail, whose CPU passes count
// too, is done).
void EngineImpl::check_masked_nonfinite(const StepRun& r) {
  if (norm_op_ >= 0) return;
  const uint64_t bad = r.gpu_nonfinite + r.cpu_nonfinite;
  if (bad == 0) return;
  failed_ = true;
  throw core::RuntimeFailure("step " + std::to_string(r.step) + ": " + std::to_string(bad) +
                             " non-finite gradient element(s); they kept their previous values but the others were "
                             "updated (without clipping or loss scaling the optimizers do not wait for the "
                             "check). Set training.gradient_clipping to stop before any update");
}

// Step t: its ops on the issuers; returns once its body is done and step t - 1's carried tail too.
// Without a carried tail its own report; with one, the previous step's (complete only now), or the one a
// drain point left in ready_.
std::optional<StepReport> EngineImpl::step() {
  if (failed_) throw core::RuntimeFailure("engine: an earlier step failed; the engine cannot continue");
  DeviceGuard guard(cfg_.device);
  ++step_;
  last_scale_ = scaler_.scale;
  StepRun& r = run_of(step_);
  StepRun* prev = pending_ ? &run_of(pending_) : nullptr;
  begin_step(r, prev != nullptr);
  spec_->begin_step(s_.policy, step_, scaler_.scale, opt_step_);
  start_issuers(r, run_of(step_ - 1));
  pending_ = step_;  // from here on r's threads are the ones to join
  wait_issued_parts(r, prev);
  sync_part(r, last_body_op_);
  if (prev) sync_part(*prev, last_tail_op_);
  r.host_body_done = Clock::now();
  end_body(r);
  if (prev) {
    StepReport rep = report(*prev, &r);
    check_masked_nonfinite(*prev);
    ready_ = std::move(rep);
  }
  if (carrying_) return std::exchange(ready_, std::nullopt);
  finish_tail();  // no carried op: the step's threads are done; joins them and times the step
  return std::exchange(ready_, std::nullopt);
}

std::optional<StepReport> EngineImpl::drain() {
  finish_tail();
  return std::exchange(ready_, std::nullopt);
}

// (model-order element, value_of(shard offset)) for every real element of the shard, in shard order.
std::vector<std::pair<int64_t, float>> EngineImpl::owned(const std::function<float(int64_t)>& value_of) const {
  std::vector<std::pair<int64_t, float>> out;
  out.reserve(size_t(shard_.real_elems));
  for (const core::ShardPiece& p : shard_.pieces)
    for (int64_t j = 0; j < p.real_count; ++j)
      out.emplace_back(layer_first_[p.layer] + p.layer_offset + j, value_of(p.shard_offset + j));
  return out;
}

std::vector<std::pair<int64_t, float>> EngineImpl::master_weights() {
  finish_tail();
  DeviceGuard guard(cfg_.device);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> gpu(size_t(split_.gpu_elems));
  if (!gpu.empty()) TF_CUDA_CHECK(cudaMemcpy(gpu.data(), d_master_.get(), gpu.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<float> cpu(size_t(split_.cpu_elems));  // (cpu_elems) fp32: each layer's current slot
  for (const core::ShardPiece& p : split_.cpu)
    std::copy_n(current_state(p.layer).master, p.count, cpu.begin() + (p.shard_offset - split_.gpu_elems));
  return owned([&](int64_t o) { return o < split_.gpu_elems ? gpu[size_t(o)] : cpu[size_t(o - split_.gpu_elems)]; });
}

// "grads" holds the whole shard's reduced gradients (the CPU segment's part is copied from it), which
// the optimizers read and nothing writes until the next step's reductions.
std::vector<std::pair<int64_t, float>> EngineImpl::last_gradients() {
  if (step_ == 0) throw core::InputError("engine: no step has run yet, so there are no gradients");
  finish_tail();
  DeviceGuard guard(cfg_.device);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> g(size_t(shard_.elems));  // (shard) grad dtype
  TF_CUDA_CHECK(cudaMemcpy(g.data(), d_grad_.get(), g.size() * 2, cudaMemcpyDeviceToHost));
  const bool fp16 = s_.step.grad_dtype == core::DType::kF16;
  return owned([&](int64_t o) {
    const float v = fp16 ? core::f16_to_f32(g[size_t(o)]) : core::bf16_to_f32(g[size_t(o)]);
    return float(double(v) / last_scale_);
  });
}

// ---- checkpoints (docs/ARCHITECTURE.md, "Checkpoints") -------------------------------------------------

std::vector<std::pair<DeviceMemory*, HostBuffer*>> EngineImpl::optimizer_segments() {
  std::vector<std::pair<DeviceMemory*, HostBuffer*>> out = {{&d_master_, &h_master_}, {&d_s1_, &h_s1_}};
  if (core::state_count(s_.policy.kind) == 2) out.push_back({&d_s2_, &h_s2_});
  return out;
}

void EngineImpl::check_checkpoint_arrays(size_t count, const std::function<size_t(size_t)>& size_of) {
  if (failed_) throw core::RuntimeFailure("engine: an earlier step failed; its state cannot be checkpointed");
  const size_t want = optimizer_segments().size();
  if (count != want)
    throw core::InputError("engine checkpoint: " + std::to_string(count) + " arrays; " +
                           std::string(core::optimizer_name(s_.policy.kind)) + " has " + std::to_string(want));
  for (size_t a = 0; a < count; ++a)
    if (size_of(a) != size_t(shard_.elems))
      throw core::InputError("engine checkpoint: array " + std::to_string(a) + " has " + std::to_string(size_of(a)) +
                             " elements; this rank's shard has " + std::to_string(shard_.elems));
}

// The GPU segment's arrays go home on the d2h stream while the CPU segment's are copied by the
// optimizer's threads (memory-bound: the pool's split).
void EngineImpl::snapshot_optimizer(std::span<const std::span<float>> arrays) {
  if (!failed_) finish_tail();
  check_checkpoint_arrays(arrays.size(), [&](size_t a) { return arrays[a].size(); });
  DeviceGuard guard(cfg_.device);
  TF_CUDA_CHECK(cudaDeviceSynchronize());  // the last step's updates have landed
  const size_t g = size_t(split_.gpu_elems), n = size_t(split_.cpu_elems);
  const auto segs = optimizer_segments();
  const cudaStream_t s = stream_of(core::Queue::kD2H);
  for (size_t a = 0; a < segs.size() && g; ++a)
    TF_CUDA_CHECK(cudaMemcpyAsync(arrays[a].data(), segs[a].first->get(), g * 4, cudaMemcpyDeviceToHost, s));
  for (size_t a = 0; a < segs.size() && n; ++a) cpu_segment_to(a, arrays[a].data() + g);
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
}

// Array `a` (core::checkpoint_arrays' order) of a layer's CPU part in one state slot.
float* array_of(const cpu::LayerState& st, size_t a) { return a == 0 ? st.master : a == 1 ? st.state1 : st.state2; }

// Each worker copies its share [b, e) of the segment, layer by layer from the layer's current state
// slot (current_state: a speculated layer's may be the spare one); the caller drained the tail.
void EngineImpl::cpu_segment_to(size_t a, float* dst) {
  cpu::ThreadPool& pool = cpu_->backend().pool();
  pool.run(pool.size(), [&](size_t w) {
    size_t b = 0, e = 0;
    cpu::ThreadPool::split(size_t(split_.cpu_elems), pool.size(), w, b, e);
    for (const cpu::SegmentRange& r : cpu_->ranges()) {
      const int64_t lo = std::max(int64_t(b), r.begin), hi = std::min(int64_t(e), r.end);
      if (lo < hi) std::memcpy(dst + lo, array_of(current_state(r.layer), a) + (lo - r.begin), size_t(hi - lo) * 4);
    }
  });
}

// Into each layer's current slot: restore_optimizer resets the slots first, so the primary one.
void EngineImpl::cpu_segment_from(size_t a, const float* src) {
  for (const cpu::SegmentRange& r : cpu_->ranges())
    if (r.begin < r.end) std::memcpy(array_of(current_state(r.layer), a), src + r.begin, size_t(r.end - r.begin) * 4);
}

// The bf16 copy of the whole shard (both segments' parts live on the device), rounded from master on
// the host a chunk at a time.
void EngineImpl::restore_bf16_copy(std::span<const float> master) {
  constexpr size_t kChunk = size_t(1) << 24;
  std::vector<uint16_t> lp;  // (chunk) bf16
  for (size_t c0 = 0; c0 < master.size(); c0 += kChunk) {
    const size_t n = std::min(kChunk, master.size() - c0);
    lp.resize(n);
    for (size_t j = 0; j < n; ++j) lp[j] = core::f32_to_bf16(master[c0 + j]);
    TF_CUDA_CHECK(cudaMemcpy(d_lp_.as<uint16_t>() + c0, lp.data(), n * 2, cudaMemcpyHostToDevice));
  }
}

void EngineImpl::restore_optimizer(std::span<const std::vector<float>> arrays, const core::TrainingPosition& pos) {
  if (!failed_) finish_tail();
  check_checkpoint_arrays(arrays.size(), [&](size_t a) { return arrays[a].size(); });
  DeviceGuard guard(cfg_.device);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> state1 = arrays[1];  // (shard) fp32: padding takes the optimizer's initial state
  for (const core::ShardPiece& p : shard_.pieces)
    std::fill(state1.begin() + p.shard_offset + p.real_count, state1.begin() + p.shard_offset + p.count,
              initial_state1());
  std::vector<std::span<const float>> whole(arrays.begin(), arrays.end());
  whole[1] = state1;
  const size_t g = size_t(split_.gpu_elems), n = size_t(split_.cpu_elems);
  const auto segs = optimizer_segments();
  spec_->reset_slots();  // every layer's state in its primary slot, where cpu_segment_from writes it
  for (size_t a = 0; a < segs.size(); ++a) {
    if (g) TF_CUDA_CHECK(cudaMemcpy(segs[a].first->get(), whole[a].data(), g * 4, cudaMemcpyHostToDevice));
    if (n) cpu_segment_from(a, whole[a].data() + g);
  }
  restore_bf16_copy(arrays[0]);
  fill_replica();  // stages 1/2: the replicated model from the restored shards
  step_ = int(pos.step);
  opt_step_ = pos.optimizer_step;
  scaler_ = pos.loss_scaler;
  last_scale_ = scaler_.scale;
}

}  // namespace

const char* cuda_sync_name(CudaSync s) {
  switch (s) {
    case CudaSync::kSpin: return "spin";
    case CudaSync::kYield: return "yield";
    case CudaSync::kBlock: return "block";
    default: return "auto";
  }
}

CudaSync parse_cuda_sync(const std::string& text, const std::string& option) {
  for (CudaSync s : {CudaSync::kAuto, CudaSync::kSpin, CudaSync::kYield, CudaSync::kBlock})
    if (text == cuda_sync_name(s)) return s;
  throw core::InputError(option + " '" + text + "': expected auto, spin, yield or block");
}

core::HostAllocator pinned_host_allocator() {
  // cudaHostAlloc where it succeeds, else page-aligned heap: `heap` remembers which pointers are which.
  auto heap = std::make_shared<std::pair<std::mutex, std::vector<void*>>>();
  core::HostAllocator a;
  a.allocate = [heap](size_t bytes) -> void* {
    void* p = nullptr;
    if (bytes == 0) return nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess) return p;
    (void)cudaGetLastError();
    p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    std::lock_guard lk(heap->first);
    heap->second.push_back(p);
    return p;
  };
  a.release = [heap](void* p) {
    {
      std::lock_guard lk(heap->first);
      auto it = std::find(heap->second.begin(), heap->second.end(), p);
      if (it != heap->second.end()) {
        heap->second.erase(it);
        std::free(p);
        return;
      }
    }
    (void)cudaFreeHost(p);
  };
  return a;
}

std::unique_ptr<Engine> Engine::create(EngineConfig cfg) { return std::make_unique<EngineImpl>(std::move(cfg)); }

}  // namespace tf::backend::cuda
