// The host footprints at which `twinflow calibrate --footprints` (and `bench --footprints`) measure the CPU
// optimizer's rate: the pinned memory the simulator plans for the node's ranks at a few ratios of each
// scenario, each with the CPU segments the engine would run there (docs/ARCHITECTURE.md, "The simulator:
// the host is shared").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "apps/twinflow/cpu_ranks.h"
#include "core/scenario.h"

namespace tf::app {

struct HostFootprint {
  std::string what;        // e.g. "mlp-8b-h200x2 at ratio 1"
  int64_t node_bytes = 0;  // the node's pinned bytes as the simulator plans them (SimPoint::cpu_node_host_bytes)
  std::vector<RankLayout> layouts;  // the CPU segment of each of the node's ranks (scenario_layouts)
  std::vector<int64_t> resident;    // per rank: its planned host bytes beyond the worker's segment
};

// The footprints of every scenario at ratio 1 (the most pinned memory) and, unless quick, 0.5, the node's ranks being
// core::ranks_per_node at the scenario's world; ascending by node_bytes, a footprint within 10% of a larger one kept
// once (the larger).
std::vector<HostFootprint> scenario_footprints(const std::vector<core::Scenario>& scenarios, bool quick);

// `fp` cut to fit `available_bytes` of host memory: the resident bytes shrink first (equally per rank);
// returns false when the segments alone do not fit. node_bytes then says what is held.
bool fit_footprint(HostFootprint& fp, int64_t available_bytes);

// One footprint measured: the node rate of k rank processes holding `held` against that of k processes on
// small segments, the two groups' passes alternating (so that a drift of the host moves both), `reps` pairs.
struct FootprintMeasurement {
  HostFootprint held;                                     // as held: cut to the free memory (fit_footprint)
  int64_t small_node_bytes = 0;                           // the small segments' bytes over the k processes
  std::vector<double> small_gparam_s, gparam_s, factors;  // per pair: node rates and their ratio
};

// Measures `fp` through the engine's CPU path (CpuRankGroup, AdamW bf16) against k processes on `small`
// (k = fp.layouts.size() layouts; both groups' memory page-locked with register_memory), keeping a margin of the free
// memory (max(4 GiB, 2%)) and the small segments' bytes free; nullopt, with `why`, when fp's segments alone do not fit.
// `note` hears what is placed before the (long) first touch.
std::optional<FootprintMeasurement> measure_footprint(HostFootprint fp, const std::vector<RankLayout>& small, int reps,
                                                      bool pin, bool register_memory,
                                                      const std::function<void(const std::string&)>& note,
                                                      std::string* why);

}  // namespace tf::app
