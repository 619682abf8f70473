// StepSample -> Twin-Flow's metrics: names, labels, units, accumulation across steps, what NaN means, and
// refusal of impossible samples.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "metrics/step_metrics.h"

namespace tf::metrics {
namespace {

StepSample sample() {
  StepSample s;
  s.step = 7;
  s.step_seconds = 0.25;
  s.phase(Phase::kForward) = 0.0625;
  s.phase(Phase::kCpuOptimizer) = 0.125;
  s.busy(QueueId::kCompute) = 0.5;
  s.busy(QueueId::kCpu) = 1.25;  // clamped to 1
  s.offload_ratio = 0.4;
  s.memory = {{"gpu", "params", 1000}, {"host", "optimizer", 4096}};
  s.pcie_d2h_bytes = 2048;
  s.pcie_h2d_bytes = 1024;
  s.loss_scale = 65536;
  s.tokens = 512;
  return s;
}

bool has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(StepMetrics, PublishesEveryMetricWithRankAndScenario) {
  Registry r;
  const RunLabels labels{3, "toy \"a\"", "sim"};
  publish(r, sample(), labels);
  const std::string t = r.expose();
  const std::string rs = "rank=\"3\",scenario=\"toy \\\"a\\\"\"";
  const std::string info =
      "twinflow_build_info{" + rs + ",version=\"" + build_version() + "\",backend=\"sim\",compiler=\"";
  const size_t at = t.find(info);
  ASSERT_NE(at, std::string::npos) << t;
  EXPECT_EQ(t.substr(t.find('\n', at) - 4, 4), "\"} 1");
  EXPECT_TRUE(has(t, "twinflow_steps_total{" + rs + "} 1")) << t;
  EXPECT_TRUE(has(t, "twinflow_last_step{" + rs + "} 7"));
  EXPECT_TRUE(has(t, "twinflow_step_seconds_bucket{" + rs + ",le=\"0.16\"} 0"));
  EXPECT_TRUE(has(t, "twinflow_step_seconds_bucket{" + rs + ",le=\"0.25\"} 1"));
  EXPECT_TRUE(has(t, "twinflow_step_seconds_sum{" + rs + "} 0.25"));
  EXPECT_TRUE(has(t, "twinflow_phase_seconds_sum{" + rs + ",phase=\"forward\"} 0.0625"));
  EXPECT_TRUE(has(t, "twinflow_phase_seconds_sum{" + rs + ",phase=\"cpu_optimizer\"} 0.125"));
  EXPECT_EQ(t.find("phase=\"backward\""), std::string::npos) << "a phase left NaN is not published";
  EXPECT_TRUE(has(t, "twinflow_queue_busy_ratio{" + rs + ",queue=\"compute\"} 0.5"));
  EXPECT_TRUE(has(t, "twinflow_queue_busy_ratio{" + rs + ",queue=\"cpu\"} 1"));
  EXPECT_EQ(t.find("queue=\"comm\""), std::string::npos);
  EXPECT_TRUE(has(t, "twinflow_offload_ratio{" + rs + "} 0.4"));
  EXPECT_TRUE(has(t, "twinflow_memory_bytes{" + rs + ",device=\"gpu\",kind=\"params\"} 1000"));
  EXPECT_TRUE(has(t, "twinflow_memory_bytes{" + rs + ",device=\"host\",kind=\"optimizer\"} 4096"));
  EXPECT_TRUE(has(t, "twinflow_pcie_bytes_total{" + rs + ",direction=\"d2h\"} 2048"));
  EXPECT_TRUE(has(t, "twinflow_pcie_bytes_total{" + rs + ",direction=\"h2d\"} 1024"));
  EXPECT_TRUE(has(t, "twinflow_loss{" + rs + "} NaN"));
  EXPECT_TRUE(has(t, "twinflow_loss_scale{" + rs + "} 65536"));
  EXPECT_TRUE(has(t, "twinflow_skipped_steps_total{" + rs + "} 0"));
  EXPECT_TRUE(has(t, "twinflow_tokens_total{" + rs + "} 512"));
  // Every sample line carries rank and scenario.
  size_t lines = 0;
  for (size_t p = 0, e; (e = t.find('\n', p)) != std::string::npos; p = e + 1) {
    const std::string line = t.substr(p, e - p);
    if (line.starts_with("#")) continue;
    ++lines;
    EXPECT_NE(line.find("{" + rs), std::string::npos) << line;
  }
  EXPECT_GT(lines, 80u);
}

TEST(StepMetrics, TheGpusClockAndPowerWhereTheRunReadThem) {
  Registry r;
  const RunLabels labels{0, "g", "cuda"};
  publish(r, sample(), labels);  // the simulator's samples, and a run without NVML: no twinflow_gpu_* series
  EXPECT_EQ(r.expose().find("twinflow_gpu_"), std::string::npos) << r.expose();
  StepSample s = sample();
  s.gpu_sm_clock_hz = 1755e6;
  s.gpu_power_watts = 689.5;
  s.gpu_power_limit_watts = 700;
  s.gpu_temperature_celsius = 61;
  s.gpu_power_capped_ratio = 0.75;
  publish(r, s, labels);
  const std::string t = r.expose();
  const std::string rs = "rank=\"0\",scenario=\"g\"";
  EXPECT_TRUE(has(t, "twinflow_gpu_sm_clock_hertz{" + rs + "} 1.755e+09")) << t;
  EXPECT_TRUE(has(t, "twinflow_gpu_power_watts{" + rs + "} 689.5"));
  EXPECT_TRUE(has(t, "twinflow_gpu_power_limit_watts{" + rs + "} 700"));
  EXPECT_TRUE(has(t, "twinflow_gpu_temperature_celsius{" + rs + "} 61"));
  EXPECT_TRUE(has(t, "twinflow_gpu_power_capped_ratio{" + rs + "} 0.75"));
}

TEST(StepMetrics, CountersAccumulateAndGaugesFollowTheLastStep) {
  Registry r;
  const RunLabels labels{0, "s", "sim"};
  StepSample a = sample();
  publish(r, a, labels);
  a.step = 8;
  a.step_seconds = 1;
  a.skipped = true;
  a.loss = 2.5;
  a.loss_scale = 32768;
  a.offload_ratio = 0.5;
  publish(r, a, labels);
  const std::string t = r.expose();
  const std::string rs = "rank=\"0\",scenario=\"s\"";
  EXPECT_TRUE(has(t, "twinflow_steps_total{" + rs + "} 2"));
  EXPECT_TRUE(has(t, "twinflow_last_step{" + rs + "} 8"));
  EXPECT_TRUE(has(t, "twinflow_step_seconds_count{" + rs + "} 2"));
  EXPECT_TRUE(has(t, "twinflow_step_seconds_sum{" + rs + "} 1.25"));
  EXPECT_TRUE(has(t, "twinflow_step_seconds_bucket{" + rs + ",le=\"0.63\"} 1"));
  EXPECT_TRUE(has(t, "twinflow_step_seconds_bucket{" + rs + ",le=\"1\"} 2"));
  EXPECT_TRUE(has(t, "twinflow_pcie_bytes_total{" + rs + ",direction=\"d2h\"} 4096"));
  EXPECT_TRUE(has(t, "twinflow_tokens_total{" + rs + "} 1024"));
  EXPECT_TRUE(has(t, "twinflow_skipped_steps_total{" + rs + "} 1"));
  EXPECT_TRUE(has(t, "twinflow_loss{" + rs + "} 2.5"));
  EXPECT_TRUE(has(t, "twinflow_loss_scale{" + rs + "} 32768"));
  EXPECT_TRUE(has(t, "twinflow_offload_ratio{" + rs + "} 0.5"));
}

TEST(StepMetrics, RanksAreSeparateSeries) {
  Registry r;
  publish(r, sample(), {0, "s", "sim"});
  publish(r, sample(), {1, "s", "sim"});
  const std::string t = r.expose();
  EXPECT_TRUE(has(t, "twinflow_steps_total{rank=\"0\",scenario=\"s\"} 1"));
  EXPECT_TRUE(has(t, "twinflow_steps_total{rank=\"1\",scenario=\"s\"} 1"));
}

TEST(StepMetrics, ImpossibleSamplesAreRefused) {
  Registry r;
  const RunLabels labels{0, "s", "sim"};
  StepSample s = sample();
  s.step_seconds = -1;
  EXPECT_THROW(publish(r, s, labels), std::invalid_argument);
  s.step_seconds = std::nan("");
  EXPECT_THROW(publish(r, s, labels), std::invalid_argument);
  s = sample();
  s.tokens = -5;
  try {
    publish(r, s, labels);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("StepSample::tokens"), std::string::npos) << e.what();
  }
  s = sample();
  s.memory = {{"gpu", "x", -1}};
  EXPECT_THROW(publish(r, s, labels), std::invalid_argument);
}

TEST(StepMetrics, NamesAndBuckets) {
  EXPECT_STREQ(phase_name(Phase::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(phase_name(Phase::kGpuOptimizer), "gpu_optimizer");
  EXPECT_STREQ(queue_name(QueueId::kCpu), "cpu");
  EXPECT_EQ(duration_buckets().front(), 1e-4);
  EXPECT_EQ(duration_buckets().back(), 100);
  EXPECT_EQ(format_value(duration_buckets()[1]), "0.00016");
  const StepSample s;
  for (double v : s.phase_seconds) EXPECT_TRUE(std::isnan(v));
  EXPECT_TRUE(std::isnan(s.loss));
}

}  // namespace
}  // namespace tf::metrics

namespace tf::metrics {

// Issue 19: a scrape before the first step already carries the build and the run's configuration.
TEST(StepMetrics, BuildInfoAndConfigBeforeTheFirstStep) {
  Registry reg;
  RunConfig c;
  c.world_size = 8;
  c.zero_stage = 3;
  c.micro_batch = 4;
  c.grad_accum = 2;
  c.offload_ratio = 0.3;
  c.precision = "bf16";
  c.optimizer = "adamw";
  c.offload_device = "cpu";
  publish_run_config(reg, {0, "opt-30b", "sim"}, c);
  const std::string text = reg.expose();
  const std::string rs = "{rank=\"0\",scenario=\"opt-30b\"}";
  for (const std::string& line :
       {"twinflow_build_info{rank=\"0\",scenario=\"opt-30b\",version=\"" + std::string(build_version()) +
            "\",backend=\"sim\",compiler=",
        std::string("twinflow_config_info{rank=\"0\",scenario=\"opt-30b\",precision=\"bf16\",optimizer=\"adamw\","
                    "offload_device=\"cpu\"} 1\n"),
        "twinflow_config_world_size" + rs + " 8\n", "twinflow_config_zero_stage" + rs + " 3\n",
        "twinflow_config_micro_batch" + rs + " 4\n", "twinflow_config_grad_accum" + rs + " 2\n",
        "twinflow_config_offload_ratio" + rs + " 0.3\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
  EXPECT_EQ(text.find("twinflow_steps_total"), std::string::npos);  // no step yet
  // the first step's publish() keeps one build_info series
  StepSample s;
  s.step = 1;
  s.step_seconds = 0.5;
  publish(reg, s, {0, "opt-30b", "sim"});
  const std::string after = reg.expose();
  size_t series = 0;
  for (size_t p = after.find("\ntwinflow_build_info{"); p != std::string::npos;
       p = after.find("\ntwinflow_build_info{", p + 1))
    ++series;
  EXPECT_EQ(series, 1u);
  c.offload_ratio = 1.5;
  EXPECT_THROW(publish_run_config(reg, {0, "opt-30b", "sim"}, c), std::invalid_argument);
}

}  // namespace tf::metrics
