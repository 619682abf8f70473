// The speculated CPU passes' count and order in the commands (docs/ARCHITECTURE.md, "How many layers
// speculate", "Order after the norm"): a line of words and a JSON record of what a point planned with and,
// where training.speculation or training.cpu_order was auto, how the cost model chose it (`twinflow run` and
// `twinflow simulate` share them; `validate` reads the records back).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "backends/sim/sim_backend.h"
#include "core/step.h"

namespace tf::app {

// "CPU pass order: ..." (arrival order, or the cost model's m and k of n with the predicted steps).
std::string cpu_order_text(const core::CpuPassOrder& order, const std::optional<backend::sim::CpuOrderChoice>& choice);
// {"arrival": m, "before_norm": k} (-1: all, today's order) and, when chosen, "chosen": {"passes",
// "step_ms", "arrival_order_step_ms", "candidates"}.
nlohmann::json cpu_order_json(const core::CpuPassOrder& order,
                              const std::optional<backend::sim::CpuOrderChoice>& choice);

// "speculation: the cost model's choice of J of E eligible layers ...: X ms predicted, Y with every eligible
// layer, Z with none" (for a choice with eligible layers: the commands print none otherwise).
std::string speculation_choice_text(const backend::sim::SpeculationChoice& choice);
// {"layers", "eligible", "suggested", "step_ms", "every_layer_step_ms", "no_layer_step_ms", "candidates"}.
nlohmann::json speculation_choice_json(const backend::sim::SpeculationChoice& choice);

}  // namespace tf::app
