// `ratio: auto`: the choice on profiles whose answer is known by construction, against a dense sweep,
// where nothing fits, and the calibration it needs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backends/sim/auto_ratio.h"
#include "backends/sim/sim_backend.h"
#include "core/error.h"
#include "core/memory_fit.h"
#include "core/scenario.h"
#include "tests/grid_sample.h"

namespace {

using tf::backend::sim::AutoRatio;
using tf::backend::sim::AutoRatioOptions;
using tf::backend::sim::choose_ratio;
using tf::backend::sim::simulate_step;
using tf::core::Scenario;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// GPT-2 124M, one rank on the calibrated H100 profile, clipping on, ratio auto.
Scenario gpt2_scenario(const std::string& training = "micro_batch: 2, gradient_clipping: 1.0") {
  return tf::core::parse_scenario(
      "model: {preset: gpt2-124m, seq: 256}\n"
      "cluster: {profile: h100-80gb-16core-calibrated, cpu_cores_per_gpu: 16}\n"
      "training: {" +
          training +
          "}\n"
          "optimizer: {type: adamw}\n"
          "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: auto}}\n",
      {}, "gpt2.yaml");
}

// The memory of the largest shard at `ratio`, by the allocation plan, with `speculation_bytes` for the
// speculated layers' spare slots (0: none; kSpeculationMax resolved against `host_bytes_per_rank`).
tf::core::RankMemory memory_at(const Scenario& s, double ratio, int64_t speculation_bytes = 0,
                               int64_t host_bytes_per_rank = 0) {
  const tf::core::RunSettings rs = tf::core::resolve_settings(
      s, {.staging_slots = tf::core::kUnboundedStaging, .speculation_bytes = speculation_bytes});
  tf::core::MemoryOptions mo = rs.memory_options();
  mo.workload = tf::core::WorkloadType::kAuto;
  mo.host_bytes_per_rank = host_bytes_per_rank;
  return tf::core::rank_memory_at(rs.model, tf::core::make_partition(rs.model, rs.partition), mo, ratio);
}

// Full-size host staging, pinned (memory_at's): with `staging_slots: auto` a tight host would switch to
// rings and move the ends these tests place (tests/unit/test_alloc_plan.cpp tests that choice).
AutoRatioOptions full_staging() {
  AutoRatioOptions o;
  o.sim.overrides.staging_slots = tf::core::kUnboundedStaging;
  return o;
}

// Every point of the table fits, and the chosen one is the table's fastest (ties: the smaller ratio).
void expect_fastest_of_table(const AutoRatio& a) {
  ASSERT_FALSE(a.table.empty());
  for (const auto& p : a.table) {
    EXPECT_GE(p.ratio, a.range.min_ratio - 1e-12);
    EXPECT_LE(p.ratio, a.range.max_ratio + 1e-12);
    EXPECT_TRUE(p.step_ns > a.step_ns || (p.step_ns == a.step_ns && p.ratio >= a.actual_ratio))
        << "ratio " << p.ratio << " predicts " << p.step_ns << " ns, the chosen " << a.step_ns;
  }
  EXPECT_TRUE(std::is_sorted(a.table.begin(), a.table.end(),
                             [](const auto& x, const auto& y) { return x.requested < y.requested; }));
}

}  // namespace

// A CPU and PCIe that cost nothing and a slow GPU optimizer: every element moved to the CPU shortens the
// step, so the answer is the largest ratio that fits. Host memory is cut so that it is below 1.
TEST(AutoRatio, FreeCpuAndPcieChooseTheLargestRatioThatFits) {
  Scenario s = gpt2_scenario();
  tf::core::HardwareProfile& hw = s.cluster.hardware;
  hw.cpu.optimizer_gparam_s_by_threads = {{1, 1e9}};
  hw.cpu.optimizer_node_gparam_s_by_ranks.clear();
  hw.cpu.optimizer_gparam_s_per_core = hw.cpu.optimizer_gparam_s_all_cores = 1e9;
  hw.cpu.mem_gbps = 1e12;
  hw.cpu.dma_slowdown_factor = 1;
  hw.pcie.h2d_gbps = hw.pcie.d2h_gbps = hw.pcie.bidir_total_gbps = 1e12;
  hw.pcie.copy_latency_ns = 0;
  hw.gpu.event_sync_ns = 0;
  hw.gpu.optimizer_gbps = 1;  // 28 B an element: 28 ns each on the GPU
  hw.host_memory_bytes = memory_at(s, 0.6).host_total;
  s.training.host_reserve = {};  // the host's edge exactly at 0.6
  const AutoRatio a = choose_ratio(s, full_staging());
  ASSERT_TRUE(a.range.feasible);
  EXPECT_LT(a.range.max_ratio, 0.61);
  EXPECT_GT(a.range.max_ratio, 0.59);
  EXPECT_EQ(a.actual_ratio, a.range.max_ratio);
  EXPECT_EQ(a.ratio, a.range.max_ratio);  // the grid's last point, exactly
  expect_fastest_of_table(a);
  EXPECT_TRUE(contains(a.why, "fastest predicted is 0.6")) << a.why;
}

