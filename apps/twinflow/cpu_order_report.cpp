// The speculated CPU passes' count and order in words and JSON (see cpu_order_report.h).
#include "apps/twinflow/cpu_order_report.h"

#include <nlohmann/json.hpp>

#include "apps/twinflow/table.h"

namespace tf::app {

namespace {

std::string count_text(int c) { return c == core::kAllPasses ? "all" : std::to_string(c); }

}  // namespace

std::string cpu_order_text(const core::CpuPassOrder& order, const std::optional<backend::sim::CpuOrderChoice>& choice) {
  std::string t = "CPU pass order";
  if (choice && choice->passes == 0) return t + ": nothing to order (training.cpu_order auto)";
  if (order == core::CpuPassOrder{})
    t += ": arrival (each speculated layer's pass as its gradient lands, every commit after them)";
  else
    t += ": " + count_text(order.arrival) + " speculated pass(es) in arrival order, the rest in forward order, " +
         count_text(order.before_norm) + " before the commits";
  if (choice)
    t += "; the cost model's choice of " + std::to_string(choice->candidates) + " orders over " +
         std::to_string(choice->passes) + " passes: " + fmt(double(choice->step_ns) / 1e6, 1) + " ms predicted, " +
         fmt(double(choice->arrival_ns) / 1e6, 1) + " in arrival order";
  return t;
}

nlohmann::json cpu_order_json(const core::CpuPassOrder& order,
                              const std::optional<backend::sim::CpuOrderChoice>& choice) {
  nlohmann::json j = {{"arrival", order.arrival}, {"before_norm", order.before_norm}};
  if (choice)
    j["chosen"] = {{"passes", choice->passes},
                   {"step_ms", double(choice->step_ns) / 1e6},
                   {"arrival_order_step_ms", double(choice->arrival_ns) / 1e6},
                   {"candidates", choice->candidates}};
  return j;
}

std::string speculation_choice_text(const backend::sim::SpeculationChoice& c) {
  const auto ms = [](int64_t ns) { return fmt(double(ns) / 1e6, 1); };
  return "speculation: the cost model's choice of " + std::to_string(c.layers) + " of " + std::to_string(c.eligible) +
         " eligible CPU layer(s) (" + std::to_string(c.candidates) + " counts simulated, " +
         std::to_string(c.suggested) +
         " passes start before the norm lands with every layer speculating): " + ms(c.step_ns) + " ms predicted, " +
         ms(c.every_ns) + " with every eligible layer, " + ms(c.none_ns) + " with none";
}

nlohmann::json speculation_choice_json(const backend::sim::SpeculationChoice& c) {
  return {{"layers", c.layers},
          {"eligible", c.eligible},
          {"suggested", c.suggested},
          {"step_ms", double(c.step_ns) / 1e6},
          {"every_layer_step_ms", double(c.every_ns) / 1e6},
          {"no_layer_step_ms", double(c.none_ns) / 1e6},
          {"candidates", c.candidates}};
}

}  // namespace tf::app
