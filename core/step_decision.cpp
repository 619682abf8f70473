// Step decisions: overflow policy, clipping coefficient, the step's scalars.
#include "core/step_decision.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/error.h"

namespace tf::core {

StepPolicy make_step_policy(OptimizerKind kind, const HyperParams& hp, double clip, DType grad_dtype,
                            LrSchedule schedule) {
  schedule.base_lr = hp.lr;
  check_lr_schedule(schedule);
  HyperParams peak = hp;
  peak.lr = lr_peak(schedule);
  validate(kind, peak);
  return {kind, hp, clip, grad_dtype == DType::kF16, schedule};
}

StepDecision decide_step(const StepPolicy& p, int step, double sumsq, uint64_t nonfinite, double loss_scale,
                         int64_t opt_step) {
  if (p.schedule.base_lr != p.hp.lr)
    throw std::logic_error(
        "decide_step: the policy's schedule.base_lr differs from hp.lr; build it with make_step_policy");
  StepDecision d;
  d.lr = lr_at(p.schedule, opt_step);
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
  HyperParams hp = p.hp;
  hp.lr = d.lr;
  d.scalars = make_step_scalars(p.kind, hp, opt_step, coef / loss_scale);
  return d;
}

}  // namespace tf::core
