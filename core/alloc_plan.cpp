// The allocation plan of one rank: the engine's buffers, the workload's and the GPU memory no buffer names.
#include "core/alloc_plan.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/decoder_layout.h"
#include "core/error.h"
#include "core/local_kernels.h"
#include "core/optim/grad_stats.h"
#include "core/speculation.h"
#include "core/workload_layout.h"

namespace tf::core {

const char* mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::kParams: return "params";
    case MemKind::kGrads: return "grads";
    case MemKind::kOptimizer: return "optimizer";
    case MemKind::kActivations: return "activations";
    case MemKind::kComm: return "comm";
    case MemKind::kWorkspace: return "workspace";
    case MemKind::kStaging: return "staging";
    case MemKind::kContext: return "context";
  }
  return "?";
}

int64_t AllocPlan::bytes(MemPlace place) const {
  int64_t n = 0;
  for (const BufferSpec& b : buffers) n += b.place == place ? b.bytes : 0;
  return n;
}

int64_t AllocPlan::bytes(MemPlace place, MemKind kind) const {
  int64_t n = 0;
  for (const BufferSpec& b : buffers) n += b.place == place && b.kind == kind ? b.bytes : 0;
  return n;
}

bool AllocPlan::has(std::string_view name) const {
  return std::any_of(buffers.begin(), buffers.end(), [&](const BufferSpec& b) { return b.name == name; });
}

const BufferSpec& AllocPlan::at(std::string_view name) const {
  for (const BufferSpec& b : buffers)
    if (b.name == name) return b;
  throw InputError("allocation plan: no buffer named '" + std::string(name) + "'");
}

std::string buffer_name(std::string_view family, int index) {
  return std::string(family) + "." + std::to_string(index);
}

namespace {

class Lister {
 public:
  Lister(MemPlace place, std::vector<BufferSpec>& out) : place_(place), out_(out) {}
  void add(std::string_view name, MemKind kind, int64_t bytes, bool allocated = true) {
    out_.push_back({std::string(name), place_, kind, bytes, allocated});
  }

