// The allocation plan: every buffer one rank holds during training, by name, place, kind and size.
// The CUDA engine allocates exactly these (backends/cuda/engine.cpp, by name) and the memory model
// (core/memory.h) is their sum, so what is checked before a run is what the run allocates.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/model.h"
#include "core/partition.h"
#include "core/scenario.h"
#include "core/step.h"
#include "core/twinflow.h"

namespace tf::core {

enum class MemPlace : uint8_t { kGpu, kHost };
enum class MemKind : uint8_t {
  kParams,       // bf16 parameters (the shard; stages 1/2 with several ranks also the replicated model)
  kGrads,        // the reduced gradient shard and its fp32 accumulation
  kOptimizer,    // fp32 master weights and optimizer states
  kActivations,  // the workload's activations, data and loss scratch
  kComm,         // all-gather prefetch, layer-gradient and receive buffers (whole layers)
  kWorkspace,    // small buffers of the step (statistics tables, counters, descriptors), cuBLAS's workspace
  kStaging,      // host: the CPU segment's gradient landing and bf16 copy rings, the decoder's batches
  kContext,      // GPU memory nobody allocates by name: the CUDA context and libraries, cudaMalloc's rounding,
                 // the device's mapping of pinned host memory (UnnamedGpuMemory: measured or estimated)
};
const char* mem_kind_name(MemKind k);

struct BufferSpec {
  std::string name;  // e.g. "grads", "gather.1", "mlp.act.0"
  MemPlace place = MemPlace::kGpu;
  MemKind kind = MemKind::kWorkspace;
  int64_t bytes = 0;
  bool allocated = true;  // false: an estimate no backend allocates (the CUDA context, a model's estimate)
  bool operator==(const BufferSpec&) const = default;
};

struct AllocPlan {
  std::vector<BufferSpec> buffers;
  bool context_measured = false;  // buf::kContext is the profile's measurement (else kContextEstimateBytes)
  int64_t bytes(MemPlace place) const;
  int64_t bytes(MemPlace place, MemKind kind) const;
  // The buffer named `name`; core::InputError naming it when the plan has none.
  const BufferSpec& at(std::string_view name) const;
  bool has(std::string_view name) const;
};

// "gather.2": the name of the i-th buffer of a family.
std::string buffer_name(std::string_view family, int index);

// The engine's buffer names (the workloads' are in workload_buffers).
namespace buf {
inline constexpr std::string_view kParams = "params";         // (shard) bf16, what the optimizers write
inline constexpr std::string_view kReplica = "replica";       // (world x shard) bf16: stages 1/2, world > 1, the
                                                              // replicated model, padded layers in model order
inline constexpr std::string_view kGpuMaster = "gpu_master";  // (gpu_elems) fp32
inline constexpr std::string_view kGpuState1 = "gpu_state1";  // (gpu_elems) fp32
inline constexpr std::string_view kGpuState2 = "gpu_state2";  // (gpu_elems) fp32, two-state optimizers
inline constexpr std::string_view kGrads = "grads";  // (shard) grad dtype; stage 1: (world x shard), every rank's
                                                     // reduced shard, this rank's first (core::stage1_grad_block)
inline constexpr std::string_view kGradAccum = "grad_accum";      // (shard) fp32, grad_accum > 1
inline constexpr std::string_view kGather = "gather";             // .i, (padded layer) bf16, ZeRO-3 world > 1
inline constexpr std::string_view kLayerGrad = "layer_grad";      // .i, (padded layer) grad dtype
inline constexpr std::string_view kRecv = "recv";                 // .i, (padded layer) grad dtype, ZeRO-3 world > 1
inline constexpr std::string_view kStatsTable = "stats_table";    // (tiles + 1) f64
inline constexpr std::string_view kFoldScratch = "fold_scratch";  // (max(tiles, 1)) f64 + the 16-byte result
inline constexpr std::string_view kCounters = "counters";         // (2) u64
inline constexpr std::string_view kOptimizerTileSums = "optimizer_tile_sums";  // (max(gpu tiles, 1)) f64
inline constexpr std::string_view kDescriptors = "descriptors";  // (1 + statistics ranges) chunk descriptors
// GPU memory no buffer names (kind kContext, not allocated; UnnamedGpuMemory): the CUDA context, cuBLAS,
// the streams and NCCL; cudaMalloc's rounding of every allocated GPU buffer; the page tables that map the
// plan's pinned host memory into the device.
inline constexpr std::string_view kContext = "cuda_context";
inline constexpr std::string_view kAllocRounding = "alloc_rounding";
inline constexpr std::string_view kPinnedHostMap = "pinned_host_map";
inline constexpr std::string_view kHostMaster = "host_master";  // (cpu_elems) fp32
inline constexpr std::string_view kHostState1 = "host_state1";  // (cpu_elems) fp32
inline constexpr std::string_view kHostState2 = "host_state2";  // (cpu_elems) fp32, two-state optimizers
// The staging rings (core::staging_ring): slot s from element offsets[s], indexed by Op::staging_slot.
inline constexpr std::string_view kHostGrad = "host_grad";  // (ring elems) grad dtype, D2H landing ring
inline constexpr std::string_view kHostCopy = "host_copy";  // (ring elems) bf16, H2D staging ring
// The speculated layers' second state slot (core/speculation.h): the tail of the CPU segment that
// core::spare_range gives, present when some layer speculates.
inline constexpr std::string_view kHostMasterSpare = "host_master_spare";  // (spare elems) fp32
inline constexpr std::string_view kHostState1Spare = "host_state1_spare";  // (spare elems) fp32
inline constexpr std::string_view kHostState2Spare = "host_state2_spare";  // (spare elems) fp32, two-state optimizers
inline constexpr std::string_view kHostNorm = "host_norm";                 // (2) f64: the folded norm and count
inline constexpr std::string_view kCublasWorkspace = "cublas_workspace";
inline constexpr std::string_view kMlpAct = "mlp.act";    // .l, (B x d_l) bf16 + GEMM slack
inline constexpr std::string_view kMlpDy = "mlp.dy";      // .c, (B x d_{l+1}) bf16 + slack, alternating
inline constexpr std::string_view kMlpDw32 = "mlp.dw32";  // (out x in) fp32, fp16 gradients
inline constexpr std::string_view kMlpBiasPartials = "mlp.bias_partials";  // (chunks x out) fp32
inline constexpr std::string_view kMlpLossPartials = "mlp.loss_partials";  // (row blocks) fp32
inline constexpr std::string_view kMlpLossSums = "mlp.loss_sums";          // (grad_accum) fp32
inline constexpr std::string_view kMlpTaps = "mlp.taps";                   // (d_L x 4) u32, the teacher
inline constexpr std::string_view kGatherShared = "gather_shared";  // (padded owner layer) bf16: the layer a shared
                                                                    // tensor belongs to, gathered for its reader
// The decoder workload's (backends/cuda/workload_decoder.cu; docs/decoder.md's names), for T = micro_batch x seq
// rows. Every (T, width) bf16 buffer carries GEMM slack (core::decoder_layout::activation_buffer_bytes). Block
// sets ".k": one per block (k = block index), or with activation checkpointing one set (k = 0) that the forward
// and each block's recompute share.
inline constexpr std::string_view kDecX = "decoder.x";             // .i, i in [0, L]: (T, h) bf16, block i's input
inline constexpr std::string_view kDecA = "decoder.a";             // .k: (T, h) bf16, LN1(x) (pre-LN) or r1 (post-LN)
inline constexpr std::string_view kDecQkv = "decoder.qkv";         // .k: (T, 3h) bf16
inline constexpr std::string_view kDecO = "decoder.o";             // .k: (T, h) bf16, the attention's output
inline constexpr std::string_view kDecX2 = "decoder.x2";           // .k: (T, h) bf16
inline constexpr std::string_view kDecC = "decoder.c";             // .k: (T, h) bf16, LN2(x2) (pre-LN) or r2 (post-LN)
inline constexpr std::string_view kDecU = "decoder.u";             // .k: (T, f) bf16, fc1 output + bias
inline constexpr std::string_view kDecG = "decoder.g";             // .k: (T, f) bf16, act(u)
inline constexpr std::string_view kDecStats = "decoder.stats";     // .k: (4T + T·H) fp32: mean1, rstd1, mean2, rstd2
                                                                   //     (T each), lse (B, H, s)
inline constexpr std::string_view kDecEin = "decoder.ein";         // (T, e) bf16 E[tok], e != h
inline constexpr std::string_view kDecZ = "decoder.z";             // (T, h) bf16 LNf(x_L), pre-LN
inline constexpr std::string_view kDecZStats = "decoder.z_stats";  // (2T) fp32 LNf's mean, rstd, pre-LN
inline constexpr std::string_view kDecZp = "decoder.zp";           // (T, e) bf16 z·W_outᵀ, e != h
inline constexpr std::string_view kDecLogits = "decoder.logits";   // (T, V) bf16 logits, then dlogits; rows
                                                                   // decoder_layout::logits_stride(V) apart
inline constexpr std::string_view kDecDx = "decoder.dx";           // (T, h) bf16 the residual stream's gradient
inline constexpr std::string_view kDecDh = "decoder.dh";           // (T, h) bf16 a branch's input gradient
inline constexpr std::string_view kDecDf = "decoder.df";           // (T, f) bf16 dg, then du
inline constexpr std::string_view kDecDqkv = "decoder.dqkv";       // (T, 3h) bf16
inline constexpr std::string_view kDecDe = "decoder.de";           // (T, e) bf16 dz' / dein, e != h
inline constexpr std::string_view kDecDeHead = "decoder.de_head";  // (V, e) fp32 the tied head's dE
inline constexpr std::string_view kDecDz32 = "decoder.dz32";       // (T, e) fp32 dz' of a split logits GEMM
inline constexpr std::string_view kDecDelta = "decoder.delta";     // (B, H, s) fp32 attention's D
inline constexpr std::string_view kDecPartials = "decoder.partials";  // fp32 LayerNorm / bias column-sum partials
inline constexpr std::string_view kDecDw32 = "decoder.dw32";          // (largest weight) fp32, fp16 gradients
inline constexpr std::string_view kDecTokens = "decoder.tokens";      // (T) int32
inline constexpr std::string_view kDecTargets = "decoder.targets";    // (T) int32
inline constexpr std::string_view kDecTokenStarts = "decoder.token_starts";  // (V + 1) int32, core::sort_token_rows
inline constexpr std::string_view kDecTokenRows = "decoder.token_rows";      // (T) int32
inline constexpr std::string_view kDecRowLoss = "decoder.row_loss";          // (T) fp32
inline constexpr std::string_view kDecLossSums = "decoder.loss_sums";        // (grad_accum) fp32
// host, pinned: the step's batches, sampled at its start: per micro-batch tokens, targets, token_rows (T)
// and token_starts (V + 1) int32, copied to the device at the micro-batch's first forward
inline constexpr std::string_view kDecHostBatch = "decoder.host_batch";  // (grad_accum x (3T + V + 1)) int32
}  // namespace buf

// The replicated model of stages 1/2 (buf::kReplica): every layer gathered, padded (its slices of every
// rank, layer_slice x world), in model order. Element offset of layer l's first element, l in [0, L]
// (the last is the total: world x the shard's elements).
std::vector<int64_t> replica_layer_offsets(const Partition& part);
// Stage 1's whole-model gradients (buf::kGrads) hold every rank's reduced shard, rank-rotated: block j
// is rank (rank + j) % world's, so this rank's own shard is block 0 and every reader of the shard's
// gradients reads them where stages 2/3 keep them. The block (0-based) that holds `owner`'s shard.
int stage1_grad_block(int rank, int owner, int world);

// The context term when the hardware profile has no measurement of it: the CUDA context, cuBLAS's and NCCL's
// own memory. An estimate: the H100 runs of 2026-11-24 held 555-585 MiB beyond their buffers, their
// rounding and their pinned-host mappings (scenarios/hardware/MEASUREMENTS.md, "Unnamed GPU memory").
inline constexpr int64_t kContextEstimateBytes = int64_t(512) << 20;

// GPU memory a rank holds beyond its named buffers (docs/ARCHITECTURE.md, "Memory a rank has"): the allocation
// plan lists it as the kContext entries buf::kContext, buf::kAllocRounding and buf::kPinnedHostMap.
struct UnnamedGpuMemory {
  int64_t context_bytes = kContextEstimateBytes;  // the CUDA context, cuBLAS, the streams (+ NCCL, world > 1)
  bool context_measured = false;                  // false: kContextEstimateBytes
  int64_t alloc_granularity_bytes = 1;            // a GPU buffer costs its size rounded up to this (1: exact)
  double pinned_host_map_bytes_per_gb = 0;        // GPU bytes per GB (1e9 B) of the plan's pinned host memory
  bool operator==(const UnnamedGpuMemory&) const = default;
};
// The profile's measurements (twinflow calibrate: gpu.context_bytes, with several ranks + gpu.nccl_comm_bytes;
// gpu.alloc_granularity_bytes; gpu.pinned_host_map_bytes_per_gb), each where the profile has it; the context
// is kContextEstimateBytes unless the profile measured every part a run of `world` ranks has.
UnnamedGpuMemory unnamed_gpu_memory(const GpuProfile& gpu, int world);
// `bytes` rounded up to a multiple of `granularity` (>= 1).
int64_t round_up_bytes(int64_t bytes, int64_t granularity);
// The allocation granularity measured costs show (twinflow calibrate: N cudaMallocs of one odd size, what
// the device's used bytes grew by over N): the largest power of two g in [256, 2^30] with
// round_up_bytes(size, g) == cost for every (size, cost) pair; 0 when none explains them all (no
// rounding to one granularity: the costs are noise or something else). A size of k MiB + 1 tells every g
// apart: it costs g when g > k MiB, and k MiB + g below.
int64_t granularity_of(const std::vector<std::pair<int64_t, int64_t>>& size_cost);

struct MemoryOptions {
  StepConfig step;  // dtypes, optimizer, micro-batch, accumulation, checkpointing, prefetch depth
  // The workload's buffers (workload_buffers): the engine's own workload, or kAuto for the model
  // trained for real (what the simulator times).
  WorkloadType workload = WorkloadType::kAuto;
  // GPU memory the rank uses that no buffer names (the plan's kContext entries).
  UnnamedGpuMemory unnamed;
  // Host bytes the rank may use: what `staging_slots: auto` checks full-size staging against
  // (core::resolve_staging_slots) and `speculation: max` (auto's ceiling) fills (core::resolve_speculation_bytes). 0:
  // not known, full-size staging and every eligible layer speculates.
  int64_t host_bytes_per_rank = 0;
};

// Every buffer of one rank (shard `shard`, split `split`): the engine's, then the workload's, then the GPU
// memory no buffer names (opt.unnamed: the context, the rounding of every allocated GPU buffer to the
// allocation granularity, the mapping of the plan's host bytes). ZeRO stages 1/2 keep the whole bf16 model (with
// several ranks a replica beside the shard the optimizers write; one rank's shard is the whole padded model) and, stage
// 1, the whole model's reduced gradients. The staging rings and the speculated layers' spare slots are those of
// opt.step with its staging slots (resolve_staging_slots), then its speculation budget
// (resolve_speculation_bytes) resolved.
AllocPlan plan_allocations(const ModelDesc& model, const Partition& part, const RankShard& shard,
                           const TwinFlowSplit& split, const MemoryOptions& opt);

// How a rank's host staging was chosen (resolve_staging_slots, choose_staging).
struct StagingChoice {
  int slots = kStagingSlots;  // what the rank plans with: kUnboundedStaging (full-size) or a ring's slots
  bool automatic = false;     // chosen for kStagingAuto (false: the slots were given)
  // kStagingAuto with a known host: the rank's host bytes at full-size staging without speculation, and
  // the host bytes per rank they were checked against. 0 otherwise.
  int64_t full_size_host_bytes = 0;
  int64_t host_bytes_per_rank = 0;
  bool operator==(const StagingChoice&) const = default;
};

// The host staging one rank plans with (docs/ARCHITECTURE.md, "Host staging rings"): opt.step.staging_slots,
// where kStagingAuto becomes kUnboundedStaging (full-size staging) when the allocation plan at full-size
// staging without speculation fits opt.host_bytes_per_rank or that is not known (0), else kStagingSlots.
// It does not depend on the speculation budget, which is resolved after it (resolve_speculation_bytes:
// the spare slots fill what the staging leaves).
StagingChoice choose_staging(const ModelDesc& model, const Partition& part, const RankShard& shard,
                             const TwinFlowSplit& split, const MemoryOptions& opt);
// choose_staging(...).slots: never kStagingAuto.
int resolve_staging_slots(const ModelDesc& model, const Partition& part, const RankShard& shard,
                          const TwinFlowSplit& split, const MemoryOptions& opt);

// The speculation budget one rank plans with: opt.step.speculation_bytes, where kSpeculationMax becomes
// the host bytes opt.host_bytes_per_rank leaves beyond the allocation plan without speculation (its
// staging resolved: resolve_staging_slots) (0 when
// nothing is left), or stays kSpeculationMax (every eligible layer) when that is not known. Either
// way core::speculated_layers stops at the layers whose gradients land early enough to matter.
int64_t resolve_speculation_bytes(const ModelDesc& model, const Partition& part, const RankShard& shard,
                                  const TwinFlowSplit& split, const MemoryOptions& opt);

// The buffers of a workload for one micro-batch shape (on the GPU unless the entry says otherwise):
//   kSynthetic: none (its gradient is a function of the weights);
//   kMlp:       backends/cuda/workload_mlp.cu's, exactly (it allocates this list by name);
//   kDecoder:   backends/cuda/workload_decoder.cu's, exactly (the buf::kDec* names above): the
//               activations docs/decoder.md's forward keeps (with activation checkpointing the block
//               inputs and one block's recompute set), backward scratch, data and loss, and the
//               step's batches in pinned host memory;
//   kAuto:      the model trained for real: kMlp for an MLP, kDecoder for a decoder.
// Throws core::InputError for kMlp or kDecoder on a model of the other type.
std::vector<BufferSpec> workload_buffers(const ModelDesc& model, WorkloadType workload, const StepConfig& step);

}  // namespace tf::core
