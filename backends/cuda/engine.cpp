// The real backend's engine: executes one rank's step plan on CUDA streams and the CPU optimizer's
// threads. One issuing thread per queue walks that queue's ops in plan order and honours every
// cross-queue dependency: GPU after GPU through cudaStreamWaitEvent, GPU after CPU by waiting on the
// host for the CPU op to finish, CPU after GPU through cudaEventSynchronize. Each GPU op is
// bracketed by two timing events, each CPU op by two host clock reads: that is the timeline.
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
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/cuda_tuning.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/nccl_comm.cuh"
#include "backends/cuda/workload.cuh"
#include "core/error.h"
#include "core/optim/dtype.h"
#include "core/optim/grad_stats.h"
#include "core/synthetic_workload.h"

namespace tf::backend::cuda {

const char* workload_name(WorkloadKind k) { return k == WorkloadKind::kMlp ? "mlp" : "synthetic"; }

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

// ---- host memory for the CPU segment ---------------------------------------------------------------

// Page-locked when possible (cudaHostAlloc); otherwise pageable, and the owner warns once.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(size_t bytes, bool pin) : bytes_(bytes) {
    if (!bytes) return;
    if (pin && cudaHostAlloc(&p_, bytes, cudaHostAllocPortable) == cudaSuccess) {
      pinned_ = true;
      return;
    }
    (void)cudaGetLastError();
    p_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p_)
      throw core::RuntimeFailure("host allocation of " + core::format_gb(int64_t(bytes)) +
                                 " for the CPU segment failed: lower the ratio or free host memory");
  }
  ~HostBuffer() { release(); }
  HostBuffer(HostBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), pinned_(o.pinned_) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      pinned_ = o.pinned_;
    }
    return *this;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void release() {
    if (!p_) return;
    if (pinned_)
      (void)cudaFreeHost(p_);
    else
      std::free(p_);
    p_ = nullptr;
  }
  void* p_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
};

DeviceMemory device_alloc(size_t bytes, const char* what) {
  try {
    return DeviceMemory(bytes);
  } catch (const core::RuntimeFailure& e) {
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw core::RuntimeFailure(std::string("GPU allocation of ") + core::format_gb(int64_t(bytes)) + " for " + what +
                               " failed with " + core::format_gb(int64_t(free_b)) +
                               " free: the memory model under-estimated this run; raise the ratio (" + e.what() + ")");
  }
}

// Raised inside issuing threads when another thread failed: unwinds without a second report.
struct Aborted {};

class EngineImpl final : public Engine {
 public:
  explicit EngineImpl(EngineConfig cfg) : cfg_(std::move(cfg)) {
    validate_config();
    DeviceGuard guard(cfg_.device);
    part_ = core::make_partition(cfg_.model, {3, cfg_.world, kTile});
    shard_ = part_.ranks[size_t(cfg_.rank)];
    split_ = core::split_shard(shard_, cfg_.ratio, kTile);
    plan_ = core::plan_step(cfg_.model, part_, split_, cfg_.step);
    check_memory();
    build_tables();
    allocate();
    if (cfg_.world > 1) {
      ncclUniqueId id;
      std::memcpy(id.internal, cfg_.nccl_id.data(), sizeof id.internal);
      comm_.emplace(cfg_.world, id, cfg_.rank);
    }
    init_weights_all();
    size_t free_b = 0, total_b = 0;
    TF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    mem_.gpu_used_by_process = int64_t(total_b - free_b);
  }

  ~EngineImpl() override {
    // Queues are drained at the end of every step; after a failure, abort NCCL rather than wait.
    if (failed_ && comm_) comm_->abort();
    (void)cudaSetDevice(cfg_.device);
    (void)cudaDeviceSynchronize();
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    if (t0_) (void)cudaEventDestroy(t0_);
  }

  const Capabilities& caps() const override { return caps_; }
  const core::StepPlan& plan() const override { return plan_; }
  const core::Partition& partition() const override { return part_; }
  const core::TwinFlowSplit& split() const override { return split_; }
  const EngineMemory& memory() const override { return mem_; }

  StepTimeline run_step(const core::StepPlan& plan, int step_number) override {
    if (&plan != &plan_ && plan.ops.size() != plan_.ops.size())
      throw core::InputError("engine: run_step was given a plan this engine was not built for");
    if (step_number != step_ + 1)
      throw core::InputError("engine: steps run in order; expected step " + std::to_string(step_ + 1));
    return step().timeline;
  }

  StepReport step() override;
  std::vector<std::pair<int64_t, float>> master_weights() override;