// A CPU that takes forever: every element on the CPU lengthens the step, so the answer is the smallest
// ratio that fits. GPU memory is cut so that it is above 0: the plan at 0.3 and the default headroom
// (max(1 GiB, 1% of the GPU): 1 GiB here) fill it. The chosen ratio's plan + headroom fits the GPU; one
// 2048-element unit less does not.
TEST(AutoRatio, SlowCpuChoosesTheSmallestRatioThatFitsWithTheHeadroom) {
  Scenario s = gpt2_scenario();
  tf::core::HardwareProfile& hw = s.cluster.hardware;
  hw.cpu.optimizer_gparam_s_by_threads = {{1, 1e-3}};
  hw.cpu.optimizer_node_gparam_s_by_ranks.clear();
  hw.cpu.optimizer_gparam_s_per_core = hw.cpu.optimizer_gparam_s_all_cores = 1e-3;
  const int64_t headroom = int64_t(1) << 30;
  hw.gpu.hbm_bytes = memory_at(s, 0.3).gpu_total + headroom;
  ASSERT_LT(hw.gpu.hbm_bytes / 100, headroom);  // 1 GiB is the larger
  const AutoRatio a = choose_ratio(s);
  ASSERT_TRUE(a.range.feasible);
  EXPECT_EQ(a.gpu_headroom_bytes, headroom);
  EXPECT_GT(a.range.min_ratio, 0.29);
  EXPECT_LT(a.range.min_ratio, 0.31);
  EXPECT_EQ(a.actual_ratio, a.range.min_ratio);
  EXPECT_EQ(a.ratio, a.range.min_ratio);
  expect_fastest_of_table(a);
  for (const auto& p : a.table) EXPECT_LE(p.gpu_bytes + headroom, hw.gpu.hbm_bytes) << "ratio " << p.ratio;
  const tf::core::Partition part = tf::core::make_partition(tf::core::describe_model(s.model), {3, 1, 2048});
  const double unit = 2048.0 / double(part.ranks[0].elems);
  EXPECT_GT(memory_at(s, a.actual_ratio - unit).gpu_total + headroom, hw.gpu.hbm_bytes);
  // 0.3 or the next printed value: the measured pinned-host mapping adds GPU bytes as the ratio grows
  EXPECT_TRUE(contains(a.why, "smallest that fits is 0.30")) << a.why;
  EXPECT_TRUE(contains(a.why, " (1.1 GB of the GPU kept free beyond the plan: training.gpu_headroom)")) << a.why;
  EXPECT_TRUE(contains(a.why, "fastest predicted is 0.3")) << a.why;
  // without the headroom the same GPU fits smaller ratios
  s.training.gpu_headroom = {};
  EXPECT_LT(choose_ratio(s).range.min_ratio, a.range.min_ratio - 10 * unit);
}

// On the calibrated H100 profile the search (41 points + refinement) predicts within 0.2% of the best of
// a dense 401-point sweep over the same range.
TEST(AutoRatio, MatchesADenseSweepOnTheCalibratedH100) {
  const Scenario s = gpt2_scenario("micro_batch: 8, gradient_clipping: 1.0");
  const AutoRatio a = choose_ratio(s);
  ASSERT_TRUE(a.range.feasible);
  expect_fastest_of_table(a);
  // every row keeps both cases, and compares the slower (the table prints both: `simulate --ratio auto`)
  bool cases_differ = false;
  for (const tf::backend::sim::RatioPoint& p : a.table) {
    ASSERT_GT(p.after_clip_ns, 0) << p.ratio;
    EXPECT_EQ(p.step_ns, std::max(p.held_ns, p.after_clip_ns)) << p.ratio;
    cases_differ = cases_differ || p.held_ns != p.after_clip_ns;
  }
  EXPECT_TRUE(cases_differ) << "with clipping, some ratio's step after a clip differs from its held step";
  int64_t dense_best = INT64_MAX;
  double dense_ratio = 0;
  // the sanitizer pass takes every kSanitizedShare-th point of the sweep (tests/grid_sample.h)
  for (int i = 0; i <= 400; i += tf::test::kSanitizedShare) {
    const double r = a.range.min_ratio + (a.range.max_ratio - a.range.min_ratio) * i / 400.0;
    const tf::backend::sim::SimPoint p = tf::backend::sim::predicted_step(s, r);
    ASSERT_FALSE(p.oom) << r;
    if (i % 50 == 0) {  // the slower of the two schedules: speculation holding, and the step after a clip
      tf::backend::sim::SimOptions after_clip;
      after_clip.speculation = tf::backend::sim::SpeculationCase::kNotSpeculating;
      const int64_t held = simulate_step(s, r).step_ns, clipped = simulate_step(s, r, after_clip).step_ns;
      EXPECT_EQ(p.step_ns, std::max(held, clipped)) << r;
    }
    if (p.step_ns < dense_best) dense_best = p.step_ns, dense_ratio = p.ratio;
  }
  EXPECT_LE(double(a.step_ns), double(dense_best) * 1.002)
      << "auto " << a.actual_ratio << " predicts " << a.step_ns << " ns; the dense sweep's best is ratio "
      << dense_ratio << " at " << dense_best << " ns";
  // the chosen point is what simulate_step predicts at that ratio
  EXPECT_EQ(tf::backend::sim::predicted_step(s, a.ratio).step_ns, a.step_ns);
}

