// The CUDA engine (one rank) against the functional simulator, bit for bit, and its timeline and
// fault behaviour. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/engine.h"
#include "backends/cuda/launch.h"
#include "backends/sim/choices.h"
#include "backends/sim/functional.h"
#include "backends/sim/sim_backend.h"
#include "core/error.h"
#include "core/local_kernels.h"
#include "core/memory_fit.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "tests/cuda/engine_steps.h"
#include "tests/cuda/gpu_test.h"

namespace tf {
namespace {

namespace cu = backend::cuda;

struct Case {
  double ratio = 0.3;
  int grad_accum = 2;
  double clip = 1.0;
  bool fp16 = false;
  core::OptimizerKind kind = core::OptimizerKind::kAdamW;
  int steps = 3;
  int overflow_at = -1;
  int64_t scale_window = 0;                 // fp16: clean steps before the loss scale doubles (0: never)
  int staging_slots = core::kStagingSlots;  // slots per host staging ring (0: full-size staging)
  core::LrSchedule schedule = {};           // the lr of each step (constant: the optimizer's)
  int probe_passes = 0;                     // EngineConfig::cpu_probe_passes
};

core::ModelDesc small_model() { return core::describe_model(core::make_mlp({96, 160, 80, 48})); }

// The settings core::resolve_settings would give a one-rank ZeRO-3 scenario of this case.
core::RunSettings settings(const core::ModelDesc& m, const Case& c) {
  core::RunSettings s;
  s.model = m;
  s.world = 1;
  s.partition = {3, 1, int64_t(core::kStatsTile)};
  const core::DType grad = c.fp16 ? core::DType::kF16 : core::DType::kBF16;
  s.policy = core::make_step_policy(c.kind, core::default_hyper_params(c.kind), c.clip, grad, c.schedule);
  s.step = core::make_step_config(s.policy, grad, 1, c.grad_accum, false);
  s.step.staging_slots = c.staging_slots;
  s.loss_scaler = {c.fp16 ? 65536.0 : 1.0, c.scale_window, 1.0, 0};
  s.workload = core::WorkloadType::kSynthetic;
  s.seed = 7;
  return s;
}

cu::EngineConfig config(const core::ModelDesc& m, const Case& c) {
  cu::EngineConfig e;
  e.settings = settings(m, c);
  e.ratio = c.ratio;
  e.cpu_threads = 4;
  e.pin_threads = false;
  e.overflow_at_step = c.overflow_at;
  e.cpu_probe_passes = c.probe_passes;
  return e;
}

// The functional simulator with the engine's own settings, as `twinflow run --verify` runs it.
backend::sim::FunctionalResult reference(const core::ModelDesc& m, const Case& c) {
  backend::sim::FunctionalConfig f = backend::sim::functional_config(settings(m, c), c.ratio, c.steps, c.grad_accum);
  f.overflow_at_step = c.overflow_at;
  return backend::sim::run_functional(m, f);
}

void expect_bit_identical(const core::ModelDesc& m, const Case& c) {
  auto eng = cu::Engine::create(config(m, c));
  const std::vector<cu::StepReport> reps = test::run_steps(*eng, c.steps);
  const auto mine = eng->master_weights();
  const auto ref = reference(m, c);
  ASSERT_EQ(int64_t(mine.size()), m.total_params);
  int64_t differ = 0;
  for (const auto& [idx, v] : mine) differ += std::memcmp(&v, &ref.master[size_t(idx)], 4) != 0;
  EXPECT_EQ(differ, 0) << "ratio " << c.ratio << " accum " << c.grad_accum << " clip " << c.clip;
  for (int s = 0; s < c.steps; ++s) {
    const bool skipped =
        std::find(ref.skipped_steps.begin(), ref.skipped_steps.end(), s + 1) != ref.skipped_steps.end();
    EXPECT_EQ(reps[size_t(s)].skipped, skipped) << "step " << s + 1;
    EXPECT_EQ(reps[size_t(s)].loss_scale, ref.loss_scales[size_t(s)]) << "step " << s + 1;
    EXPECT_EQ(reps[size_t(s)].lr, ref.lrs[size_t(s)]) << "step " << s + 1;
    if (c.clip > 0 || c.fp16) {
      EXPECT_EQ(reps[size_t(s)].grad_norm, ref.grad_norms[size_t(s)]) << "step " << s + 1;
    }
  }
}

TEST(CudaEngine, BitIdenticalToFunctionalSimulatorAcrossRatios) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  for (double r : {0.0, 0.3, 1.0}) {
    Case c;
    c.ratio = r;
    expect_bit_identical(m, c);
  }
}

// Issue 16: the engine's staging rings (more CPU layers than slots, so every slot is reused) give the
// functional simulator's bits, which are full-size staging's (tests/sim/test_functional.cpp); with and
// without the norm wait (the deferred D2Hs), at ratios 0.3 and 1.
TEST(CudaEngine, StagingRingsBitIdenticalToFunctionalSimulator) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = core::describe_model(core::make_mlp({96, 160, 80, 160, 80, 160, 48}));
  for (double r : {0.3, 1.0})
    for (int slots : {1, 2})
      for (double clip : {0.0, 1.0}) {
        Case c;
        c.ratio = r;
        c.clip = clip;
        c.staging_slots = slots;
        SCOPED_TRACE("ratio " + std::to_string(r) + " slots " + std::to_string(slots) + " clip " +
                     std::to_string(clip));
        expect_bit_identical(m, c);
        const core::StepPlan plan = cu::Engine::create(config(m, c))->plan();
        EXPECT_EQ(plan.staging.slots, slots);
      }
}

