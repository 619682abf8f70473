// Independent simulations several at once: the ratios of a sweep or of `ratio: auto`'s grid. Each cost-only
// simulation reads only its inputs (the scenario and the options, const), so they share nothing; callers record
// the results by index, so what they print and choose does not depend on the threads.
#pragma once

#include <cstddef>
#include <functional>

#include "backends/sim/sim_backend.h"
#include "core/scenario.h"

namespace tf::backend::sim {

inline constexpr int kSimulationMaxThreads = 8;   // at most this many simulations at once
inline constexpr int kSimulationWideWorld = 256;  // from this many simulated ranks, two at once (each holds
                                                  // every rank's plan: ~0.5 GB at 512 ranks)

// How many simulations of `s` (with `opt`'s world) run at once: `requested` when > 0, else the machine's cores,
// at most kSimulationMaxThreads, and 2 from kSimulationWideWorld ranks up.
size_t simulation_threads(const core::Scenario& s, const SimOptions& opt, int requested = 0);

// Runs fn(i) for every i in [0, n) on up to `threads` threads (the caller's among them) and waits for all. If
// any fail, rethrows the error of the smallest i that failed, after every call has returned.
void for_each_index(size_t n, size_t threads, const std::function<void(size_t)>& fn);

}  // namespace tf::backend::sim
