// The CUDA suites' step loop: every step's report in step order, with a carried tail or without
// (Engine::step returns the previous step's report when the plan carries; Engine::drain the last one).
#pragma once

#include <optional>
#include <stdexcept>
#include <vector>

#include "backends/cuda/engine.h"

namespace tf::test {

// Runs `steps` steps and drains the last tail: exactly one report per step, step order.
inline std::vector<backend::cuda::StepReport> run_steps(backend::cuda::Engine& eng, int steps) {
  std::vector<backend::cuda::StepReport> out;
  for (int s = 0; s < steps; ++s)
    if (std::optional<backend::cuda::StepReport> r = eng.step()) out.push_back(std::move(*r));
  if (std::optional<backend::cuda::StepReport> r = eng.drain()) out.push_back(std::move(*r));
  if (int(out.size()) != steps) throw std::logic_error("run_steps: a step's report is missing");
  return out;
}

// One step and the drain after it: the step's own report, its state complete (a report an earlier
// drain point kept is dropped).
inline backend::cuda::StepReport step_drained(backend::cuda::Engine& eng) {
  (void)eng.drain();
  std::optional<backend::cuda::StepReport> r = eng.step();
  if (!r) r = eng.drain();
  return r.value();
}

}  // namespace tf::test
