// Checkpoint and resume in the functional simulator: train N steps against train k + save + resume +
// train N - k; the final master weights, optimizer states, loss scaler and optimizer step are
// bit-identical for every optimizer, for fp16 with a skipped step after the resume, at ratios
// {0, 0.3, 1}, across the reshard matrix (ratio 0.3 -> 0.7, world 2 -> 4 -> 1, stage 3 -> 2), and with
// speculative CPU updates whose layers hold their state in the spare slot at the save.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backends/sim/functional.h"
#include "core/checkpoint.h"
#include "core/error.h"
#include "core/hf_names.h"
#include "core/optim/dtype.h"
#include "tests/bit_diff.h"
#include "tests/sim/functional_test_config.h"
#include "tests/temp_dir.h"

using namespace tf;
using backend::sim::FunctionalConfig;
using backend::sim::FunctionalResult;
using test::first_diff;

namespace {

FunctionalConfig config(core::OptimizerKind kind, int steps) {
  FunctionalConfig c = test::optimizer_config(kind, steps);
  c.micro_shards = 4;  // divisible by every world below
  c.clip = 0.5;        // active: the norm's bits matter
  c.world = 2;
  return c;
}

// One leg of a resumed run: the layout it trains with and the step it stops after.
struct Leg {
  int world;
  int stage;
  double ratio;
  int until;
};

// Trains the legs one after the other, each saving its last step into `dir` and the next resuming from
// the newest checkpoint there. Returns the last leg's result.
FunctionalResult run_legs(const core::ModelDesc& m, FunctionalConfig c, const std::vector<Leg>& legs,
                          const std::filesystem::path& dir) {
  FunctionalResult r;
  for (size_t i = 0; i < legs.size(); ++i) {
    c.world = legs[i].world;
    c.stage = legs[i].stage;
    c.ratio = legs[i].ratio;
    c.steps = legs[i].until;
    c.checkpoints.dir = dir;
    c.checkpoints.resume = i == 0 ? std::filesystem::path() : core::resolve_checkpoint(dir);
    r = backend::sim::run_functional(m, c);
    EXPECT_EQ(r.last_step, legs[i].until);
    EXPECT_EQ(r.first_step, i == 0 ? 1 : legs[i - 1].until + 1);
  }
  return r;
}

// The resumed run's final state equals the uninterrupted run's, bit for bit, and its steps are the
// uninterrupted run's last steps (norms, scales, skips).
void expect_same_final_state(const FunctionalResult& whole, const FunctionalResult& resumed, const std::string& what) {
  ASSERT_EQ(first_diff(whole.master, resumed.master), -1) << what << ": master";
  ASSERT_EQ(whole.states.size(), resumed.states.size()) << what;
  for (size_t a = 0; a < whole.states.size(); ++a)
    ASSERT_EQ(first_diff(whole.states[a], resumed.states[a]), -1) << what << ": state " << a;
  EXPECT_EQ(whole.loss_scaler.scale, resumed.loss_scaler.scale) << what;
  EXPECT_EQ(whole.loss_scaler.clean, resumed.loss_scaler.clean) << what;
  EXPECT_EQ(whole.optimizer_step, resumed.optimizer_step) << what;
  const size_t tail = resumed.grad_norms.size();
  ASSERT_LE(tail, whole.grad_norms.size());
  const auto last = [&](const std::vector<double>& v) {
    return std::vector<double>(v.end() - std::ptrdiff_t(tail), v.end());
  };
  EXPECT_EQ(last(whole.grad_norms), resumed.grad_norms) << what;
  EXPECT_EQ(last(whole.loss_scales), resumed.loss_scales) << what;
  std::vector<int> late_skips;
  for (int s : whole.skipped_steps)
    if (s >= resumed.first_step) late_skips.push_back(s);
  EXPECT_EQ(late_skips, resumed.skipped_steps) << what;
}

}  // namespace

