// Carrying the optimizer tail into the next step keeps the bits (docs/ARCHITECTURE.md, "Carrying the
// optimizer tail into the next step"): the functional simulator runs each step's carried ops as late as
// the plan allows (when a later op waits for them, or at a drain) and ends with the same fp32 master
// weights and states as the same run with carry_tail off and as the plain loop, at every ratio, world,
// ZeRO stage and staging ring, with speculation on and off, through clipped steps and an fp16 overflow,
// and across a checkpoint save and resume in the middle of the run; and in every order of the speculated
// CPU passes (core::CpuPassOrder).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "backends/sim/functional.h"
#include "core/checkpoint.h"
#include "core/model.h"
#include "core/partition.h"
#include "core/speculation.h"
#include "core/step.h"
#include "core/twinflow.h"
#include "tests/bit_diff.h"
#include "tests/grid_sample.h"
#include "tests/sim/functional_test_config.h"
#include "tests/temp_dir.h"

using namespace tf;
using backend::sim::FunctionalConfig;
using backend::sim::FunctionalResult;
using test::first_diff;

namespace {

FunctionalResult run(FunctionalConfig c, bool carry) {
  c.carry_tail = carry;
  return backend::sim::run_functional(test::toy_mlp(), c);
}

// Carry on against carry off and the plain loop: master and states bit for bit, the same steps'
// norms, skips, loss scales and speculation outcomes; with a CPU segment that leaves the first layer
// on the GPU some carried ops ran in the next step (the order really changed).
void expect_same_bits(const FunctionalConfig& c, const FunctionalResult& ref, const std::string& at) {
  const FunctionalResult on = run(c, true), off = run(c, false);
  ASSERT_EQ(first_diff(on.master, ref.master), -1) << at;
  ASSERT_EQ(first_diff(off.master, ref.master), -1) << at;
  ASSERT_EQ(on.states.size(), off.states.size()) << at;
  for (size_t a = 0; a < on.states.size(); ++a) EXPECT_EQ(first_diff(on.states[a], off.states[a]), -1) << at;
  EXPECT_EQ(on.grad_norms, off.grad_norms) << at;
  EXPECT_EQ(on.skipped_steps, off.skipped_steps) << at;
  EXPECT_EQ(on.loss_scales, off.loss_scales) << at;
  EXPECT_EQ(on.speculated_steps, off.speculated_steps) << at;
  EXPECT_EQ(on.failed_speculations, off.failed_speculations) << at;
  EXPECT_EQ(on.d2h_bytes, off.d2h_bytes) << at;
  EXPECT_EQ(on.h2d_bytes, off.h2d_bytes) << at;
  EXPECT_EQ(off.carried_ops_run_late, 0) << at;
  // below ratio 1 the first layer has no CPU part, so the next step starts before the tail is done
  if (c.ratio > 0 && c.ratio < 1) {
    EXPECT_GT(on.carried_ops_run_late, 0) << at;
  }
}

void expect_same_bits_everywhere(FunctionalConfig c, const std::string& what, uint64_t salt) {
  const FunctionalResult ref = backend::sim::run_reference_loop(test::toy_mlp(), c);
  test::GridSample grid(salt);
  for (int stage : {1, 2, 3})
    for (int world : {1, 2, 4})
      for (double ratio : {0.0, 0.3, 1.0})
        for (int64_t speculation : {int64_t(0), core::kSpeculationMax}) {
          if (!grid.take()) continue;
          c.stage = stage;
          c.world = world;
          c.ratio = ratio;
          c.speculation_bytes = speculation;
          expect_same_bits(c, ref,
                           what + " stage " + std::to_string(stage) + " world " + std::to_string(world) + " ratio " +
                               std::to_string(ratio) + " speculation " + std::to_string(speculation));
        }
}

// A clip between the step norms that makes some steps clip and others not.
double mixed_clip(const FunctionalConfig& base) {
  const std::vector<double> clips = test::clips_between_norms(test::toy_mlp(), base);
  return clips.at(clips.size() / 2);
}

}  // namespace

