// How many CPU layers speculate where the cost model predicts the shortest step (see speculation_budget.h).
#include "backends/sim/speculation_budget.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace tf::backend::sim {

namespace {

// The speculated layers of the largest count among the ranks' plans (each speculated layer has one commit).
int eligible_layers(const SimPoint& pilot) {
  int most = 0;
  for (const core::StepPlan& plan : pilot.plans)
    most = std::max(most, int(std::count_if(plan.ops.begin(), plan.ops.end(),
                                            [](const core::Op& op) { return op.kind == core::OpKind::kCpuCommit; })));
  return most;
}

// The pilot's suggestion (speculation_budget.h): rank 0's speculative passes replayed back to back in
// arrival order from the first gradient's landing, each once its gradient has landed; the count of those
// that start before the norm ends.
int suggested_layers(const SimPoint& pilot) {
  const core::StepPlan& plan = pilot.plans.at(0);
  const std::vector<OpTiming>& t = pilot.ranks.at(0).ops;
  std::map<int, int64_t> landed;  // layer -> its D2H's end
  int64_t norm_end = 0;
  struct Pass {
    int64_t ready_ns, pass_ns;
  };
  std::vector<Pass> passes;  // the cpu queue's order: arrival order in the pilot
  for (const core::Op& op : plan.ops) {
    const OpTiming& ot = t.at(op.id);
    if (op.kind == core::OpKind::kD2HGrad) landed[op.layer] = ot.end_ns;
    if (op.kind == core::OpKind::kNormAllReduce) norm_end = ot.end_ns;
    if (op.kind == core::OpKind::kCpuOptimizer && op.state_slot == 1)
      passes.push_back({landed.at(op.layer), ot.end_ns - ot.start_ns});
  }
  if (passes.empty()) return 0;
  int before_norm = 0;
  int64_t cpu_free = passes.front().ready_ns;
  for (const Pass& p : passes) {
    const int64_t start = std::max(cpu_free, p.ready_ns);
    if (start >= norm_end) break;
    ++before_norm;
    cpu_free = start + p.pass_ns;
  }
  return before_norm;
}

}  // namespace

SpeculationChoice choose_speculation(const core::Scenario& s, double ratio, const SimOptions& opt,
                                     SpeculationSearch search) {
  SimOptions o = opt;
  o.speculation = SpeculationCase::kHolds;
  o.overrides.speculation_layers = core::kEveryEligibleLayer;
  SimOptions pilot_opt = o;
  pilot_opt.record_ops = pilot_opt.keep_plans = true;       // the pilot's plans and timeline suggest the count
  pilot_opt.overrides.cpu_order = core::CpuOrderSetting{};  // arrival order: each pass as its gradient lands
  const SimPoint pilot = simulate_step(s, ratio, pilot_opt);
  SpeculationChoice c;
  c.eligible = eligible_layers(pilot);
  c.candidates = 1;
  c.step_ns = c.every_ns = c.none_ns = pilot.step_ns;
  if (c.eligible == 0) return c;  // nothing speculates: nothing to choose
  c.suggested = suggested_layers(pilot);

  std::set<int> counts;
  if (search == SpeculationSearch::kExhaustive)
    for (int j = 0; j <= c.eligible; ++j) counts.insert(j);
  else
    for (int j : {0, c.suggested - 1, c.suggested, c.suggested + 1, c.suggested + 2, c.eligible})
      counts.insert(std::clamp(j, 0, c.eligible));
  std::map<int, int64_t> step;  // count -> predicted step
  for (int j : counts) {
    o.overrides.speculation_layers = j;
    step[j] = simulate_step(s, ratio, o).step_ns;
    ++c.candidates;
  }
  int64_t best = INT64_MAX;
  for (const auto& [j, ns] : step) best = std::min(best, ns);
  for (const auto& [j, ns] : step)  // ascending counts: the fewest within the gain of the fastest
    if (double(ns) <= double(best) * (1 + kSpeculationMinGain)) {
      c.layers = j;
      c.step_ns = ns;
      break;
    }
  c.every_ns = step.at(c.eligible);
  c.none_ns = step.at(0);
  return c;
}

}  // namespace tf::backend::sim