// run --pages-probe: the engine's passes over its own pages before it writes its state change no bit of the
// training, for every optimizer kind's initial state (Adagrad's is not zero), with staging rings; the probe
// times every pass between two barriers.
TEST(CudaEngine, PagesProbeLeavesTheTrainingBitIdentical) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = core::describe_model(core::make_mlp({96, 160, 80, 160, 80, 160, 48}));
  for (core::OptimizerKind k : {core::OptimizerKind::kAdamW, core::OptimizerKind::kAdagrad, core::OptimizerKind::kLion})
    for (double r : {0.3, 1.0}) {
      Case c;
      c.kind = k;
      c.ratio = r;
      c.staging_slots = 1;
      c.probe_passes = 2;
      SCOPED_TRACE(std::string(core::optimizer_name(k)) + " ratio " + std::to_string(r));
      expect_bit_identical(m, c);
      int barriers = 0;
      cu::EngineConfig e = config(m, c);
      e.cpu_probe_barrier = [&] { ++barriers; };
      const auto eng = cu::Engine::create(e);
      const cu::CpuPassProbe& p = eng->cpu_pass_probe();
      EXPECT_EQ(p.elems, eng->split().cpu_elems);
      ASSERT_EQ(p.own_s.size(), 2u);
      ASSERT_EQ(p.all_s.size(), 2u);
      for (size_t i = 0; i < 2; ++i) EXPECT_GE(p.all_s[i], p.own_s[i]);
      EXPECT_EQ(barriers, 5);  // before the warm-up, then around each timed pass
    }
  Case off;
  EXPECT_TRUE(cu::Engine::create(config(small_model(), off))->cpu_pass_probe().own_s.empty());
  off.probe_passes = -1;
  EXPECT_THROW(cu::Engine::create(config(small_model(), off)), core::InputError);
}

TEST(CudaEngine, BitIdenticalWithoutClippingAndWithOneMicroBatch) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.clip = 0;
  c.grad_accum = 1;
  expect_bit_identical(m, c);
}

TEST(CudaEngine, BitIdenticalForLionAndAdagrad) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  for (core::OptimizerKind k : {core::OptimizerKind::kLion, core::OptimizerKind::kAdagrad}) {
    Case c;
    c.kind = k;
    expect_bit_identical(m, c);
  }
}

// An lr schedule (docs/ARCHITECTURE.md, "Learning-rate schedule"): every step's lr is the functional
// simulator's and so are the bits, while the lr warms up and decays, at ratios 0, 0.3 and 1, with an fp16
// overflow (the schedule does not advance) and clipping (the speculation's scalars carry the lr).
TEST(CudaEngine, LrScheduleBitIdenticalToFunctionalSimulator) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  core::LrSchedule cosine;
  cosine.kind = core::LrScheduleKind::kWarmupCosineLr;
  cosine.warmup_num_steps = 3;
  cosine.warmup_type = core::WarmupType::kLinear;
  cosine.warmup_min_ratio = 0.1;
  cosine.total_num_steps = 6;
  for (double r : {0.0, 0.3, 1.0})
    for (bool fp16 : {false, true}) {
      Case c;
      c.ratio = r;
      c.steps = 8;
      c.schedule = cosine;
      c.fp16 = fp16;
      c.overflow_at = fp16 ? 3 : -1;
      SCOPED_TRACE("ratio " + std::to_string(r) + (fp16 ? " fp16" : " bf16"));
      expect_bit_identical(m, c);
    }
}

TEST(CudaEngine, Fp16OverflowSkipsTheStepLikeTheSimulator) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.fp16 = true;
  c.overflow_at = 2;
  c.steps = 4;
  expect_bit_identical(m, c);
}

