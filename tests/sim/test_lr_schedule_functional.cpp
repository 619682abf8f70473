// Lr schedules in the functional simulator: a scheduled run equals the plain loop with the same schedule
// bit for bit (ratios 0, 0.3, 1; worlds 1, 2), each step's lr is core::lr_at at its optimizer step (an
// fp16 step skipped on overflow does not advance it), speculation holds under a schedule (a step's lr is
// known when it begins), and a checkpoint taken during the warm-up resumes bit-identically.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/sim/functional.h"
#include "core/checkpoint.h"
#include "core/optim/lr_schedule.h"
#include "tests/bit_diff.h"
#include "tests/sim/functional_test_config.h"
#include "tests/temp_dir.h"

using namespace tf;
using backend::sim::FunctionalConfig;
using backend::sim::FunctionalResult;
using test::first_diff;

namespace {

// Each DeepSpeed kind over 10 steps: a 4-step warm-up, a decay that ends at step 8 (so steps 9 and 10
// run past it).
std::vector<core::LrSchedule> schedules() {
  core::LrSchedule warm;
  warm.kind = core::LrScheduleKind::kWarmupLr;
  warm.warmup_min_lr = 1e-4;
  warm.warmup_max_lr = 2e-2;
  warm.warmup_num_steps = 4;
  core::LrSchedule decay = warm;
  decay.kind = core::LrScheduleKind::kWarmupDecayLr;
  decay.warmup_type = core::WarmupType::kLinear;
  decay.total_num_steps = 8;
  core::LrSchedule cosine;
  cosine.kind = core::LrScheduleKind::kWarmupCosineLr;
  cosine.warmup_min_ratio = 0.1;
  cosine.cos_min_ratio = 0.2;
  cosine.warmup_num_steps = 4;
  cosine.total_num_steps = 8;
  return {warm, decay, cosine};
}

FunctionalConfig config(core::OptimizerKind kind, const core::LrSchedule& schedule) {
  FunctionalConfig c = test::optimizer_config(kind, 10);
  c.schedule = schedule;
  c.schedule.base_lr = c.hp.lr;
  c.micro_shards = 4;
  c.clip = 0.5;
  return c;
}

std::string name(const FunctionalConfig& c) {
  return std::string(core::lr_schedule_name(c.schedule.kind)) + " " + std::string(core::optimizer_name(c.kind)) +
         " world " + std::to_string(c.world) + " ratio " + std::to_string(c.ratio);
}

// lr_at at each optimizer step: step t is update t when nothing was skipped.
std::vector<double> lrs_of(const core::LrSchedule& s, int steps) {
  std::vector<double> out;
  for (int t = 1; t <= steps; ++t) out.push_back(core::lr_at(s, t));
  return out;
}

}  // namespace

TEST(LrScheduleFunctional, BitIdenticalToTheReferenceLoopAtEveryRatioAndWorld) {
  const core::ModelDesc m = test::toy_mlp();
  for (const core::LrSchedule& schedule : schedules())
    for (core::OptimizerKind kind :
         {core::OptimizerKind::kAdamW, core::OptimizerKind::kAdagrad, core::OptimizerKind::kLion}) {
      const FunctionalConfig base = config(kind, schedule);
      const FunctionalResult ref = backend::sim::run_reference_loop(m, base);
      EXPECT_EQ(ref.lrs, lrs_of(base.schedule, 10)) << name(base);
      // the schedule changes the result: the constant lr lands elsewhere
      FunctionalConfig constant = base;
      constant.schedule = {};
      ASSERT_NE(first_diff(backend::sim::run_reference_loop(m, constant).master, ref.master), -1) << name(base);
      for (int world : {1, 2})
        for (double ratio : {0.0, 0.3, 1.0}) {
          FunctionalConfig c = base;
          c.world = world;
          c.ratio = ratio;
          const FunctionalResult r = backend::sim::run_functional(m, c);
          ASSERT_EQ(first_diff(r.master, ref.master), -1) << name(c);
          for (size_t a = 0; a < ref.states.size(); ++a)
            ASSERT_EQ(first_diff(r.states[a], ref.states[a]), -1) << name(c) << " state " << a;
          EXPECT_EQ(r.lrs, ref.lrs) << name(c);
          EXPECT_EQ(r.grad_norms, ref.grad_norms) << name(c);
        }
    }
}

