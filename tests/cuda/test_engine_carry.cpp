// The CUDA engine carrying the optimizer tail into the next step (docs/ARCHITECTURE.md, "Carrying the
// optimizer tail into the next step") against the same engine without: the same bits, steps and
// checkpoints, and a failure of a carried step named at the next step. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/engine.h"
#include "backends/sim/functional.h"
#include "core/error.h"
#include "core/settings.h"
#include "tests/cuda/engine_steps.h"
#include "tests/cuda/gpu_test.h"

namespace tf {
namespace {

namespace cu = backend::cuda;

// Six layers: more CPU layers than a ring of one or two slots, so slots are reused across the boundary.
core::ModelDesc small_model() { return core::describe_model(core::make_mlp({96, 160, 80, 160, 80, 48})); }

struct Case {
  double ratio = 0.3;
  double clip = 1.0;
  bool fp16 = false;
  int overflow_at = -1;
  int steps = 6;
  int stage = 3;
  int64_t speculation_bytes = core::kSpeculationMax;
  int staging_slots = core::kStagingAuto;
  core::CpuPassOrder order;  // the speculated CPU passes' order (today's by default)
  std::string what() const {
    return "ratio " + std::to_string(ratio) + " clip " + std::to_string(clip) + (fp16 ? " fp16" : " bf16") + " stage " +
           std::to_string(stage) + " speculation " + (speculation_bytes == 0 ? "off" : "auto") + " slots " +
           std::to_string(staging_slots);
  }
};

core::RunSettings settings(const core::ModelDesc& m, const Case& c, bool carry) {
  core::RunSettings s;
  s.model = m;
  s.world = 1;
  s.partition = {c.stage, 1, int64_t(core::kStatsTile)};
  const core::DType grad = c.fp16 ? core::DType::kF16 : core::DType::kBF16;
  core::HyperParams hp = core::default_hyper_params(core::OptimizerKind::kAdamW);
  hp.lr = 1e-2;
  s.policy = core::make_step_policy(core::OptimizerKind::kAdamW, hp, c.clip, grad);
  s.step = core::make_step_config(s.policy, grad, 1, 2, false, c.speculation_bytes);
  s.step.staging_slots = c.staging_slots;
  s.step.carry_tail = carry;
  s.step.cpu_order = c.order;
  s.loss_scaler = {c.fp16 ? 1024.0 : 1.0, 0, 1.0, 0};
  s.workload = core::WorkloadType::kSynthetic;
  s.seed = 13;
  return s;
}

std::unique_ptr<cu::Engine> engine(const core::ModelDesc& m, const Case& c, bool carry) {
  cu::EngineConfig e;
  e.settings = settings(m, c, carry);
  e.ratio = c.ratio;
  e.cpu_threads = 4;
  e.pin_threads = false;
  e.overflow_at_step = c.overflow_at;
  return cu::Engine::create(e);
}

struct Run {
  std::vector<cu::StepReport> steps;
  std::vector<std::pair<int64_t, float>> master, grads;  // fp32 master; the last step's gradients
  bool carried = false;                                  // core::carries(plan)
  core::QueueOrder order;                                // core::plan_queue_order(plan)
};

// The last step's gradients were computed from the bf16 parameters the step before wrote (both segments'
// H2D or GPU optimizer): comparing them compares every element's bf16 parameter of step K - 1.
Run run(const core::ModelDesc& m, const Case& c, bool carry) {
  auto eng = engine(m, c, carry);
  Run r;
  r.carried = core::carries(eng->plan());
  r.order = core::plan_queue_order(eng->plan());
  r.steps = test::run_steps(*eng, c.steps);
  r.master = eng->master_weights();
  r.grads = eng->last_gradients();
  return r;
}

int64_t bits_differ(const std::vector<std::pair<int64_t, float>>& a, const std::vector<std::pair<int64_t, float>>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i].first != b[i].first || std::memcmp(&a[i].second, &b[i].second, 4);
  return n;
}

// Two runs of one training: the same fp32 master, last gradients and per-step reports; each issued its
// queues in its own plan's order.
void expect_same_bits(const Run& on, const Run& off) {
  EXPECT_EQ(bits_differ(on.master, off.master), 0) << "fp32 master";
  EXPECT_EQ(bits_differ(on.grads, off.grads), 0) << "the last step's gradients (the bf16 parameters before it)";
  ASSERT_EQ(on.steps.size(), off.steps.size());
  for (size_t s = 0; s < on.steps.size(); ++s) {
    const cu::StepReport &a = on.steps[s], &b = off.steps[s];
    EXPECT_EQ(a.step, int(s) + 1);
    EXPECT_EQ(std::memcmp(&a.grad_norm, &b.grad_norm, 8), 0) << "step " << s + 1;
    EXPECT_EQ(a.skipped, b.skipped) << "step " << s + 1;
    EXPECT_EQ(a.loss_scale, b.loss_scale) << "step " << s + 1;
    EXPECT_EQ(a.lr, b.lr) << "step " << s + 1;
    EXPECT_EQ(a.speculated, b.speculated) << "step " << s + 1;
    EXPECT_EQ(a.speculation_held, b.speculation_held) << "step " << s + 1;
    EXPECT_EQ(a.d2h_bytes, b.d2h_bytes) << "step " << s + 1;
    EXPECT_EQ(a.h2d_bytes, b.h2d_bytes) << "step " << s + 1;
    EXPECT_EQ(a.issued, on.order) << "step " << s + 1;
    EXPECT_EQ(b.issued, off.order) << "step " << s + 1;
  }
}

void expect_same_as_without_carry(const core::ModelDesc& m, const Case& c) {
  SCOPED_TRACE(c.what());
  const Run on = run(m, c, true), off = run(m, c, false);
  EXPECT_TRUE(on.carried);
  EXPECT_FALSE(off.carried);
  expect_same_bits(on, off);
}

// A clip between the step norms of a run without clipping, so that some steps clip and some do not.
double mid_clip(const core::ModelDesc& m, Case c) {
  c.clip = 1e30;  // the norm is computed (and never clips)
  const Run r = run(m, c, false);
  std::vector<double> norms;
  for (const cu::StepReport& s : r.steps) norms.push_back(s.grad_norm);
  std::sort(norms.begin(), norms.end());
  return 0.5 * (norms[norms.size() / 2 - 1] + norms[norms.size() / 2]);
}

}  // namespace

