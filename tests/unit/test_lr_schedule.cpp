// core::lr_at against hand-computed values at each kind's boundary steps (DeepSpeed's schedules with
// its step offset: update t runs at last_batch_iteration t - 2), its refusals, and lr_peak.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/optim/lr_schedule.h"

using namespace tf::core;

namespace {

// Relative error bound for values written by hand: DeepSpeed's operation order (1/log(W) x log(i+1),
// min + delta x gamma) may round differently from the decimal written here by an ulp or two.
constexpr double kRel = 1e-14;

void expect_lr(const LrSchedule& s, int64_t step, double want) {
  const double got = lr_at(s, step);
  EXPECT_NEAR(got, want, std::abs(want) * kRel) << lr_schedule_name(s.kind) << " step " << step;
}

LrSchedule warmup(WarmupType type, double min_lr, double max_lr, int64_t steps) {
  LrSchedule s;
  s.kind = LrScheduleKind::kWarmupLr;
  s.warmup_type = type;
  s.warmup_min_lr = min_lr;
  s.warmup_max_lr = max_lr;
  s.warmup_num_steps = steps;
  return s;
}

}  // namespace

TEST(LrSchedule, ConstantIsTheOptimizersLr) {
  LrSchedule s;
  s.base_lr = 3e-4;
  for (int64_t step : {int64_t(1), int64_t(2), int64_t(1000), int64_t(1) << 40}) EXPECT_EQ(lr_at(s, step), 3e-4);
}

// warmup_min_lr 0, warmup_max_lr 1e-3, 10 steps, log: gamma(i) = ln(i+1) / ln(10) = log10(i+1).
TEST(LrSchedule, WarmupLrLog) {
  const LrSchedule s = warmup(WarmupType::kLog, 0.0, 1e-3, 10);
  EXPECT_EQ(lr_at(s, 1), 0.0);                  // before DeepSpeed's first scheduler step: warmup_min_lr
  EXPECT_EQ(lr_at(s, 2), 0.0);                  // i = 0: log10(1) = 0
  expect_lr(s, 3, 1e-3 * 0.30102999566398120);  // i = 1: log10(2)
  expect_lr(s, 6, 1e-3 * 0.69897000433601880);  // i = 4: log10(5)
  expect_lr(s, 11, 1e-3);                       // i = 9: log10(10) = 1, the last warm-up point
  EXPECT_EQ(lr_at(s, 12), 1e-3);                // i = 10: warm-up done, gamma exactly 1
  EXPECT_EQ(lr_at(s, 100000), 1e-3);
}

// warmup_min_lr 1e-5, warmup_max_lr 1e-3 (delta 9.9e-4), 4 steps, linear: gamma(i) = i / 4.
TEST(LrSchedule, WarmupLrLinear) {
  const LrSchedule s = warmup(WarmupType::kLinear, 1e-5, 1e-3, 4);
  EXPECT_EQ(lr_at(s, 1), 1e-5);
  EXPECT_EQ(lr_at(s, 2), 1e-5);  // i = 0
  expect_lr(s, 3, 2.575e-4);     // i = 1: 1e-5 + 9.9e-4 / 4
  expect_lr(s, 5, 7.525e-4);     // i = 3: 1e-5 + 9.9e-4 x 3/4
  expect_lr(s, 6, 1e-3);         // i = 4: done
  expect_lr(s, 7, 1e-3);
}

// DeepSpeed warms up over max(2, warmup_num_steps): 1 step is 2.
TEST(LrSchedule, OneWarmupStepIsTwo) {
  const LrSchedule s = warmup(WarmupType::kLinear, 0.0, 1e-3, 1);
  EXPECT_EQ(lr_at(s, 2), 0.0);   // i = 0
  expect_lr(s, 3, 5e-4);         // i = 1: 1/2
  EXPECT_EQ(lr_at(s, 4), 1e-3);  // i = 2
  const LrSchedule log = warmup(WarmupType::kLog, 0.0, 1e-3, 1);
  expect_lr(log, 3, 1e-3);  // ln 2 / ln 2
}

// WarmupDecayLR: linear warm-up over 4 steps to 1e-3, then (T - i) / (T - W) with T = 10.
TEST(LrSchedule, WarmupDecayLr) {
  LrSchedule s = warmup(WarmupType::kLinear, 0.0, 1e-3, 4);
  s.kind = LrScheduleKind::kWarmupDecayLr;
  s.total_num_steps = 10;
  EXPECT_EQ(lr_at(s, 1), 0.0);
  expect_lr(s, 3, 2.5e-4);        // i = 1
  EXPECT_EQ(lr_at(s, 6), 1e-3);   // i = 4: (10 - 4) / 6 = 1
  expect_lr(s, 7, 1e-3 * 5 / 6);  // i = 5
  expect_lr(s, 9, 1e-3 * 3 / 6);  // i = 7
  EXPECT_EQ(lr_at(s, 12), 0.0);   // i = 10: (10 - 10) / 6
  EXPECT_EQ(lr_at(s, 13), 0.0);   // i = 11: max(0, -1/6)
  // total_num_steps below the warm-up: the denominator is max(1, T - W) = 1, the lr 0 after it
  s.total_num_steps = 2;
  expect_lr(s, 5, 7.5e-4);      // i = 3, still warming up
  EXPECT_EQ(lr_at(s, 6), 0.0);  // i = 4: max(0, (2 - 4) / 1)
}

