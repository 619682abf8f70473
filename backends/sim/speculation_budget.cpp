// How many CPU layers speculate where the cost model predicts the shortest step (see speculation_budget.h).
#include "backends/sim/speculation_budget.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "backends/sim/pilot.h"

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
// arrival order (pilot.h), the count of those that start before the norm ends.
int suggested_layers(const SimPoint& pilot) {
  const PilotTimes p = pilot_times(pilot);
  if (p.passes.empty()) return 0;
  bool waits = false;
  const std::vector<int64_t> ends = replay(p, int(p.passes.size()), waits);
  int before_norm = 0;
  for (size_t i = 0; i < ends.size(); ++i) before_norm += ends[i] - p.passes[i].pass_ns < p.norm_end_ns;
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
  std::map<int, int64_t> step;                         // count -> predicted step
  std::map<int, std::optional<CpuOrderChoice>> order;  // count -> its order, where cpu_order was auto
  for (int j : counts) {
    o.overrides.speculation_layers = j;
    const SimPoint p = simulate_step(s, ratio, o);
    step[j] = p.step_ns;
    order[j] = p.cpu_order_choice;
    ++c.candidates;
  }
  int64_t best = INT64_MAX;
  for (const auto& [j, ns] : step) best = std::min(best, ns);
  for (const auto& [j, ns] : step)  // ascending counts: the fewest within the gain of the fastest
    if (double(ns) <= double(best) * (1 + kSpeculationMinGain)) {
      c.layers = j;
      c.step_ns = ns;
      c.cpu_order = order.at(j);
      break;
    }
  c.every_ns = step.at(c.eligible);
  c.none_ns = step.at(0);
  return c;
}

}  // namespace tf::backend::sim