// Clipping on some steps and not on others, ratios 0.3 and 1, speculation on and off, ZeRO-3 and 2.
TEST(CudaEngineCarry, SameBitsAsWithoutCarryWhenSomeStepsClip) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  const double clip = mid_clip(m, Case{});
  for (int stage : {3, 2})
    for (double ratio : {0.3, 1.0})
      for (int64_t spec : {core::kSpeculationMax, int64_t(0)}) {
        Case c;
        c.stage = stage;
        c.ratio = ratio;
        c.clip = clip;
        c.speculation_bytes = spec;
        expect_same_as_without_carry(m, c);
      }
}

// The speculated CPU passes' order (core::CpuPassOrder; docs/ARCHITECTURE.md, "Order after the norm"): at
// full-size staging with speculation, orders that move the passes (m arrival-order passes, k before the
// commits) against today's order, bit for bit, with steps that clip (the passes after the commits run
// twice: speculative and redo) and with none clipping (every speculation holds), ratios 0.3 and 1. Each
// engine issues its queues in its plan's order, and the reordered plans' cpu queues differ from today's.
TEST(CudaEngineCarry, EveryCpuPassOrderKeepsTheBits) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  for (double clip : {mid_clip(m, Case{}), 1e30})
    for (double ratio : {0.3, 1.0}) {
      Case c;
      c.ratio = ratio;
      c.clip = clip;
      c.staging_slots = core::kUnboundedStaging;
      const tf::Run today = run(m, c, true);
      for (core::CpuPassOrder o : {core::CpuPassOrder{0, 0}, core::CpuPassOrder{0, 2}, core::CpuPassOrder{1, 1},
                                   core::CpuPassOrder{1, 3}, core::CpuPassOrder{2, 5}}) {
        c.order = o;
        SCOPED_TRACE(c.what() + " order " + std::to_string(o.arrival) + "," + std::to_string(o.before_norm));
        const tf::Run r = run(m, c, true);
        expect_same_bits(r, today);
        if (ratio == 1.0) {
          EXPECT_NE(r.order[size_t(core::Queue::kCpu)], today.order[size_t(core::Queue::kCpu)]);
        }
      }
    }
}

