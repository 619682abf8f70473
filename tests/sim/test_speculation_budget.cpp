// The cost model's count of speculated CPU layers (backends/sim/speculation_budget.h; docs/ARCHITECTURE.md,
// "How many layers speculate"): the window finds what trying every count finds, the simulator runs the
// count it chose with the memory of that count, nothing is chosen where nothing speculates or the budget
// was given, and on the 2.15B MLP on one H200 (where it was measured) the choice is a few layers that beat
// both every eligible layer and none.
#include <gtest/gtest.h>

#include <string>

#include "backends/sim/choices.h"
#include "backends/sim/sim_backend.h"
#include "backends/sim/speculation_budget.h"
#include "core/hardware.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "core/step.h"

using namespace tf;
using backend::sim::SimOptions;
using backend::sim::SpeculationChoice;
using backend::sim::SpeculationSearch;

namespace {

const std::string kDir = TWINFLOW_SOURCE_DIR;

// The 2.15B MLP (32 layers of 8192 x 8192, clipping 1.0) on one H200, the profile of the 2026-11-29 call that
// measured the out-of-place pass on one H200.
core::Scenario mlp2b_h200() {
  core::Scenario s = core::load_scenario(kDir + "/scenarios/real/mlp-2b.yaml");
  s.cluster.hardware = core::find_hardware_profile(
      kDir + "/bench/results/2026-11-29-h200x2-out-of-place/call4-h200-1gpu/h200-cal-2b.yaml");
  return s;
}

// OPT-1.3B on one H100 with clipping 100 (every speculation holds; tests/sim/test_cpu_order.cpp's setting).
core::Scenario opt13_held() {
  core::Scenario s = core::load_scenario(kDir + "/scenarios/real/opt-1.3b-h100.yaml");
  s.cluster.hardware =
      core::find_hardware_profile(kDir + "/bench/results/2026-11-24-hostmodel-h100/call2/h100-hostmodel.yaml");
  s.training.gradient_clipping = 100;
  return s;
}

}  // namespace

// The window (at most 7 simulations with the pilot, each count with its own CPU pass order) predicts a step
// within the minimum gain of the count that trying every one of them chooses.
TEST(SpeculationBudget, TheWindowFindsWhatEveryCountFinds) {
  struct Case {
    core::Scenario s;
    double ratio;
  };
  for (const Case& c : {Case{mlp2b_h200(), 0.3}, Case{mlp2b_h200(), 0.8}, Case{mlp2b_h200(), 1.0},
                        Case{opt13_held(), 0.4}, Case{opt13_held(), 1.0}}) {
    SCOPED_TRACE(c.s.name + " at ratio " + std::to_string(c.ratio));
    const SpeculationChoice w = backend::sim::choose_speculation(c.s, c.ratio, {}, SpeculationSearch::kWindow);
    const SpeculationChoice all = backend::sim::choose_speculation(c.s, c.ratio, {}, SpeculationSearch::kExhaustive);
    ASSERT_GT(all.eligible, 2);
    EXPECT_EQ(w.eligible, all.eligible);
    EXPECT_EQ(all.candidates, 1 + all.eligible + 1);
    EXPECT_LE(w.candidates, 7);
    const double within = 1 + backend::sim::kSpeculationMinGain;
    EXPECT_LE(double(w.step_ns), double(all.step_ns) * within);
    EXPECT_EQ(w.every_ns, all.every_ns);
    EXPECT_EQ(w.none_ns, all.none_ns);
    EXPECT_LE(double(w.step_ns), double(w.every_ns) * within);
    EXPECT_LE(double(w.step_ns), double(w.none_ns) * within);
  }
}