// bf16 with clipping on some steps (their speculation fails; the next step does not speculate).
TEST(FunctionalCarry, SameBitsWhenSomeStepsClip) {
  FunctionalConfig c = test::optimizer_config(core::OptimizerKind::kAdamW, 6);
  c.clip = mixed_clip(c);
  expect_same_bits_everywhere(c, "clip " + std::to_string(c.clip), 1);
}

// No clipping and no loss scaling: nothing waits for the norm, the CPU passes run during backward and
// the tail is the last of them.
TEST(FunctionalCarry, SameBitsWithoutANormWait) {
  FunctionalConfig c = test::optimizer_config(core::OptimizerKind::kAdam, 5);
  c.clip = 0;
  expect_same_bits_everywhere(c, "no clip", 2);
}

// fp16: a forced overflow skips step 3 (its carried H2Ds skip with it), the loss scale halves.
TEST(FunctionalCarry, SameBitsAcrossAnFp16Overflow) {
  FunctionalConfig c = test::optimizer_config(core::OptimizerKind::kLion, 6);
  c.grad_dtype = core::DType::kF16;
  c.loss_scaler = {1024, 2, 1, 0};
  c.overflow_at_step = 3;
  c.clip = 1e30;
  const FunctionalResult ref = backend::sim::run_reference_loop(test::toy_mlp(), c);
  ASSERT_EQ(ref.skipped_steps, std::vector<int>{3});
  expect_same_bits_everywhere(c, "fp16", 3);
}

// The staging rings: 1, 2 and 3 slots and full-size staging, speculation on and off, the passes after the
// norm in ring forward order (core::StepConfig::ring_forward_order, the default); backward order (the order
// before it) on the rings at stage 3 and ratio 1.
TEST(FunctionalCarry, SameBitsOnEveryStagingRing) {
  FunctionalConfig c = test::optimizer_config(core::OptimizerKind::kAdagrad, 6);
  c.clip = mixed_clip(c);
  const FunctionalResult ref = backend::sim::run_reference_loop(test::toy_mlp(), c);
  for (int slots : {1, 2, 3, core::kUnboundedStaging})
    for (int stage : {2, 3})
      for (double ratio : {0.3, 1.0})
        for (int64_t speculation : {int64_t(0), core::kSpeculationMax})
          for (bool ring_forward : {true, false}) {
            if (!ring_forward && (slots == core::kUnboundedStaging || stage != 3 || ratio != 1.0)) continue;
            c.staging_slots = slots;
            c.stage = stage;
            c.world = 2;
            c.ratio = ratio;
            c.speculation_bytes = speculation;
            c.ring_forward_order = ring_forward;
            expect_same_bits(c, ref,
                             "slots " + std::to_string(slots) + " stage " + std::to_string(stage) + " ratio " +
                                 std::to_string(ratio) + " speculation " + std::to_string(speculation) +
                                 (ring_forward ? " ring forward order" : " ring backward order"));
          }
}

// A checkpoint drains the carried tail first: 8 steps against 4 + save + resume + 4 with carry on,
// bit for bit, with clipping on some steps.
TEST(FunctionalCarry, CheckpointDrainsTheTail) {
  FunctionalConfig c = test::optimizer_config(core::OptimizerKind::kAdamW, 8);
  c.clip = mixed_clip(c);
  c.world = 2;
  c.ratio = 0.6;
  const FunctionalResult whole = run(c, false);
  test::TempDir dir("carry_ckpt");
  FunctionalConfig first = c;
  first.steps = 4;
  first.checkpoints.dir = dir.path();
  const FunctionalResult a = run(first, true);
  ASSERT_EQ(a.saves.size(), 1u);
  FunctionalConfig second = c;
  second.checkpoints.resume = core::resolve_checkpoint(dir.path());
  const FunctionalResult b = run(second, true);
  EXPECT_EQ(b.first_step, 5);
  EXPECT_GT(b.carried_ops_run_late, 0);
  ASSERT_EQ(first_diff(b.master, whole.master), -1);
  for (size_t s = 0; s < whole.states.size(); ++s) EXPECT_EQ(first_diff(b.states[s], whole.states[s]), -1);
}