// Clipping on but never biting: every step speculates, and under a schedule every speculation holds (the
// speculated scalars carry the step's own lr), still bit-identical to the reference loop.
TEST(LrScheduleFunctional, SpeculationHoldsUnderASchedule) {
  const core::ModelDesc m = test::toy_mlp();
  for (const core::LrSchedule& schedule : schedules()) {
    FunctionalConfig c = config(core::OptimizerKind::kAdamW, schedule);
    c.clip = 1e30;
    c.world = 2;
    c.ratio = 1.0;
    c.speculation_bytes = core::kSpeculationMax;
    const FunctionalResult r = backend::sim::run_functional(m, c);
    EXPECT_EQ(r.speculated_steps.size(), 10u) << name(c);
    EXPECT_TRUE(r.failed_speculations.empty()) << name(c);
    ASSERT_EQ(first_diff(r.master, backend::sim::run_reference_loop(m, c).master), -1) << name(c);
  }
}

// fp16: the overflow at step 3 skips it, and the schedule does not advance (DeepSpeed steps its scheduler
// only after an applied update): step 4 runs at the lr step 3 would have had.
TEST(LrScheduleFunctional, ASkippedStepDoesNotAdvanceTheSchedule) {
  const core::ModelDesc m = test::toy_mlp();
  FunctionalConfig c = config(core::OptimizerKind::kAdamW, schedules()[0]);
  c.grad_dtype = core::DType::kF16;
  c.loss_scaler = {1024, 1000, 1, 0};
  c.overflow_at_step = 3;
  c.world = 2;
  c.ratio = 0.3;
  const FunctionalResult r = backend::sim::run_functional(m, c);
  ASSERT_EQ(r.skipped_steps, std::vector<int>{3});
  std::vector<double> want = lrs_of(c.schedule, 9);  // updates 1..9 over steps 1..10, step 3 skipped
  want.insert(want.begin() + 2, want[2]);            // step 3 (skipped) reports update 3's lr; step 4 runs it
  EXPECT_EQ(r.lrs, want);
  EXPECT_EQ(r.optimizer_step, 9);
  const FunctionalResult ref = backend::sim::run_reference_loop(m, c);
  EXPECT_EQ(ref.lrs, want);
  ASSERT_EQ(first_diff(r.master, ref.master), -1);
}

// A checkpoint after step 3 (inside the 4-step warm-up), resumed at the same layout and resharded: the
// resumed steps take their lrs from the checkpoint's optimizer step, so the run equals the uninterrupted
// one bit for bit. With fp16 and the overflow at step 2, the optimizer step at the save (2) is not the
// step (3): the schedule follows the former.
TEST(LrScheduleFunctional, ResumeAcrossTheWarmupIsBitIdentical) {
  const core::ModelDesc m = test::toy_mlp();
  for (const core::LrSchedule& schedule : schedules())
    for (bool fp16 : {false, true}) {
      FunctionalConfig c = config(core::OptimizerKind::kAdamW, schedule);
      c.world = 2;
      c.ratio = 0.3;
      if (fp16) {
        c.grad_dtype = core::DType::kF16;
        c.loss_scaler = {1024, 1000, 1, 0};
        c.overflow_at_step = 2;
      }
      const FunctionalResult whole = backend::sim::run_functional(m, c);
      for (const auto& [world, ratio] : std::vector<std::pair<int, double>>{{2, 0.3}, {1, 0.7}}) {
        const std::string what = name(c) + (fp16 ? " fp16" : "") + " -> world " + std::to_string(world);
        test::TempDir dir("tf_lrsched");
        FunctionalConfig first = c;
        first.steps = 3;
        first.checkpoints.dir = dir.path();
        const FunctionalResult a = backend::sim::run_functional(m, first);
        EXPECT_EQ(a.optimizer_step, fp16 ? 2 : 3) << what;
        FunctionalConfig second = c;
        second.world = world;
        second.ratio = ratio;
        second.checkpoints.dir = dir.path();
        second.checkpoints.resume = core::resolve_checkpoint(dir.path());
        const FunctionalResult b = backend::sim::run_functional(m, second);
        EXPECT_EQ(b.first_step, 4) << what;
        ASSERT_EQ(first_diff(whole.master, b.master), -1) << what;
        for (size_t s = 0; s < whole.states.size(); ++s)
          ASSERT_EQ(first_diff(whole.states[s], b.states[s]), -1) << what << " state " << s;
        EXPECT_EQ(std::vector<double>(whole.lrs.begin() + 3, whole.lrs.end()), b.lrs) << what;
      }
    }
}
