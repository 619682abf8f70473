// The CUDA engine's speculative CPU updates (docs/ARCHITECTURE.md, "Speculation") against a run of the same
// engine without speculation and against the functional simulator, bit for bit, with steps that clip and
// fp16 steps that overflow; and the current-slot accessor a checkpoint reads. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/engine.h"
#include "backends/sim/functional.h"
#include "core/settings.h"
#include "core/speculation.h"
#include "tests/cuda/engine_steps.h"
#include "tests/cuda/gpu_test.h"

namespace tf {
namespace {

namespace cu = backend::cuda;

core::ModelDesc small_model() { return core::describe_model(core::make_mlp({96, 160, 80, 48})); }

struct Case {
  double ratio = 0.6;
  double clip = 1.0;
  bool fp16 = false;
  int overflow_at = -1;
  int steps = 6;
  core::OptimizerKind kind = core::OptimizerKind::kAdamW;
  int speculation_layers = core::kEveryEligibleLayer;  // the cost model's count for `speculation: auto`
};

core::RunSettings settings(const core::ModelDesc& m, const Case& c, int64_t speculation_bytes) {
  core::RunSettings s;
  s.model = m;
  s.world = 1;
  s.partition = {3, 1, int64_t(core::kStatsTile)};
  const core::DType grad = c.fp16 ? core::DType::kF16 : core::DType::kBF16;
  core::HyperParams hp = core::default_hyper_params(c.kind);
  hp.lr = 1e-2;
  s.policy = core::make_step_policy(c.kind, hp, c.clip, grad);
  s.step = core::make_step_config(s.policy, grad, 1, 2, false, speculation_bytes);
  s.step.speculation_layers = c.speculation_layers;
  s.loss_scaler = {c.fp16 ? 1024.0 : 1.0, 0, 1.0, 0};
  s.workload = core::WorkloadType::kSynthetic;
  s.seed = 11;
  return s;
}

struct EngineRun {
  std::vector<cu::StepReport> steps;
  std::vector<std::pair<int64_t, float>> master;
  std::unique_ptr<cu::Engine> engine;
};

EngineRun run_engine(const core::ModelDesc& m, const Case& c, int64_t speculation_bytes) {
  cu::EngineConfig e;
  e.settings = settings(m, c, speculation_bytes);
  e.ratio = c.ratio;
  e.cpu_threads = 4;
  e.pin_threads = false;
  e.overflow_at_step = c.overflow_at;
  EngineRun r;
  r.engine = cu::Engine::create(e);
  r.steps = test::run_steps(*r.engine, c.steps);
  r.master = r.engine->master_weights();
  return r;
}

backend::sim::FunctionalResult run_functional(const core::ModelDesc& m, const Case& c, int64_t speculation_bytes) {
  backend::sim::FunctionalConfig f =
      backend::sim::functional_config(settings(m, c, speculation_bytes), c.ratio, c.steps, 2);
  f.overflow_at_step = c.overflow_at;
  return backend::sim::run_functional(m, f);
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Speculating against not speculating on the engine, and against the functional simulator; the per-step
// speculation outcome is the simulator's.
void expect_same_bits(const core::ModelDesc& m, const Case& c, const std::string& what) {
  const EngineRun on = run_engine(m, c, core::kSpeculationMax);
  const EngineRun off = run_engine(m, c, 0);
  const backend::sim::FunctionalResult ref = run_functional(m, c, core::kSpeculationMax);
  ASSERT_EQ(on.master.size(), off.master.size());
  int64_t differ = 0, differ_ref = 0;
  for (size_t i = 0; i < on.master.size(); ++i) {
    differ += std::memcmp(&on.master[i].second, &off.master[i].second, 4) != 0;
    differ_ref += std::memcmp(&on.master[i].second, &ref.master[size_t(on.master[i].first)], 4) != 0;
  }
  EXPECT_EQ(differ, 0) << what << ": speculating vs not";
  EXPECT_EQ(differ_ref, 0) << what << ": vs the functional simulator";
  EXPECT_EQ(on.engine->speculated_steps(), int64_t(ref.speculated_steps.size())) << what;
  EXPECT_EQ(on.engine->failed_speculations(), int64_t(ref.failed_speculations.size())) << what;
  for (int s = 1; s <= c.steps; ++s) {
    const cu::StepReport& r = on.steps[size_t(s - 1)];
    EXPECT_EQ(r.speculated, contains(ref.speculated_steps, s)) << what << " step " << s;
    EXPECT_EQ(r.speculated && !r.speculation_held, contains(ref.failed_speculations, s)) << what << " step " << s;
    EXPECT_FALSE(off.steps[size_t(s - 1)].speculated) << what << " step " << s;
  }
}

// A clip between the step norms of a run without clipping, so that some steps clip and some do not.
double mid_clip(const core::ModelDesc& m, Case c) {
  c.clip = 1e30;
  std::vector<double> norms = run_functional(m, c, 0).grad_norms;
  std::sort(norms.begin(), norms.end());
  return 0.5 * (norms[norms.size() / 2 - 1] + norms[norms.size() / 2]);
}

}  // namespace

TEST(CudaEngineSpeculation, SameBitsAsWithoutSpeculationWhenSomeStepsClip) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  for (core::OptimizerKind k : {core::OptimizerKind::kAdamW, core::OptimizerKind::kAdam, core::OptimizerKind::kAdagrad,
                                core::OptimizerKind::kLion})
    for (double ratio : {0.3, 1.0}) {
      Case c;
      c.kind = k;
      c.ratio = ratio;
      c.clip = mid_clip(m, c);
      expect_same_bits(m, c, std::string(core::optimizer_name(k)) + " ratio " + std::to_string(ratio));
    }
}

// A count of speculated layers (`speculation: auto`'s choice, StepConfig::speculation_layers): the engine
// speculates that many, the last in backward order, takes their spare slots only, and the bits stay those of
// no speculation and of the functional simulator (which speculates every eligible layer).
TEST(CudaEngineSpeculation, ACountOfLayersSpeculatesThatManyWithTheSameBits) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.ratio = 1.0;
  c.clip = mid_clip(m, c);
  const EngineRun every = run_engine(m, c, core::kSpeculationMax);
  const std::vector<int32_t> all = core::speculated_layers(every.engine->split(), every.engine->plan().config);
  ASSERT_EQ(all.size(), 2u);  // layers 2 and 1 (never layer 0)
  c.speculation_layers = 1;
  expect_same_bits(m, c, "one layer");
  const EngineRun one = run_engine(m, c, core::kSpeculationMax);
  EXPECT_EQ(core::speculated_layers(one.engine->split(), one.engine->plan().config), std::vector<int32_t>{all[0]});
  EXPECT_LT(one.engine->memory().planned.host_total, every.engine->memory().planned.host_total);
  EXPECT_GT(one.engine->speculated_steps(), 0);
}

