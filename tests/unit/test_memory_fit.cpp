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

// The edge tests below place the budget's ends exactly: no headroom, no host reserve.
Scenario without_margins(Scenario s) {
  s.training.gpu_headroom = {};
  s.training.host_reserve = {};
  return s;
}

}  // namespace

// What a rank may pin: the host less the reserve (max(8 GiB, 10%) by default, of the whole host), shared
// by the node's ranks; the GPU headroom is max(1 GiB, 1%) of the GPU.
TEST(MemoryFit, BudgetSharesTheHostLessTheReserveAmongTheNodesRanks) {
  const Scenario one = decoder("{preset: gpt2-124m}", "micro_batch: 1");
  ASSERT_EQ(one.cluster.hardware.host_memory_bytes, 135148564480);  // h100-80gb-16core
  ASSERT_EQ(one.cluster.hardware.gpu.hbm_bytes, 85520809984);
  EXPECT_EQ(rank_budget(one, 1).gpu_bytes, 85520809984);
  EXPECT_EQ(rank_budget(one, 1).host_reserve_bytes, 13514856448);  // 10% > 8 GiB
  EXPECT_EQ(rank_budget(one, 1).host_bytes, 135148564480 - 13514856448);
  EXPECT_EQ(rank_budget(one, 1).gpu_headroom_bytes, 1073741824);  // 1 GiB > 1% (855208099)
  const Scenario dgx = parse_scenario(
      "model: {preset: gpt2-124m}\ncluster: {profile: dgx-h100-80gb, gpus_per_node: 4}\ntraining: {micro_batch: 1}\n"
      "optimizer: {type: adamw}\nzero: {stage: 3}\n",
      {}, "dgx.yaml");
  ASSERT_EQ(dgx.cluster.hardware.host_memory_bytes, 2000000000000);
  EXPECT_EQ(rank_budget(dgx, ranks_per_node(dgx, 4)).host_bytes, 450000000000);  // 1.8 TB over the scenario's node of 4
  EXPECT_EQ(rank_budget(dgx, ranks_per_node(dgx, 16)).host_bytes, 225000000000);  // ... over the profile's nodes of 8
  // 64 GiB: 8 GiB is more than 10%; two ranks share the rest
  EXPECT_EQ(pinnable_host_bytes_per_rank(int64_t(64) << 30, 2, kDefaultHostReserve), int64_t(28) << 30);
  EXPECT_EQ(pinnable_host_bytes_per_rank(int64_t(4) << 30, 1, kDefaultHostReserve), 0);  // all reserved
  EXPECT_EQ(margin_bytes({0, 0.25}, 1000), 250);
  EXPECT_EQ(margin_bytes({300, 0.25}, 1000), 300);
  // a scenario's own margins, in every form it may write them
  const auto margins = [](const std::string& headroom, const std::string& reserve) {
    const Scenario s =
        decoder("{preset: gpt2-124m}", "micro_batch: 1, gpu_headroom: " + headroom + ", host_reserve: " + reserve);
    return std::pair{s.training.gpu_headroom, s.training.host_reserve};
  };
  EXPECT_EQ(margins("2147483648", "\"16 GiB\""), std::pair(MemoryMargin{2147483648, 0}, MemoryMargin{17179869184, 0}));
  EXPECT_EQ(margins("0.02", "\"5%\""), std::pair(MemoryMargin{0, 0.02}, MemoryMargin{0, 0.05}));
  EXPECT_EQ(margins("1.5 GB", "0"), std::pair(MemoryMargin{1500000000, 0}, MemoryMargin{0, 0}));
  const Scenario s = decoder("{preset: gpt2-124m}", "micro_batch: 1, gpu_headroom: \"2%\", host_reserve: 1 TiB");
  EXPECT_EQ(rank_budget(s, 1).gpu_headroom_bytes, 1710416199);  // 2% of 85520809984, floored
  EXPECT_EQ(rank_budget(s, 1).host_bytes, 0);
}