 private:
  MemPlace place_;
  std::vector<BufferSpec>& out_;
};

// The engine's GPU buffers (backends/cuda/engine.cpp allocates each by its name).
void engine_gpu_buffers(const ModelDesc& model, const Partition& part, const RankShard& shard,
                        const TwinFlowSplit& split, const StepConfig& step, std::vector<BufferSpec>& out) {
  Lister gpu(MemPlace::kGpu, out);
  const int stage = part.opt.stage;
  const int world = part.opt.world;
  const auto param_bytes = int64_t(dtype_bytes(step.param_dtype));
  const auto grad_bytes = int64_t(dtype_bytes(step.grad_dtype));
  // Every stage keeps the shard the optimizers write (GPU kernel, H2D); stages 1/2 with several ranks
  // also the replicated model forward and backward read, refreshed by the all-gathers after the
  // optimizers (core::plan_step). One rank's shard is the whole padded model: it computes on it.
  gpu.add(buf::kParams, MemKind::kParams, shard.elems * param_bytes);
  if (stage < 3 && world > 1) gpu.add(buf::kReplica, MemKind::kParams, world * shard.elems * param_bytes);
  gpu.add(buf::kGpuMaster, MemKind::kOptimizer, split.gpu_elems * 4);
  gpu.add(buf::kGpuState1, MemKind::kOptimizer, split.gpu_elems * 4);
  if (state_count(step.optimizer) == 2) gpu.add(buf::kGpuState2, MemKind::kOptimizer, split.gpu_elems * 4);
  // Stage >= 2: the shard's reduced gradients (the CPU segment's part lands here before its D2H);
  // stage 1: every rank's (the all-reduce), this rank's first (stage1_grad_block). Every stage reduces
  // each micro-batch (core::plan_step) and accumulates the shard's sums in fp32, in the same order.
  gpu.add(buf::kGrads, MemKind::kGrads, (stage >= 2 ? 1 : world) * shard.elems * grad_bytes);
  if (step.grad_accum > 1) gpu.add(buf::kGradAccum, MemKind::kGrads, shard.elems * 4);
  int64_t padded_layer = 0;  // the largest layer as gathered: its slices of every rank
  for (int64_t s : part.layer_slice) padded_layer = std::max(padded_layer, s * world);
  // ZeRO-3 with several ranks gathers layers into prefetch buffers; every stage with several ranks
  // receives the other ranks' slices (all-to-all, then a sum in rank order); one rank computes on its
  // shard directly. Every stage writes layer gradients into kGradSlots buffers in turn.
  const bool exchange = stage == 3 && world > 1;
  for (int i = 0; exchange && i < step.prefetch_layers; ++i)
    gpu.add(buffer_name(buf::kGather, i), MemKind::kComm, padded_layer * param_bytes);
  // A layer that reads another's tensor (the tied LM head) gets that layer gathered beside its own
  // (core::plan_step's all-gather; one buffer: the planner orders its reuse).
  int64_t shared_padded = 0;
  for (size_t l = 0; l < model.layers.size(); ++l)
    if (const int32_t owner = model.shared_owner(l); owner >= 0)
      shared_padded = std::max(shared_padded, part.layer_slice[size_t(owner)] * world);
  if (exchange && shared_padded > 0) gpu.add(buf::kGatherShared, MemKind::kComm, shared_padded * param_bytes);
  for (int i = 0; i < kGradSlots; ++i)
    gpu.add(buffer_name(buf::kLayerGrad, i), MemKind::kComm, padded_layer * grad_bytes);
  for (int i = 0; world > 1 && i < kGradSlots; ++i)
    gpu.add(buffer_name(buf::kRecv, i), MemKind::kComm, padded_layer * grad_bytes);
  const int64_t tiles = stats_table_tiles(part);
  gpu.add(buf::kStatsTable, MemKind::kWorkspace, norm_table_bytes(tiles));
  gpu.add(buf::kFoldScratch, MemKind::kWorkspace, norm_fold_scratch_bytes(tiles));
  gpu.add(buf::kCounters, MemKind::kWorkspace, kStepCounterBytes);
  const auto gpu_tiles = int64_t(stats_tiles(size_t(split.gpu_elems)));
  gpu.add(buf::kOptimizerTileSums, MemKind::kWorkspace, std::max<int64_t>(gpu_tiles, 1) * 8);
  // [0] the GPU optimizer's chunk, [1..] the statistics pass's ranges
  const auto ranges = int64_t(shard_stats_ranges(part, shard).size());
  gpu.add(buf::kDescriptors, MemKind::kWorkspace, (1 + ranges) * kChunkDescBytes);
}

// The engine's host buffers: the CPU segment (master, states), its staging rings (gradient landing,
// bf16 copy: core::staging_ring's slots, which the plan's Op::staging_slot indexes), the norm's result,
// and the speculated layers' second slot (`step` with its budget resolved).
void engine_host_buffers(const TwinFlowSplit& split, const StepConfig& step, std::vector<BufferSpec>& out) {
  Lister host(MemPlace::kHost, out);
  const int64_t n = split.cpu_elems;
  const bool two = state_count(step.optimizer) == 2;
  host.add(buf::kHostMaster, MemKind::kOptimizer, n * 4);
  host.add(buf::kHostState1, MemKind::kOptimizer, n * 4);
  if (two) host.add(buf::kHostState2, MemKind::kOptimizer, n * 4);
  const int64_t ring_elems = staging_ring(split, step).elems();
  host.add(buf::kHostGrad, MemKind::kStaging, ring_elems * int64_t(dtype_bytes(step.grad_dtype)));
  host.add(buf::kHostCopy, MemKind::kStaging, ring_elems * int64_t(dtype_bytes(step.param_dtype)));
  host.add(buf::kHostNorm, MemKind::kWorkspace, kNormResultBytes);
  const int64_t spare = spare_range(split, speculated_layers(split, step)).elems;
  if (spare == 0) return;
  host.add(buf::kHostMasterSpare, MemKind::kOptimizer, spare * 4);
  host.add(buf::kHostState1Spare, MemKind::kOptimizer, spare * 4);
  if (two) host.add(buf::kHostState2Spare, MemKind::kOptimizer, spare * 4);
}

// backends/cuda/workload_mlp.cu's buffers, in the order it allocates them.
std::vector<BufferSpec> mlp_buffers(const ModelDesc& model, const StepConfig& step) {
  namespace ml = mlp_layout;
  const std::vector<int64_t>& dims = model.spec.mlp_dims;  // [in, h1, ..., out]
  const int64_t B = step.micro_batch;
  const auto layers = int64_t(dims.size()) - 1;
  const int64_t max_dim = *std::max_element(dims.begin(), dims.end());
  const int64_t slack = kGemmSlackRows * max_dim * 2;
  std::vector<BufferSpec> out;
  Lister gpu(MemPlace::kGpu, out);
  for (int64_t l = 0; l < layers; ++l)  // x_l, the input of layer l
    gpu.add(buffer_name(buf::kMlpAct, int(l)), MemKind::kActivations, B * dims[size_t(l)] * 2 + slack);
  // dY of the layers with (last - l) % 2 == c (the last layer's first holds its output y)
  int64_t need[2] = {0, 0}, max_weight = 0, max_out = 0;
  for (int64_t l = 0; l < layers; ++l) {
    need[(layers - 1 - l) % 2] = std::max(need[(layers - 1 - l) % 2], B * dims[size_t(l) + 1]);
    max_weight = std::max(max_weight, dims[size_t(l) + 1] * dims[size_t(l)]);
    max_out = std::max(max_out, dims[size_t(l) + 1]);
  }
  for (int c = 0; c < 2; ++c) gpu.add(buffer_name(buf::kMlpDy, c), MemKind::kActivations, need[c] * 2 + slack);
  if (step.grad_dtype == DType::kF16) gpu.add(buf::kMlpDw32, MemKind::kWorkspace, max_weight * 4);
  if (model.spec.mlp_bias) gpu.add(buf::kMlpBiasPartials, MemKind::kWorkspace, ml::bias_chunks(B) * max_out * 4);
  gpu.add(buf::kMlpLossPartials, MemKind::kActivations, ml::row_blocks(B) * 4);
  gpu.add(buf::kMlpLossSums, MemKind::kActivations, int64_t(step.grad_accum) * 4);
  gpu.add(buf::kMlpTaps, MemKind::kActivations, dims.back() * ml::kTeacherTaps * 4);
  gpu.add(buf::kCublasWorkspace, MemKind::kWorkspace, kCublasWorkspaceBytes);
  return out;
}

// The block sets of the decoder workload: per block, or one shared set under checkpointing.
void decoder_block_sets(const DecoderShape& d, int64_t T, bool checkpointing, Lister& gpu) {
  namespace dl = decoder_layout;
  const int64_t h = d.hidden, f = d.ffn;
  const int sets = checkpointing ? 1 : int(d.layers);
  for (int k = 0; k < sets; ++k) {
    gpu.add(buffer_name(buf::kDecA, k), MemKind::kActivations, dl::activation_buffer_bytes(T, h));
    gpu.add(buffer_name(buf::kDecQkv, k), MemKind::kActivations, dl::activation_buffer_bytes(T, 3 * h));
    gpu.add(buffer_name(buf::kDecO, k), MemKind::kActivations, dl::activation_buffer_bytes(T, h));
    gpu.add(buffer_name(buf::kDecX2, k), MemKind::kActivations, dl::activation_buffer_bytes(T, h));
    gpu.add(buffer_name(buf::kDecC, k), MemKind::kActivations, dl::activation_buffer_bytes(T, h));
    gpu.add(buffer_name(buf::kDecU, k), MemKind::kActivations, dl::activation_buffer_bytes(T, f));
    gpu.add(buffer_name(buf::kDecG, k), MemKind::kActivations, dl::activation_buffer_bytes(T, f));
    gpu.add(buffer_name(buf::kDecStats, k), MemKind::kActivations, (4 + d.heads) * T * 4);
  }
}

// The largest weight gradient a GEMM computes (fp16 gradients go through fp32 scratch of this size):
// QKV, out-projection, fc1, fc2, project_in/out, an untied LM head. The tied embedding's gradient is
// assembled by token_embedding_grad from the fp32 de_head instead.
int64_t largest_gemm_weight(const ModelDesc& model) {
  int64_t n = 0;
  for (const TensorDesc& t : model.tensors)
    if (t.shape.size() == 2 && t.name != "embed.tokens.weight" && t.name != "embed.positions.weight")
      n = std::max(n, t.numel);
  return n;
}

// backends/cuda/workload_decoder.cu's buffers, in the order it allocates them (docs/decoder.md: what
// the forward keeps, what the backward needs besides it).
std::vector<BufferSpec> decoder_buffers(const ModelDesc& model, const StepConfig& step) {
  namespace dl = decoder_layout;
  const DecoderShape& d = model.spec.decoder;
  const int64_t T = step.micro_batch * d.seq, h = d.hidden, f = d.ffn, V = d.vocab, e = embed_width(d);
  const bool proj = has_embed_projection(d);
  std::vector<BufferSpec> out;
  Lister gpu(MemPlace::kGpu, out);
  for (int i = 0; i <= int(d.layers); ++i)
    gpu.add(buffer_name(buf::kDecX, i), MemKind::kActivations, dl::activation_buffer_bytes(T, h));
  decoder_block_sets(d, T, step.checkpointing, gpu);
  if (proj) gpu.add(buf::kDecEin, MemKind::kActivations, dl::activation_buffer_bytes(T, e));
  if (d.pre_ln) {
    gpu.add(buf::kDecZ, MemKind::kActivations, dl::activation_buffer_bytes(T, h));
    gpu.add(buf::kDecZStats, MemKind::kActivations, 2 * T * 4);
  }
  if (proj) gpu.add(buf::kDecZp, MemKind::kActivations, dl::activation_buffer_bytes(T, e));
  gpu.add(buf::kDecLogits, MemKind::kActivations, dl::activation_buffer_bytes(T, dl::logits_stride(V)));
  gpu.add(buf::kDecDx, MemKind::kActivations, dl::activation_buffer_bytes(T, h));
  gpu.add(buf::kDecDh, MemKind::kActivations, dl::activation_buffer_bytes(T, h));
  gpu.add(buf::kDecDf, MemKind::kActivations, dl::activation_buffer_bytes(T, f));
  gpu.add(buf::kDecDqkv, MemKind::kActivations, dl::activation_buffer_bytes(T, 3 * h));
  if (proj) gpu.add(buf::kDecDe, MemKind::kActivations, dl::activation_buffer_bytes(T, e));
  if (d.tied_embeddings) gpu.add(buf::kDecDeHead, MemKind::kActivations, V * e * 4);
  if (dl::logits_split(V)) gpu.add(buf::kDecDz32, MemKind::kWorkspace, dl::logits_grad_scratch_bytes(T, e, V));
  gpu.add(buf::kDecDelta, MemKind::kWorkspace, T * d.heads * 4);
  const int64_t partials = std::max({dl::layer_norm_partial_floats(T, h), dl::bias_grad_partial_floats(T, 3 * h),
                                     dl::bias_grad_partial_floats(T, f)});
  gpu.add(buf::kDecPartials, MemKind::kWorkspace, partials * 4);
  if (step.grad_dtype == DType::kF16) gpu.add(buf::kDecDw32, MemKind::kWorkspace, largest_gemm_weight(model) * 4);
  gpu.add(buf::kDecTokens, MemKind::kActivations, T * 4);
  gpu.add(buf::kDecTargets, MemKind::kActivations, T * 4);
  gpu.add(buf::kDecTokenStarts, MemKind::kActivations, (V + 1) * 4);
  gpu.add(buf::kDecTokenRows, MemKind::kActivations, T * 4);
  gpu.add(buf::kDecRowLoss, MemKind::kActivations, T * 4);
  gpu.add(buf::kDecLossSums, MemKind::kActivations, int64_t(step.grad_accum) * 4);
  gpu.add(buf::kCublasWorkspace, MemKind::kWorkspace, kCublasWorkspaceBytes);
  Lister(MemPlace::kHost, out)
      .add(buf::kDecHostBatch, MemKind::kStaging, int64_t(step.grad_accum) * (3 * T + V + 1) * 4);
  return out;
}

// The GPU memory no buffer names, after the named buffers (docs/ARCHITECTURE.md, "Memory a rank has").
void add_unnamed_gpu(const UnnamedGpuMemory& u, AllocPlan& plan) {
  int64_t rounding = 0;
  for (const BufferSpec& b : plan.buffers)
    if (b.place == MemPlace::kGpu && b.allocated)
      rounding += round_up_bytes(b.bytes, u.alloc_granularity_bytes) - b.bytes;
  const auto map_bytes = int64_t(std::ceil(double(plan.bytes(MemPlace::kHost)) * u.pinned_host_map_bytes_per_gb / 1e9));
  Lister gpu(MemPlace::kGpu, plan.buffers);
  gpu.add(buf::kContext, MemKind::kContext, u.context_bytes, false);
  if (rounding > 0) gpu.add(buf::kAllocRounding, MemKind::kContext, rounding, false);
  if (map_bytes > 0) gpu.add(buf::kPinnedHostMap, MemKind::kContext, map_bytes, false);
  plan.context_measured = u.context_measured;
}

}  // namespace