TEST(CudaEngineSpeculation, SameBitsAcrossAnFp16Overflow) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.fp16 = true;
  c.clip = 1e30;
  c.overflow_at = 3;
  c.ratio = 1.0;
  expect_same_bits(m, c, "fp16");
  const EngineRun on = run_engine(m, c, core::kSpeculationMax);
  EXPECT_TRUE(on.steps[2].skipped);
  EXPECT_TRUE(on.steps[2].speculated);
  EXPECT_FALSE(on.steps[2].speculation_held);
  EXPECT_FALSE(on.steps[3].speculated);  // the step after an overflow does not speculate
  EXPECT_TRUE(on.steps[4].speculated && on.steps[4].speculation_held);
}

// What a checkpoint reads: each CPU layer's current slot holds the master weights master_weights() reports,
// whichever slot the speculation left current.
TEST(CudaEngineSpeculation, CurrentStateSlotHoldsTheMasterWeights) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.ratio = 1.0;
  c.clip = 1e30;  // every step holds: the speculated layers flip every step
  for (int steps : {1, 2}) {
    c.steps = steps;
    const EngineRun on = run_engine(m, c, core::kSpeculationMax);
    const core::TwinFlowSplit& split = on.engine->split();
    std::vector<float> by_shard(size_t(split.cpu_elems));  // (cpu_elems) fp32
    for (const core::ShardPiece& p : split.cpu) {
      const backend::cpu::LayerState st = on.engine->cpu_layer_state(p.layer);
      ASSERT_NE(st.master, nullptr);
      std::copy_n(st.master, p.count, by_shard.begin() + (p.shard_offset - split.gpu_elems));
    }
    // master_weights() lists the shard's real elements in shard order (at ratio 1 all on the CPU)
    ASSERT_EQ(split.gpu_elems, 0);
    size_t i = 0;
    int64_t mismatch = 0;
    for (const core::ShardPiece& p : on.engine->partition().ranks[0].pieces)
      for (int64_t j = 0; j < p.real_count; ++j, ++i) {
        ASSERT_LT(i, on.master.size());
        const float v = by_shard[size_t(p.shard_offset + j)];
        mismatch += std::memcmp(&v, &on.master[i].second, 4) != 0;
      }
    EXPECT_EQ(i, on.master.size());
    EXPECT_EQ(mismatch, 0) << steps << " step(s)";
  }
}

}  // namespace tf
