// Speculative CPU updates keep the bits (docs/ARCHITECTURE.md, "Speculation"): the functional simulator,
// executing the plan's speculative updates and commits, ends with the same fp32 master weights as the same
// run without speculation and as the plain loop, at every ratio, world and ZeRO stage, for every optimizer,
// with steps that clip and steps that do not, and with fp16 steps that overflow and are skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/sim/functional.h"
#include "core/step.h"
#include "tests/bit_diff.h"
#include "tests/grid_sample.h"
#include "tests/sim/functional_test_config.h"

using namespace tf;
using backend::sim::FunctionalConfig;
using backend::sim::FunctionalResult;
using test::first_diff;

namespace {

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

FunctionalResult run(FunctionalConfig c, int64_t speculation_bytes, int world, double ratio, int stage = 3) {
  c.speculation_bytes = speculation_bytes;
  c.world = world;
  c.ratio = ratio;
  c.stage = stage;
  return backend::sim::run_functional(test::toy_mlp(), c);
}

// What a run's speculation did must follow the rule: step 1 speculates; a step speculates exactly when the
// step before it neither clipped nor was skipped; a speculation fails exactly when its step clipped or
// was skipped (the steps' norms against the clip tell which clipped).
void expect_the_rule(const FunctionalResult& r, double clip, const std::string& what) {
  const int steps = int(r.grad_norms.size());
  for (int s = 1; s <= steps; ++s) {
    const auto spoiled = [&](int t) { return contains(r.skipped_steps, t) || r.grad_norms[size_t(t - 1)] > clip; };
    const bool speculated = s == 1 || !spoiled(s - 1);
    EXPECT_EQ(contains(r.speculated_steps, s), speculated) << what << " step " << s;
    EXPECT_EQ(contains(r.failed_speculations, s), speculated && spoiled(s)) << what << " step " << s;
  }
}

// A clip between the norms of a clipping-free run that makes some speculated steps clip and others hold.
std::optional<double> mixed_clip(const FunctionalConfig& base) {
  for (double clip : test::clips_between_norms(test::toy_mlp(), base)) {
    FunctionalConfig c = base;
    c.clip = clip;
    const FunctionalResult r = run(c, core::kSpeculationMax, 1, 1.0);
    const size_t failed = r.failed_speculations.size(), held = r.speculated_steps.size() - failed;
    if (failed >= 2 && held >= 2 && int(r.speculated_steps.size()) < c.steps) return c.clip;
  }
  return std::nullopt;
}

// Every layout (ZeRO stages 1-3: stage 1's all-reduce and stages 1/2's replica refresh carry the same
// speculative updates and commits) with speculation on against the plain loop and the same layout with
// speculation off.
void expect_same_bits_everywhere(const FunctionalConfig& c, const FunctionalResult& ref, const std::string& what,
                                 test::GridSample& grid) {
  for (int stage : {1, 2, 3})
    for (int world : {1, 2, 4})
      for (double ratio : {0.0, 0.3, 1.0}) {
        if (!grid.take()) continue;
        const std::string at = what + " stage " + std::to_string(stage) + " world " + std::to_string(world) +
                               " ratio " + std::to_string(ratio);
        const FunctionalResult on = run(c, core::kSpeculationMax, world, ratio, stage);
        const FunctionalResult off = run(c, 0, world, ratio, stage);
        ASSERT_EQ(first_diff(on.master, ref.master), -1) << at;
        ASSERT_EQ(first_diff(off.master, ref.master), -1) << at;
        EXPECT_EQ(on.grad_norms, ref.grad_norms) << at;
        EXPECT_EQ(on.skipped_steps, ref.skipped_steps) << at;
        EXPECT_EQ(on.loss_scales, ref.loss_scales) << at;
        EXPECT_TRUE(off.speculated_steps.empty()) << at;
        if (ratio == 0.0) {  // no CPU segment: nothing to speculate
          EXPECT_TRUE(on.speculated_steps.empty()) << at;
        } else {
          EXPECT_FALSE(on.speculated_steps.empty()) << at;
          expect_the_rule(on, c.clip, at);
        }
      }
}

const core::OptimizerKind kKinds[] = {core::OptimizerKind::kAdamW, core::OptimizerKind::kAdam,
                                      core::OptimizerKind::kAdagrad, core::OptimizerKind::kLion};

}  // namespace

// bf16 with clipping: some steps clip (their speculation is redone, the next step does not speculate),
// the others hold.
TEST(FunctionalSpeculation, SameBitsWhenSomeStepsClip) {
  test::GridSample grid;
  for (core::OptimizerKind kind : kKinds) {
    FunctionalConfig base = test::optimizer_config(kind, 8);
    const std::optional<double> clip = mixed_clip(base);
    ASSERT_TRUE(clip) << core::optimizer_name(kind) << ": no clip gives both held and failed speculations";
    base.clip = *clip;
    const FunctionalResult ref = backend::sim::run_reference_loop(test::toy_mlp(), base);
    expect_same_bits_everywhere(base, ref, std::string(core::optimizer_name(kind)) + " clip " + std::to_string(*clip),
                                grid);
  }
}

