// Learning-rate schedules: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR, and the constant lr.
#include "core/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "core/error.h"

namespace tf::core {

std::string_view lr_schedule_name(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kWarmupLr: return "WarmupLR";
    case LrScheduleKind::kWarmupDecayLr: return "WarmupDecayLR";
    case LrScheduleKind::kWarmupCosineLr: return "WarmupCosineLR";
  }
  return "?";
}

std::string_view warmup_type_name(WarmupType t) { return t == WarmupType::kLinear ? "linear" : "log"; }

namespace {

void require(bool ok, const LrSchedule& s, const char* field, double v, const char* range) {
  if (ok) return;
  std::ostringstream os;
  os << lr_schedule_name(s.kind) << ": '" << field << "' = " << v << " is out of range; expected " << range;
  throw InputError(os.str());
}

bool nonneg(double v) { return std::isfinite(v) && v >= 0; }

// DeepSpeed's warm-up length: max(2, warmup_num_steps) (WarmupLR and WarmupCosineLR __init__).
int64_t warmup_steps(const LrSchedule& s) { return std::max<int64_t>(2, s.warmup_num_steps); }

// The warm-up's progress at DeepSpeed's last_batch_iteration i in [0, warmup_steps): log(i + 1) times
// the precomputed 1 / log(W) (inverse_log_warm_up), or i / W.
double warmup_gamma(const LrSchedule& s, int64_t i) {
  const int64_t w = warmup_steps(s);
  if (s.warmup_type == WarmupType::kLinear) return double(i) / double(w);
  const double inverse_log_warm_up = 1.0 / std::log(double(w));
  return inverse_log_warm_up * std::log(double(i + 1));
}

// WarmupLR._get_gamma / WarmupDecayLR._get_gamma at i >= 0.
double warmup_decay_gamma(const LrSchedule& s, int64_t i) {
  const int64_t w = warmup_steps(s);
  if (i < w) return warmup_gamma(s, i);
  if (s.kind == LrScheduleKind::kWarmupLr) return 1.0;
  const double remaining = double(s.total_num_steps - i);
  return std::max(0.0, remaining / std::max(1.0, double(s.total_num_steps - w)));
}

// WarmupCosineLR.get_lr_ratio at i >= 0.
double cosine_ratio(const LrSchedule& s, int64_t i) {
  const int64_t w = warmup_steps(s);
  if (i < w) {
    const double ratio_delta = 1.0 - s.warmup_min_ratio;
    return s.warmup_min_ratio + warmup_gamma(s, i) * ratio_delta;
  }
  const double real_last_step = double(i - w + 1);
  const double real_total_steps = double(std::max<int64_t>(1, s.total_num_steps - w));
  const double cosine_progress = std::min(1.0, real_last_step / real_total_steps);
  const double ratio_delta = 1.0 - s.cos_min_ratio;
  const double ratio = (1.0 + std::cos(std::numbers::pi * cosine_progress)) / 2.0;
  return std::max(0.0, s.cos_min_ratio + ratio_delta * ratio);
}

}  // namespace

void check_lr_schedule(const LrSchedule& s) {
  require(nonneg(s.base_lr), s, "lr", s.base_lr, "a finite value >= 0 (the optimizer's lr)");
  if (s.kind == LrScheduleKind::kConstant) return;
  require(s.warmup_num_steps >= 1, s, "warmup_num_steps", double(s.warmup_num_steps),
          "an integer >= 1 (DeepSpeed refuses 0 and negatives)");
  if (s.kind == LrScheduleKind::kWarmupDecayLr || s.kind == LrScheduleKind::kWarmupCosineLr)
    require(s.total_num_steps >= 1, s, "total_num_steps", double(s.total_num_steps), "an integer >= 1");
  if (s.kind == LrScheduleKind::kWarmupCosineLr) {
    require(nonneg(s.warmup_min_ratio), s, "warmup_min_ratio", s.warmup_min_ratio, "a finite value >= 0");
    require(nonneg(s.cos_min_ratio), s, "cos_min_ratio", s.cos_min_ratio, "a finite value >= 0");
    return;
  }
  require(nonneg(s.warmup_min_lr), s, "warmup_min_lr", s.warmup_min_lr, "a finite value >= 0");
  require(nonneg(s.warmup_max_lr), s, "warmup_max_lr", s.warmup_max_lr, "a finite value >= 0");
}

double lr_at(const LrSchedule& s, int64_t step) {
  if (step < 1) throw InputError("lr schedule: optimizer step must be >= 1 (1-based), got " + std::to_string(step));
  check_lr_schedule(s);
  const int64_t i = step - 2;  // DeepSpeed's last_batch_iteration when update `step` runs
  switch (s.kind) {
    case LrScheduleKind::kConstant: return s.base_lr;
    case LrScheduleKind::kWarmupLr:
    case LrScheduleKind::kWarmupDecayLr: {
      if (i < 0) return s.warmup_min_lr;  // get_lr before the first scheduler step: min_lrs
      const double delta_lr = s.warmup_max_lr - s.warmup_min_lr;
      return s.warmup_min_lr + (delta_lr * warmup_decay_gamma(s, i));
    }
    case LrScheduleKind::kWarmupCosineLr:
      if (i < 0) return 0.0;  // get_lr before the first scheduler step: 0 for every group
      return s.base_lr * cosine_ratio(s, i);
  }
  return s.base_lr;
}

double lr_peak(const LrSchedule& s) {
  switch (s.kind) {
    case LrScheduleKind::kConstant: return s.base_lr;
    case LrScheduleKind::kWarmupLr:
    case LrScheduleKind::kWarmupDecayLr: return std::max(s.warmup_min_lr, s.warmup_max_lr);
    case LrScheduleKind::kWarmupCosineLr: return s.base_lr * std::max({1.0, s.warmup_min_ratio, s.cos_min_ratio});
  }
  return s.base_lr;
}

}  // namespace tf::core
