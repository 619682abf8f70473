// The speculated CPU passes' order in words and JSON (see cpu_order_report.h).
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

}  // namespace tf::app
