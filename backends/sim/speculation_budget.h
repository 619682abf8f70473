// How many CPU layers speculate (core::StepConfig::speculation_layers) where the cost model predicts the
// shortest step: what `training.speculation: auto` resolves to before a plan is made, for `run` (the CUDA
// engine's plan) and the cost-only simulator (`simulate`, `ratio: auto`) alike (docs/ARCHITECTURE.md,
// "Speculation": "How many layers speculate"). It lives here, not in core/, because it runs the simulator.
#pragma once

#include <optional>

#include "backends/sim/sim_backend.h"
#include "core/scenario.h"

namespace tf::backend::sim {

// How the candidates are found.
enum class SpeculationSearch : uint8_t {
  // The counts around the pilot's suggestion, and none and every eligible layer (choose_speculation):
  // at most 6 counts besides the pilot, what `run`, `simulate` and `ratio: auto` use.
  kWindow,
  // Every count from 0 to every eligible layer (the tests hold the window to it).
  kExhaustive,
};

// A count predicted within this fraction of the fastest step counts as fast as it: the fewest such layers
// win (a smaller difference is below what the cost model resolves, and fewer layers take less host memory
// and waste less work in a step that clips).
inline constexpr double kSpeculationMinGain = 0.005;

// The cost model's count for scenario `s` at `ratio` with `opt` (its overrides: the world, accumulation,
// staging, speculation bytes and carry the plan is made with, and the CPU pass order, `auto` choosing one
// per count; its speculation_layers is ignored), the speculation holding (SpeculationCase::kHolds: the
// case the speculated layers are for; in a step after a clipped one nothing speculates, and in a step that
// clips every speculated pass is wasted, so neither asks for more layers). SpeculationChoice: sim_backend.h.
// The pilot is every eligible layer speculating in arrival order (every pass right after its gradient's
// D2H): its rank 0 timeline (pilot.h) gives each speculated pass's start had the CPU queue run them back to
// back from the first gradient's landing, and the norm's end; the suggestion is the count of passes that start
// before the norm ends. A pass that starts after it updates out of place for nothing (its commit could
// have run the in-place update at once) and takes a second state slot; one that starts before it moves
// CPU work ahead of the norm. kWindow simulates 0, the suggestion - 1 .. + 2 and every eligible layer
// (the pilot's CPU order aside; the best count was the suggestion + 1 or + 2 on the 2.15B MLP at ratios
// 0.3-1, where the layers after it run in place in forward order once the norm is in); the fastest count
// wins, and the fewest within kSpeculationMinGain of it.
SpeculationChoice choose_speculation(const core::Scenario& s, double ratio, const SimOptions& opt = {},
                                     SpeculationSearch search = SpeculationSearch::kWindow);

}  // namespace tf::backend::sim