 private:
  // --- set-up -------------------------------------------------------------------------------------
  void validate_config() {
    const EngineConfig& c = cfg_;
    if (c.world < 1 || c.rank < 0 || c.rank >= c.world)
      throw core::InputError("engine: rank " + std::to_string(c.rank) + " is outside world " + std::to_string(c.world));
    if (!(c.ratio >= 0 && c.ratio <= 1)) throw core::InputError("engine: ratio must be in [0, 1]");
    if (c.grad_dtype != core::DType::kBF16 && c.grad_dtype != core::DType::kF16)
      throw core::InputError("engine: gradients must be bf16 or fp16 (fp32 training runs in the simulator only)");
    if (c.step.lp_bytes != 2) throw core::InputError("engine: lp_bytes must be 2");
    if (c.step.optimizer_states != core::state_count(c.policy.kind))
      throw core::InputError("engine: step.optimizer_states does not match the optimizer");
    core::validate(c.policy.kind, c.policy.hp);
    int count = 0;
    TF_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (c.device < 0 || c.device >= count)
      throw core::RuntimeFailure("engine: CUDA device " + std::to_string(c.device) + " does not exist (" +
                                 std::to_string(count) + " visible; check CUDA_VISIBLE_DEVICES and LOCAL_RANK)");
    cudaDeviceProp prop{};
    TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, c.device));
    sm_count_ = prop.multiProcessorCount;
    caps_.name = "cuda:" + std::to_string(c.device) + " " + prop.name + " rank " + std::to_string(c.rank) + "/" +
                 std::to_string(c.world);
    caps_.functional_math = true;
    caps_.device_memory = true;
    caps_.bitwise_contract = true;
    caps_.buffer_alignment = 16;
    total_gpu_bytes_ = int64_t(prop.totalGlobalMem);
  }

  void check_memory() {
    core::MemoryOptions mo;
    mo.lp_bytes = 2;
    mo.optimizer_states = cfg_.step.optimizer_states;
    mo.micro_batch = cfg_.step.micro_batch;
    mo.grad_accum = cfg_.step.grad_accum;
    mo.checkpointing = cfg_.step.checkpointing;
    mo.prefetch_layers = cfg_.step.prefetch_layers;
    int64_t gpu_limit = cfg_.gpu_bytes_limit > 0 ? cfg_.gpu_bytes_limit : total_gpu_bytes_;
    int64_t host_limit = cfg_.host_bytes_limit;
    if (host_limit <= 0) host_limit = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
    mem_.planned = core::rank_memory(cfg_.model, part_, shard_, split_, mo);
    core::check_ratio_fits(cfg_.model, part_, mo, cfg_.ratio, gpu_limit, host_limit);
  }

  // Canonical tile indexes, per-layer CPU ranges, extra buffer-reuse dependencies.
  void build_tables() {
    const size_t L = cfg_.model.layers.size();
    layer_first_.assign(L + 1, 0);
    layer_first_tile_.assign(L + 1, 0);
    for (size_t l = 0; l < L; ++l) {
      layer_first_[l + 1] = layer_first_[l] + part_.layer_params[l];
      layer_first_tile_[l + 1] = layer_first_tile_[l] + int64_t(core::stats_tiles(size_t(part_.layer_params[l])));
    }
    total_tiles_ = layer_first_tile_[L];
    piece_of_layer_.assign(L, -1);
    for (size_t i = 0; i < shard_.pieces.size(); ++i) piece_of_layer_[shard_.pieces[i].layer] = int(i);
    cpu_begin_.assign(L, 0);
    cpu_end_.assign(L, 0);
    for (const core::ShardPiece& p : split_.cpu) {
      cpu_begin_[p.layer] = p.shard_offset;
      cpu_end_[p.layer] = p.shard_offset + p.count;
    }
    max_padded_ = 0;
    for (size_t l = 0; l < L; ++l) max_padded_ = std::max(max_padded_, part_.layer_slice[l] * cfg_.world);
    // Buffer reuse the plan leaves implicit: backward writes its layer gradient into one of two send
    // buffers; the reduce-scatter that read the same buffer two backward ops earlier must be done.
    extra_deps_.assign(plan_.ops.size(), {});
    bwd_slot_.assign(plan_.ops.size(), -1);
    red_slot_.assign(plan_.ops.size(), -1);
    std::vector<uint32_t> bwd, red;
    for (const core::Op& op : plan_.ops) {
      if (op.kind == core::OpKind::kBackward) {
        if (bwd.size() >= 2) extra_deps_[op.id].push_back(red[bwd.size() - 2]);
        bwd_slot_[op.id] = int(bwd.size() % 2);
        bwd.push_back(op.id);
      } else if (op.kind == core::OpKind::kReduceScatter || op.kind == core::OpKind::kAllReduce) {
        red.push_back(op.id);
        red_slot_[op.id] = int((red.size() - 1) % 2);
      }
    }
    for (const core::Op& op : plan_.ops) {
      queue_ops_[size_t(op.queue)].push_back(op.id);
      if (op.kind == core::OpKind::kNormAllReduce) norm_op_ = op.id;
      if (op.kind == core::OpKind::kAllReduce)
        throw core::InputError("engine: the real backend runs ZeRO stage 3 (the plan has a stage-1 all-reduce)");
      if (op.kind == core::OpKind::kAllGather && op.micro_batch < 0)
        throw core::InputError("engine: the real backend runs ZeRO stage 3 (the plan has a stage-1/2 refresh)");
    }
  }

  void allocate() {
    const bool two = core::state_count(cfg_.policy.kind) == 2;
    const size_t g = size_t(split_.gpu_elems), n = size_t(split_.cpu_elems), s = size_t(shard_.elems);
    const float init1 =
        cfg_.policy.kind == core::OptimizerKind::kAdagrad ? float(cfg_.policy.hp.initial_accumulator_value) : 0.f;
    int64_t dev = 0;
    auto d = [&](size_t bytes, const char* what) {
      dev += int64_t(bytes);
      return device_alloc(bytes, what);
    };
    d_lp_ = d(s * 2, "the bf16 parameter shard");
    d_master_ = d(g * 4, "the GPU segment's fp32 master weights");
    d_s1_ = d(g * 4, "the GPU segment's first optimizer state");
    if (two) d_s2_ = d(g * 4, "the GPU segment's second optimizer state");
    d_grad_ = d(s * 2, "the reduced gradient shard");
    if (cfg_.step.grad_accum > 1) d_acc_ = d(s * 4, "the fp32 gradient accumulation");
    const int slots = cfg_.world > 1 ? cfg_.step.prefetch_layers : 0;
    for (int i = 0; i < slots; ++i) d_ag_.push_back(d(size_t(max_padded_) * 2, "an all-gather buffer"));
    for (int i = 0; i < 2; ++i) d_send_[i] = d(size_t(max_padded_) * 2, "a layer gradient buffer");
    if (cfg_.world > 1)
      for (int i = 0; i < 2; ++i) d_recv_[i] = d(size_t(max_padded_) * 2, "a reduce-scatter receive buffer");
    d_tiles_ = d(size_t(total_tiles_ + 1) * 8, "the gradient-statistics tile table");
    d_fold_ = d(std::max<size_t>(size_t(total_tiles_), 1) * 8 + 16, "the tile fold's scratch and result");
    d_counters_ = d(16, "counters");
    const size_t gpu_tiles = core::stats_tiles(g);
    d_opt_tiles_ = d(std::max<size_t>(gpu_tiles, 1) * 8, "the optimizer's tile sums");
    // GPU descriptors: [0] the optimizer's chunk, [1..] the statistics pass over the GPU pieces.
    std::vector<ChunkDesc> descs(1);
    descs[0] = ChunkDesc{d_master_.as<float>(),
                         d_s1_.as<float>(),
                         two ? d_s2_.as<float>() : nullptr,
                         d_grad_.get(),
                         d_lp_.get(),
                         uint64_t(g),
                         0,
                         0,
                         uint64_t(gpu_tiles)};
    uint64_t local = 0;
    for (const core::ShardPiece& p : shard_.pieces) {  // the whole shard's reduced gradients
      const int64_t real_tiles = int64_t(core::stats_tiles(size_t(part_.layer_params[p.layer])));
      const int64_t first_tile = p.layer_offset / kTile;
      const int64_t tiles = std::min(p.count / kTile, std::max<int64_t>(real_tiles - first_tile, 0));
      if (tiles <= 0) continue;
      ChunkDesc c{};
      c.g = d_grad_.as<uint16_t>() + p.shard_offset;
      c.n = uint64_t(tiles * kTile);
      c.tiles = uint64_t(tiles);
      c.local_tile_begin = local;
      c.sum_begin = uint64_t(layer_first_tile_[p.layer] + first_tile);
      local += uint64_t(tiles);
      descs.push_back(c);
    }
    stats_chunks_ = uint32_t(descs.size() - 1);
    stats_tiles_ = local;
    d_descs_ = d(descs.size() * sizeof(ChunkDesc), "descriptors");
    TF_CUDA_CHECK(cudaMemcpy(d_descs_.get(), descs.data(), descs.size() * sizeof(ChunkDesc), cudaMemcpyHostToDevice));
    if (g) {
      TF_CUDA_CHECK(cudaMemset(d_s1_.get(), 0, g * 4));
      if (init1 != 0.f) {
        std::vector<float> v(g, init1);
        TF_CUDA_CHECK(cudaMemcpy(d_s1_.get(), v.data(), g * 4, cudaMemcpyHostToDevice));
      }
      if (two) TF_CUDA_CHECK(cudaMemset(d_s2_.get(), 0, g * 4));
    }
    TF_CUDA_CHECK(cudaMemset(d_grad_.get(), 0, s * 2));

    // Host: the CPU segment (master, states, gradient and copy staging) and the tile tables.
    auto h = [&](size_t bytes) {
      HostBuffer b(bytes, cfg_.pin_memory);
      (b.pinned() ? mem_.host_pinned : mem_.host_pageable) += int64_t(bytes);
      return b;
    };
    h_master_ = h(n * 4);
    h_s1_ = h(n * 4);
    if (two) h_s2_ = h(n * 4);
    h_grad_ = h(n * 2);
    h_copy_ = h(n * 2);
    h_norm_ = h(16);
    if (mem_.host_pageable > 0) {
      const std::string msg =
          "warning: " + core::format_gb(mem_.host_pageable) + " of the CPU segment could not be page-locked" +
          (cfg_.pin_memory ? " (cudaHostAlloc failed: raise `ulimit -l` or free memory)" : " (pin_memory is off)") +
          "; PCIe copies from pageable memory run at ~8-16 GB/s instead of ~55 GB/s, so the D2H/H2D of the CPU "
          "segment will take 3-7x longer";
      if (cfg_.warn)
        cfg_.warn(msg);
      else
        std::fprintf(stderr, "%s\n", msg.c_str());
    }
    cpu_ = std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{cfg_.cpu_threads, cfg_.pin_threads, -1, 4, {}});
    if (n) {
      // first touch by the threads that will update each page; then the optimizer's initial state
      const OptimChunk all{{h_master_.as<float>(), n, core::DType::kF32},
                           {h_s1_.as<float>(), n, core::DType::kF32},
                           two ? BufferView{h_s2_.as<float>(), n, core::DType::kF32} : BufferView{},
                           {h_grad_.as<uint16_t>(), n, cfg_.grad_dtype},
                           {h_copy_.as<uint16_t>(), n, core::DType::kBF16}};
      cpu_->first_touch(std::span<const OptimChunk>(&all, 1));
      if (init1 != 0.f) std::fill(h_s1_.as<float>(), h_s1_.as<float>() + n, init1);
    }
    for (auto& st : streams_) st.emplace();
    events_.resize(plan_.ops.size() * 2);
    for (auto& e : events_) TF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventBlockingSync));
    TF_CUDA_CHECK(cudaEventCreate(&t0_));

    WorkloadContext wc;
    wc.model = &cfg_.model;
    wc.rank = cfg_.rank;
    wc.world = cfg_.world;
    wc.device = cfg_.device;
    wc.seed = cfg_.seed;
    wc.grad_dtype = cfg_.grad_dtype;
    wc.grad_accum = cfg_.step.grad_accum;
    wc.micro_batch = cfg_.step.micro_batch;
    for (size_t l = 0; l < cfg_.model.layers.size(); ++l) wc.layer_padded.push_back(part_.layer_slice[l] * cfg_.world);
    wc.overflow_at_step = cfg_.overflow_at_step;
    if (cfg_.overflow_at_step > 0 && cfg_.workload != WorkloadKind::kSynthetic)
      throw core::InputError("engine: overflow_at_step needs the synthetic workload");
    workload_ = cfg_.workload == WorkloadKind::kMlp ? make_mlp_workload(wc) : make_synthetic_workload(wc);
    mem_.gpu_allocated = dev + workload_->device_bytes();
  }

  // Initial weights: each (piece, tensor) range of the shard, scaled per tensor by the workload.
  void init_weights_all() {
    const size_t g = size_t(split_.gpu_elems);
    TF_CUDA_CHECK(cudaMemset(d_lp_.get(), 0, size_t(shard_.elems) * 2));
    if (g) TF_CUDA_CHECK(cudaMemset(d_master_.get(), 0, g * 4));
    if (split_.cpu_elems) std::memset(h_master_.as<float>(), 0, size_t(split_.cpu_elems) * 4);
    std::vector<uint16_t> host_lp;
    for (const core::ShardPiece& p : shard_.pieces) {
      const core::LayerDesc& ld = cfg_.model.layers[p.layer];
      int64_t tensor_begin = 0;  // within the layer
      for (size_t t = ld.first_tensor; t < ld.first_tensor + ld.tensor_count; ++t) {
        const int64_t tn = cfg_.model.tensors[t].numel;
        const int64_t lo = std::max(tensor_begin, p.layer_offset);
        const int64_t hi = std::min(tensor_begin + tn, p.layer_offset + p.real_count);
        tensor_begin += tn;
        if (lo >= hi) continue;
        const float scale = workload_->init_scale(t);
        const int64_t model_first = layer_first_[p.layer] + lo;
        int64_t off = p.shard_offset + (lo - p.layer_offset);
        int64_t count = hi - lo;
        // GPU segment part: master + bf16 on the device
        const int64_t gpu_hi = std::min<int64_t>(off + count, split_.gpu_elems);
        if (off < gpu_hi) {
          launch_init_weights(d_master_.as<float>() + off, d_lp_.as<uint16_t>() + off, gpu_hi - off, cfg_.seed,
                              model_first, scale, nullptr);
        }
        // CPU segment part: master on the host, bf16 copy to the device shard
        const int64_t cpu_lo = std::max<int64_t>(off, split_.gpu_elems);
        if (cpu_lo < off + count) {
          const int64_t m = off + count - cpu_lo;
          host_lp.resize(size_t(m));
          float* master = h_master_.as<float>() + (cpu_lo - split_.gpu_elems);
          const int64_t mf = model_first + (cpu_lo - off);
          cpu::ThreadPool& pool = cpu_->pool();
          const size_t parts = std::max<size_t>(1, std::min<size_t>(pool.size(), size_t(m / 65536) + 1));
          pool.run(parts, [&](size_t w) {
            size_t b = 0, e = 0;
            cpu::ThreadPool::split(size_t(m), parts, w, b, e);
            for (size_t j = b; j < e; ++j) {
              master[j] = core::synthetic_initial_weight(cfg_.seed, mf + int64_t(j)) * scale;
              host_lp[j] = core::f32_to_bf16(master[j]);
            }
          });
          TF_CUDA_CHECK(
              cudaMemcpy(d_lp_.as<uint16_t>() + cpu_lo, host_lp.data(), size_t(m) * 2, cudaMemcpyHostToDevice));
        }
      }
    }
    TF_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // --- the step -----------------------------------------------------------------------------------
  struct OpState {
    bool issued = false;  // GPU op: its end event is recorded; CPU op: finished
    int64_t host_start_ns = 0, host_end_ns = 0;
  };

  cudaStream_t stream_of(core::Queue q) const { return streams_[size_t(q)]->get(); }
  static bool on_gpu(core::Queue q) { return q != core::Queue::kCpu; }
  cudaEvent_t start_ev(uint32_t id) const { return events_[2 * id]; }
  cudaEvent_t end_ev(uint32_t id) const { return events_[2 * id + 1]; }

  void wait_issued(uint32_t id) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return states_[id].issued || abort_; });
    if (abort_) throw Aborted{};
  }
  void mark_issued(uint32_t id) {
    {
      std::lock_guard lk(mu_);
      states_[id].issued = true;
    }
    cv_.notify_all();
  }

  void issue_queue(core::Queue q) {
    TF_CUDA_CHECK(cudaSetDevice(cfg_.device));
    for (uint32_t id : queue_ops_[size_t(q)]) {
      const core::Op& op = plan_.ops[id];
      auto wait_dep = [&](uint32_t dep) {
        const core::Queue dq = plan_.ops[dep].queue;
        if (dq == q) return;  // same queue: FIFO
        wait_issued(dep);
        if (on_gpu(q) && on_gpu(dq)) TF_CUDA_CHECK(cudaStreamWaitEvent(stream_of(q), end_ev(dep), 0));
        if (!on_gpu(q) && on_gpu(dq)) TF_CUDA_CHECK(cudaEventSynchronize(end_ev(dep)));
        // GPU after CPU: wait_issued already waited for the CPU op to finish.
      };
      for (uint32_t dep : op.deps) wait_dep(dep);
      for (uint32_t dep : extra_deps_[id]) wait_dep(dep);
      if (on_gpu(q)) {
        const cudaStream_t s = stream_of(q);
        if (needs_decision(op.kind)) decision();  // host data the launch needs (scalars, skip)
        TF_CUDA_CHECK(cudaEventRecord(start_ev(id), s));
        execute_gpu(op, s);
        TF_CUDA_CHECK(cudaEventRecord(end_ev(id), s));
      } else {
        if (needs_decision(op.kind)) decision();
        states_[id].host_start_ns = host_now_ns();
        execute_cpu(op);
        states_[id].host_end_ns = host_now_ns();
      }
      mark_issued(id);
    }
  }

  static bool needs_decision(core::OpKind k) {
    return k == core::OpKind::kGpuOptimizer || k == core::OpKind::kCpuOptimizer || k == core::OpKind::kH2DParam;
  }

  int64_t host_now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - host_t0_).count();
  }

  const core::ShardPiece& piece(size_t layer) const { return shard_.pieces[size_t(piece_of_layer_[layer])]; }
  const uint16_t* gathered(size_t layer) const {
    if (cfg_.world == 1) return d_lp_.as<uint16_t>() + piece(layer).shard_offset;  // the shard is the layer
    return d_ag_[layer % d_ag_.size()].as<uint16_t>();
  }

  ncclDataType_t nccl_lp() const { return cfg_.grad_dtype == core::DType::kF16 ? ncclFloat16 : ncclBfloat16; }

  void execute_gpu(const core::Op& op, cudaStream_t s) {
    const size_t l = op.layer >= 0 ? size_t(op.layer) : 0;
    switch (op.kind) {
      case core::OpKind::kAllGather: {
        if (cfg_.world == 1) return;
        const core::ShardPiece& p = piece(l);
        TF_NCCL_CHECK(ncclAllGather(d_lp_.as<uint16_t>() + p.shard_offset, d_ag_[l % d_ag_.size()].get(),
                                    size_t(part_.layer_slice[l]), ncclBfloat16, comm_->get(), s));
        return;
      }
      case core::OpKind::kForward: workload_->forward(int(l), op.micro_batch, gathered(l), s); return;
      case core::OpKind::kBackward:
        workload_->backward(int(l), op.micro_batch, gathered(l), d_send_[bwd_slot_[op.id]].as<uint16_t>(), s);
        return;
      case core::OpKind::kReduceScatter: {
        const int slot = red_slot_[op.id];
        const int64_t slice = part_.layer_slice[l];
        const uint16_t* own = d_send_[slot].as<uint16_t>();
        const uint16_t* recv = own;
        if (cfg_.world > 1) {
          // all-to-all of bf16 slices (the wire bytes of a ring reduce-scatter), summed below in rank
          // order: the same bits whatever the world size (DESIGN.md, batch-invariant reductions)
          TF_NCCL_CHECK(ncclGroupStart());
          for (int r = 0; r < cfg_.world; ++r) {
            if (r == cfg_.rank) continue;
            TF_NCCL_CHECK(ncclSend(own + int64_t(r) * slice, size_t(slice), nccl_lp(), r, comm_->get(), s));
            TF_NCCL_CHECK(ncclRecv(d_recv_[slot].as<uint16_t>() + int64_t(r) * slice, size_t(slice), nccl_lp(), r,
                                   comm_->get(), s));
          }
          TF_NCCL_CHECK(ncclGroupEnd());
          recv = d_recv_[slot].as<uint16_t>();
        }
        const core::ShardPiece& p = piece(l);
        const bool first = op.micro_batch == 0, last = op.micro_batch == cfg_.step.grad_accum - 1;
        float* acc = cfg_.step.grad_accum > 1 ? d_acc_.as<float>() + p.shard_offset : nullptr;
        launch_sum_slices(recv, own, cfg_.rank, cfg_.world, slice, acc, first, last,
                          d_grad_.as<uint16_t>() + p.shard_offset, cfg_.grad_dtype, s);
        return;
      }
      case core::OpKind::kD2HGrad: {
        const int64_t b = cpu_begin_[l], e = cpu_end_[l];
        TF_CUDA_CHECK(cudaMemcpyAsync(h_grad_.as<uint16_t>() + (b - split_.gpu_elems), d_grad_.as<uint16_t>() + b,
                                      size_t(e - b) * 2, cudaMemcpyDeviceToHost, s));
        d2h_bytes_ += (e - b) * 2;
        return;
      }
      case core::OpKind::kGradStats:  // the shard's tiles, at their canonical indexes
        if (stats_chunks_)
          launch_stats(d_descs_.as<ChunkDesc>() + 1, stats_chunks_, stats_tiles_, cfg_.grad_dtype,
                       d_tiles_.as<double>(), d_counters_.as<unsigned long long>(), s);
        return;
      case core::OpKind::kNormAllReduce: {
        // every tile is nonzero on exactly one rank, so the sum over ranks is exact in any order
        launch_store_nonfinite(d_tiles_.as<double>() + total_tiles_, d_counters_.as<unsigned long long>(), 0, s);
        if (cfg_.world > 1)
          TF_NCCL_CHECK(ncclAllReduce(d_tiles_.get(), d_tiles_.get(), size_t(total_tiles_ + 1), ncclFloat64, ncclSum,
                                      comm_->get(), s));
        // the fold on the device (core::fold_tile_sums' order): 16 bytes cross PCIe, not the table
        double* result = d_fold_.as<double>() + std::max<int64_t>(total_tiles_, 1);
        launch_fold_tiles(d_tiles_.as<double>(), total_tiles_, d_fold_.as<double>(), d_tiles_.as<double>() + total_tiles_,
                          result, s);
        TF_CUDA_CHECK(cudaMemcpyAsync(h_norm_.as<double>(), result, 16, cudaMemcpyDeviceToHost, s));
        return;
      }
      case core::OpKind::kGpuOptimizer: {
        if (decision_->skip || split_.gpu_elems == 0) return;
        StepLaunch lc;
        lc.descs = d_descs_.as<ChunkDesc>();
        lc.count = 1;
        lc.tiles = core::stats_tiles(size_t(split_.gpu_elems));
        lc.grad = cfg_.grad_dtype;
        lc.copy = core::DType::kBF16;
        lc.s = decision_->scalars;
        lc.tile_sums = d_opt_tiles_.as<double>();
        lc.nonfinite = d_counters_.as<unsigned long long>() + 1;
        lc.sm_count = sm_count_;
        lc.stream = s;
        switch (cfg_.policy.kind) {
          case core::OptimizerKind::kAdamW: launch_step_adamw(lc, kDefaultVariant); break;
          case core::OptimizerKind::kAdam: launch_step_adam(lc, kDefaultVariant); break;
          case core::OptimizerKind::kAdagrad: launch_step_adagrad(lc, kDefaultVariant); break;
          case core::OptimizerKind::kLion: launch_step_lion(lc, kDefaultVariant); break;
        }
        return;
      }
      case core::OpKind::kH2DParam: {
        if (decision_->skip) return;
        const int64_t b = cpu_begin_[l], e = cpu_end_[l];
        TF_CUDA_CHECK(cudaMemcpyAsync(d_lp_.as<uint16_t>() + b, h_copy_.as<uint16_t>() + (b - split_.gpu_elems),
                                      size_t(e - b) * 2, cudaMemcpyHostToDevice, s));
        h2d_bytes_ += (e - b) * 2;
        return;
      }
      case core::OpKind::kCpuOptimizer:
      case core::OpKind::kAllReduce: break;
    }
    throw core::RuntimeFailure(std::string("engine: op ") + op.label() + " cannot run on a GPU stream");
  }

  void execute_cpu(const core::Op& op) {
    const size_t l = op.layer >= 0 ? size_t(op.layer) : 0;
    const bool two = core::state_count(cfg_.policy.kind) == 2;
    switch (op.kind) {
      case core::OpKind::kCpuOptimizer: {
        if (decision_->skip) return;
        const int64_t b = cpu_begin_[l], e = cpu_end_[l];
        const size_t o = size_t(b - split_.gpu_elems), n = size_t(e - b);
        if (!n) return;
        const OptimChunk c{{h_master_.as<float>() + o, n, core::DType::kF32},
                           {h_s1_.as<float>() + o, n, core::DType::kF32},
                           two ? BufferView{h_s2_.as<float>() + o, n, core::DType::kF32} : BufferView{},
                           {h_grad_.as<uint16_t>() + o, n, cfg_.grad_dtype},
                           {h_copy_.as<uint16_t>() + o, n, core::DType::kBF16}};
        cpu_nonfinite_ +=
            cpu_->step(cfg_.policy.kind, std::span<const OptimChunk>(&c, 1), decision_->scalars).nonfinite;
        return;
      }
      default: break;
    }
    throw core::RuntimeFailure(std::string("engine: op ") + op.label() + " cannot run on the cpu queue");
  }

  // The step decision: known up front without a norm wait; else once the norm all-reduce landed.
  const core::StepDecision& decision() {
    std::call_once(*decision_once_, [&] {
      if (norm_op_ < 0) {
        decision_ = core::decide_step(cfg_.policy, step_, 0.0, 0, scaler_.scale, opt_step_ + 1);
        return;
      }
      wait_issued(uint32_t(norm_op_));
      TF_CUDA_CHECK(cudaEventSynchronize(end_ev(uint32_t(norm_op_))));
      const double* t = h_norm_.as<double>();  // [0] the folded sum of squares, [1] the non-finite count
      const uint64_t nonfinite = uint64_t(t[1]);
      const double sumsq = core::canonical_nan(t[0]);
      decision_ = core::decide_step(cfg_.policy, step_, sumsq, nonfinite, scaler_.scale, opt_step_ + 1);
    });
    if (!decision_) throw Aborted{};
    return *decision_;
  }

  EngineConfig cfg_;
  Capabilities caps_;
  int sm_count_ = 0;
  int64_t total_gpu_bytes_ = 0;
  core::Partition part_;
  core::RankShard shard_;
  core::TwinFlowSplit split_;
  core::StepPlan plan_;
  EngineMemory mem_;
  std::vector<int64_t> layer_first_, layer_first_tile_, cpu_begin_, cpu_end_;
  std::vector<int> piece_of_layer_;
  int64_t total_tiles_ = 0, max_padded_ = 0;
  std::vector<std::vector<uint32_t>> extra_deps_;
  std::vector<int> bwd_slot_, red_slot_;  // (ops) gradient buffer of a backward / reduce-scatter op
  std::array<std::vector<uint32_t>, core::kQueueCount> queue_ops_;
  int64_t norm_op_ = -1;

  DeviceMemory d_lp_, d_master_, d_s1_, d_s2_, d_grad_, d_acc_, d_tiles_, d_fold_, d_counters_, d_opt_tiles_,
      d_descs_;
  std::vector<DeviceMemory> d_ag_;
  std::array<DeviceMemory, 2> d_send_, d_recv_;
  uint32_t stats_chunks_ = 0;
  uint64_t stats_tiles_ = 0;
  HostBuffer h_master_, h_s1_, h_s2_, h_grad_, h_copy_, h_norm_;
  std::unique_ptr<cpu::CpuBackend> cpu_;
  std::array<std::optional<Stream>, 4> streams_;  // compute, comm, d2h, h2d (core::Queue order)
  std::vector<cudaEvent_t> events_;
  cudaEvent_t t0_ = nullptr;
  std::optional<NcclComm> comm_;
  std::unique_ptr<Workload> workload_;

  // per step
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<OpState> states_;
  bool abort_ = false;
  bool failed_ = false;
  Clock::time_point host_t0_;
  std::unique_ptr<std::once_flag> decision_once_;
  std::optional<core::StepDecision> decision_;
  std::atomic<uint64_t> cpu_nonfinite_{0};
  int64_t d2h_bytes_ = 0, h2d_bytes_ = 0;
  int step_ = 0;
  int64_t opt_step_ = 0;
  core::LossScaler scaler_ = cfg_.loss_scale;
};

