// Checkpoint and resume on the CUDA engine through `twinflow run`'s code (apps/twinflow/run_checkpoint.*):
// train N steps against k steps + save + a fresh engine resumed (at the same or another ratio) + N - k
// steps; the fp32 master weights, the optimizer states and the position are bit-identical. Synthetic,
// MLP and decoder workloads; speculated CPU layers whose state is in their spare slot at the save; a
// stop signal saves synchronously. Skips without a GPU.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <string>
#include <vector>

#include "apps/twinflow/run_checkpoint.h"
#include "apps/twinflow/stop_signals.h"
#include "backends/cuda/engine.h"
#include "backends/sim/functional.h"
#include "core/checkpoint.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "core/speculation.h"
#include "tests/cuda/engine_steps.h"
#include "tests/cuda/gpu_test.h"
#include "tests/temp_dir.h"

namespace tf {
namespace {

namespace cu = backend::cuda;

core::Scenario mlp_scenario(const std::string& optimizer, const std::string& clip = "1.0") {
  return core::parse_scenario(
      "model: {type: mlp, dims: [96, 160, 80, 48]}\n"
      "cluster: {profile: h100-80gb-16core, cpu_cores_per_gpu: 4}\n"
      "training: {micro_batch: 1, grad_accum: 2, gradient_clipping: " +
          clip +
          "}\n"
          "optimizer: {type: " +
          optimizer +
          ", params: {lr: 0.01}}\n"
          "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.3}}\n"
          "workload: {seed: 3}\n",
      {}, "mlp.yaml");
}

core::Scenario decoder_scenario() {
  return core::parse_scenario(
      "model: {preset: gpt-tiny, heads: 1}\n"
      "cluster: {profile: h100-80gb-16core, cpu_cores_per_gpu: 4}\n"
      "training: {micro_batch: 2, grad_accum: 2, gradient_clipping: 1.0}\n"
      "optimizer: {type: adamw, params: {lr: 0.001, weight_decay: 0.1}}\n"
      "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.3}}\n"
      "workload: {seed: 4}\n",
      {}, "decoder.yaml");
}

std::unique_ptr<cu::Engine> engine(const core::RunSettings& s, double ratio) {
  cu::EngineConfig e;
  e.settings = s;
  e.ratio = ratio;
  e.cpu_threads = 4;
  e.pin_threads = false;
  return cu::Engine::create(e);
}

// The engine's optimizer arrays (shard order) and position.
struct State {
  std::vector<std::vector<float>> arrays;
  core::TrainingPosition pos;
};
State state_of(cu::Engine& eng, const core::RunSettings& s) {
  State st;
  const int64_t elems = eng.partition().ranks[0].elems;
  st.arrays.assign(core::checkpoint_arrays(s.policy.kind).size(), std::vector<float>(size_t(elems)));
  std::vector<std::span<float>> views(st.arrays.begin(), st.arrays.end());
  eng.snapshot_optimizer(views);
  st.pos = eng.position();
  return st;
}

void expect_same(const State& a, const State& b, const std::string& what) {
  ASSERT_EQ(a.arrays.size(), b.arrays.size()) << what;
  for (size_t i = 0; i < a.arrays.size(); ++i)
    EXPECT_EQ(std::memcmp(a.arrays[i].data(), b.arrays[i].data(), a.arrays[i].size() * 4), 0)
        << what << ": array " << i;
  EXPECT_EQ(a.pos.step, b.pos.step) << what;
  EXPECT_EQ(a.pos.optimizer_step, b.pos.optimizer_step) << what;
  EXPECT_EQ(a.pos.loss_scaler.scale, b.pos.loss_scaler.scale) << what;
  EXPECT_EQ(a.pos.loss_scaler.clean, b.pos.loss_scaler.clean) << what;
}

State uninterrupted(const core::RunSettings& s, double ratio, int steps) {
  auto eng = engine(s, ratio);
  for (int i = 0; i < steps; ++i) eng->step();
  return state_of(*eng, s);
}

app::RunCheckpointOptions options(const std::filesystem::path& dir, int64_t total, double ratio) {
  app::RunCheckpointOptions o;
  o.config.dir = dir;
  o.total_steps = total;
  o.ratio = ratio;
  o.texts = {"scenario text", ""};
  return o;
}

// Steps 1..k at ratio r1 (saved after k), then a fresh engine at r2 resumed from the newest checkpoint
// for steps k+1..total.
State resumed(const core::RunSettings& s, double r1, int k, double r2, int total, const std::filesystem::path& dir) {
  {
    auto eng = engine(s, r1);
    app::RunCheckpoints ck(*eng, s, options(dir, k, r1));
    for (int64_t step = ck.first_step(); step <= k; ++step) {
      eng->step();
      ck.after_step(step);
    }
  }
  auto eng = engine(s, r2);
  app::RunCheckpointOptions o = options(dir, total, r2);
  o.resume = core::resolve_checkpoint(dir);
  app::RunCheckpoints ck(*eng, s, o);
  EXPECT_EQ(ck.first_step(), k + 1);
  for (int64_t step = ck.first_step(); step <= total; ++step) {
    eng->step();
    ck.after_step(step);
  }
  return state_of(*eng, s);
}

}  // namespace

// Synthetic and MLP workloads, every optimizer: 6 steps against 3 + resume + 3, at one ratio and with
// the ratio changed on resume (0.3 -> 0.7: the bits do not depend on the ratio).
TEST(EngineCheckpoint, ResumeIsBitIdenticalForSyntheticAndMlp) {
  SKIP_WITHOUT_GPU();
  for (const char* opt : {"adamw", "adam", "adagrad", "lion"})
    for (core::WorkloadType w : {core::WorkloadType::kSynthetic, core::WorkloadType::kMlp}) {
      const core::RunSettings s = core::resolve_settings(mlp_scenario(opt), {.workload = w});
      const std::string what = std::string(opt) + " " + std::string(core::workload_type_name(w));
      const State whole = uninterrupted(s, 0.3, 6);
      for (double r2 : {0.3, 0.7}) {
        test::TempDir dir("tf_eckpt");
        expect_same(whole, resumed(s, 0.3, 3, r2, 6, dir.path()), what + " -> ratio " + std::to_string(r2));
      }
    }
}

// The synthetic workload resumed is also the functional simulator's bits (what `run --verify` checks).
TEST(EngineCheckpoint, ResumedSyntheticRunMatchesTheFunctionalSimulator) {
  SKIP_WITHOUT_GPU();
  const core::RunSettings s =
      core::resolve_settings(mlp_scenario("adamw"), {.workload = core::WorkloadType::kSynthetic});
  test::TempDir dir("tf_eckpt");
  const State got = resumed(s, 0.0, 2, 1.0, 5, dir.path());
  const backend::sim::FunctionalResult ref =
      backend::sim::run_functional(s.model, backend::sim::functional_config(s, 0.5, 5, s.step.grad_accum));
  auto eng = engine(s, 0.5);  // a fresh engine only to read its shard layout
  const std::vector<core::ShardSpan> spans = core::shard_spans(eng->partition(), eng->partition().ranks[0].pieces);
  int64_t differ = 0;
  for (const core::ShardSpan& sp : spans)
    for (int64_t j = 0; j < sp.count; ++j)
      differ += std::memcmp(&got.arrays[0][size_t(sp.offset + j)], &ref.master[size_t(sp.model_begin + j)], 4) != 0;
  EXPECT_EQ(differ, 0);
}

// Speculation (docs/ARCHITECTURE.md, "Speculation") with a clip no norm reaches: every step holds, so the
// speculated layers flip slots every step and after 3 steps their state is in the spare slot. The save
// reads it there (Engine::cpu_layer_state); 6 steps against 3 + resume + 3 at ratio 1 and resharded to
// 0.3. Then a restore into an engine whose layers sit in their spare slot resets the slots: the next
// step equals an engine that never restored.
TEST(EngineCheckpoint, SpeculatedLayersInTheirSpareSlot) {
  SKIP_WITHOUT_GPU();
  const core::RunSettings s =
      core::resolve_settings(mlp_scenario("adamw", "1.0e30"), {.workload = core::WorkloadType::kMlp});
  ASSERT_NE(s.step.speculation_bytes, 0);
  const State whole = uninterrupted(s, 1.0, 6);
  for (double r2 : {1.0, 0.3}) {
    test::TempDir dir("tf_eckpt");
    expect_same(whole, resumed(s, 1.0, 3, r2, 6, dir.path()), "speculation -> ratio " + std::to_string(r2));
  }
  auto a = engine(s, 1.0);
  auto b = engine(s, 1.0);
  ASSERT_FALSE(core::speculated_layers(a->split(), a->plan().config).empty());
  const cu::StepReport first = test::step_drained(*a);
  b->step();
  ASSERT_TRUE(first.speculated && first.speculation_held);  // slot 1 now
  const State st = state_of(*a, s);
  a->step();
  a->step();  // slot 1 again, two steps further
  a->restore_optimizer(st.arrays, st.pos);
  expect_same(st, state_of(*a, s), "restored over the spare slot");
  const cu::StepReport next = test::step_drained(*a);
  b->step();
  EXPECT_TRUE(next.speculated && next.speculation_held);
  expect_same(state_of(*b, s), state_of(*a, s), "the step after the restore");
}

// The decoder (gpt-tiny): 4 steps against 2 at ratio 0.3 + resume at ratio 0 + 2.
TEST(EngineCheckpoint, DecoderResumeIsBitIdentical) {
  SKIP_WITHOUT_GPU();
  const core::RunSettings s = core::resolve_settings(decoder_scenario());
  const State whole = uninterrupted(s, 0.3, 4);
  test::TempDir dir("tf_eckpt");
  expect_same(whole, resumed(s, 0.3, 2, 0.0, 4, dir.path()), "decoder 0.3 -> 0");
}

// A stop signal after step 2 of 6 ends the run with a synchronous save of step 2; the resume goes on.
TEST(EngineCheckpoint, StopSignalSavesAndTheResumeContinues) {
  SKIP_WITHOUT_GPU();
  const core::RunSettings s = core::resolve_settings(mlp_scenario("adamw"), {.workload = core::WorkloadType::kMlp});
  const State whole = uninterrupted(s, 0.3, 6);
  test::TempDir dir("tf_eckpt");
  {
    app::StopSignals signals;
    auto eng = engine(s, 0.3);
    app::RunCheckpointOptions o = options(dir.path(), 6, 0.3);
    o.signals = &signals;
    app::RunCheckpoints ck(*eng, s, o);
    eng->step();
    EXPECT_FALSE(ck.after_step(1));
    eng->step();
    ASSERT_EQ(::raise(SIGTERM), 0);
    EXPECT_TRUE(ck.after_step(2));
  }
  EXPECT_EQ(core::resolve_checkpoint(dir.path()), dir.path() / "step-2");
  auto eng = engine(s, 0.3);
  app::RunCheckpointOptions o = options(dir.path(), 6, 0.3);
  o.resume = core::resolve_checkpoint(dir.path());
  app::RunCheckpoints ck(*eng, s, o);
  for (int64_t step = ck.first_step(); step <= 6; ++step) {
    eng->step();
    ck.after_step(step);
  }
  expect_same(whole, state_of(*eng, s), "stop at 2");
}

// restore(snapshot) is the identity, and the bf16 copy it recomputes is the one training keeps: the
// next step's bits equal an engine that never restored.
TEST(EngineCheckpoint, SnapshotRestoreRoundTrip) {
  SKIP_WITHOUT_GPU();
  const core::RunSettings s = core::resolve_settings(mlp_scenario("adagrad"), {.workload = core::WorkloadType::kMlp});
  auto a = engine(s, 0.3);
  auto b = engine(s, 0.3);
  a->step();
  b->step();
  const State st = state_of(*a, s);
  a->restore_optimizer(st.arrays, st.pos);
  expect_same(st, state_of(*a, s), "round trip");
  a->step();
  b->step();
  expect_same(state_of(*b, s), state_of(*a, s), "next step");
}

}  // namespace tf
