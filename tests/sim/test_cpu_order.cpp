// The cost model's choice of the speculated CPU passes' order (backends/sim/cpu_order.h; docs/ARCHITECTURE.md,
// "Order after the norm"): the window of candidates finds what trying every order finds, the simulator
// runs the order it chose, nothing is chosen where there is nothing to order, and on OPT-1.3B with every
// speculation holding the chosen order brings ratio 0.4 under ratio 0's step (issue 15).
#include <gtest/gtest.h>

#include <string>

#include "backends/sim/auto_ratio.h"
#include "backends/sim/cpu_order.h"
#include "backends/sim/sim_backend.h"
#include "core/hardware.h"
#include "core/scenario.h"
#include "core/step.h"

using namespace tf;
using backend::sim::CpuOrderChoice;
using backend::sim::CpuOrderSearch;
using backend::sim::SimOptions;

namespace {

// OPT-1.3B on one H100 with gradient clipping 100 (no step clips, every speculation holds), the profile
// calibrated in the 2026-11-24 host-model call: bench/results/2026-11-25-held04-trace-h100's setting.
core::Scenario opt13_held() {
  const std::string dir = TWINFLOW_SOURCE_DIR;
  core::Scenario s = core::load_scenario(dir + "/scenarios/real/opt-1.3b-h100.yaml");
  s.cluster.hardware =
      core::find_hardware_profile(dir + "/bench/results/2026-11-24-hostmodel-h100/call2/h100-hostmodel.yaml");
  s.training.gradient_clipping = 100;
  s.training.speculation_bytes = core::kSpeculationMax;  // every eligible layer: the orders of all of them
  return s;
}

SimOptions with_order(core::CpuOrderSetting o) {
  SimOptions opt;
  opt.overrides.cpu_order = o;
  return opt;
}

}  // namespace

// The window (about 10 simulations) predicts a step within the minimum gain of the best order of all
// n (n + 3) / 2 (OPT-1.3B: 90 at ratio 0.4, 350 at ratio 1), at every ratio with a CPU segment.
TEST(CpuOrder, TheWindowFindsWhatEveryOrderFinds) {
  const core::Scenario s = opt13_held();
  for (double ratio : {0.2, 0.4, 0.7, 1.0}) {
    const CpuOrderChoice w = backend::sim::choose_cpu_order(s, ratio, {}, CpuOrderSearch::kWindow);
    const CpuOrderChoice all = backend::sim::choose_cpu_order(s, ratio, {}, CpuOrderSearch::kExhaustive);
    ASSERT_GT(all.passes, 0) << ratio;
    EXPECT_EQ(w.passes, all.passes);
    EXPECT_EQ(all.candidates, 1 + all.passes * (all.passes + 3) / 2) << ratio;
    EXPECT_LE(w.candidates, 10) << ratio;
    EXPECT_EQ(w.arrival_ns, all.arrival_ns);
    EXPECT_LE(double(w.step_ns), double(all.step_ns) * (1 + backend::sim::kCpuOrderMinGain)) << ratio;
    EXPECT_LE(all.step_ns, all.arrival_ns);
  }
}

// Where the norm lands before the CPU has ended as many passes as the arrival-order ones it needs (a CPU pass
// far longer than backward: the 2.15B MLP at ratios 0.9-1 on one H200, 31 and 29 speculated layers), every
// m of the window still gets its candidates (k from m up): the window's k range used to be empty there and
// the choice fell back to arrival order, 532.0 ms predicted at ratio 1 where the best order predicts 481.9.
TEST(CpuOrder, TheWindowHasCandidatesWhereTheNormLandsEarly) {
  const std::string dir = TWINFLOW_SOURCE_DIR;
  core::Scenario s = core::load_scenario(dir + "/scenarios/real/mlp-2b.yaml");
  s.cluster.hardware = core::find_hardware_profile(
      dir + "/bench/results/2026-11-29-h200x2-out-of-place/call4-h200-1gpu/h200-cal-2b.yaml");
  s.training.speculation_bytes = core::kSpeculationMax;  // every eligible layer (auto speculates 4 or 5 here)
  for (double ratio : {0.9, 1.0}) {
    const CpuOrderChoice w = backend::sim::choose_cpu_order(s, ratio, {}, CpuOrderSearch::kWindow);
    const CpuOrderChoice all = backend::sim::choose_cpu_order(s, ratio, {}, CpuOrderSearch::kExhaustive);
    ASSERT_GT(all.passes, 25) << ratio;
    EXPECT_GE(w.candidates, 7) << ratio;
    EXPECT_LE(w.candidates, 10) << ratio;
    EXPECT_LE(double(w.step_ns), double(all.step_ns) * (1 + backend::sim::kCpuOrderMinGain)) << ratio;
    EXPECT_LT(double(w.step_ns), 0.95 * double(w.arrival_ns)) << ratio;
  }
}