// The engine and `run --verify`'s functional reference share one core::LossScaler: with a window of 2
// clean steps the scale grows twice and halves once on the overflow, alike on both.
TEST(CudaEngine, Fp16LossScaleGrowsLikeTheSimulator) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.fp16 = true;
  c.scale_window = 2;
  c.overflow_at = 4;
  c.steps = 7;
  expect_bit_identical(m, c);
}

TEST(CudaEngine, Bf16NonFiniteStopsBeforeAnyUpdate) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  Case c;
  c.overflow_at = 2;
  auto eng = cu::Engine::create(config(m, c));
  eng->step();
  const auto before = eng->master_weights();
  try {
    eng->step();
    FAIL() << "no error";
  } catch (const core::RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(eng->master_weights(), before);
}

TEST(CudaEngine, TimelineRespectsEveryDependency) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = core::describe_model(core::make_mlp({512, 1024, 1024, 512}));
  for (double clip : {0.0, 1.0}) {
    Case c;
    c.clip = clip;
    c.ratio = 0.5;
    auto eng = cu::Engine::create(config(m, c));
    eng->step();
    const cu::StepReport r = test::step_drained(*eng);
    const core::StepPlan& plan = eng->plan();
    ASSERT_EQ(r.timeline.ops.size(), plan.ops.size());
    // Host and GPU clocks are aligned at the step's start to within the wake-up latency of one
    // event synchronisation; allow 50 us between a GPU end and a CPU start.
    constexpr int64_t kSlackNs = 50'000;
    for (const core::Op& op : plan.ops) {
      const auto& o = r.timeline.ops[op.id];
      EXPECT_LE(o.start_ns, o.end_ns);
      EXPECT_LE(o.end_ns, r.timeline.step_ns);
      for (uint32_t d : op.deps)
        EXPECT_GE(o.start_ns + kSlackNs, r.timeline.ops[d].end_ns) << op.label() << " after " << plan.ops[d].label();
    }
    EXPECT_GT(r.d2h_bytes, 0);
    EXPECT_EQ(r.d2h_bytes, r.h2d_bytes);
    EXPECT_EQ(r.d2h_bytes, eng->split().cpu_elems * 2);
  }
}

TEST(CudaEngine, InfeasibleRatioIsRefusedBeforeAllocation) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  cu::EngineConfig e = config(m, Case{});
  e.ratio = 0;
  e.gpu_bytes_limit = 512 << 20;  // the workspace term alone takes 512 MB
  try {
    cu::Engine::create(e);
    FAIL() << "no error";
  } catch (const core::InputError& err) {
    EXPECT_NE(std::string(err.what()).find("ratio"), std::string::npos) << err.what();
  }
}

// The engine allocates exactly core::plan_allocations' buffers (by name and size), its workload's
// included, and nothing the plan only estimates.
TEST(CudaEngine, AllocatesExactlyTheAllocationPlan) {
  SKIP_WITHOUT_GPU();
  const core::ModelDesc m = small_model();
  for (core::WorkloadType w : {core::WorkloadType::kSynthetic, core::WorkloadType::kMlp})
    for (double ratio : {0.0, 0.3, 1.0}) {
      Case c;
      c.ratio = ratio;
      cu::EngineConfig e = config(m, c);
      e.settings.workload = w;
      auto eng = cu::Engine::create(e);
      const cu::EngineMemory& mem = eng->memory();
      std::map<std::string, int64_t> planned, allocated;
      int64_t planned_gpu = 0;
      for (const core::BufferSpec& b : mem.plan.buffers)
        if (b.allocated) {
          planned[b.name] = b.bytes;
          planned_gpu += b.place == core::MemPlace::kGpu ? b.bytes : 0;
        }
      for (const core::BufferSpec& b : mem.allocated) {
        EXPECT_EQ(allocated.count(b.name), 0u) << b.name << " allocated twice";
        allocated[b.name] = b.bytes;
      }
      EXPECT_EQ(allocated, planned) << core::workload_type_name(w) << " ratio " << ratio;
      EXPECT_EQ(mem.gpu_allocated, planned_gpu);
      EXPECT_EQ(mem.host_pinned + mem.host_pageable, mem.plan.bytes(core::MemPlace::kHost));
      EXPECT_EQ(mem.planned.gpu_total, mem.plan.bytes(core::MemPlace::kGpu));
      EXPECT_EQ(mem.planned.gpu_total - mem.planned.gpu_context, planned_gpu);
    }
}

