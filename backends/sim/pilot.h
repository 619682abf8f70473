// A pilot simulation's speculated CPU passes, as the cost model's choices read them (cpu_order.h: the
// passes' order, speculation_budget.h: how many layers speculate): rank 0's timeline with every eligible
// layer speculating in arrival order, and the cpu queue replayed at its times.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/sim/sim_backend.h"

namespace tf::backend::sim {

// A speculated layer's pass as the pilot ran it.
struct PilotPass {
  int layer = 0;
  int64_t ready_ns = 0;  // its gradient landed (its D2H's end)
  int64_t pass_ns = 0;   // its speculative pass took
};

// What the pilot's rank 0 timeline says of the passes: each in arrival order, and the norm's end.
struct PilotTimes {
  std::vector<PilotPass> passes;  // arrival order (the pilot's cpu queue order)
  int64_t norm_end_ns = 0;
};

// From a pilot simulated with SimOptions::record_ops and keep_plans.
PilotTimes pilot_times(const SimPoint& pilot);

// The pass ends of the cpu queue with the first m passes in arrival order and the rest in forward order, at
// the pilot's times: each starting when its gradient has landed and the one before it ended, from the first
// gradient's landing (m = the passes' count: all in arrival order). `waits`: whether the CPU sat idle before
// a pass after the first m (its gradient had not landed while earlier ones had). `p` must have a pass.
std::vector<int64_t> replay(const PilotTimes& p, int m, bool& waits);

}  // namespace tf::backend::sim