// `training.speculation: auto` simulates the count it chose (the same step and memory as that count given),
// records it, and takes the host memory of that count's spare slots only.
TEST(SpeculationBudget, TheSimulatorRunsTheCountItChose) {
  const core::Scenario s = mlp2b_h200();
  for (double ratio : {0.5, 1.0}) {
    const backend::sim::SimPoint chosen = backend::sim::simulate_step(s, ratio, {});
    ASSERT_TRUE(chosen.speculation_choice.has_value());
    const SpeculationChoice& c = *chosen.speculation_choice;
    EXPECT_EQ(chosen.speculation_layers, c.layers);
    EXPECT_EQ(chosen.step_ns, c.step_ns);
    SimOptions given;
    given.overrides.speculation_layers = c.layers;
    const backend::sim::SimPoint same = backend::sim::simulate_step(s, ratio, given);
    EXPECT_FALSE(same.speculation_choice.has_value());
    EXPECT_EQ(same.step_ns, chosen.step_ns);
    // the order chosen with the count while it was a candidate, taken as it is: what choosing again gives
    ASSERT_TRUE(c.cpu_order.has_value());
    ASSERT_TRUE(same.cpu_order_choice.has_value());
    EXPECT_EQ(chosen.cpu_order, same.cpu_order);
    EXPECT_EQ(chosen.cpu_order_choice->order, same.cpu_order_choice->order);
    EXPECT_EQ(chosen.cpu_order_choice->step_ns, same.cpu_order_choice->step_ns);
    EXPECT_EQ(chosen.cpu_order_choice->candidates, same.cpu_order_choice->candidates);
    EXPECT_EQ(same.memory.host_total, chosen.memory.host_total);
    SimOptions max;
    max.overrides.speculation_bytes = core::kSpeculationMax;
    const backend::sim::SimPoint every = backend::sim::simulate_step(s, ratio, max);
    EXPECT_FALSE(every.speculation_choice.has_value());
    EXPECT_EQ(every.speculation_layers, core::kEveryEligibleLayer);
    EXPECT_EQ(every.step_ns, c.every_ns);
    EXPECT_LT(chosen.memory.host_total, every.memory.host_total);
    // the spare slots of the chosen layers, 8192 x 8193 elements x 12 B each
    EXPECT_EQ(every.memory.host_total - chosen.memory.host_total, int64_t(c.eligible - c.layers) * 8192 * 8193 * 12);
  }
}

// The 2.15B MLP on one H200 at ratios 0.8 and 1: every eligible layer (26 and 31) speculating pays the
// out-of-place pass for passes that start after the norm has landed; the model picks a few layers, faster
// than every layer and than none by more than 3% (measured on an H200 with 4 layers:
// bench/results/2026-11-29-h200-speculation-budget).
TEST(SpeculationBudget, TheTwoBillionMlpOnOneH200SpeculatesAFewLayers) {
  const core::Scenario s = mlp2b_h200();
  for (double ratio : {0.8, 1.0}) {
    const SpeculationChoice c = backend::sim::choose_speculation(s, ratio);
    SCOPED_TRACE(ratio);
    EXPECT_GE(c.layers, 2);
    EXPECT_LE(c.layers, 8);
    EXPECT_GE(c.eligible, 26);
    EXPECT_LT(double(c.step_ns), 0.97 * double(c.every_ns));
    EXPECT_LT(double(c.step_ns), 0.97 * double(c.none_ns));
  }
}

// Nothing to choose: no clipping (no update waits for the norm), and a budget given (max, 0 or bytes) is
// not auto. The choice is every eligible layer after the pilot alone.
TEST(SpeculationBudget, NothingToChooseWhereNothingSpeculatesOrTheBudgetIsGiven) {
  core::Scenario plain = mlp2b_h200();
  plain.training.gradient_clipping = 0;
  const SpeculationChoice c = backend::sim::choose_speculation(plain, 0.5);
  EXPECT_EQ(c.eligible, 0);
  EXPECT_EQ(c.candidates, 1);
  EXPECT_EQ(c.layers, core::kEveryEligibleLayer);
  EXPECT_EQ(c.step_ns, c.every_ns);
  const core::Scenario s = mlp2b_h200();
  for (int64_t given : {core::kSpeculationMax, int64_t(0), int64_t(4) << 30}) {
    SimOptions o;
    o.overrides.speculation_bytes = given;
    core::RunSettings rs = core::resolve_settings(s, o.overrides);
    EXPECT_FALSE(backend::sim::resolve_model_choices(rs, s, 1.0, o).speculation.has_value()) << given;
    EXPECT_EQ(rs.step.speculation_layers, core::kEveryEligibleLayer);
  }
  core::RunSettings rs = core::resolve_settings(s, {});
  ASSERT_TRUE(rs.speculation_auto);
  ASSERT_TRUE(rs.cpu_order_auto);
  const backend::sim::ModelChoices chosen = backend::sim::resolve_model_choices(rs, s, 1.0, {});
  ASSERT_TRUE(chosen.speculation.has_value());
  ASSERT_TRUE(chosen.cpu_order.has_value());
  EXPECT_FALSE(rs.speculation_auto);
  EXPECT_FALSE(rs.cpu_order_auto);
  EXPECT_EQ(rs.step.speculation_layers, chosen.speculation->layers);
  EXPECT_EQ(rs.step.cpu_order, chosen.cpu_order->order);
  // the order is the one chosen with that count: what simulate_step plans
  const backend::sim::SimPoint p = backend::sim::simulate_step(s, 1.0, {});
  EXPECT_EQ(p.speculation_layers, rs.step.speculation_layers);
  EXPECT_EQ(p.cpu_order, rs.step.cpu_order);
  EXPECT_TRUE(chosen.not_costed.empty());
}