// Rings of one slot (every D2H after the first waits for a pass: deferred D2Hs are carried) and no
// clipping (nothing waits for the norm).
TEST(CudaEngineCarry, SameBitsWithARingOfOneSlotAndWithoutClipping) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  for (double clip : {0.0, 1.0}) {
    Case c;
    c.ratio = 1.0;
    c.clip = clip;
    c.staging_slots = 1;
    expect_same_as_without_carry(m, c);
  }
}

// An fp16 overflow skips a step: its carried tail skips too, and the next steps agree.
TEST(CudaEngineCarry, SameBitsAcrossAnFp16OverflowSkip) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  for (double ratio : {0.3, 1.0}) {
    Case c;
    c.fp16 = true;
    c.clip = 1e30;
    c.overflow_at = 3;
    c.ratio = ratio;
    expect_same_as_without_carry(m, c);
  }
}

// A checkpoint snapshot after a carried step (a drain point) holds what the same step without carry
// holds, and training goes on from it with the same bits.
TEST(CudaEngineCarry, SnapshotAfterACarriedStepIsTheUncarriedOne) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.ratio = 1.0;
  auto on = engine(m, c, true), off = engine(m, c, false);
  const int64_t n = on->partition().ranks[0].elems;
  const auto snapshot = [&](cu::Engine& e) {
    std::vector<std::vector<float>> arrays(3, std::vector<float>(size_t(n)));  // AdamW: master, m, v
    std::vector<std::span<float>> views(arrays.begin(), arrays.end());
    e.snapshot_optimizer(views);
    return arrays;
  };
  for (int s = 0; s < 3; ++s) {
    on->step();
    off->step();
  }
  EXPECT_EQ(snapshot(*on), snapshot(*off));
  EXPECT_EQ(on->position().step, 3);
  const std::optional<cu::StepReport> kept = on->drain();  // the report the snapshot's drain kept
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->step, 3);
  for (int s = 0; s < 3; ++s) {
    on->step();
    off->step();
  }
  EXPECT_EQ(bits_differ(on->master_weights(), off->master_weights()), 0);
}

// Without clipping a non-finite gradient is masked by the passes; with a carried tail the CPU passes
// of step 2 (ratio 1: the whole shard) end under step 3, whose step() (or the drain) reports step 2.
TEST(CudaEngineCarry, AFailureOfACarriedStepIsNamedAtTheNextStep) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.ratio = 1.0;
  c.clip = 0;
  c.overflow_at = 2;
  auto eng = engine(m, c, true);
  ASSERT_TRUE(core::carries(eng->plan()));
  EXPECT_FALSE(eng->step().has_value());
  std::string error;
  try {
    eng->step();  // step 2's body: its CPU passes are carried
    eng->step();  // step 2's tail is done here
    eng->drain();
  } catch (const core::RuntimeFailure& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("step 2"), std::string::npos) << error;
  EXPECT_NE(error.find("non-finite"), std::string::npos) << error;
  EXPECT_THROW(eng->step(), core::RuntimeFailure);  // the engine cannot continue
}

}  // namespace tf
