// The step schedule: which ops one rank issues in a training step, on which queue, after which ops.
// The core decides what and in which order; a backend (real or simulated) decides how and when.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/optim/dtype.h"
#include "core/optim/optimizer.h"
#include "core/partition.h"
#include "core/step_decision.h"
#include "core/twinflow.h"

namespace tf::core {

enum class Queue : uint8_t { kCompute, kComm, kD2H, kH2D, kCpu };
constexpr int kQueueCount = 5;
const char* queue_name(Queue q);

enum class OpKind : uint8_t {
  kAllGather,      // comm: gather a layer's bf16 parameters (ZeRO-3: forward and backward; stages
                   // 1/2: once, after the optimizers, to refresh the replicated model)
  kForward,        // compute: one layer, one micro-batch
  kBackward,       // compute: one layer, one micro-batch (recompute included with checkpointing)
  kReduceScatter,  // comm: a layer's bf16 gradients -> each rank's slice (stages 2, 3)
  kAllReduce,      // comm: a layer's bf16 gradients summed on every rank (stage 1)
  kD2HGrad,        // d2h: the CPU segment's part of a layer's reduced gradient (bf16)
  kGradStats,      // compute: canonical tile sums of squares + non-finite count of the shard's reduced grads
  kNormAllReduce,  // comm: global norm partials and the overflow flag (8 B x 2)
  kGpuOptimizer,   // compute: the fused multi-tensor kernel over the GPU segment
  kCpuOptimizer,   // cpu: the fused SIMD pass over the CPU part of one layer (Op::state_slot 1: speculative,
                   // into the layer's spare state slot before the norm is known; core/speculation.h)
  kH2DParam,       // h2d: the updated bf16 copy of the CPU part of one layer
  kCpuCommit,      // cpu: a speculated layer once the step is decided: adopt the spare slot when the step's
                   // scalars are the speculated ones, else update the current slot (the redo), or nothing (skip)
};
constexpr int kOpKindCount = 12;
const char* op_kind_name(OpKind k);

struct Op {
  uint32_t id = 0;
  OpKind kind = OpKind::kForward;
  Queue queue = Queue::kCompute;
  int32_t layer = -1;          // model layer, -1 for whole-shard ops
  int32_t micro_batch = -1;    // -1 when not per micro-batch
  std::vector<uint32_t> deps;  // ids of ops that must finish first (all earlier in the list)
  double flops = 0;            // compute ops
  int64_t bytes = 0;           // bytes moved: per rank on the wire for collectives, over PCIe for copies,
                               // through memory for memory-bound kernels
  int64_t elems = 0;           // optimizer/stats ops: elements processed
  // Buffers used in turn (-1: none). The plan orders every reuse (docs/ARCHITECTURE.md, "Step
  // schedule"); a backend indexes its buffers with these and adds no ordering of its own.
  int8_t gather_slot = -1;  // ZeRO-3 all-gather: the prefetch buffer it fills; forward/backward: the one they read
  int8_t grad_slot = -1;    // backward: the layer-gradient buffer it writes; reduce-scatter/all-reduce: the one
                            // it reads, with the receive buffer of the same index
  // The layer whose parameters this op also needs because the op's layer reads one of its tensors
  // (ModelDesc::shared_owner: the tied LM head reads the token embedding), -1 if none. A ZeRO-3
  // all-gather of such a layer gathers this one too, into the one shared buffer ("gather_shared";
  // its bytes counted in `bytes`), which the layer's forward and backward read; with stages 1/2 they
  // read it in the replicated model.
  int32_t shared_layer = -1;
  // The host staging rings' slot (core::StagingRing): the D2H writes gradient slot `staging_slot`, the
  // CPU update reads it and writes copy slot `staging_slot`, the H2D reads that copy slot. -1: none.
  int32_t staging_slot = -1;
  // The CPU optimizer's state slot a speculated layer's op writes (core/speculation.h): 1, the layer's
  // spare slot (kCpuOptimizer: the speculative update reads the current slot and writes the spare one;
  // kCpuCommit: the spare slot it adopts). -1: the layer's one current slot, updated in place.
  int8_t state_slot = -1;
  // Carrying the optimizer tail into the next step (StepConfig::carry_tail; docs/ARCHITECTURE.md,
  // "Carrying the optimizer tail into the next step"). `carried`: the step's end does not wait for this
  // op; it runs on while the next step begins (the CPU passes, their H2Ds, the D2Hs and replica
  // refreshes that wait for them). `carried_deps`: ids of the previous step's carried ops that must
  // finish before this op (every step issues the same list, so the ids are this plan's); ignored in the
  // first step and after a drain (core::drain points: nothing is carried in then).
  bool carried = false;
  std::vector<uint32_t> carried_deps;
  std::string label() const;
  bool operator==(const Op&) const = default;
};

// An op's kind, layer and micro-batch read back from its Op::label() ("backward L3 mb0"; -1 where the
// label has none); nullopt for text Op::label() does not write.
struct OpLabel {
  OpKind kind = OpKind::kForward;
  int layer = -1;
  int micro_batch = -1;
};
std::optional<OpLabel> parse_op_label(std::string_view label);

// Layer-gradient (send) buffers: backward writes one while the reduction reads the other.
constexpr int kGradSlots = 2;

// Slots of each host staging ring (docs/ARCHITECTURE.md, "Host staging rings"): the CPU segment's
// gradient landing ring (D2H -> CPU update) and its bf16 copy ring (CPU update -> H2D). Two slots let
// the producer fill one while the consumer drains the other, which keeps both busy when their per-layer
// times are equal; the third absorbs what is not: the host's event wake-up before a CPU op, the copy's
// fixed latency and layers of different sizes (a decoder's embedding is ~2 blocks), so in steady state
// neither the copy engine nor the CPU waits on a slot. Each slot costs 2 B x the largest CPU piece.
constexpr int kStagingSlots = 3;
// StepConfig::staging_slots value for one slot per CPU layer: full-size staging, the schedule without
// ring-reuse dependencies (what Twin-Flow ran before the rings; tests compare the two bit for bit).
constexpr int kUnboundedStaging = 0;
// Settings value (RunSettings::step, `--staging-slots auto`, the default): full-size staging where the
// rank's host memory holds it, else kStagingSlots (core::resolve_staging_slots). Resolved before a plan
// is made: core::plan_step and check_staging_slots refuse it.
constexpr int kStagingAuto = -1;

// CpuPassOrder's "all of them": the default, today's order.
inline constexpr int kAllPasses = -1;

// The order of the speculated CPU layers' passes on the cpu queue (docs/ARCHITECTURE.md, "Order after the
// norm"). It applies where the passes after the norm run in forward order: a carrying plan (carry_tail) at
// full-size staging with a norm wait and speculated layers; elsewhere the plan ignores it. With n speculated
// layers, m = min(arrival, n) and k = min(before_norm, n), m <= k (a larger m plans as m = k):
//  - the first m speculated layers in the order their gradients land (backward order) pass right after
//    their D2H, as today; the other n - m pass in forward order, the next forward's first CPU layer first,
//    once the last one's gradient has landed (each still after its own D2H);
//  - of the passes in that order, the first k are issued before the norm's commits; the rest after them,
//    each right before its own commit. The commits (and the updates of the CPU layers that do not
//    speculate) run after the norm in forward order, each followed by its H2D, so the next forward's
//    first CPU layer gets its parameters before the last pass ends instead of after it.
// kAllPasses for both (the default) is today's order: every pass in arrival order, before every commit;
// m = k = n plans the same ops. The choice is the cost model's (backends/sim cpu_order.h: the shortest
// simulated step); the bits do not depend on it (each layer's pass and commit are its own).
struct CpuPassOrder {
  int arrival = kAllPasses;      // m: the speculated layers that pass in arrival order, or kAllPasses
  int before_norm = kAllPasses;  // k: the passes issued before the commits, or kAllPasses
  bool operator==(const CpuPassOrder&) const = default;
};
// Throws core::InputError for a count below kAllPasses; `where` names its origin ("--cpu-order").
void check_cpu_pass_order(const CpuPassOrder& o, const std::string& where);

// StepConfig::speculation_bytes: every eligible layer whose spare slot the host holds (`speculation: max`).
inline constexpr int64_t kSpeculationMax = -1;
// A scenario's or command's `speculation: auto` (core::SettingsOverrides, Scenario::TrainingConfig): the cost
// model chooses how many layers speculate (RunSettings::speculation_auto, StepConfig::speculation_layers)
// within kSpeculationMax. Resolved by core::resolve_settings; never a StepConfig's value.
inline constexpr int64_t kSpeculationAuto = -2;
// StepConfig::speculation_layers: no cap but the bytes.
inline constexpr int kEveryEligibleLayer = -1;

struct StepConfig {
  int64_t micro_batch = 1;
  int grad_accum = 1;
  OptimizerKind optimizer = OptimizerKind::kAdamW;  // its states and bytes per element (core::bytes_per_element)
  DType param_dtype = DType::kBF16;  // parameters as gathered and computed with (bf16; fp32 when training in fp32)
  DType grad_dtype = DType::kBF16;   // gradients as reduced: bf16, fp16 (loss scaling) or fp32
  bool checkpointing = false;
  bool clip_gradients = false;        // global-norm clipping: optimizers wait for the norm all-reduce
  bool loss_scaling = false;          // fp16 dynamic loss scaling: optimizers wait for the overflow flag
  int prefetch_layers = 2;            // ZeRO-3 all-gathers in flight ahead of compute
  int staging_slots = kStagingSlots;  // slots per host staging ring; kUnboundedStaging: one per CPU layer
  // Speculative CPU updates (core/speculation.h, docs/ARCHITECTURE.md "Speculation"): with clipping or
  // loss scaling, the CPU layers whose gradients land first update into a second state slot before the
  // norm is known, and a commit adopts or redoes them after it. The host bytes those second slots may
  // take: 0 turns speculation off; kSpeculationMax is what the host has beyond the plan without them
  // (core::resolve_speculation_bytes), every eligible layer where the host's memory is not known.
  int64_t speculation_bytes = 0;
  // At most this many CPU layers speculate, the first in backward order (kEveryEligibleLayer: as many as
  // speculation_bytes holds): the cost model's choice for `training.speculation: auto` (backends/sim
  // speculation_budget.h), since a speculated pass that starts after the norm has landed hides nothing and
  // pays the out-of-place pass and a second state slot.
  int speculation_layers = kEveryEligibleLayer;
  // Carry the step's CPU-side tail into the next step (Op::carried): the step ends when its GPU and
  // collective work ends, and the next step's ops that touch what the tail writes or reads wait for it
  // (Op::carried_deps). false: every op is awaited at the step's end (the schedule before issue 15).
  bool carry_tail = false;
  CpuPassOrder cpu_order;  // the speculated layers' passes (today's order by default)
  // With staging rings, a norm wait and a carried tail: after the norm, the CPU layers whose D2Hs landed
  // before it (the first `staging_slots` in backward order, which hold every slot) pass first, then the
  // others in forward order, so the next forward's first CPU layer gets its parameters early and the
  // forward pipelines with the rest of the pass (core::ring_use_order). false: backward order, the ring
  // schedule before it (where only the GPU segment's forward overlapped the pass of a step that clipped).
  bool ring_forward_order = false;
  bool operator==(const StepConfig&) const = default;
};

// The order the CPU layers use the host staging slots in, and with a norm wait the order their passes run in
// after the norm, as positions in backward order (0: the CPU layer whose gradient lands first): the i-th
// entry takes slot i % slots and reuses the slot of the entry `slots` before it. With clipping or loss
// scaling and a carried tail: at full-size staging (slots >= cpu_layers) forward order, cpu_layers - 1 down
// to 0; with rings and StepConfig::ring_forward_order, positions 0 .. slots - 1 (the D2Hs that land before
// the norm) and then the others in forward order (cpu_layers - 1 down to slots). Everywhere else backward
// order, 0 .. cpu_layers - 1.
std::vector<int> ring_use_order(int cpu_layers, int slots, const StepConfig& cfg);

// The host staging rings of a split (the gradient ring and the copy ring have this one layout). The
// CPU layers take slots in core::ring_use_order (backward order, the order their gradients land, unless
// StepConfig::ring_forward_order applies): the i-th takes slot i % slots, and slot s is as large as the
// largest CPU piece among its layers, so a ring never holds
// more than the segment (with one slot per CPU layer it is exactly the segment). No CPU segment: no slots.
struct StagingRing {
  int slots = 0;
  std::vector<int64_t> offsets;  // (slots + 1) slot s's first element; offsets[slots]: the ring's elements
  // (CPU layers) the slot of the i-th CPU layer in backward order (the CPU pieces with elements, from the
  // segment's end): its place in core::ring_use_order modulo slots. The one statement of which slot holds
  // a layer: the planner's Op::staging_slot and cpu::CpuSegment's first touch both read it.
  std::vector<int32_t> slot_of;
  int64_t elems() const { return offsets.empty() ? 0 : offsets.back(); }
  int64_t slot_elems(int s) const { return offsets[size_t(s) + 1] - offsets[size_t(s)]; }
  bool operator==(const StagingRing&) const = default;
};
// Throws core::InputError for a `cfg.staging_slots` out of range (check_staging_slots).
StagingRing staging_ring(const TwinFlowSplit& split, const StepConfig& cfg);
// The most slots a ring may have (StepConfig::staging_slots).
constexpr int kMaxStagingSlots = 1024;
// Throws core::InputError unless `slots` is in [0, kMaxStagingSlots] (0: kUnboundedStaging; kStagingAuto
// is a settings value, resolved before planning).
void check_staging_slots(int slots);

// The step configuration of a policy: the optimizer, clipping and loss scaling it implies, gradients
// of `grad_dtype` (bf16/fp16 gradients with bf16 parameters; fp32 both), the batch shape and the
// speculation budget. The one derivation shared by the settings resolver (core/settings.h) and the
// functional simulator.
StepConfig make_step_config(const StepPolicy& policy, DType grad_dtype, int64_t micro_batch, int grad_accum,
                            bool checkpointing, int64_t speculation_bytes = kSpeculationMax);

// The ops of one step of one rank, in issue order; deps only point backwards, and ops on one queue
// run in issue order (so same-queue deps are implicit and not listed), across steps too: step t + 1's ops
// on a queue run after step t's. With StepConfig::carry_tail the carried ops (Op::carried) are a suffix
// of each queue's ops, no other op depends on them, and step t + 1 begins once step t's other ops are
// done. Every rank issues the same
// list. Gradient accumulation keeps the CPU segment's gradients on the GPU until the last
// micro-batch, so PCIe carries exactly 2 B/param of the CPU segment each way per step.
struct StepPlan {
  std::vector<Op> ops;
  int64_t pcie_d2h_bytes = 0, pcie_h2d_bytes = 0;  // totals over the step (2 B/param of the CPU segment each way)
  StepConfig config;                               // what it was planned with
  int stage = 3;                                   // ZeRO stage
  int layers = 0;                                  // model layers
  StagingRing staging;                             // the host staging rings the slots index
  bool operator==(const StepPlan&) const = default;
};

// Every dependency is listed, buffer reuse included: backward k writes the layer-gradient buffer that
// reduction k-2 read, so it waits for that reduction; a ZeRO-3 gather waits for the last reader of its
// prefetch buffer (and of the shared buffer when it fills that too); the D2H into staging slot s waits
// for the CPU pass that last read it (a speculated layer's commit), and the CPU pass writing copy slot
// s for the H2D that last read it. A speculated layer (core::speculated_layers) gets its speculative
// CPU update right after its D2H (or later, in the order StepConfig::cpu_order sets) and, after the
// norm, a commit that its H2D waits for.
// With StepConfig::carry_tail the step's carried ops and the next step's waits on them
// (Op::carried_deps): the next step's first gather (ZeRO-3) or first forward (stages 1/2, the replica)
// of a layer waits for the layer's H2D (refresh). Every other pair across the steps follows from those:
// the next step reads every layer's parameters before anything else of it touches what the tail does.
// core/plan_hazards.h checks that nothing is left implicit, within a step and across two.
StepPlan plan_step(const ModelDesc& model, const Partition& part, const TwinFlowSplit& split, const StepConfig& cfg);

// Op ids per queue (core::Queue order), in the order each queue issues and runs them: the plan's order.
// The CUDA engine's issuers walk these lists; the simulators' queues run them in this order.
using QueueOrder = std::array<std::vector<uint32_t>, kQueueCount>;
QueueOrder plan_queue_order(const StepPlan& plan);

// Whether the plan carries ops into the next step (StepConfig::carry_tail with something to carry).
bool carries(const StepPlan& plan);

// The speculated layers whose passes StepConfig::cpu_order orders in `plan` (its n), 0 where the order does
// not apply (no carried tail, staging rings, no norm wait, no speculation): the candidates' range.
int ordered_cpu_passes(const StepPlan& plan);

}  // namespace tf::core