// A one-GPU scenario launched on two GPUs of one host (2026-11-29, two H200s: `run` refused at world 2 because
// the cost model took the two ranks for two nodes): with the launched ranks per node the collectives cross
// the node's link; a profile without one cannot cost them, so the auto choices keep their defaults and say
// why, while simulate_step still refuses (it has nothing to simulate them with).
TEST(SpeculationBudget, AProfileWithoutTheLinkKeepsTheDefaults) {
  core::Scenario s = core::load_scenario(kDir + "/scenarios/real/parity-mlp.yaml");  // h100-80gb-16core: one GPU
  ASSERT_EQ(s.cluster.hardware.intra_node.gbps, 0);
  s.training.speculation_bytes.reset();  // auto
  s.training.cpu_order_auto = true;
  SimOptions o;
  o.overrides.world = 2;
  o.overrides.ranks_per_node = 2;
  core::RunSettings rs = core::resolve_settings(s, o.overrides);
  ASSERT_TRUE(rs.speculation_auto);
  ASSERT_TRUE(rs.cpu_order_auto);
  const backend::sim::ModelChoices c = backend::sim::resolve_model_choices(rs, s, 0.3, o);
  EXPECT_FALSE(c.speculation.has_value());
  EXPECT_FALSE(c.cpu_order.has_value());
  EXPECT_EQ(c.not_costed,
            "world 2 (2 rank(s) per node): profile h100-80gb-16core has no intra-node GPU link (none, 0 GB/s) to cost "
            "the collectives with");
  EXPECT_FALSE(rs.speculation_auto);
  EXPECT_FALSE(rs.cpu_order_auto);
  EXPECT_EQ(rs.step.speculation_layers, core::kEveryEligibleLayer);
  EXPECT_EQ(rs.step.cpu_order, core::CpuPassOrder{});  // today's order
  try {
    (void)backend::sim::simulate_step(s, 0.3, o);
    ADD_FAILURE() << "simulate_step costed collectives over a link the profile does not have";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no intra-node GPU link"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("twinflow calibrate"), std::string::npos) << e.what();
  }
  // the same world on nodes of the profile (one GPU each) crosses the link between nodes
  o.overrides.ranks_per_node.reset();
  core::RunSettings two_nodes = core::resolve_settings(s, o.overrides);
  EXPECT_NE(backend::sim::resolve_model_choices(two_nodes, s, 0.3, o).not_costed.find("inter-node"), std::string::npos);
  // a profile of two GPUs a node costs them: the choices are made
  core::Scenario x2 = s;
  x2.cluster.hardware = core::load_scenario(kDir + "/scenarios/real/mlp-2b-h200x2.yaml").cluster.hardware;
  core::RunSettings costed = core::resolve_settings(x2, o.overrides);
  const backend::sim::ModelChoices made = backend::sim::resolve_model_choices(costed, x2, 0.3, o);
  EXPECT_TRUE(made.not_costed.empty()) << made.not_costed;
  EXPECT_TRUE(made.speculation.has_value());
  // the launched node is the CPU host model's too: its two ranks share one host's pinned memory and cores
  const backend::sim::SimPoint one_host = backend::sim::simulate_step(x2, 0.3, o);
  SimOptions two_hosts_opt = o;
  two_hosts_opt.overrides.ranks_per_node = 1;
  two_hosts_opt.overrides.world = 2;
  core::Scenario x2_nodes = x2;  // two nodes of one GPU, costed over the profile's link between nodes
  x2_nodes.cluster.hardware.inter_node.gbps = 25;
  const backend::sim::SimPoint two_hosts = backend::sim::simulate_step(x2_nodes, 0.3, two_hosts_opt);
  EXPECT_EQ(one_host.cpu_node_host_bytes, 2 * two_hosts.cpu_node_host_bytes);
}
