// Step decisions: overflow policy, clipping coefficient, the step's scalars.
#include "core/step_decision.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace tf::core {

StepPolicy make_step_policy(OptimizerKind kind, const HyperParams& hp, double clip, DType grad_dtype) {
  return {kind, hp, clip, grad_dtype == DType::kF16};
}

StepDecision decide_step(const StepPolicy& p, int step, double sumsq, uint64_t nonfinite, double loss_scale,
                         int64_t opt_step) {
  StepDecision d;
  d.norm = std::sqrt(sumsq) / loss_scale;
  if (nonfinite > 0) {
    if (!p.skip_nonfinite)
      throw RuntimeFailure("step " + std::to_string(step) + ": " + std::to_string(nonfinite) +
                           " non-finite gradient element(s) in bf16/fp32 training; stopping before any update, "
                           "the weights and optimizer state are those of the previous step");
    d.skip = true;
    d.norm = std::numeric_limits<double>::infinity();
    return d;
  }
  d.clipped = p.clip > 0 && d.norm > p.clip;
  const double coef = d.clipped ? p.clip / (d.norm + 1e-6) : 1.0;
  d.scalars = make_step_scalars(p.kind, p.hp, opt_step, coef / loss_scale);
  return d;
}

}  // namespace tf::core
