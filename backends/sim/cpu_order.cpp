// The speculated CPU layers' pass order the cost model predicts fastest (see cpu_order.h).
#include "backends/sim/cpu_order.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "backends/sim/pilot.h"

namespace tf::backend::sim {

namespace {

// The candidates around the pilot's suggestion (cpu_order.h), m then k ascending.
std::vector<core::CpuPassOrder> window(const PilotTimes& p) {
  if (p.passes.empty()) return {};  // rank 0 speculates nothing (another rank does)
  const auto n = int(p.passes.size());
  int m0 = n;
  for (int m = 0; m < n && m0 == n; ++m) {
    bool waits = false;
    replay(p, m, waits);
    if (!waits) m0 = m;
  }
  std::vector<core::CpuPassOrder> out;
  for (int m = std::max(0, m0 - 1); m <= std::min(n - 1, m0 + 1); ++m) {
    bool waits = false;
    const std::vector<int64_t> ends = replay(p, m, waits);
    const auto k0 = int(std::count_if(ends.begin(), ends.end(), [&](int64_t e) { return e <= p.norm_end_ns; }));
    // k >= m: where fewer than m passes end before the norm (it lands early), the window starts at k = m
    const int k_lo = std::max(m, k0 - 1);
    for (int k = k_lo; k <= std::min(n, k_lo + 2); ++k) out.push_back({m, k});
  }
  return out;
}

std::vector<core::CpuPassOrder> every_order(int n) {
  std::vector<core::CpuPassOrder> out;
  for (int m = 0; m < n; ++m)
    for (int k = m; k <= n; ++k) out.push_back({m, k});
  return out;
}

}  // namespace

CpuOrderChoice choose_cpu_order(const core::Scenario& s, double ratio, const SimOptions& opt, CpuOrderSearch search) {
  SimOptions o = opt;
  o.speculation = SpeculationCase::kHolds;
  o.record_ops = o.keep_plans = true;  // the pilot's plans and timeline suggest the candidates
  o.overrides.cpu_order = core::CpuOrderSetting{};
  const SimPoint today = simulate_step(s, ratio, o);
  CpuOrderChoice c;
  for (const core::StepPlan& p : today.plans) c.passes = std::max(c.passes, core::ordered_cpu_passes(p));
  c.step_ns = c.arrival_ns = today.step_ns;
  c.candidates = 1;
  if (c.passes == 0) return c;
  const std::vector<core::CpuPassOrder> candidates =
      search == CpuOrderSearch::kExhaustive ? every_order(c.passes) : window(pilot_times(today));
  o.record_ops = o.keep_plans = false;
  int64_t best_ns = today.step_ns;
  core::CpuPassOrder best;
  for (const core::CpuPassOrder& order : candidates) {
    o.overrides.cpu_order = core::CpuOrderSetting{false, order};
    const int64_t ns = simulate_step(s, ratio, o).step_ns;
    ++c.candidates;
    if (ns < best_ns) best_ns = ns, best = order;
  }
  if (double(best_ns) <= double(today.step_ns) * (1.0 - kCpuOrderMinGain)) c.step_ns = best_ns, c.order = best;
  return c;
}

}  // namespace tf::backend::sim