// Every optimizer at ratios {0, 0.3, 1}: 10 steps against 5 + save + resume + 5 (world 2, stage 3).
TEST(FunctionalCheckpoint, ResumeIsBitIdenticalForEveryOptimizerAndRatio) {
  const core::ModelDesc m = test::toy_mlp();
  for (core::OptimizerKind kind : {core::OptimizerKind::kAdamW, core::OptimizerKind::kAdam,
                                   core::OptimizerKind::kAdagrad, core::OptimizerKind::kLion})
    for (double ratio : {0.0, 0.3, 1.0}) {
      const std::string what = std::string(core::optimizer_name(kind)) + " ratio " + std::to_string(ratio);
      FunctionalConfig c = config(kind, 10);
      c.ratio = ratio;
      const FunctionalResult whole = backend::sim::run_functional(m, c);
      ASSERT_EQ(first_diff(whole.master, backend::sim::run_reference_loop(m, c).master), -1) << what;
      test::TempDir dir("tf_fckpt");
      const FunctionalResult resumed = run_legs(m, c, {{2, 3, ratio, 5}, {2, 3, ratio, 10}}, dir.path());
      expect_same_final_state(whole, resumed, what);
      // the checkpoint really carried the state: a fresh run of steps 6..10 would not get there
      EXPECT_NE(first_diff(backend::sim::run_reference_loop(m, config(kind, 5)).master, resumed.master), -1);
    }
}

// fp16 with a window of 2 clean steps: the scale grows across the resume (the clean-step counter is
// restored), and the overflow at step 7, after the resume, skips that step and halves the scale in both
// runs.
TEST(FunctionalCheckpoint, Fp16WithASkippedStepAfterTheResume) {
  const core::ModelDesc m = test::toy_mlp();
  FunctionalConfig c = config(core::OptimizerKind::kAdamW, 10);
  c.grad_dtype = core::DType::kF16;
  c.loss_scaler = {128, 2, 1, 0};
  c.overflow_at_step = 7;
  c.ratio = 0.3;
  const FunctionalResult whole = backend::sim::run_functional(m, c);
  ASSERT_EQ(whole.skipped_steps, std::vector<int>{7});
  // growth after steps 2, 4, 6 (128 -> 1024); step 5 starts with a clean count of 0 but the counter at
  // the save (after step 5) is 1: without it the resumed run would grow after step 7 instead of 6
  EXPECT_EQ(whole.loss_scales, (std::vector<double>{128, 128, 256, 256, 512, 512, 1024, 512, 512, 1024}));
  test::TempDir dir("tf_fckpt");
  const FunctionalResult resumed = run_legs(m, c, {{2, 3, 0.3, 5}, {2, 3, 0.3, 10}}, dir.path());
  expect_same_final_state(whole, resumed, "fp16");
  EXPECT_EQ(resumed.skipped_steps, std::vector<int>{7});
}

// The reshard matrix: a checkpoint written at one layout continues bit for bit at another.
TEST(FunctionalCheckpoint, ReshardedResumeIsBitIdentical) {
  const core::ModelDesc m = test::toy_mlp();
  const FunctionalConfig c = config(core::OptimizerKind::kAdamW, 10);
  const FunctionalResult whole = backend::sim::run_functional(m, c);
  const std::vector<std::pair<std::string, std::vector<Leg>>> matrix = {
      {"ratio 0.3 -> 0.7", {{2, 3, 0.3, 5}, {2, 3, 0.7, 10}}},
      {"world 2 -> 4 -> 1", {{2, 3, 0.3, 3}, {4, 3, 0.3, 6}, {1, 3, 0.3, 10}}},
      {"stage 3 -> 2", {{2, 3, 0.3, 5}, {2, 2, 0.3, 10}}},
  };
  for (const auto& [what, legs] : matrix) {
    test::TempDir dir("tf_fckpt");
    expect_same_final_state(whole, run_legs(m, c, legs, dir.path()), what);
  }
}

namespace {

// Steps 1..until that ran their speculative updates and that speculation held (every speculated layer
// adopted its spare slot: its slot index flipped).
int held_until(const FunctionalResult& r, int until) {
  int n = 0;
  for (int s : r.speculated_steps)
    if (s <= until &&
        std::find(r.failed_speculations.begin(), r.failed_speculations.end(), s) == r.failed_speculations.end())
      ++n;
  return n;
}

// A clip under which `c`'s 10 steps both clip and hold speculations, with an odd number held in steps 1..5:
// at the save after step 5 every speculated layer's state is in its spare slot.
std::optional<double> clip_leaving_spare_slots(const core::ModelDesc& m, FunctionalConfig c) {
  for (double clip : test::clips_between_norms(m, c)) {
    c.clip = clip;
    const FunctionalResult r = backend::sim::run_functional(m, c);
    if (!r.failed_speculations.empty() && held_until(r, 5) % 2 == 1 && held_until(r, 10) > held_until(r, 5))
      return clip;
  }
  return std::nullopt;
}

}  // namespace

