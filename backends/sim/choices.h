// The cost model's choices an executor's plan needs before it is made, resolved in one call: how many CPU
// layers speculate (training.speculation auto, speculation_budget.h), then their passes' order with that
// count (training.cpu_order auto, cpu_order.h). `run` resolves them per ratio before the CUDA engine plans;
// `simulate_step` makes the same choices itself.
#pragma once

#include <optional>
#include <string>

#include "backends/sim/cpu_order.h"
#include "backends/sim/sim_backend.h"
#include "backends/sim/speculation_budget.h"

namespace tf::backend::sim {

struct ModelChoices {
  std::optional<SpeculationChoice> speculation;  // how many CPU layers speculate (nullopt: not auto)
  std::optional<CpuOrderChoice> cpu_order;       // their passes' order (nullopt: not auto)
  // Why the cost model made no choice: the profile cannot cost the collectives at the settings' world and
  // ranks per node (collective_cost_issue); empty when it chose, or when nothing was auto
  std::string not_costed;
};

// Both auto settings of `settings` (core::resolve_settings of `s` with opt.overrides) resolved at `ratio`,
// as simulate_step chooses them: the count written to settings.step.speculation_layers, then the order chosen
// with that count to settings.step.cpu_order, each auto flag cleared; a setting that was not auto stays as it
// is (its choice nullopt). The same on every rank (the simulator is deterministic). When the profile cannot
// cost the collectives (a profile of one GPU for a launched world of two), both keep what an executor plans
// without choosing (every eligible layer the host holds speculates, today's order), the flags are cleared and
// `not_costed` says why: the run trains, it only loses the cost model's tuning.
ModelChoices resolve_model_choices(core::RunSettings& settings, const core::Scenario& s, double ratio,
                                   const SimOptions& opt);

}  // namespace tf::backend::sim
