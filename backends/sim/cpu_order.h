// The speculated CPU layers' pass order (core::CpuPassOrder) that the cost model predicts fastest: what
// `training.cpu_order: auto` resolves to before a plan is made, for `run` (the CUDA engine's plan) and the
// cost-only simulator (`simulate`, `ratio: auto`) alike (docs/ARCHITECTURE.md, "Order after the norm").
// It lives here, not in core/, because it runs the simulator.
#pragma once

#include <optional>

#include "backends/sim/sim_backend.h"
#include "core/scenario.h"
#include "core/step.h"

namespace tf::backend::sim {

// How the candidates are found.
enum class CpuOrderSearch : uint8_t {
  // A few candidates around the order the pilot's timeline suggests (choose_cpu_order): about 10
  // simulations, what `run`, `simulate` and `ratio: auto` use.
  kWindow,
  // Every m and k with 0 <= m <= k <= n: n (n + 3) / 2 simulations (the tests hold the window to it).
  kExhaustive,
};

// A chosen order must predict a step this much shorter than today's (a fraction of it), else today's
// order stays: a smaller gain is below what the cost model resolves (its measured sweeps validate at a
// few percent) and not worth leaving the order the runs measured.
inline constexpr double kCpuOrderMinGain = 0.005;

// The order with the shortest step the cost-only simulator predicts for scenario `s` at `ratio` with
// `opt` (its overrides: the world, accumulation, staging, speculation and carry the plan is made with; its
// cpu_order is ignored), the speculation holding (SpeculationCase::kHolds: the case the order is for;
// without speculative work the passes after the norm run in forward order whatever the order, and in a
// step whose speculation fails the passes issued after the commits run twice, the speculative one and
// the redo). The pilot is today's order (m = k = n): its rank 0 timeline gives each speculated layer's
// gradient arrival (its D2H's end) and pass time and the norm's end; replaying the CPU queue with those
// for each m gives m0, the fewest arrival-order passes that keep the CPU busy until the last gradient
// lands (fewer leave it idle, more delay the next forward's first CPU layers), and k0(m), the passes that
// end before the norm does (the commits then find the norm decided). kWindow simulates m0 - 1 .. m0 + 1,
// each with three k from max(m, k0(m) - 1) (k0(m) - 1 .. k0(m) + 1, or m .. m + 2 where the norm lands before
// m passes have ended). The fastest wins (equal predictions: the earlier candidate, m then k
// ascending), and only when it beats today's order by kCpuOrderMinGain.
CpuOrderChoice choose_cpu_order(const core::Scenario& s, double ratio, const SimOptions& opt = {},
                                CpuOrderSearch search = CpuOrderSearch::kWindow);

}  // namespace tf::backend::sim