// WarmupCosineLR: base 1e-3, warmup_min_ratio 0.1, cos_min_ratio 0.01, 4 linear warm-up steps, T = 10:
// ratio 0.1 + 0.9 i/4 while warming up, then 0.01 + 0.99 (1 + cos(pi p)) / 2 with p = (i - 3) / 6 up to 1.
TEST(LrSchedule, WarmupCosineLr) {
  LrSchedule s;
  s.kind = LrScheduleKind::kWarmupCosineLr;
  s.base_lr = 1e-3;
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.01;
  s.warmup_num_steps = 4;
  s.warmup_type = WarmupType::kLinear;
  s.total_num_steps = 10;
  EXPECT_EQ(lr_at(s, 1), 0.0);  // before DeepSpeed's first scheduler step: 0 x the base
  expect_lr(s, 2, 1e-4);        // i = 0: ratio 0.1
  expect_lr(s, 3, 3.25e-4);     // i = 1: 0.1 + 0.9 / 4
  // i = 4: p = 1/6, cos(pi/6) = sqrt(3)/2
  expect_lr(s, 6, 1e-3 * (0.01 + 0.99 * (1 + 0.86602540378443865) / 2));
  expect_lr(s, 8, 5.05e-4);  // i = 6: p = 1/2, cos = 0: 0.01 + 0.99/2
  expect_lr(s, 11, 1e-5);    // i = 9: p = 1, the floor
  expect_lr(s, 30, 1e-5);    // p clamped to 1: stays at the floor
  // log warm-up with the default ratios: 0 + log10(i + 1) over 10 steps
  s.warmup_type = WarmupType::kLog;
  s.warmup_min_ratio = 0;
  s.warmup_num_steps = 10;
  s.total_num_steps = 100;
  expect_lr(s, 3, 1e-3 * 0.30102999566398120);
}

// An lr depends on the optimizer step alone: the same step, the same bits, in any order.
TEST(LrSchedule, PureFunctionOfTheStep) {
  LrSchedule s = warmup(WarmupType::kLog, 1e-6, 2e-3, 50);
  s.kind = LrScheduleKind::kWarmupDecayLr;
  s.total_num_steps = 80;
  std::vector<double> forward;
  for (int64_t t = 1; t <= 100; ++t) forward.push_back(lr_at(s, t));
  for (int64_t t = 100; t >= 1; --t) EXPECT_EQ(lr_at(s, t), forward[size_t(t - 1)]) << t;
}

TEST(LrSchedule, Refusals) {
  LrSchedule s = warmup(WarmupType::kLog, 0.0, 1e-3, 10);
  EXPECT_THROW(lr_at(s, 0), InputError);
  EXPECT_THROW(lr_at(s, -3), InputError);
  s.warmup_num_steps = 0;
  EXPECT_THROW(check_lr_schedule(s), InputError);
  s.warmup_num_steps = -1;
  EXPECT_THROW(lr_at(s, 5), InputError);
  s = warmup(WarmupType::kLog, -1e-3, 1e-3, 10);
  EXPECT_THROW(check_lr_schedule(s), InputError);
  s = warmup(WarmupType::kLog, 0.0, NAN, 10);
  EXPECT_THROW(check_lr_schedule(s), InputError);
  s = warmup(WarmupType::kLog, 0.0, 1e-3, 10);
  s.kind = LrScheduleKind::kWarmupDecayLr;  // total_num_steps 0: missing
  EXPECT_THROW(check_lr_schedule(s), InputError);
  s.kind = LrScheduleKind::kWarmupCosineLr;
  EXPECT_THROW(check_lr_schedule(s), InputError);
  s.total_num_steps = 10;
  s.cos_min_ratio = -0.1;
  EXPECT_THROW(check_lr_schedule(s), InputError);
  try {
    s.cos_min_ratio = 0;
    s.warmup_num_steps = 0;
    check_lr_schedule(s);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("WarmupCosineLR: 'warmup_num_steps' = 0"), std::string::npos) << e.what();
  }
}

TEST(LrSchedule, Peak) {
  LrSchedule s;
  s.base_lr = 2e-4;
  EXPECT_EQ(lr_peak(s), 2e-4);
  s = warmup(WarmupType::kLog, 3e-3, 1e-3, 10);  // a decreasing "warm-up" is allowed: its start is the peak
  EXPECT_EQ(lr_peak(s), 3e-3);
  s.kind = LrScheduleKind::kWarmupCosineLr;
  s.base_lr = 1e-3;
  s.total_num_steps = 20;
  EXPECT_EQ(lr_peak(s), 1e-3);
  s.warmup_min_ratio = 1.5;
  EXPECT_EQ(lr_peak(s), 1.5e-3);
  // the peak bounds every step
  for (int64_t t = 1; t <= 40; ++t) EXPECT_LE(lr_at(s, t), lr_peak(s)) << t;
}