int64_t round_up_bytes(int64_t bytes, int64_t granularity) {
  if (granularity < 1) throw std::invalid_argument("round_up_bytes: granularity must be >= 1");
  return (bytes + granularity - 1) / granularity * granularity;
}

int64_t granularity_of(const std::vector<std::pair<int64_t, int64_t>>& size_cost) {
  if (size_cost.empty()) return 0;
  for (int64_t g = int64_t(1) << 30; g >= 256; g /= 2)
    if (std::all_of(size_cost.begin(), size_cost.end(),
                    [&](const auto& sc) { return sc.first >= 1 && round_up_bytes(sc.first, g) == sc.second; }))
      return g;
  return 0;
}

UnnamedGpuMemory unnamed_gpu_memory(const GpuProfile& gpu, int world) {
  UnnamedGpuMemory u;
  if (gpu.context_bytes > 0 && (world <= 1 || gpu.nccl_comm_bytes > 0)) {
    u.context_bytes = gpu.context_bytes + (world > 1 ? gpu.nccl_comm_bytes : 0);
    u.context_measured = true;
  }
  u.alloc_granularity_bytes = std::max<int64_t>(1, gpu.alloc_granularity_bytes);
  u.pinned_host_map_bytes_per_gb = gpu.pinned_host_map_bytes_per_gb;
  return u;
}