StepReport EngineImpl::step() {
  if (failed_) throw core::RuntimeFailure("engine: an earlier step failed; the engine cannot continue");
  DeviceGuard guard(cfg_.device);
  ++step_;
  states_.assign(plan_.ops.size(), OpState{});
  abort_ = false;
  decision_once_ = std::make_unique<std::once_flag>();
  decision_.reset();
  cpu_nonfinite_ = 0;
  d2h_bytes_ = h2d_bytes_ = 0;
  const double scale = scaler_.scale;
  workload_->begin_step(step_, scale);
  const cudaStream_t cs = stream_of(core::Queue::kCompute);
  TF_CUDA_CHECK(cudaMemsetAsync(d_counters_.get(), 0, 16, cs));
  if (norm_op_ >= 0) TF_CUDA_CHECK(cudaMemsetAsync(d_tiles_.get(), 0, size_t(total_tiles_ + 1) * 8, cs));
  TF_CUDA_CHECK(cudaEventRecord(t0_, cs));
  for (size_t q = 1; q < 4; ++q) TF_CUDA_CHECK(cudaStreamWaitEvent(streams_[q]->get(), t0_, 0));
  TF_CUDA_CHECK(cudaEventSynchronize(t0_));
  host_t0_ = Clock::now();

  std::exception_ptr error;
  std::mutex err_mu;
  {
    std::vector<std::jthread> threads;
    for (int q = 0; q < core::kQueueCount; ++q)
      threads.emplace_back([&, q] {
        try {
          issue_queue(core::Queue(q));
        } catch (const Aborted&) {
        } catch (...) {
          {
            std::lock_guard lk(err_mu);
            if (!error) error = std::current_exception();
          }
          {
            std::lock_guard lk(mu_);
            abort_ = true;
          }
          cv_.notify_all();
        }
      });
  }
  if (error) {
    // A stop before any update (non-finite gradients) leaves the state as it was: the queues only
    // held reads of it. Anything else leaves the engine unusable.
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
    try {
      std::rethrow_exception(error);
    } catch (const core::RuntimeFailure& e) {
      failed_ = true;
      throw;
    }
  }
  for (auto& st : streams_) st->sync();

  StepReport rep;
  rep.step = step_;
  rep.loss_scale = scale;
  const core::StepDecision& d = decision();
  rep.skipped = d.skip;
  rep.grad_norm = norm_op_ >= 0 ? d.norm : std::numeric_limits<double>::quiet_NaN();
  std::vector<OpInterval> iv(plan_.ops.size());
  for (const core::Op& op : plan_.ops) {
    OpInterval& o = iv[op.id];
    o.op = op.id;
    if (on_gpu(op.queue)) {
      float a = 0, b = 0;
      TF_CUDA_CHECK(cudaEventElapsedTime(&a, t0_, start_ev(op.id)));
      TF_CUDA_CHECK(cudaEventElapsedTime(&b, t0_, end_ev(op.id)));
      o.start_ns = int64_t(double(a) * 1e6);
      o.end_ns = std::max(o.start_ns, int64_t(double(b) * 1e6));
    } else {
      o.start_ns = states_[op.id].host_start_ns;
      o.end_ns = states_[op.id].host_end_ns;
    }
  }
  rep.timeline = summarize_timeline(plan_, std::move(iv));
  rep.loss = workload_->step_loss();
  rep.d2h_bytes = d2h_bytes_;
  rep.h2d_bytes = h2d_bytes_;
  if (norm_op_ < 0) {
    // Without a norm wait the fused passes masked non-finite elements one by one (they kept their
    // values); the step cannot be undone, so say so and stop.
    unsigned long long gpu_bad = 0;
    TF_CUDA_CHECK(cudaMemcpy(&gpu_bad, d_counters_.as<unsigned long long>() + 1, 8, cudaMemcpyDeviceToHost));
    const uint64_t bad = gpu_bad + cpu_nonfinite_.load();
    if (bad > 0) {
      failed_ = true;
      throw core::RuntimeFailure("step " + std::to_string(step_) + ": " + std::to_string(bad) +
                                 " non-finite gradient element(s); they kept their previous values but the others were "
                                 "updated (without clipping or loss scaling the optimizers do not wait for the "
                                 "check). Set training.gradient_clipping to stop before any update");
    }
  }
  scaler_.update(d.skip);
  if (!d.skip) ++opt_step_;
  return rep;
}

std::vector<std::pair<int64_t, float>> EngineImpl::master_weights() {
  DeviceGuard guard(cfg_.device);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> gpu(size_t(split_.gpu_elems));
  if (!gpu.empty()) TF_CUDA_CHECK(cudaMemcpy(gpu.data(), d_master_.get(), gpu.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<std::pair<int64_t, float>> out;
  out.reserve(size_t(shard_.real_elems));
  for (const core::ShardPiece& p : shard_.pieces)
    for (int64_t j = 0; j < p.real_count; ++j) {
      const int64_t o = p.shard_offset + j;
      const float v = o < split_.gpu_elems ? gpu[size_t(o)] : h_master_.as<float>()[o - split_.gpu_elems];
      out.emplace_back(layer_first_[p.layer] + p.layer_offset + j, v);
    }
  return out;
}

}  // namespace

std::unique_ptr<Engine> Engine::create(EngineConfig cfg) { return std::make_unique<EngineImpl>(std::move(cfg)); }

}  // namespace tf::backend::cuda
