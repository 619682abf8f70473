// The functional simulator tests' shared setup: the toy MLP, an optimizer's configuration, and clip
// thresholds between a run's step norms (for the speculation tests).
#pragma once

#include <algorithm>
#include <vector>

#include "backends/sim/functional.h"
#include "core/model.h"

namespace tf::test {

// The toy MLP: every rank of 4 holds several 2048-element tiles of each layer.
inline const core::ModelDesc& toy_mlp() {
  static const core::ModelDesc m = core::describe_model(core::make_mlp({128, 256, 256, 128}));
  return m;
}

// `kind` with its default hyper-parameters at lr 1e-2, over `steps` steps (the rest FunctionalConfig's
// defaults).
inline backend::sim::FunctionalConfig optimizer_config(core::OptimizerKind kind, int steps) {
  backend::sim::FunctionalConfig c;
  c.kind = kind;
  c.hp = core::default_hyper_params(kind);
  c.hp.lr = 1e-2;
  c.steps = steps;
  return c;
}

// The midpoints between consecutive sorted step norms of `base` trained by the plain loop with a clip
// that never bites (clipping stays on, so the optimizers still wait for the norm): with one of them
// some steps clip (their speculation fails) and others do not (it holds). The norms move with the
// weights, so a caller checks what a candidate does on its own run.
inline std::vector<double> clips_between_norms(const core::ModelDesc& m, backend::sim::FunctionalConfig base) {
  base.clip = 1e30;
  std::vector<double> norms = backend::sim::run_reference_loop(m, base).grad_norms;
  std::sort(norms.begin(), norms.end());
  std::vector<double> out;
  for (size_t i = 1; i < norms.size(); ++i) out.push_back(0.5 * (norms[i - 1] + norms[i]));
  return out;
}

}  // namespace tf::test