// Speculation on (docs/ARCHITECTURE.md, "Speculation") with a clip that makes some steps clip: the save
// after step 5 reads each speculated layer's current slot (the spare one there), the resume writes it
// back into the primary slot and resets the slot indices; 10 steps against 5 + save + resume + 5, at the
// same layout and resharded, every optimizer, ratios 0.3 and 1.
TEST(FunctionalCheckpoint, ResumeWithSpeculatedLayersInTheirSpareSlot) {
  const core::ModelDesc m = test::toy_mlp();
  for (core::OptimizerKind kind : {core::OptimizerKind::kAdamW, core::OptimizerKind::kAdam,
                                   core::OptimizerKind::kAdagrad, core::OptimizerKind::kLion})
    for (double ratio : {0.3, 1.0}) {
      const std::string what = std::string(core::optimizer_name(kind)) + " ratio " + std::to_string(ratio);
      FunctionalConfig c = config(kind, 10);
      c.ratio = ratio;
      c.speculation_bytes = core::kSpeculationMax;
      const std::optional<double> clip = clip_leaving_spare_slots(m, c);
      ASSERT_TRUE(clip) << what << ": no clip leaves the speculated layers in their spare slot at step 5";
      c.clip = *clip;
      const FunctionalResult whole = backend::sim::run_functional(m, c);
      ASSERT_EQ(first_diff(whole.master, backend::sim::run_reference_loop(m, c).master), -1) << what;
      for (const std::vector<Leg>& legs : {std::vector<Leg>{{2, 3, ratio, 5}, {2, 3, ratio, 10}},
                                           std::vector<Leg>{{2, 3, ratio, 5}, {1, 2, 0.7, 10}}}) {
        test::TempDir dir("tf_fckpt");
        const FunctionalResult resumed = run_legs(m, c, legs, dir.path());
        expect_same_final_state(whole, resumed, what + " -> world " + std::to_string(legs[1].world));
        EXPECT_FALSE(resumed.speculated_steps.empty()) << what;
      }
    }
}

// The decoder workload (the CPU reference decoder's gradients on the tokens of the resumed step): 4
// steps against 2 at world 2, ratio 0.3 + 2 at world 1, ratio 0; the losses of steps 3 and 4 agree too.
TEST(FunctionalCheckpoint, DecoderResumeAcrossWorldAndRatio) {
  const core::ModelDesc m = core::describe_model(core::model_preset("gpt-tiny"));
  FunctionalConfig c = config(core::OptimizerKind::kAdamW, 4);
  c.workload = core::WorkloadType::kDecoder;
  c.hp.lr = 1e-3;
  c.clip = 0.05;
  c.ratio = 0.3;
  const FunctionalResult whole = backend::sim::run_functional(m, c);
  test::TempDir dir("tf_fckpt");
  const FunctionalResult resumed = run_legs(m, c, {{2, 3, 0.3, 2}, {1, 3, 0.0, 4}}, dir.path());
  expect_same_final_state(whole, resumed, "decoder");
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses, std::vector<double>(whole.losses.begin() + 2, whole.losses.end()));
}

// A stop request ends the run after the current step with a synchronous save; the resumed run goes on
// to the total steps bit for bit.
TEST(FunctionalCheckpoint, StopRequestSavesAndTheResumeContinues) {
  const core::ModelDesc m = test::toy_mlp();
  FunctionalConfig c = config(core::OptimizerKind::kLion, 8);
  const FunctionalResult whole = backend::sim::run_functional(m, c);
  test::TempDir dir("tf_fckpt");
  c.checkpoints.dir = dir.path();
  int asked = 0;
  c.checkpoints.stop_requested = [&] { return ++asked == 3; };  // after step 3
  const FunctionalResult stopped = backend::sim::run_functional(m, c);
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.last_step, 3);
  ASSERT_EQ(stopped.saves.size(), 1u);
  EXPECT_EQ(stopped.saves[0].dir, dir.path() / "step-3");
  EXPECT_EQ(core::resolve_checkpoint(dir.path()), dir.path() / "step-3");
  c.checkpoints.stop_requested = {};
  c.checkpoints.resume = core::resolve_checkpoint(dir.path());
  const FunctionalResult resumed = backend::sim::run_functional(m, c);
  EXPECT_FALSE(resumed.stopped);
  expect_same_final_state(whole, resumed, "stop");
}

