// Memory per rank (GPU and pinned host) for ZeRO stage 1/2/3 with Twin-Flow: the allocation plan
// (core/alloc_plan.h) summed by kind, and the range of ratios that fit.
#pragma once

#include <cstdint>
#include <string>

#include "core/alloc_plan.h"
#include "core/model.h"
#include "core/partition.h"
#include "core/twinflow.h"

namespace tf::core {

// Bytes per rank: plan_allocations' buffers summed by kind. GPU terms sum to gpu_total, host terms to
// host_total.
struct RankMemory {
  int64_t gpu_params = 0;       // the rank's bf16 shard; stages 1/2 with several ranks also the replicated model
  int64_t gpu_grads = 0;        // stage >= 2: the shard's reduced grads (the CPU segment's part lands here
                                // before its D2H); stage 1: the full model's; + fp32 accumulation of the
                                // shard with grad_accum > 1
  int64_t gpu_optimizer = 0;    // fp32 master + states of the GPU segment
  int64_t gpu_activations = 0;  // one micro-batch, with or without checkpointing
  int64_t gpu_comm = 0;         // all-gather prefetch + reduce-scatter buffers (whole layers)
  int64_t gpu_workspace = 0;    // the step's small buffers and cuBLAS's workspace
  int64_t gpu_context = 0;      // GPU memory no buffer names: the CUDA context and libraries, cudaMalloc's rounding,
                                // the mapping of pinned host memory (the plan's kContext entries)
  int64_t gpu_total = 0;
  int64_t host_optimizer = 0;  // pinned fp32 master + states of the CPU segment (+ the speculated layers' spare slot)
  int64_t host_staging = 0;    // pinned gradient (D2H) and bf16 copy (H2D) rings of the CPU segment, and the
                               // decoder's pinned batches
  int64_t host_workspace = 0;  // the norm's 16-byte result
  int64_t host_total = 0;
};

// The allocation plan's bytes by kind.
RankMemory sum_by_kind(const AllocPlan& plan);

// Host bytes per CPU-side parameter (issue 16): the CPU segment's fp32 master and states, the speculated
// layers' second state slot (issue 15) and the staging rings, each over the segment's elements, read from
// the allocation plan's buffers by name. All 0 when the segment is empty.
struct HostBytesPerParam {
  double optimizer = 0;  // host_master + host_state1/2: 12 for Adam/AdamW, 8 for Adagrad/Lion
  double spare = 0;      // host_*_spare: the speculated layers' second slot (0 without speculation)
  double staging = 0;    // host_grad + host_copy (the rings)
  double total() const { return optimizer + spare + staging; }
};
HostBytesPerParam host_bytes_per_cpu_param(const AllocPlan& plan, int64_t cpu_elems);
// sum_by_kind(plan_allocations(...)).
RankMemory rank_memory(const ModelDesc& model, const Partition& part, const RankShard& shard,
                       const TwinFlowSplit& split, const MemoryOptions& opt);

// The memory of the largest shard at `ratio` (what feasible_ratios and check_ratio_fits hold to the budget).
RankMemory rank_memory_at(const ModelDesc& model, const Partition& part, const MemoryOptions& opt, double ratio);

// The ratios whose memory fits: GPU bytes fall and host bytes rise with the ratio, so the feasible
// set is an interval [min_ratio, max_ratio] (on the alignment grid of the largest shard). Both this and
// check_ratio_fits resolve `speculation: max` (auto's ceiling) against host_bytes_per_rank (opt.host_bytes_per_rank is
// replaced), so auto never changes which ratios fit; an explicit speculation budget counts in full.
struct RatioRange {
  bool feasible = false;
  double min_ratio = 0, max_ratio = 0;
  std::string why;  // when infeasible: the numbers
};
RatioRange feasible_ratios(const ModelDesc& model, const Partition& part, const MemoryOptions& opt,
                           int64_t gpu_bytes_per_rank, int64_t host_bytes_per_rank);

// Throws InputError when `ratio` does not fit on some rank, naming the numbers and the feasible range,
// e.g. "ratio 0.2 needs 85.3 GB on each GPU (params 3.1 + grads 2.4 + optimizer 64.0 + ...) but a GPU
// has 80.0 GB; the ratios that fit are [0.34, 1]".
void check_ratio_fits(const ModelDesc& model, const Partition& part, const MemoryOptions& opt, double ratio,
                      int64_t gpu_bytes_per_rank, int64_t host_bytes_per_rank);

// The rank's host staging in one line, e.g. "host staging: full-size (the host holds it: 31.2 GB of
// 503.6 GB)" or "host staging: rings of 3 slots (full-size staging would need 212.4 GB of host memory, the
// host has 125.9 GB)".
std::string staging_choice_text(const StagingChoice& c);

// "85.3 GB" (1 GB = 1e9 B)
std::string format_gb(int64_t bytes);

// The plan's GPU memory no buffer names, e.g. "unnamed GPU memory 0.91 GB: CUDA context and libraries 0.61 GB
// (measured), allocation rounding 0.20 GB, pinned-host mapping 0.10 GB".
std::string unnamed_gpu_text(const AllocPlan& plan);

// The bytes a margin keeps of `total_bytes` (>= 0): max(m.bytes, floor(m.fraction x total_bytes)).
int64_t margin_bytes(const MemoryMargin& m, int64_t total_bytes);
// A margin as a scenario writes it: "max(1 GiB, 1%)", "2147483648 B", "2%".
std::string margin_text(const MemoryMargin& m);

// What one rank may pin (docs/ARCHITECTURE.md, "Choosing the ratio"): the host's memory less the reserve
// (margin_bytes of the whole host), shared equally by the host's `local_ranks` (>= 1); 0 when the reserve
// takes it all. The memory model's host limit (core::rank_budget, from the profile), `staging_slots: auto`,
// `speculation: max` and the engine (`twinflow run`, from the machine) all take it from here.
int64_t pinnable_host_bytes_per_rank(int64_t host_bytes, int local_ranks, const MemoryMargin& reserve);

// The warning for a ratio that fits but eats into the GPU headroom (an explicit ratio: `ratio: auto` keeps
// the headroom), e.g. "ratio 0.33 leaves 0.1 GB of the GPU beyond the allocation plan (85.0 of 85.0 GB
// planned), less than training.gpu_headroom (1.1 GB): ..."; empty when plan + headroom fits.
std::string headroom_warning(double ratio, int64_t gpu_planned_bytes, int64_t gpu_bytes, int64_t headroom_bytes);

}  // namespace tf::core
