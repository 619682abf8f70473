// The speculated CPU passes' order in the commands (docs/ARCHITECTURE.md, "Order after the norm"): one
// line of words and a JSON record of what a point planned with and, where training.cpu_order was auto,
// how the cost model chose it (`twinflow run` and `twinflow simulate` share them; `validate` reads the
// record back).
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

}  // namespace tf::app
