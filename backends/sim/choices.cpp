// The cost model's choices before a plan is made (see choices.h).
#include "backends/sim/choices.h"

namespace tf::backend::sim {

ModelChoices resolve_model_choices(core::RunSettings& settings, const core::Scenario& s, double ratio,
                                   const SimOptions& opt) {
  ModelChoices c;
  SimOptions o = opt;
  c.speculation = resolve_speculation(settings, s, ratio, o);
  if (c.speculation) o.overrides.speculation_layers = c.speculation->layers;
  c.cpu_order = resolve_cpu_order(settings, s, ratio, o);
  return c;
}

}  // namespace tf::backend::sim