// The simulations run several at once (AutoRatioOptions::threads); the table, its order and the choice are
// the same with one thread as with four.
TEST(AutoRatio, TheSameChoiceAndTableWithAnyNumberOfThreads) {
  const Scenario s = gpt2_scenario("micro_batch: 8, gradient_clipping: 1.0");
  AutoRatioOptions one, four;
  one.threads = 1;
  four.threads = 4;
  const AutoRatio a = choose_ratio(s, one), b = choose_ratio(s, four);
  EXPECT_EQ(a.ratio, b.ratio);
  EXPECT_EQ(a.step_ns, b.step_ns);
  EXPECT_EQ(a.why, b.why);
  ASSERT_EQ(a.table.size(), b.table.size());
  ASSERT_GE(a.table.size(), 41u);
  for (size_t i = 0; i < a.table.size(); ++i) {
    const tf::backend::sim::RatioPoint &x = a.table[i], &y = b.table[i];
    EXPECT_EQ(x.requested, y.requested) << i;
    EXPECT_EQ(x.ratio, y.ratio) << i;
    EXPECT_EQ(x.step_ns, y.step_ns) << i;
    EXPECT_EQ(x.held_ns, y.held_ns) << i;
    EXPECT_EQ(x.after_clip_ns, y.after_clip_ns) << i;
    EXPECT_EQ(x.gpu_bytes, y.gpu_bytes) << i;
    EXPECT_EQ(x.host_bytes, y.host_bytes) << i;
  }
}

// Nothing fits: the error names the shortfall in GB and the changes that fit, each checked.
TEST(AutoRatio, NothingFitsNamesTheShortfallAndWhatToChange) {
  Scenario s = gpt2_scenario("micro_batch: 64, gradient_clipping: 1.0");
  const tf::core::RankMemory at_one = memory_at(s, 1.0);
  s.cluster.hardware.gpu.hbm_bytes = at_one.gpu_total - 2'000'000'000;  // 2 GB short at ratio 1
  ASSERT_LT(s.cluster.hardware.gpu.hbm_bytes / 100, int64_t(1) << 30);  // + the headroom, 1 GiB: 3.07 GB
  try {
    (void)choose_ratio(s);
    FAIL() << "no error";
  } catch (const tf::core::InputError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "zero.offload_optimizer.ratio: auto: no ratio fits")) << m;
    EXPECT_TRUE(contains(m, "GPU memory is short by 3.1 GB per rank at ratio 1")) << m;
    EXPECT_TRUE(contains(m, "+ the headroom 1.1 GB (training.gpu_headroom)")) << m;
    EXPECT_TRUE(contains(m, "Changes that fit:")) << m;
    EXPECT_TRUE(contains(m, "training.activation_checkpointing: true fits at ratios")) << m;
    EXPECT_TRUE(contains(m, "training.micro_batch: ")) << m;
  }
}

