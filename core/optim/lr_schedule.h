// Learning-rate schedules as DeepSpeed writes them (deepspeed/runtime/lr_schedules.py: WarmupLR,
// WarmupDecayLR, WarmupCosineLR) and the constant lr, as one pure function of the optimizer step.
#pragma once

#include <cstdint>
#include <string_view>

namespace tf::core {

enum class LrScheduleKind : uint8_t {
  kConstant,        // no scheduler: every update at the optimizer's lr
  kWarmupLr,        // warmup_min_lr -> warmup_max_lr over warmup_num_steps, then warmup_max_lr
  kWarmupDecayLr,   // WarmupLR's warm-up, then linear decay to 0 at total_num_steps
  kWarmupCosineLr,  // the optimizer's lr x a ratio: warmup_min_ratio -> 1, then cosine to cos_min_ratio
};
enum class WarmupType : uint8_t { kLog, kLinear };

// "constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR" (DeepSpeed's class names).
std::string_view lr_schedule_name(LrScheduleKind k);
std::string_view warmup_type_name(WarmupType t);  // "log", "linear"

// A schedule and its parameters, DeepSpeed's keyword arguments (their defaults here are DeepSpeed's,
// except warmup_max_lr, whose default differs by kind: the scenario readers fill it).
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  // The optimizer's lr (HyperParams::lr; core::make_step_policy copies it here): the constant
  // schedule's lr and the base WarmupCosineLR multiplies (DeepSpeed's org_lrs). WarmupLR and
  // WarmupDecayLR do not read it.
  double base_lr = 1e-3;
  double warmup_min_lr = 0;         // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 1e-3;      // WarmupLR, WarmupDecayLR
  double warmup_min_ratio = 0;      // WarmupCosineLR
  double cos_min_ratio = 1e-4;      // WarmupCosineLR
  int64_t warmup_num_steps = 1000;  // >= 1; DeepSpeed warms up over max(2, warmup_num_steps)
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;  // WarmupDecayLR, WarmupCosineLR: >= 1
};

// The lr of optimizer step `step`: 1-based, the step Adam's bias correction uses (`opt_step` of
// core::decide_step), i.e. updates applied; an fp16 step skipped on overflow does not advance it.
// That is DeepSpeed's rule: engine.step() steps the scheduler after each applied update and not after
// an overflow (deepspeed/runtime/engine.py _take_model_step), and the scheduler starts at
// last_batch_iteration -1 without a step at construction. So update t runs at DeepSpeed's
// last_batch_iteration t - 2: update 1 at -1, where WarmupLR and WarmupDecayLR give warmup_min_lr and
// WarmupCosineLR gives 0, update 2 at 0 (the warm-up's first point, where gamma is 0 for both warm-up
// types: warmup_min_lr, or the base x warmup_min_ratio), update t at t - 2. The arithmetic is DeepSpeed's,
// operation for operation, in double, as of kDeepSpeedCompatibility's master: WarmupCosineLR's progress is
// clamped to 1 past total_num_steps (older releases let the lr rise again) and warmup_num_steps < 1 is
// refused (older releases took max(2, n) of any n).
// Throws InputError for step < 1 or an invalid schedule (check_lr_schedule).
double lr_at(const LrSchedule& s, int64_t step);

// The largest lr the schedule reaches at any step (what lr x weight_decay <= 1 must hold for).
double lr_peak(const LrSchedule& s);

// Throws InputError naming the parameter and its allowed range: lrs and ratios finite and >= 0,
// warmup_num_steps >= 1 (DeepSpeed refuses 0 and negatives), total_num_steps >= 1 for WarmupDecayLR
// and WarmupCosineLR, base_lr finite and >= 0.
void check_lr_schedule(const LrSchedule& s);

}  // namespace tf::core
