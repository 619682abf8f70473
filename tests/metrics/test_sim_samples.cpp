// The simulator's timeline as step metrics: phase durations from per-op timings, cross-checked against the
// simulator's own per-queue busy time, and the other fields from the scenario.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "backends/sim/sim_backend.h"
#include "core/scenario.h"
#include "metrics/sim_samples.h"

namespace tf::metrics {
namespace {

// Two ranks, fp16 with a loss scale of 2^15, both optimizer halves, gradient clipping.
constexpr const char* kScenario = R"(
name: two-rank-fp16
model: {type: mlp, dims: [1024, 4096, 4096, 1024]}
cluster: {profile: h200x2-32core, gpus_per_node: 2}
training: {micro_batch: 64, grad_accum: 2, steps: 3, precision: fp16, gradient_clipping: 1.0,
           loss_scaling: {initial_scale_power: 15}}
optimizer: {type: adamw, params: {lr: 0.001}}
zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}
)";

struct Simulated {
  core::Scenario sc = core::parse_scenario(kScenario, {});
  backend::sim::SimPoint p = [this] {
    backend::sim::SimOptions o;
    o.record_ops = o.keep_plans = true;
    return backend::sim::simulate_step(sc, 0.5, o);
  }();
};

double busy_s(const backend::sim::SimPoint& p, size_t rank, core::Queue q) {
  return double(p.ranks[rank].busy_ns[size_t(q)]) * 1e-9;
}

TEST(SimSamples, PhasesMatchTheQueuesTheyRunOn) {
  const Simulated s;
  ASSERT_EQ(s.p.ranks.size(), 2u);
  const auto samples = sim_step_samples(s.p, s.sc, 8);
  ASSERT_EQ(samples.size(), 2u);
  for (size_t r = 0; r < samples.size(); ++r) {
    const StepSample& x = samples[r];
    using core::Queue;
    // A queue runs one op at a time, so the union of its ops' intervals is its busy time.
    EXPECT_NEAR(x.phase(Phase::kD2H), busy_s(s.p, r, Queue::kD2H), 1e-12);
    EXPECT_NEAR(x.phase(Phase::kH2D), busy_s(s.p, r, Queue::kH2D), 1e-12);
    EXPECT_NEAR(x.phase(Phase::kCpuOptimizer), busy_s(s.p, r, Queue::kCpu), 1e-12);  // update + its statistics
    EXPECT_NEAR(x.phase(Phase::kForward) + x.phase(Phase::kBackward) + x.phase(Phase::kGpuOptimizer),
                busy_s(s.p, r, Queue::kCompute), 1e-12);
    EXPECT_LE(x.phase(Phase::kAllGather) + x.phase(Phase::kReduceScatter), busy_s(s.p, r, Queue::kComm) + 1e-12);
    EXPECT_GT(x.phase(Phase::kAllGather) + x.phase(Phase::kReduceScatter), 0.9 * busy_s(s.p, r, Queue::kComm));
    for (int ph = 0; ph < kPhaseCount; ++ph) {
      EXPECT_GT(x.phase_seconds[size_t(ph)], 0) << phase_name(Phase(ph));
      EXPECT_LE(x.phase_seconds[size_t(ph)], x.step_seconds) << phase_name(Phase(ph));
    }
    for (int q = 0; q < kQueueCount; ++q)
      EXPECT_DOUBLE_EQ(x.queue_busy[size_t(q)],
                       double(s.p.ranks[r].busy_ns[size_t(q)]) / double(s.p.step_ns));  // same order as core::Queue
    EXPECT_EQ(x.step_seconds, double(s.p.step_ns) * 1e-9);
  }
}

TEST(SimSamples, ScenarioFields) {
  const Simulated s;
  const auto samples = sim_step_samples(s.p, s.sc, 1);
  ASSERT_EQ(samples.size(), 1u);  // max_ranks
  const StepSample& x = samples[0];
  EXPECT_EQ(x.offload_ratio, s.p.ratio);
  EXPECT_EQ(x.loss_scale, 32768);
  EXPECT_TRUE(std::isnan(x.loss));
  EXPECT_FALSE(x.skipped);
  EXPECT_EQ(x.tokens, 64 * 2);  // an MLP sample is one token
  EXPECT_EQ(x.pcie_d2h_bytes, s.p.plans[0].pcie_d2h_bytes);
  EXPECT_GT(x.pcie_d2h_bytes, 0);
  int64_t gpu = 0, host = 0;
  for (const MemoryUse& m : x.memory) (m.device == "gpu" ? gpu : host) += m.bytes;
  EXPECT_EQ(gpu, s.p.memory.gpu_total);
  EXPECT_EQ(host, s.p.memory.host_total);
}

TEST(SimSamples, NeedsPerOpTimings) {
  const Simulated s;
  const backend::sim::SimPoint bare = backend::sim::simulate_step(s.sc, 0.5);
  EXPECT_THROW(sim_step_samples(bare, s.sc, 8), std::invalid_argument);
}

}  // namespace
}  // namespace tf::metrics