// Negative or unparsable margins name the key path and the accepted forms.
TEST(MemoryFit, BadMarginsNameTheKeyAndTheForms) {
  for (const std::string bad : {"gpu_headroom: -1", "gpu_headroom: \"-2%\"", "host_reserve: lots", "host_reserve: 1.5",
                                "gpu_headroom: 3 parsecs", "gpu_headroom: \"100%\"", "host_reserve: [1, 2]"}) {
    try {
      (void)decoder("{preset: gpt2-124m}", "micro_batch: 1, " + bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      const std::string key = bad.substr(0, bad.find(':'));
      EXPECT_TRUE(contains(e.what(), "s.yaml:")) << e.what();
      EXPECT_TRUE(contains(e.what(), "training." + key + ": ")) << e.what();
      EXPECT_TRUE(contains(e.what(), "allowed: bytes (a whole number")) << e.what();
      EXPECT_TRUE(contains(e.what(), "or a percentage")) << e.what();
    }
  }
}

// Choosing a ratio keeps the GPU headroom free: the smallest ratio that fits is where plan + headroom crosses
// the GPU, one 2048-element unit below it does not fit, and without the headroom it would.
TEST(MemoryFit, TheFeasibleRangeKeepsTheGpuHeadroom) {
  Scenario s = without_margins(decoder("{preset: gpt2-350m, seq: 512}", "micro_batch: 4"));
  const int64_t headroom = 700'000'000;
  s.training.gpu_headroom = {headroom, 0};
  s.cluster.hardware.gpu.hbm_bytes = memory_at(s, 0.4).gpu_total + headroom;
  const FitReport r = check_fit(s, kFullStaging);
  ASSERT_TRUE(r.range.feasible);
  EXPECT_EQ(r.budget.gpu_headroom_bytes, headroom);
  const double unit = 2048.0 / double(make_partition(describe_model(s.model), {3, 1, 2048}).ranks[0].elems);
  EXPECT_NEAR(r.range.min_ratio, 0.4, unit);
  EXPECT_LE(r.at_min.gpu_total + headroom, r.budget.gpu_bytes);
  EXPECT_GT(memory_at(s, r.range.min_ratio - unit).gpu_total + headroom, r.budget.gpu_bytes);
  s.training.gpu_headroom = {};
  EXPECT_LT(check_fit(s, kFullStaging).range.min_ratio, r.range.min_ratio - 10 * unit);
  // an explicit ratio is checked without it, and warned about
  const std::string w = headroom_warning(r.range.min_ratio - unit, memory_at(s, r.range.min_ratio - unit).gpu_total,
                                         r.budget.gpu_bytes, headroom);
  EXPECT_TRUE(contains(w, "less than training.gpu_headroom (0.7 GB)")) << w;
  EXPECT_EQ(headroom_warning(r.range.min_ratio, r.at_min.gpu_total, r.budget.gpu_bytes, headroom), "");
}

// The GPU memory no buffer names: the profile's measured context replaces the 512 MiB estimate byte for byte
// (with several ranks only with the NCCL communicator measured too), every allocated GPU buffer is rounded
// up to the allocation granularity, and the pinned host bytes cost their mapping.
TEST(MemoryFit, MeasuredUnnamedGpuMemoryEntersThePlan) {
  const Scenario base = decoder("{preset: gpt2-124m, seq: 256}", "micro_batch: 2");
  const RankMemory est = memory_at(base, 0.5);
  Scenario s = base;
  s.cluster.hardware.gpu.context_bytes = 600'000'123;
  const RankMemory measured = memory_at(s, 0.5);
  EXPECT_EQ(measured.gpu_total - est.gpu_total, 600'000'123 - kContextEstimateBytes);
  EXPECT_EQ(measured.gpu_context, 600'000'123);
  EXPECT_EQ(measured.host_total, est.host_total);
  EXPECT_TRUE(resolve_settings(s).unnamed_gpu.context_measured);
  EXPECT_FALSE(resolve_settings(base).unnamed_gpu.context_measured);
  // two ranks: the communicator is part of it; unmeasured, the estimate stands
  SettingsOverrides two;
  two.world = 2;
  EXPECT_EQ(resolve_settings(s, two).unnamed_gpu.context_bytes, kContextEstimateBytes);
  s.cluster.hardware.gpu.nccl_comm_bytes = 300'000'000;
  EXPECT_EQ(resolve_settings(s, two).unnamed_gpu.context_bytes, 900'000'123);
  EXPECT_EQ(resolve_settings(s).unnamed_gpu.context_bytes, 600'000'123);

  // rounding, buffer by buffer, and the pinned host's mapping
  s.cluster.hardware.gpu.alloc_granularity_bytes = 2 << 20;
  s.cluster.hardware.gpu.pinned_host_map_bytes_per_gb = 1953125;  // 8 B per 4096
  const RunSettings rs = resolve_settings(s, kFullStaging);
  MemoryOptions mo = rs.memory_options();
  mo.workload = WorkloadType::kAuto;
  const Partition part = make_partition(rs.model, rs.partition);
  const AllocPlan plan =
      plan_allocations(rs.model, part, part.ranks[0], split_shard(part.ranks[0], 0.5, part.opt.align_elems), mo);
  int64_t rounding = 0, buffers = 0;
  for (const BufferSpec& b : plan.buffers)
    if (b.place == MemPlace::kGpu && b.allocated) {
      const int64_t chunks = b.bytes / (2 << 20) + (b.bytes % (2 << 20) != 0);
      rounding += chunks * (2 << 20) - b.bytes;
      ++buffers;
    }
  ASSERT_GT(buffers, 100);  // gpt2-124m's per-block activations: rounding matters
  EXPECT_EQ(plan.at(buf::kAllocRounding).bytes, rounding);
  EXPECT_EQ(plan.at(buf::kAllocRounding).kind, MemKind::kContext);
  EXPECT_FALSE(plan.at(buf::kAllocRounding).allocated);
  const int64_t host = plan.bytes(MemPlace::kHost);
  EXPECT_EQ(plan.at(buf::kPinnedHostMap).bytes, (host * 8 + 4095) / 4096);
  EXPECT_EQ(sum_by_kind(plan).gpu_context, 600'000'123 + rounding + (host * 8 + 4095) / 4096);
  EXPECT_EQ(round_up_bytes(1, 2 << 20), 2 << 20);
  EXPECT_EQ(round_up_bytes(2 << 20, 2 << 20), 2 << 20);
  EXPECT_EQ(round_up_bytes((2 << 20) + 1, 2 << 20), 4 << 20);
  const std::string text = unnamed_gpu_text(plan);
  EXPECT_TRUE(contains(text, "CUDA context and libraries 0.6 GB (measured)")) << text;
  EXPECT_TRUE(contains(text, "allocation rounding " + format_gb(rounding))) << text;
}

// The feasible range's ends are where the budget is crossed: one 2048-element unit further does not fit.
TEST(MemoryFit, FeasibleRangeEndsAreTheBudgetsEdges) {
  Scenario s = without_margins(decoder("{preset: gpt2-350m, seq: 512}", "micro_batch: 4"));
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
  Scenario s = without_margins(decoder("{preset: gpt2-350m, seq: 1024}", "micro_batch: 16"));
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
  Scenario s = without_margins(decoder("{preset: gpt2-124m, seq: 256}", "micro_batch: 2"));
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