std::vector<int64_t> replica_layer_offsets(const Partition& part) {
  std::vector<int64_t> off(part.layer_slice.size() + 1, 0);
  for (size_t l = 0; l < part.layer_slice.size(); ++l) off[l + 1] = off[l] + part.layer_slice[l] * part.opt.world;
  return off;
}

int stage1_grad_block(int rank, int owner, int world) { return ((owner - rank) % world + world) % world; }

std::vector<BufferSpec> workload_buffers(const ModelDesc& model, WorkloadType workload, const StepConfig& step) {
  switch (workload) {
    case WorkloadType::kSynthetic: return {};
    case WorkloadType::kMlp:
      if (model.spec.type != ModelType::kMlp)
        throw InputError("workload mlp: model '" + model.spec.name + "' is not an MLP (model type mlp required)");
      return mlp_buffers(model, step);
    case WorkloadType::kDecoder:
      if (model.spec.type != ModelType::kDecoder)
        throw InputError("workload decoder: model '" + model.spec.name + "' is not a decoder (an MLP)");
      return decoder_buffers(model, step);
    case WorkloadType::kAuto:
      return model.spec.type == ModelType::kMlp ? mlp_buffers(model, step) : decoder_buffers(model, step);
  }
  return {};
}

StagingChoice choose_staging(const ModelDesc& model, const Partition& part, const RankShard& shard,
                             const TwinFlowSplit& split, const MemoryOptions& opt) {
  StagingChoice c;
  c.slots = opt.step.staging_slots;
  if (c.slots != kStagingAuto) return c;
  c.automatic = true;
  c.slots = kUnboundedStaging;
  if (opt.host_bytes_per_rank <= 0) return c;
  MemoryOptions full = opt;
  full.step.staging_slots = kUnboundedStaging;
  full.step.speculation_bytes = 0;
  c.full_size_host_bytes = plan_allocations(model, part, shard, split, full).bytes(MemPlace::kHost);
  c.host_bytes_per_rank = opt.host_bytes_per_rank;
  if (c.full_size_host_bytes > c.host_bytes_per_rank) c.slots = kStagingSlots;
  return c;
}

