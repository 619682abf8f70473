// What fits by the memory model: budgets per rank, shortfalls at their ratio, changes that fit, and the
// largest preset that fits, each against the allocation plan's sums computed here.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "core/error.h"
#include "core/memory.h"
#include "core/memory_fit.h"
#include "core/model.h"
#include "core/scenario.h"
#include "core/settings.h"

using namespace tf::core;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Scenario decoder(const std::string& model, const std::string& training,
                 const std::string& profile = "h100-80gb-16core") {
  return parse_scenario("model: " + model + "\ncluster: {profile: " + profile + "}\ntraining: {" + training +
                            "}\noptimizer: {type: adamw}\n"
                            "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 1}}\n",
                        {}, "s.yaml");
}

// The largest shard's memory at `ratio`: plan_allocations summed (the memory model's definition).
// Full-size host staging, pinned: with `staging_slots: auto` a tight host would switch to rings and move
// the ends these tests place (tests/unit/test_alloc_plan.cpp tests that choice).
const SettingsOverrides kFullStaging{.staging_slots = kUnboundedStaging};

RankMemory memory_at(const Scenario& s, double ratio) {
  const RunSettings rs = resolve_settings(s, kFullStaging);
  MemoryOptions mo = rs.memory_options();
  mo.workload = WorkloadType::kAuto;
  const Partition part = make_partition(rs.model, rs.partition);
  const RankShard& shard = part.ranks.front();  // world 1: the one shard
  return sum_by_kind(plan_allocations(rs.model, part, shard, split_shard(shard, ratio, part.opt.align_elems), mo));
}

}  // namespace

TEST(MemoryFit, BudgetSharesTheHostAmongTheNodesRanks) {
  const Scenario one = decoder("{preset: gpt2-124m}", "micro_batch: 1");
  EXPECT_EQ(rank_budget(one, 1).gpu_bytes, one.cluster.hardware.gpu.hbm_bytes);
  EXPECT_EQ(rank_budget(one, 1).host_bytes, one.cluster.hardware.host_memory_bytes);
  const Scenario dgx = parse_scenario(
      "model: {preset: gpt2-124m}\ncluster: {profile: dgx-h100-80gb, gpus_per_node: 4}\ntraining: {micro_batch: 1}\n"
      "optimizer: {type: adamw}\nzero: {stage: 3}\n",
      {}, "dgx.yaml");
  EXPECT_EQ(rank_budget(dgx, 4).host_bytes, dgx.cluster.hardware.host_memory_bytes / 4);   // the scenario's node
  EXPECT_EQ(rank_budget(dgx, 16).host_bytes, dgx.cluster.hardware.host_memory_bytes / 8);  // the profile's nodes
}

// The feasible range's ends are where the budget is crossed: one 2048-element unit further does not fit.
TEST(MemoryFit, FeasibleRangeEndsAreTheBudgetsEdges) {
  Scenario s = decoder("{preset: gpt2-350m, seq: 512}", "micro_batch: 4");
  s.cluster.hardware.gpu.hbm_bytes = memory_at(s, 0.4).gpu_total;
  s.cluster.hardware.host_memory_bytes = memory_at(s, 0.7).host_total;
  const FitReport r = check_fit(s, kFullStaging);
  ASSERT_TRUE(r.range.feasible);
  const double unit = 2048.0 / double(make_partition(describe_model(s.model), {3, 1, 2048}).ranks[0].elems);
  EXPECT_NEAR(r.range.min_ratio, 0.4, unit);
  EXPECT_NEAR(r.range.max_ratio, 0.7, unit);
  EXPECT_LE(r.at_min.gpu_total, r.budget.gpu_bytes);
  EXPECT_GT(memory_at(s, r.range.min_ratio - unit).gpu_total, r.budget.gpu_bytes);
  EXPECT_LE(r.at_max.host_total, r.budget.host_bytes);
  EXPECT_GT(memory_at(s, r.range.max_ratio + unit).host_total, r.budget.host_bytes);
}