// fp16 with loss scaling and clipping: a forced overflow skips step 3 (its speculation is discarded, no
// slot flips) and step 4 does not speculate; the loss scale halves.
TEST(FunctionalSpeculation, SameBitsAcrossAnFp16Overflow) {
  test::GridSample grid;
  for (core::OptimizerKind kind : kKinds) {
    FunctionalConfig base = test::optimizer_config(kind, 7);
    base.grad_dtype = core::DType::kF16;
    base.loss_scaler = {1024, 2, 1, 0};  // doubles after 2 clean steps: the scale changes between speculations
    base.overflow_at_step = 3;
    base.clip = 1e30;  // only the overflow spoils a speculation
    const FunctionalResult ref = backend::sim::run_reference_loop(test::toy_mlp(), base);
    ASSERT_EQ(ref.skipped_steps, std::vector<int>{3});
    const FunctionalResult on = run(base, core::kSpeculationMax, 2, 0.3);
    EXPECT_EQ(on.speculated_steps, (std::vector<int>{1, 2, 3, 5, 6, 7}));
    EXPECT_EQ(on.failed_speculations, std::vector<int>{3});
    expect_same_bits_everywhere(base, ref, std::string(core::optimizer_name(kind)) + " fp16", grid);
  }
}

// A budget that holds some speculated layers and not others (the prefix in backward order that fits)
// gives the same bits too.
TEST(FunctionalSpeculation, SameBitsWithAPartialBudget) {
  FunctionalConfig base = test::optimizer_config(core::OptimizerKind::kAdamW, 6);
  const std::optional<double> clip = mixed_clip(base);
  ASSERT_TRUE(clip);
  base.clip = *clip;
  const FunctionalResult ref = backend::sim::run_reference_loop(test::toy_mlp(), base);
  // the last layer (256 x 128 + 128 elements, padded to tiles) alone: 12 B per element for AdamW
  for (int64_t budget : {int64_t(12) * 34816, int64_t(12) * 34816 * 4})
    for (int world : {1, 2}) {
      FunctionalConfig c = base;
      c.speculation_bytes = budget;
      c.world = world;
      c.ratio = 1.0;
      const FunctionalResult r = backend::sim::run_functional(test::toy_mlp(), c);
      EXPECT_FALSE(r.speculated_steps.empty()) << budget;
      ASSERT_EQ(first_diff(r.master, ref.master), -1) << "budget " << budget << " world " << world;
    }
}

// Issues 15 and 16 together: the staging rings bound where a speculated layer's gradient and copy wait,
// and a slot is reused only after the commit (or its redo) and the H2D of its previous layer
// (core::plan_step). Six MLP layers (more than any ring's slots; with K slots the first K CPU layers
// speculate), rings of 1, 2 and 3 slots with speculation on and off, against unbounded staging without
// speculation: bit-identical masters, norms, skips and loss scales, on ZeRO stages 1-3, worlds 1 and 2,
// ratios 0.3 and 1, with a clip that makes some steps clip and with an fp16 step that overflows.
TEST(FunctionalSpeculation, StagingRingsWithSpeculationKeepTheBits) {
  const core::ModelDesc m = core::describe_model(core::make_mlp({128, 256, 256, 256, 256, 256, 128}));
  FunctionalConfig clipped = test::optimizer_config(core::OptimizerKind::kAdamW, 8);
  clipped.ratio = 1.0;  // the search's run: world 1, every layer on the CPU
  clipped.staging_slots = 3;
  clipped.speculation_bytes = core::kSpeculationMax;
  std::optional<double> clip;
  for (double candidate : test::clips_between_norms(m, clipped)) {
    clipped.clip = candidate;
    const FunctionalResult r = backend::sim::run_functional(m, clipped);
    const size_t failed = r.failed_speculations.size(), held = r.speculated_steps.size() - failed;
    if (failed >= 1 && held >= 1) {
      clip = candidate;
      break;
    }
  }
  ASSERT_TRUE(clip) << "no clip gives both held and failed speculations";
  clipped.clip = *clip;
  FunctionalConfig fp16 = test::optimizer_config(core::OptimizerKind::kAdamW, 5);
  fp16.grad_dtype = core::DType::kF16;
  fp16.loss_scaler = {1024, 2, 1, 0};
  fp16.overflow_at_step = 3;
  fp16.clip = 1e30;  // only the overflow spoils a speculation
  test::GridSample grid;
  for (const auto& [base, what] : {std::pair{clipped, "clipped"}, std::pair{fp16, "fp16"}}) {
    size_t failed = 0;
    for (int stage : {1, 2, 3})
      for (int world : {1, 2})
        for (double ratio : {0.3, 1.0}) {
          if (!grid.take()) continue;
          FunctionalConfig c = base;
          c.stage = stage;
          c.world = world;
          c.ratio = ratio;
          c.staging_slots = core::kUnboundedStaging;
          c.speculation_bytes = 0;
          const FunctionalResult ref = backend::sim::run_functional(m, c);
          ASSERT_TRUE(ref.speculated_steps.empty());
          for (int slots : {1, 2, 3})
            for (int64_t speculation : {int64_t(0), core::kSpeculationMax}) {
              c.staging_slots = slots;
              c.speculation_bytes = speculation;
              const FunctionalResult r = backend::sim::run_functional(m, c);
              const std::string at = std::string(what) + " stage " + std::to_string(stage) + " world " +
                                     std::to_string(world) + " ratio " + std::to_string(ratio) + " slots " +
                                     std::to_string(slots) + " speculation " + std::to_string(speculation);
              ASSERT_EQ(first_diff(r.master, ref.master), -1) << at;
              EXPECT_EQ(r.grad_norms, ref.grad_norms) << at;
              EXPECT_EQ(r.skipped_steps, ref.skipped_steps) << at;
              EXPECT_EQ(r.loss_scales, ref.loss_scales) << at;
              EXPECT_EQ(r.speculated_steps.empty(), speculation == 0) << at;
              failed += r.failed_speculations.size();
            }
        }
    EXPECT_GT(failed, 0u) << what << ": some speculations must fail (and be redone from the ring)";
  }
}
