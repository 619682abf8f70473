// The cost model's choices before a plan is made (see choices.h).
#include "backends/sim/choices.h"

#include <utility>

namespace tf::backend::sim {

ModelChoices resolve_model_choices(core::RunSettings& settings, const core::Scenario& s, double ratio,
                                   const SimOptions& opt) {
  ModelChoices c;
  if (!settings.speculation_auto && !settings.cpu_order_auto) return c;
  if (std::optional<std::string> issue =
          collective_cost_issue(s.cluster.hardware, settings.world, settings.ranks_per_node)) {
    c.not_costed = std::move(*issue);
    settings.speculation_auto = settings.cpu_order_auto = false;
    return c;
  }
  SimOptions o = opt;
  if (settings.speculation_auto) {
    c.speculation = choose_speculation(s, ratio, o);
    settings.step.speculation_layers = c.speculation->layers;
    o.overrides.speculation_layers = c.speculation->layers;
    settings.speculation_auto = false;
  }
  if (settings.cpu_order_auto) {  // with the count just chosen (chosen with it where it was)
    c.cpu_order = c.speculation && c.speculation->cpu_order ? *c.speculation->cpu_order : choose_cpu_order(s, ratio, o);
    settings.step.cpu_order = c.cpu_order->order;
    settings.cpu_order_auto = false;
  }
  return c;
}

}  // namespace tf::backend::sim
