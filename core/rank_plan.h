// Everything one rank runs a step with, from its settings: the split of its shard, the step plan and
// the allocation plan. The CUDA engine and the cost-only simulator both build their ranks with this one
// call, so the simulator runs the plan the GPU runs (docs/ARCHITECTURE.md, "Where each fact lives").
#pragma once

#include "core/alloc_plan.h"
#include "core/model.h"
#include "core/partition.h"
#include "core/step.h"
#include "core/twinflow.h"

namespace tf::core {

struct RankPlan {
  TwinFlowSplit split;
  StepPlan step;    // core::plan_step(model, part, split, opt.step), its staging slots and speculation
                    // budget resolved (core::resolve_staging_slots, core::resolve_speculation_bytes: its
                    // config holds what it planned with)
  AllocPlan alloc;  // core::plan_allocations(model, part, shard, split, opt)
  StagingChoice staging;  // how the staging slots were chosen (core::choose_staging)
};

// Rank `rank` of `part` at `ratio`. Throws core::InputError for a rank outside the partition or a ratio
// outside [0, 1].
RankPlan plan_rank(const ModelDesc& model, const Partition& part, int rank, double ratio, const MemoryOptions& opt);

}  // namespace tf::core