// ---- the CPU pass order (core::CpuPassOrder; docs/ARCHITECTURE.md, "Order after the norm") ----

namespace {

// 6 layers: up to 5 speculated CPU layers to reorder.
const core::ModelDesc& deep_mlp() {
  static const core::ModelDesc m = core::describe_model(core::make_mlp({128, 256, 256, 256, 256, 256, 128}));
  return m;
}

// The speculated layers of rank 0 under `c` (what the order counts).
int speculated_of(const FunctionalConfig& c) {
  const core::Partition part = core::make_partition(deep_mlp(), {c.stage, c.world, 2048});
  core::StepConfig s;
  s.clip_gradients = true;
  s.staging_slots = c.staging_slots;
  s.speculation_bytes = c.speculation_bytes;
  return int(core::speculated_layers(core::split_shard(part.ranks[0], c.ratio, 2048), s).size());
}

}  // namespace

// Every m and k against today's order, bit for bit (master, states, norms, the speculation's outcomes):
// with steps that clip (their speculation fails: the passes issued after the commits run twice) and with
// none clipping (every speculation holds), ratios 0.3 and 1, ZeRO-3 and stage 1 on two ranks. Each
// reordered run's cpu queue really ran in another order for some m and k.
TEST(FunctionalCarry, SameBitsInEveryCpuPassOrder) {
  FunctionalConfig c = test::optimizer_config(core::OptimizerKind::kAdamW, 5);
  c.staging_slots = core::kUnboundedStaging;
  c.speculation_bytes = core::kSpeculationMax;
  c.carry_tail = true;
  const std::vector<double> clips = test::clips_between_norms(deep_mlp(), c);
  for (double clip : {clips.at(clips.size() / 2), 1e30})
    for (double ratio : {0.3, 1.0})
      for (int stage : {3, 1}) {
        c.clip = clip;
        c.ratio = ratio;
        c.stage = stage;
        c.world = 2;
        c.cpu_order = {};
        const FunctionalResult today = backend::sim::run_functional(deep_mlp(), c);
        EXPECT_EQ(today.failed_speculations.empty(), clip == 1e30);
        const int n = speculated_of(c);
        ASSERT_GE(n, 1);
        size_t moved = 0;
        for (int m = 0; m < n; ++m)
          for (int k = m; k <= n; ++k) {
            c.cpu_order = {m, k};
            const std::string at = "clip " + std::to_string(clip) + " ratio " + std::to_string(ratio) + " stage " +
                                   std::to_string(stage) + " order " + std::to_string(m) + "," + std::to_string(k);
            const FunctionalResult r = backend::sim::run_functional(deep_mlp(), c);
            ASSERT_EQ(first_diff(r.master, today.master), -1) << at;
            ASSERT_EQ(r.states.size(), today.states.size()) << at;
            for (size_t a = 0; a < r.states.size(); ++a) EXPECT_EQ(first_diff(r.states[a], today.states[a]), -1) << at;
            EXPECT_EQ(r.grad_norms, today.grad_norms) << at;
            EXPECT_EQ(r.speculated_steps, today.speculated_steps) << at;
            EXPECT_EQ(r.failed_speculations, today.failed_speculations) << at;
            moved +=
                r.queue_order.at(0)[size_t(core::Queue::kCpu)] != today.queue_order.at(0)[size_t(core::Queue::kCpu)];
          }
        if (n > 1) {
          EXPECT_GT(moved, 0u) << "clip " << clip << " ratio " << ratio;
        }
      }
}
