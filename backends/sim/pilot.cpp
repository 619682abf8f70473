// A pilot simulation's speculated CPU passes (see pilot.h).
#include "backends/sim/pilot.h"

#include <algorithm>
#include <map>

namespace tf::backend::sim {

PilotTimes pilot_times(const SimPoint& pilot) {
  const core::StepPlan& plan = pilot.plans.at(0);
  const std::vector<OpTiming>& t = pilot.ranks.at(0).ops;
  PilotTimes out;
  std::map<int, int64_t> d2h_end;  // layer -> its D2H's end
  for (const core::Op& op : plan.ops) {
    const OpTiming& ot = t.at(op.id);
    if (op.kind == core::OpKind::kD2HGrad) d2h_end[op.layer] = ot.end_ns;
    if (op.kind == core::OpKind::kNormAllReduce) out.norm_end_ns = ot.end_ns;
    if (op.kind == core::OpKind::kCpuOptimizer && op.state_slot == 1)
      out.passes.push_back({op.layer, d2h_end.at(op.layer), ot.end_ns - ot.start_ns});
  }
  return out;
}

std::vector<int64_t> replay(const PilotTimes& p, int m, bool& waits) {
  std::vector<const PilotPass*> order;
  for (int i = 0; i < m; ++i) order.push_back(&p.passes[size_t(i)]);
  for (int i = int(p.passes.size()) - 1; i >= m; --i) order.push_back(&p.passes[size_t(i)]);  // forward order
  std::vector<int64_t> ends;
  int64_t t = p.passes.front().ready_ns;
  waits = false;
  for (size_t i = 0; i < order.size(); ++i) {
    waits = waits || (int(i) >= m && order[i]->ready_ns > t);
    t = std::max(t, order[i]->ready_ns) + order[i]->pass_ns;
    ends.push_back(t);
  }
  return ends;
}

}  // namespace tf::backend::sim
