// Speculative CPU updates: the speculated layers, their spare slots, and the per-step rule.
#include "core/speculation.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace tf::core {

int64_t spare_slot_bytes_per_element(OptimizerKind k) { return 4 * (1 + int64_t(state_count(k))); }

std::vector<int32_t> speculated_layers(const TwinFlowSplit& split, const StepConfig& cfg) {
  std::vector<int32_t> out;
  if (!(cfg.clip_gradients || cfg.loss_scaling) || cfg.speculation_bytes == 0) return out;
  const int64_t budget =
      cfg.speculation_bytes == kSpeculationMax ? std::numeric_limits<int64_t>::max() : cfg.speculation_bytes;
  if (budget < 0) throw std::invalid_argument("speculated_layers: speculation_bytes must be >= 0 or max");
  if (cfg.speculation_layers < kEveryEligibleLayer)
    throw std::invalid_argument("speculated_layers: speculation_layers must be >= 0 or every eligible layer");
  const size_t most = cfg.speculation_layers == kEveryEligibleLayer ? SIZE_MAX : size_t(cfg.speculation_layers);
  const int64_t per_elem = spare_slot_bytes_per_element(cfg.optimizer);
  const int slots = staging_ring(split, cfg).slots;  // the D2Hs that land before the norm
  int64_t used = 0;
  int landed = 0;
  for (auto it = split.cpu.rbegin(); it != split.cpu.rend(); ++it) {  // backward order
    if (it->layer == 0) break;                                        // layer 0's gradient lands with the norm
    if (it->count == 0) continue;
    if (landed++ >= slots) break;  // its D2H waits for a commit, after the norm (core::plan_step)
    const int64_t bytes = it->count * per_elem;
    if (bytes > budget - used || out.size() >= most)
      break;  // a prefix in backward order: the spare slots stay contiguous
    used += bytes;
    out.push_back(int32_t(it->layer));
  }
  return out;
}

SpareRange spare_range(const TwinFlowSplit& split, const std::vector<int32_t>& layers) {
  SpareRange r;
  r.begin = split.cpu_elems;
  for (int32_t l : layers)
    for (const ShardPiece& p : split.cpu)
      if (int32_t(p.layer) == l) {
        r.begin = std::min(r.begin, p.shard_offset - split.boundary);
        r.elems += p.count;
      }
  if (r.begin + r.elems != split.cpu_elems)
    throw std::logic_error("spare_range: the speculated layers are not the tail of the CPU segment");
  return r;
}

bool same_bits(const StepScalars& a, const StepScalars& b) {
  static_assert(sizeof(StepScalars) == 11 * 4, "StepScalars has padding: compare it field by field");
  return std::memcmp(&a, &b, sizeof a) == 0;
}

Speculation::Speculation(const StepPlan& plan) : slot_(size_t(plan.layers), 0) {
  for (const Op& op : plan.ops)
    if (op.kind == OpKind::kCpuOptimizer && op.state_slot == 1) layers_.push_back(op.layer);
}

void Speculation::begin_step(const StepPolicy& policy, int step, double loss_scale, int64_t opt_step) {
  step_ = step;
  Bet& b = bets_[size_t(step) & 1];
  b.active = planned() && last_clean_;
  if (!b.active) return;
  b.scalars = decide_step(policy, step, 0.0, 0, loss_scale, opt_step + 1).scalars;
  ++speculated_steps_;
}

void Speculation::reset_slots() {
  std::fill(slot_.begin(), slot_.end(), uint8_t(0));
  last_clean_ = true;
  bets_ = {};
}

Speculation::Commit Speculation::commit(int32_t layer, const StepDecision& d, int step) {
  if (d.skip) return Commit::kSkip;
  if (!held(d, step)) return Commit::kUpdate;
  slot_[size_t(layer)] ^= 1;
  return Commit::kAdopt;
}

// The step's bet stays: its carried commits may still read it (Speculation::bet).
Speculation::Outcome Speculation::end_step(const StepDecision& d) {
  const Outcome o{bet(step_).active, held(d, step_)};
  if (o.speculated && !o.held) ++failed_steps_;
  last_clean_ = !d.skip && !d.clipped;
  return o;
}

}  // namespace tf::core