// `speculation: max` (with clipping, the speculated CPU layers' second state slots; auto's ceiling) fills what
// the host has beyond the plan: the ratios that fit are those of the plan without spare slots, every point of
// the table counts the spare slots max resolved to at that point and stays within the rank's host memory,
// and the chosen ratio fits. An explicit budget counts in full: it narrows the range.
TEST(AutoRatio, SpeculationMaxFitsWithItsSpareSlotsCounted) {
  using tf::core::kSpeculationMax;
  Scenario s = gpt2_scenario("micro_batch: 2, gradient_clipping: 1.0, speculation: max");
  const int64_t slack = 300'000'000;  // host bytes per rank beyond the plan (no spare slots) at ratio 0.6
  // the host: the ranks' share and the default reserve, max(8 GiB, 10%): 8 GiB below 80 GiB
  const int64_t reserve = int64_t(8) << 30;
  s.cluster.hardware.host_memory_bytes =
      (memory_at(s, 0.6).host_total + slack) * tf::core::ranks_per_node(s, s.cluster.world_size()) + reserve;
  ASSERT_LT(s.cluster.hardware.host_memory_bytes, int64_t(80) << 30);
  const int64_t host_budget = tf::core::rank_budget(s, tf::core::ranks_per_node(s, s.cluster.world_size())).host_bytes;
  ASSERT_EQ(host_budget, memory_at(s, 0.6).host_total + slack);

  const AutoRatio a = choose_ratio(s, full_staging());
  Scenario off = s;
  off.training.speculation_bytes = 0;
  const tf::core::FitReport without = tf::core::check_fit(off, full_staging().sim.overrides);
  ASSERT_TRUE(a.range.feasible);
  ASSERT_TRUE(without.range.feasible);
  EXPECT_EQ(a.range.min_ratio, without.range.min_ratio);
  EXPECT_EQ(a.range.max_ratio, without.range.max_ratio);  // auto never narrows it
  EXPECT_GT(a.range.max_ratio, 0.6);                      // the slack, not spare slots, sets the end
  expect_fastest_of_table(a);

  int with_spare = 0;
  for (const auto& p : a.table) {
    const tf::core::RankMemory plan = memory_at(s, p.requested, kSpeculationMax, host_budget);
    const tf::core::RankMemory bare = memory_at(s, p.requested);
    EXPECT_EQ(p.host_bytes, plan.host_total) << "ratio " << p.ratio;
    EXPECT_EQ(p.gpu_bytes, plan.gpu_total) << "ratio " << p.ratio;
    EXPECT_LE(p.host_bytes, host_budget) << "ratio " << p.ratio;
    EXPECT_GE(p.host_bytes, bare.host_total) << "ratio " << p.ratio;
    with_spare += p.host_bytes > bare.host_total;
  }
  EXPECT_GT(with_spare, 0) << "no point of the table has a spare slot: the test does not test them";
  const tf::backend::sim::SimPoint chosen = simulate_step(s, a.ratio, full_staging().sim);
  EXPECT_FALSE(chosen.oom) << chosen.oom_reason;
  EXPECT_EQ(chosen.memory.host_total, memory_at(s, a.ratio, kSpeculationMax, host_budget).host_total);
  // the memory model's report resolves auto the same way
  const tf::core::FitReport fit = tf::core::check_fit(s, full_staging().sim.overrides);
  EXPECT_EQ(fit.at_max.host_total, memory_at(s, fit.range.max_ratio, kSpeculationMax, host_budget).host_total);
  EXPECT_LE(fit.at_max.host_total, host_budget);

  // An explicit budget of the slack's size counts in full: at the old end it no longer fits.
  Scenario fixed = s;
  fixed.training.speculation_bytes = slack;
  const AutoRatio b = choose_ratio(fixed, full_staging());
  ASSERT_TRUE(b.range.feasible);
  EXPECT_LT(b.range.max_ratio, a.range.max_ratio);
  for (const auto& p : b.table) EXPECT_LE(p.host_bytes, host_budget) << "ratio " << p.ratio;
  EXPECT_FALSE(simulate_step(fixed, b.ratio, full_staging().sim).oom);
}

TEST(AutoRatio, WithRatioReplacesAuto) {
  const Scenario s = tf::backend::sim::with_ratio(gpt2_scenario(), 0.25);
  EXPECT_FALSE(s.ratio_auto());
  EXPECT_EQ(s.cpu_ratio(), 0.25);
}

TEST(AutoRatio, CalibrationItNeeds) {
  const auto plain = tf::core::find_hardware_profile("h100-80gb-16core");
  const std::vector<std::string> missing = tf::backend::sim::missing_calibration(plain);
  EXPECT_EQ(missing, (std::vector<std::string>{"gpu.bf16_gemm_tflops_by_shape", "gpu.optimizer_gbps"}));
  EXPECT_TRUE(
      tf::backend::sim::missing_calibration(tf::core::find_hardware_profile("h100-80gb-16core-calibrated")).empty());
  const std::string hint = tf::backend::sim::calibration_hint(plain);
  EXPECT_TRUE(contains(hint, "profile 'h100-80gb-16core' lacks")) << hint;
  EXPECT_TRUE(contains(hint, "h100-80gb-16core-calibrated")) << hint;
  EXPECT_TRUE(contains(hint, "twinflow calibrate --out")) << hint;
}