// The engine runs the simulator's plan and issues each queue's ops in the simulator's order, with the
// optimizer tail carried into the next step and without, and with the CPU pass order the cost model
// chooses (resolved before the engine plans, as `run` does, after the count of speculated layers) and today's.
TEST(CudaEngine, IssuesTheSimulatorsOpsInItsOrderPerQueue) {
  SKIP_WITHOUT_GPU();
  core::Scenario sc = core::parse_scenario(
      "model: {type: mlp, dims: [96, 160, 80, 48]}\n"
      "cluster: {profile: h100-80gb-16core, cpu_cores_per_gpu: 4}\n"
      "training: {micro_batch: 1, grad_accum: 3, gradient_clipping: 1.0}\n"
      "optimizer: {type: adamw}\n"
      "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.4}}\n",
      {}, "order.yaml");
  for (bool carry : {false, true})
    for (bool order_auto : {false, true})
      for (core::WorkloadType w : {core::WorkloadType::kSynthetic, core::WorkloadType::kMlp}) {
        SCOPED_TRACE(std::string(core::workload_type_name(w)) + (carry ? " carry on" : " carry off") +
                     (order_auto ? " cpu order auto" : " arrival order"));
        sc.training.carry_tail = carry;
        sc.training.cpu_order_auto = order_auto;
        backend::sim::SimOptions o;
        o.overrides.workload = w;
        cu::EngineConfig e;
        e.settings = core::resolve_settings(sc, {.workload = w});
        backend::sim::resolve_model_choices(e.settings, sc, 0.4, o);
        e.ratio = 0.4;
        e.cpu_threads = 4;
        e.pin_threads = false;
        // the profile's host, as the simulator plans with it (`speculation: auto` resolves from it)
        e.host_bytes_limit = core::rank_budget(sc, 1).host_bytes;
        auto eng = cu::Engine::create(e);
        EXPECT_EQ(core::carries(eng->plan()), carry);
        const std::vector<cu::StepReport> reps = test::run_steps(*eng, 2);  // the second begins after a tail
        const cu::StepReport& r = reps.back();
        o.record_ops = o.keep_plans = true;
        const backend::sim::SimPoint p = backend::sim::simulate_step(sc, 0.4, o);
        ASSERT_EQ(p.plans.size(), 1u);
        EXPECT_EQ(eng->plan(), p.plans[0]);
        EXPECT_EQ(r.issued, core::plan_queue_order(eng->plan()));
        EXPECT_EQ(r.issued, backend::sim::executed_queue_order(p)[0]);
      }
}

// The kernels the engine launches for its norm and its reduce-scatter's sum are those
// core/local_kernels.h counts (and the simulator charges): counted in a captured CUDA graph.
TEST(CudaEngine, LocalKernelLaunchesAreTheCoreCounts) {
  SKIP_WITHOUT_GPU();
  cu::Stream stream;
  auto kernels_in = [&](const std::function<void(cudaStream_t)>& launch) {
    TF_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    launch(stream.get());
    cudaGraph_t g = nullptr;
    TF_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &g));
    size_t n = 0;
    TF_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    TF_CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
    int kernels = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType t;
      TF_CUDA_CHECK(cudaGraphNodeGetType(node, &t));
      kernels += t == cudaGraphNodeTypeKernel;
    }
    TF_CUDA_CHECK(cudaGraphDestroy(g));
    return kernels;
  };
  for (int64_t tiles : {int64_t(3), int64_t(2049), int64_t(1000000)}) {
    cu::DeviceMemory table(size_t(core::norm_table_bytes(tiles))),
        scratch(size_t(core::norm_fold_scratch_bytes(tiles))), counters(size_t(core::kStepCounterBytes));
    double* result = scratch.as<double>() + core::norm_fold_scratch_elems(tiles);
    EXPECT_EQ(kernels_in([&](cudaStream_t s) {
                cu::launch_store_nonfinite(table.as<double>() + tiles, counters.as<unsigned long long>(), 0, s);
                cu::launch_fold_tiles(table.as<double>(), tiles, scratch.as<double>(), table.as<double>() + tiles,
                                      result, s);
              }),
              core::norm_local_launches(tiles))
        << tiles << " tiles";
  }
  cu::DeviceMemory slices(4 * 4096 * 2), acc(4096 * 4), out(4096 * 2);
  EXPECT_EQ(kernels_in([&](cudaStream_t s) {
              cu::launch_sum_slices(slices.as<uint16_t>(), slices.as<uint16_t>(), 1, 4, 4096, acc.as<float>(),
                                    acc.as<float>(), out.as<uint16_t>(), core::DType::kBF16, s);
            }),
            core::kSliceSumLaunches);
}

}  // namespace
}  // namespace tf
