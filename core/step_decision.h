// What a step does once its gradient statistics are known: skip (fp16 overflow), stop (non-finite
// gradients in bf16/fp32 training), or update with these scalars (clipping folded in). Shared by the
// functional simulator, the plain reference loop and the CUDA engine, so they decide alike.
#pragma once

#include <cstdint>

#include "core/optim/dtype.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer.h"

namespace tf::core {

struct StepPolicy {
  OptimizerKind kind = OptimizerKind::kAdamW;
  HyperParams hp = default_hyper_params(OptimizerKind::kAdamW);
  double clip = 0;              // max global L2 norm of the unscaled gradient; 0: off
  bool skip_nonfinite = false;  // fp16 loss scaling: a non-finite gradient skips the step; else it stops
  // The lr of each optimizer step (core::lr_at); its base_lr is hp.lr (make_step_policy copies it, and
  // decide_step refuses a policy where they differ).
  LrSchedule schedule;
};

// The policy of an optimizer, a clip, a gradient dtype and an lr schedule (its base_lr taken from
// hp.lr): fp16 gradients come with loss scaling, so a non-finite gradient skips the step; bf16/fp32
// training stops on one. Throws InputError for a schedule that check_lr_schedule refuses or whose peak
// lr breaks the optimizer's ranges (validate: lr x weight_decay <= 1 for AdamW and Lion).
StepPolicy make_step_policy(OptimizerKind kind, const HyperParams& hp, double clip, DType grad_dtype,
                            LrSchedule schedule = {});

struct StepDecision {
  bool skip = false;
  bool clipped = false;  // the clip coefficient was below 1 (the norm exceeded the clip)
  double norm = 0;       // global L2 norm of the unscaled gradient (inf when skipped)
  double lr = 0;         // the lr of this update (lr_at(policy.schedule, opt_step)), set when skipped too
  StepScalars scalars;   // made with hp.lr = lr
};

// sumsq: canonical sum of squares of the loss-scaled gradient; nonfinite: elements that are NaN/Inf;
// opt_step: the 1-based optimizer step this update would be (its lr is lr_at(p.schedule, opt_step), so
// a step's lr is known when the step begins: core::Speculation's scalars use it too). Throws
// RuntimeFailure naming `step` when non-finite gradients are found and the policy does not skip
// (nothing has been updated yet).
StepDecision decide_step(const StepPolicy& p, int step, double sumsq, uint64_t nonfinite, double loss_scale,
                         int64_t opt_step);

// Dynamic loss scaling as the engines run it: halve on an overflow (not below min_scale), double
// after `window` consecutive clean steps (window <= 0: never grow).
struct LossScaler {
  double scale = 1;
  int64_t window = 1000;
  double min_scale = 1;
  int64_t clean = 0;
  void update(bool overflow) {
    if (overflow) {
      scale = scale / 2 < min_scale ? min_scale : scale / 2;
      clean = 0;
    } else if (window > 0 && ++clean >= window) {
      scale *= 2;
      clean = 0;
    }
  }
};

}  // namespace tf::core