// every_steps and keep: saves after steps 2, 4, 6, 8 and 9 (the last), the two newest kept.
TEST(FunctionalCheckpoint, EveryStepsAndKeep) {
  const core::ModelDesc m = test::toy_mlp();
  FunctionalConfig c = config(core::OptimizerKind::kAdagrad, 9);
  test::TempDir dir("tf_fckpt");
  c.checkpoints.dir = dir.path();
  c.checkpoints.every_steps = 2;
  c.checkpoints.keep = 2;
  const FunctionalResult r = backend::sim::run_functional(m, c);
  ASSERT_EQ(r.saves.size(), 5u);
  std::vector<int64_t> steps;
  for (const core::CheckpointListing& l : core::list_checkpoints(dir.path())) steps.push_back(l.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{8, 9}));
  // what step 9 holds is the run's final state, read back at a one-rank layout
  const core::CheckpointReader reader(dir.path() / "step-9");
  EXPECT_EQ(reader.meta().optimizer_step, r.optimizer_step);
  EXPECT_EQ(reader.meta().data.next_step, 10);
  EXPECT_EQ(reader.meta().layout.world, 2);
  const std::vector<core::ShardSpan> all = {{0, m.total_params, 0}};
  const auto arrays = reader.read(all, m.total_params, reader.arrays());
  EXPECT_EQ(first_diff(arrays[0], r.master), -1);
  EXPECT_EQ(first_diff(arrays[1], r.states[0]), -1);
}

// A resume that would not continue the same run is refused before anything is loaded.
TEST(FunctionalCheckpoint, ResumeRefusesAnotherRun) {
  const core::ModelDesc m = test::toy_mlp();
  FunctionalConfig c = config(core::OptimizerKind::kAdamW, 3);
  test::TempDir dir("tf_fckpt");
  c.checkpoints.dir = dir.path();
  backend::sim::run_functional(m, c);
  c.checkpoints.dir.clear();
  c.checkpoints.resume = dir.path() / "step-3";
  const auto refused = [&](FunctionalConfig bad, const core::ModelDesc& model, const std::string& says) {
    try {
      backend::sim::run_functional(model, bad);
      ADD_FAILURE() << "no error; expected one saying '" << says << "'";
    } catch (const core::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  FunctionalConfig more = c;
  more.steps = 5;
  EXPECT_NO_THROW(backend::sim::run_functional(m, more));
  refused(c, m, "nothing is left to train");
  FunctionalConfig seed = more;
  seed.seed = 2;
  refused(seed, m, "seed 1; this run's is 2");
  FunctionalConfig shards = more;
  shards.micro_shards = 8;
  refused(shards, m, "cut into 4 micro-shards");
  FunctionalConfig lion = more;
  lion.kind = core::OptimizerKind::kLion;
  lion.hp = core::default_hyper_params(lion.kind);
  refused(lion, m, "written by optimizer adamw");
  refused(more, core::describe_model(core::make_mlp({128, 256, 256, 64})), "checkpoint");
}

// `twinflow export`'s path: a checkpoint's master weights, a tensor at a time from the reader through
// core::export_hf_weights, load back with core::load_hf_weights equal to the run's own weights: bit for
// bit in fp32, their bf16 rounding in bf16; GPT-2 and OPT names.
TEST(FunctionalCheckpoint, ExportedWeightsLoadBackEqual) {
  for (const char* preset : {"gpt-tiny", "opt-tiny"}) {
    const core::ModelDesc m = core::describe_model(core::model_preset(preset));
    FunctionalConfig c = config(core::OptimizerKind::kAdamW, 2);
    c.workload = core::WorkloadType::kDecoder;
    c.hp.lr = 1e-3;
    test::TempDir dir("tf_fckpt");
    c.checkpoints.dir = dir.path() / "ck";
    const FunctionalResult r = backend::sim::run_functional(m, c);
    const core::CheckpointReader reader(core::resolve_checkpoint(c.checkpoints.dir));
    const core::ModelDesc& stored = reader.model();
    for (core::DType dtype : {core::DType::kF32, core::DType::kBF16}) {
      const std::filesystem::path file = dir.path() / "w.safetensors";
      std::filesystem::remove(file);
      core::export_hf_weights(
          stored, [&](size_t t) { return reader.read_tensor(stored.tensors[t].name, "master"); }, file, dtype);
      std::vector<float> want = r.master;
      if (dtype == core::DType::kBF16)
        for (float& w : want) w = core::bf16_to_f32(core::f32_to_bf16(w));
      EXPECT_EQ(first_diff(core::load_hf_weights(m, file), want), -1) << preset << " " << core::dtype_name(dtype);
    }
  }
}
