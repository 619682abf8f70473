// One rank's split, step plan and allocation plan (see rank_plan.h).
#include "core/rank_plan.h"

#include <string>

#include "core/error.h"

namespace tf::core {

RankPlan plan_rank(const ModelDesc& model, const Partition& part, int rank, double ratio, const MemoryOptions& opt) {
  if (rank < 0 || size_t(rank) >= part.ranks.size())
    throw InputError("rank " + std::to_string(rank) + " is outside the partition's " +
                     std::to_string(part.ranks.size()) + " ranks");
  const RankShard& shard = part.ranks[size_t(rank)];
  RankPlan p;
  p.split = split_shard(shard, ratio, part.opt.align_elems);
  // The step plan and the allocation plan stage and speculate alike: the staging first, the speculation
  // budget filling what it leaves.
  MemoryOptions resolved = opt;
  p.staging = choose_staging(model, part, shard, p.split, opt);
  resolved.step.staging_slots = p.staging.slots;
  resolved.step.speculation_bytes = resolve_speculation_bytes(model, part, shard, p.split, resolved);
  p.step = plan_step(model, part, p.split, resolved.step);
  p.alloc = plan_allocations(model, part, shard, p.split, resolved);
  return p;
}

}  // namespace tf::core