// `training.cpu_order: auto` simulates the order it chose (the same step as that order given), records
// it, and predicts the step the choice did; today's order is what `arrival` (and an old run's JSON) plans.
TEST(CpuOrder, TheSimulatorRunsTheOrderItChose) {
  const core::Scenario s = opt13_held();
  for (double ratio : {0.4, 1.0}) {
    const backend::sim::SimPoint chosen = backend::sim::simulate_step(s, ratio, with_order({true, {}}));
    ASSERT_TRUE(chosen.cpu_order_choice.has_value());
    EXPECT_EQ(chosen.cpu_order, chosen.cpu_order_choice->order);
    EXPECT_NE(chosen.cpu_order, core::CpuPassOrder{}) << "a gain at " << ratio;
    EXPECT_EQ(chosen.step_ns, chosen.cpu_order_choice->step_ns);
    EXPECT_EQ(backend::sim::simulate_step(s, ratio, with_order({false, chosen.cpu_order})).step_ns, chosen.step_ns);
    const backend::sim::SimPoint today = backend::sim::simulate_step(s, ratio, with_order({}));
    EXPECT_FALSE(today.cpu_order_choice.has_value());
    EXPECT_EQ(today.cpu_order, core::CpuPassOrder{});
    EXPECT_EQ(today.step_ns, chosen.cpu_order_choice->arrival_ns);
    EXPECT_LE(double(chosen.step_ns), double(today.step_ns) * (1 - backend::sim::kCpuOrderMinGain));
  }
}

// Issue 15 in the cost model: OPT-1.3B at ratio 0.4 with every speculation holding predicts a step above
// ratio 0's in arrival order (the next forward waits for the first CPU layer, updated last) and below it
// in the chosen order.
TEST(CpuOrder, Opt13bRatio04ComesUnderRatio0) {
  const core::Scenario s = opt13_held();
  const int64_t r0 = backend::sim::simulate_step(s, 0.0, with_order({true, {}})).step_ns;
  const CpuOrderChoice c = backend::sim::choose_cpu_order(s, 0.4);
  EXPECT_GT(double(c.arrival_ns), 0.99 * double(r0));
  EXPECT_LT(c.step_ns, r0);
}

// Nothing to order: no CPU segment, no norm wait (no speculation), no speculation budget, staging rings,
// no carried tail. The choice is today's order after one simulation.
TEST(CpuOrder, NothingToOrderKeepsTodaysOrder) {
  const core::Scenario held = opt13_held();
  core::Scenario no_clip = held;
  no_clip.training.gradient_clipping = 0;
  struct Case {
    const core::Scenario& s;
    double ratio;
    core::SettingsOverrides o;
  };
  core::SettingsOverrides rings, no_spec, no_carry;
  rings.staging_slots = core::kStagingSlots;
  no_spec.speculation_bytes = 0;
  no_carry.carry_tail = false;
  for (const Case& c : {Case{held, 0.0, {}}, Case{no_clip, 0.4, {}}, Case{held, 0.4, no_spec}, Case{held, 0.4, rings},
                        Case{held, 0.4, no_carry}}) {
    SimOptions opt;
    opt.overrides = c.o;
    const CpuOrderChoice ch = backend::sim::choose_cpu_order(c.s, c.ratio, opt);
    EXPECT_EQ(ch.passes, 0);
    EXPECT_EQ(ch.candidates, 1);
    EXPECT_EQ(ch.order, core::CpuPassOrder{});
    EXPECT_EQ(ch.step_ns, ch.arrival_ns);
  }
}

// `ratio: auto` compares each ratio with its chosen order (and the step after a clipped one with that same
// plan): with cpu_order auto no ratio predicts slower than in arrival order.
TEST(CpuOrder, AutoRatioPredictsEachRatioWithItsOrder) {
  const core::Scenario s = opt13_held();
  for (double ratio : {0.4, 1.0}) {
    const backend::sim::SimPoint a = backend::sim::predicted_step(s, ratio, with_order({true, {}}));
    const backend::sim::SimPoint t = backend::sim::predicted_step(s, ratio, with_order({}));
    EXPECT_LE(a.step_ns, t.step_ns) << ratio;
    SimOptions after_clip = with_order({false, a.cpu_order});
    after_clip.speculation = backend::sim::SpeculationCase::kNotSpeculating;
    EXPECT_GE(a.step_ns, backend::sim::simulate_step(s, ratio, after_clip).step_ns) << ratio;
  }
}