TEST(MemoryFit, GpuShortfallIsMeasuredAtRatioOne) {
  Scenario s = decoder("{preset: gpt2-350m, seq: 1024}", "micro_batch: 16");
  const RankMemory at_one = memory_at(s, 1.0);
  s.cluster.hardware.gpu.hbm_bytes = at_one.gpu_total - 1'500'000'000;
  const FitReport r = check_fit(s);
  ASSERT_FALSE(r.range.feasible);
  EXPECT_EQ(r.shortfall_ratio, 1.0);
  EXPECT_EQ(r.gpu_short_bytes, 1'500'000'000);
  EXPECT_EQ(r.host_short_bytes, 0);
  EXPECT_EQ(r.needed.gpu_total, at_one.gpu_total);
  EXPECT_TRUE(contains(r.shortfall, "GPU memory is short by 1.5 GB per rank at ratio 1 (needs ")) << r.shortfall;
  EXPECT_TRUE(contains(r.shortfall, "activations " + format_gb(at_one.gpu_activations))) << r.shortfall;

  // Each suggestion fits by check_fit, and the micro-batch is the largest that does.
  const std::vector<std::string> changes = fit_suggestions(s);
  Scenario ckpt = s;
  ckpt.training.activation_checkpointing = true;
  const FitReport with_ckpt = check_fit(ckpt);
  ASSERT_TRUE(with_ckpt.range.feasible);
  bool saw_ckpt = false, saw_mb = false;
  for (const std::string& c : changes) {
    if (c.rfind("training.activation_checkpointing: true fits at ratios [", 0) == 0) saw_ckpt = true;
    if (c.rfind("training.micro_batch: ", 0) == 0 && !contains(c, "with training.activation_checkpointing")) {
      const int64_t mb = std::stoll(c.substr(std::string("training.micro_batch: ").size()));
      Scenario at = s;
      at.training.micro_batch = mb;
      EXPECT_TRUE(check_fit(at).range.feasible) << c;
      at.training.micro_batch = mb + 1;
      EXPECT_FALSE(check_fit(at).range.feasible) << c;
      saw_mb = true;
    }
  }
  EXPECT_TRUE(saw_ckpt);
  EXPECT_TRUE(saw_mb);
}

// The GPU fits at ratio 0 (all of the optimizer on it) but the host holds less than the pinned buffers
// ratio 0 still needs: the shortfall is the host's, at ratio 0.
TEST(MemoryFit, HostShortfallIsMeasuredWhereTheGpuFirstFits) {
  Scenario s = decoder("{preset: gpt2-124m, seq: 256}", "micro_batch: 2");
  const RankMemory at_zero = memory_at(s, 0.0);
  ASSERT_GT(at_zero.host_total, 1000);
  s.cluster.hardware.host_memory_bytes = at_zero.host_total - 1000;
  const FitReport r = check_fit(s);
  ASSERT_FALSE(r.range.feasible);
  EXPECT_EQ(r.shortfall_ratio, 0.0);
  EXPECT_EQ(r.gpu_short_bytes, 0);
  EXPECT_EQ(r.host_short_bytes, 1000);
  EXPECT_TRUE(contains(r.shortfall, "pinned host memory is short by 0.0 GB per rank at ratio 0")) << r.shortfall;
}

// The walk's answer is the largest OPT preset whose feasible range is non-empty, found here by checking
// every OPT preset; with a required ratio, the largest whose range holds it.
TEST(MemoryFit, LargestPresetIsTheLargestThatFits) {
  const Scenario base = decoder("{preset: opt-125m, seq: 1024}", "micro_batch: 1, activation_checkpointing: true");
  for (std::optional<double> ratio : {std::optional<double>{}, std::optional<double>{1.0}}) {
    const PresetWalk walk = largest_fitting_preset(base, "opt-", ratio);
    std::string want;
    int64_t want_params = -1;
    for (std::string_view name : model_preset_names()) {
      if (name.substr(0, 4) != "opt-") continue;
      Scenario s = base;
      s.model = model_preset(name);
      s.model.decoder.seq = std::min<int64_t>(1024, s.model.decoder.max_positions);
      const FitReport r = check_fit(s);
      const bool ok = r.range.feasible && (!ratio || r.range.max_ratio == 1.0);
      const int64_t params = parameter_count(s.model);
      if (ok && params > want_params) want = std::string(name), want_params = params;
    }
    ASSERT_TRUE(walk.found.has_value());
    EXPECT_EQ(walk.tried[*walk.found].preset, want);
    EXPECT_EQ(walk.tried.size() - 1, *walk.found);  // it stops at the answer
    for (size_t i = 0; i + 1 < walk.tried.size(); ++i) {
      EXPECT_FALSE(walk.tried[i].qualifies);
      EXPECT_GT(walk.tried[i].params, walk.tried[i + 1].params);  // largest first
    }
  }
  EXPECT_THROW(largest_fitting_preset(base, "bert"), InputError);
}