int resolve_staging_slots(const ModelDesc& model, const Partition& part, const RankShard& shard,
                          const TwinFlowSplit& split, const MemoryOptions& opt) {
  return choose_staging(model, part, shard, split, opt).slots;
}

int64_t resolve_speculation_bytes(const ModelDesc& model, const Partition& part, const RankShard& shard,
                                  const TwinFlowSplit& split, const MemoryOptions& opt) {
  if (opt.step.speculation_bytes != kSpeculationMax || opt.host_bytes_per_rank <= 0) return opt.step.speculation_bytes;
  MemoryOptions without = opt;
  without.step.staging_slots = resolve_staging_slots(model, part, shard, split, opt);
  without.step.speculation_bytes = 0;
  const int64_t base = plan_allocations(model, part, shard, split, without).bytes(MemPlace::kHost);
  return std::max<int64_t>(0, opt.host_bytes_per_rank - base);
}

AllocPlan plan_allocations(const ModelDesc& model, const Partition& part, const RankShard& shard,
                           const TwinFlowSplit& split, const MemoryOptions& opt) {
  AllocPlan plan;
  MemoryOptions resolved = opt;  // staging first: the speculation budget fills what it leaves
  resolved.step.staging_slots = resolve_staging_slots(model, part, shard, split, opt);
  resolved.step.speculation_bytes = resolve_speculation_bytes(model, part, shard, split, resolved);
  const StepConfig& step = resolved.step;
  engine_gpu_buffers(model, part, shard, split, step, plan.buffers);
  engine_host_buffers(split, step, plan.buffers);
  for (BufferSpec& b : workload_buffers(model, opt.workload, step)) plan.buffers.push_back(std::move(b));
  add_unnamed_gpu(opt.unnamed, plan);
  return plan;
}

}  // namespace tf::core
