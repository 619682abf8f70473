// The oracle: torch.optim's formulas written plainly with Eigen arrays, templated on the scalar
// (double for checking fp32 kernels, float for sanity). No fused order, no tricks.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer.h"

namespace tf::backend::reference {

template <class T>
using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;

template <class T>
struct OptimState {
  Vec<T> param;   // (n) master weights
  Vec<T> state1;  // (n) exp_avg | sum | Lion momentum
  Vec<T> state2;  // (n) exp_avg_sq (Adam*); empty otherwise
  int64_t step = 0;

  // Fresh state for `param`, as torch creates it lazily at the first step.
  static OptimState init(core::OptimizerKind k, const core::HyperParams& hp, const Vec<T>& param) {
    OptimState s;
    s.param = param;
    const T init1 = k == core::OptimizerKind::kAdagrad ? T(hp.initial_accumulator_value) : T(0);
    s.state1 = Vec<T>::Constant(param.size(), init1);
    if (core::state_count(k) == 2) s.state2 = Vec<T>::Zero(param.size());
    return s;
  }
};

// One optimizer step with gradient `grad` (already unscaled and clipped by the caller).
template <class T>
void step(core::OptimizerKind k, const core::HyperParams& hp, OptimState<T>& st, const Vec<T>& grad) {
  core::validate(k, hp);
  if (grad.size() != st.param.size())
    throw core::InputError("reference step: grad has " + std::to_string(grad.size()) + " elements, param has " +
                           std::to_string(st.param.size()));
  using std::pow;
  using std::sqrt;
  const T lr = T(hp.lr), b1 = T(hp.beta1), b2 = T(hp.beta2), eps = T(hp.eps), wd = T(hp.weight_decay);
  st.step += 1;
  const T t = T(st.step);
  switch (k) {
    case core::OptimizerKind::kAdamW:
    case core::OptimizerKind::kAdam: {
      Vec<T> g = grad;
      if (k == core::OptimizerKind::kAdamW)
        st.param *= T(1) - lr * wd;
      else if (wd != T(0))
        g += wd * st.param;
      st.state1 += (g - st.state1) * (T(1) - b1);  // lerp
      st.state2 = st.state2 * b2 + (T(1) - b2) * g * g;
      const T bc1 = T(1) - pow(b1, t);
      const T bc2 = T(1) - pow(b2, t);
      const T step_size = lr / bc1;
      const Vec<T> denom = st.state2.sqrt() / sqrt(bc2) + eps;
      st.param -= step_size * st.state1 / denom;
      break;
    }
    case core::OptimizerKind::kAdagrad: {
      Vec<T> g = grad;
      if (wd != T(0)) g += wd * st.param;
      const T clr = lr / (T(1) + (t - T(1)) * T(hp.lr_decay));
      st.state1 += g * g;
      st.param -= clr * g / (st.state1.sqrt() + eps);
      break;
    }
    case core::OptimizerKind::kLion: {
      const Vec<T> c = b1 * st.state1 + (T(1) - b1) * grad;
      st.param *= T(1) - lr * wd;
      st.param -= lr * c.sign();
      st.state1 = b2 * st.state1 + (T(1) - b2) * grad;
      break;
    }
  }
}

// One optimizer step at the lr `schedule` gives the state's next step (core::lr_at at st.step + 1, with
// the schedule's base_lr taken from hp.lr as core::make_step_policy takes it): what a DeepSpeed
// scheduler sets in the param group before torch.optim's step.
template <class T>
void step(core::OptimizerKind k, const core::HyperParams& hp, const core::LrSchedule& schedule, OptimState<T>& st,
          const Vec<T>& grad) {
  core::LrSchedule s = schedule;
  s.base_lr = hp.lr;
  core::HyperParams at = hp;
  at.lr = core::lr_at(s, st.step + 1);
  step(k, at, st, grad);
}

}  // namespace tf::backend::reference
