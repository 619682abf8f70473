// What fits on a machine by the memory model (core/memory.h), before anything runs: the memory each rank
// has, a scenario's feasible ratios, by how much it misses and which changes would fit, and the largest
// model preset that fits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory.h"
#include "core/scenario.h"
#include "core/settings.h"

namespace tf::core {

// The memory one rank may use on the scenario's machine: its GPU's (the profile's gpu.hbm_bytes), and what
// it may pin of its node's host memory (host.memory_bytes less training.host_reserve, shared equally by the
// node's ranks: core::pinnable_host_bytes_per_rank); and the GPU headroom `ratio: auto` keeps free
// (training.gpu_headroom of gpu_bytes).
struct RankBudget {
  int64_t gpu_bytes = 0;
  int64_t host_bytes = 0;
  int64_t gpu_headroom_bytes = 0;
  int64_t host_reserve_bytes = 0;  // of the whole node
};
RankBudget rank_budget(const Scenario& s, int ranks_per_node);

// What the memory model says of a scenario at `world` ranks (the settings of resolve_settings with
// `overrides`; the memory of `overrides.workload` when given, else of the model trained for real), for
// choosing a ratio: a ratio fits when its plan + the GPU headroom fits the GPU and its host bytes what a
// rank may pin.
struct FitReport {
  RatioRange range;            // the ratios that fit (core::feasible_ratios at gpu_bytes - gpu_headroom_bytes)
  RankBudget budget;           // per rank
  RankMemory at_min, at_max;   // feasible: at range.min_ratio and range.max_ratio
  RankMemory needed;           // infeasible: at the ratio the shortfall is measured at
  double shortfall_ratio = 0;  // infeasible: 1 when the GPU is short even at ratio 1, else the smallest
                               // ratio that fits the GPU (where the host is shortest of memory)
  int64_t gpu_short_bytes = 0, host_short_bytes = 0;  // infeasible: needed minus budget (> 0 where short)
  std::string shortfall;                              // infeasible: those numbers as a sentence
};
FitReport check_fit(const Scenario& s, const SettingsOverrides& overrides = {});
// "0.123" (3 significant digits), and a range as "[0.12, 1]"
std::string format_ratio(double r);
std::string ratio_range_text(const RatioRange& r);

// Changes that make an infeasible scenario fit, each checked with the memory model: activation
// checkpointing, the largest micro-batch that fits, ZeRO stage 3, the fewest ranks that fit. Each
// reads "training.activation_checkpointing: true fits at ratios [0.12, 1]".
std::vector<std::string> fit_suggestions(const Scenario& s, const SettingsOverrides& overrides = {});

// One model preset on the scenario's machine with the scenario's training shape (its micro-batch,
// accumulation, checkpointing, precision, optimizer and stage; a decoder's sequence length when the
// scenario trains a decoder, capped at the preset's positions).
struct PresetFit {
  std::string preset;
  int64_t params = 0;
  int64_t seq = 0;
  FitReport fit;
  bool qualifies = false;  // fits (at the required ratio, when one is required)
};
struct PresetWalk {
  std::vector<PresetFit> tried;  // largest first, up to and including the first that qualifies
  std::optional<size_t> found;   // index into `tried`
};
// Walks the decoder presets whose name starts with `prefix` ("" for all; aliases excluded), largest
// first, and stops at the first whose feasible range is non-empty and, when `ratio` is given, holds it.
// Throws InputError when no preset has that prefix.
PresetWalk largest_fitting_preset(const Scenario& base, std::string_view prefix, std::optional<double> ratio = {},
                                  const SettingsOverrides& overrides = {});

}  // namespace tf::core
