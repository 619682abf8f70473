// ZeRO stages 1 and 2 on the CUDA engine (issue 15): the functional simulator's bits at ratios 0, 0.3
// and 1, stage 3's PCIe bytes, stage 3's bits for the MLP and decoder workloads, and the memory the
// simulator reports. One rank: a test process drives one GPU. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/engine.h"
#include "backends/sim/choices.h"
#include "backends/sim/functional.h"
#include "backends/sim/sim_backend.h"
#include "core/memory.h"
#include "core/memory_fit.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "tests/cuda/engine_steps.h"
#include "tests/cuda/gpu_test.h"

namespace tf {
namespace {

namespace cu = backend::cuda;

// A one-rank scenario at ZeRO `stage`: AdamW with clipping, two micro-batches per step.
core::Scenario scenario(int stage, const std::string& model, const std::string& precision = "bf16") {
  return core::parse_scenario("model: " + model +
                                  "\ncluster: {profile: h100-80gb-16core, cpu_cores_per_gpu: 4}\n"
                                  "training: {micro_batch: 2, grad_accum: 2, gradient_clipping: 1.0, precision: " +
                                  precision +
                                  "}\n"
                                  "optimizer: {type: adamw, params: {lr: 0.001, weight_decay: 0.1}}\n"
                                  "zero: {stage: " +
                                  std::to_string(stage) +
                                  ", offload_optimizer: {device: cpu, ratio: 0.3}}\n"
                                  "workload: {seed: 4}\n",
                              {}, "zero12.yaml");
}

const char* const kMlp = "{type: mlp, dims: [96, 160, 80, 48]}";
const char* const kGptTiny = "{preset: gpt-tiny, heads: 1}";  // a decoder with the tied head (a shared layer)

// The scenario's settings for workload `w` at `ratio`, its CPU pass order resolved as `run` resolves it.
cu::EngineConfig config(const core::Scenario& sc, core::WorkloadType w, double ratio) {
  cu::EngineConfig e;
  e.settings = core::resolve_settings(sc, {.workload = w});
  backend::sim::resolve_model_choices(e.settings, sc, ratio, {.overrides = {.workload = w}});
  e.ratio = ratio;
  e.cpu_threads = 4;
  e.pin_threads = false;
  // The host the scenario's profile has, as the simulator plans with it: `speculation: auto` resolves
  // from it, and the machine's own memory would give another budget on a host unlike the profile's.
  e.host_bytes_limit = core::rank_budget(sc, 1).host_bytes;
  return e;
}

struct EngineRun {
  std::vector<float> master;  // (total_params) fp32, model order
  std::vector<cu::StepReport> steps;
  core::StepPlan plan;
};

EngineRun run(const cu::EngineConfig& e, int steps) {
  auto eng = cu::Engine::create(e);
  EngineRun r;
  r.steps = test::run_steps(*eng, steps);
  r.master.assign(size_t(e.settings.model.total_params), 0.f);
  for (const auto& [i, v] : eng->master_weights()) r.master[size_t(i)] = v;
  r.plan = eng->plan();
  return r;
}

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

// The engine at `stage` against the functional simulator with the engine's settings (`run --verify`):
// every master weight bit for bit, the norms, skips and loss scales; and the engine's PCIe counters
// against stage 3's engine and the plan's bytes.
void expect_parity_and_stage3_pcie(int stage, const std::string& precision, double ratio, int overflow_at) {
  const int steps = 3;
  cu::EngineConfig e = config(scenario(stage, kMlp, precision), core::WorkloadType::kSynthetic, ratio);
  e.overflow_at_step = overflow_at;
  const EngineRun mine = run(e, steps);
  backend::sim::FunctionalConfig f =
      backend::sim::functional_config(e.settings, ratio, steps, e.settings.step.grad_accum * e.settings.world);
  f.overflow_at_step = overflow_at;
  const backend::sim::FunctionalResult ref = backend::sim::run_functional(e.settings.model, f);
  const std::string what = "stage " + std::to_string(stage) + " " + precision + " ratio " + std::to_string(ratio);
  ASSERT_EQ(f.stage, stage);
  if (overflow_at > 0) {
    ASSERT_TRUE(mine.steps[size_t(overflow_at - 1)].skipped) << "the forced overflow must skip its step";
  }
  EXPECT_EQ(differing(mine.master, ref.master), 0) << what;
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(mine.steps[size_t(s)].grad_norm, ref.grad_norms[size_t(s)]) << what << " step " << s + 1;
    EXPECT_EQ(mine.steps[size_t(s)].loss_scale, ref.loss_scales[size_t(s)]) << what << " step " << s + 1;
  }
  cu::EngineConfig e3 = config(scenario(3, kMlp, precision), core::WorkloadType::kSynthetic, ratio);
  e3.overflow_at_step = overflow_at;
  const EngineRun s3 = run(e3, steps);
  EXPECT_EQ(differing(mine.master, s3.master), 0) << what << ": stage 3's bits";
  EXPECT_EQ(mine.plan.pcie_d2h_bytes, s3.plan.pcie_d2h_bytes);
  EXPECT_EQ(mine.plan.pcie_h2d_bytes, s3.plan.pcie_h2d_bytes);
  for (int s = 0; s < steps; ++s) {
    const cu::StepReport &a = mine.steps[size_t(s)], &b = s3.steps[size_t(s)];
    EXPECT_EQ(a.skipped, b.skipped) << what << " step " << s + 1;
    EXPECT_EQ(a.d2h_bytes, b.d2h_bytes) << what << " step " << s + 1;
    EXPECT_EQ(a.h2d_bytes, b.h2d_bytes) << what << " step " << s + 1;
    EXPECT_EQ(a.d2h_bytes, mine.plan.pcie_d2h_bytes) << what << " step " << s + 1;
    EXPECT_EQ(a.h2d_bytes, a.skipped ? 0 : mine.plan.pcie_h2d_bytes) << what << " step " << s + 1;
  }
}

}  // namespace

TEST(CudaEngineZero12, StagesOneAndTwoMatchTheFunctionalSimulatorAndStage3Pcie) {
  SKIP_WITHOUT_GPU();
  for (int stage : {1, 2})
    for (double ratio : {0.0, 0.3, 1.0}) expect_parity_and_stage3_pcie(stage, "bf16", ratio, -1);
}

// fp16 loss scaling with an overflow at step 2: the step is skipped on both, the scale halves alike.
TEST(CudaEngineZero12, Fp16OverflowSkipsTheStepOnStagesOneAndTwo) {
  SKIP_WITHOUT_GPU();
  for (int stage : {1, 2}) expect_parity_and_stage3_pcie(stage, "fp16", 0.3, 2);
}

// The MLP (cuBLAS) and the decoder (its tied head reads the embedding: Op::shared_layer) train to
// stage 3's bits on stages 1 and 2, with the same losses.
TEST(CudaEngineZero12, MlpAndDecoderWorkloadsGiveStage3Bits) {
  SKIP_WITHOUT_GPU();
  const std::pair<const char*, core::WorkloadType> cases[] = {{kMlp, core::WorkloadType::kMlp},
                                                              {kGptTiny, core::WorkloadType::kDecoder}};
  for (const auto& [model, w] : cases)
    for (double ratio : {0.0, 0.3, 1.0}) {
      const EngineRun s3 = run(config(scenario(3, model), w, ratio), 3);
      for (int stage : {1, 2}) {
        const EngineRun r = run(config(scenario(stage, model), w, ratio), 3);
        EXPECT_EQ(differing(r.master, s3.master), 0) << model << " stage " << stage << " ratio " << ratio;
        for (size_t s = 0; s < r.steps.size(); ++s) {
          EXPECT_EQ(std::memcmp(&r.steps[s].loss, &s3.steps[s].loss, sizeof(double)), 0) << model << " step " << s;
          EXPECT_EQ(r.steps[s].grad_norm, s3.steps[s].grad_norm) << model << " step " << s;
        }
      }
    }
}

// The memory model: the engine at stages 1/2 allocates exactly its allocation plan, and the plan's
// sum by kind is what the simulator reports for the same scenario (core::plan_rank on both sides);
// the engine runs the simulator's step plan.
TEST(CudaEngineZero12, MemoryAndPlanAgreeWithTheSimulator) {
  SKIP_WITHOUT_GPU();
  for (bool carry : {false, true})
    for (int stage : {1, 2})
      for (double ratio : {0.0, 0.3, 1.0}) {
        core::Scenario sc = scenario(stage, kMlp);
        sc.training.carry_tail = carry;
        auto eng = cu::Engine::create(config(sc, core::WorkloadType::kMlp, ratio));
        const cu::EngineMemory& mem = eng->memory();
        std::map<std::string, int64_t> planned, allocated;
        for (const core::BufferSpec& b : mem.plan.buffers)
          if (b.allocated) planned[b.name] = b.bytes;
        for (const core::BufferSpec& b : mem.allocated) allocated[b.name] += b.bytes;
        const std::string what =
            "stage " + std::to_string(stage) + " ratio " + std::to_string(ratio) + (carry ? " carry" : "");
        EXPECT_EQ(allocated, planned) << what;
        backend::sim::SimOptions o;
        o.keep_plans = true;
        o.overrides.workload = core::WorkloadType::kMlp;  // as config() resolved the CPU pass order
        const backend::sim::SimPoint p = backend::sim::simulate_step(sc, ratio, o);
        ASSERT_EQ(p.plans.size(), 1u);
        EXPECT_EQ(eng->plan(), p.plans[0]) << what;
        EXPECT_EQ(eng->plan().stage, stage);
        const core::RankMemory &a = mem.planned, &b = p.memory;
        using Term = int64_t core::RankMemory::*;
        const std::pair<const char*, Term> terms[] = {{"gpu_params", &core::RankMemory::gpu_params},
                                                      {"gpu_grads", &core::RankMemory::gpu_grads},
                                                      {"gpu_optimizer", &core::RankMemory::gpu_optimizer},
                                                      {"gpu_activations", &core::RankMemory::gpu_activations},
                                                      {"gpu_comm", &core::RankMemory::gpu_comm},
                                                      {"gpu_workspace", &core::RankMemory::gpu_workspace},
                                                      {"gpu_context", &core::RankMemory::gpu_context},
                                                      {"gpu_total", &core::RankMemory::gpu_total},
                                                      {"host_optimizer", &core::RankMemory::host_optimizer},
                                                      {"host_staging", &core::RankMemory::host_staging},
                                                      {"host_workspace", &core::RankMemory::host_workspace},
                                                      {"host_total", &core::RankMemory::host_total}};
        for (const auto& [name, term] : terms) EXPECT_EQ(a.*term, b.*term) << what << " " << name;
        eng->step();
        std::printf("%s: GPU in use %.3f GB, plan %.3f GB (params %.4f GB, grads %.4f GB)\n", what.c_str(),
                    double(eng->gpu_bytes_in_use()) / 1e9, double(a.gpu_total) / 1e9, double(a.gpu_params) / 1e9,
                    double(a.gpu_grads) / 1e9);
      }
}

// Two ranks, one per GPU, threads of this process sharing one NCCL id (skips with fewer than 2 GPUs):
// the replicated model, its refresh all-gathers and stage 1's exchange of reduced slices run for real.
// The master weights of both ranks together are the functional simulator's at world 2, which are
// world 1's (the batch-invariant reduction).
TEST(CudaEngineZero12, TwoGpusMatchTheFunctionalSimulator) {
  SKIP_WITHOUT_GPU();
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  const int steps = 3;
  for (int stage : {1, 2})
    for (double ratio : {0.0, 0.3, 1.0}) {
      const core::Scenario sc = scenario(stage, kMlp);
      const cu::NcclId id = cu::make_nccl_id();
      std::vector<float> master(size_t(core::resolve_settings(sc).model.total_params), 0.f);
      std::vector<std::exception_ptr> errors(2);
      core::RunSettings settings;
      {
        std::vector<std::jthread> ranks;
        for (int r = 0; r < 2; ++r)
          ranks.emplace_back([&, r] {
            try {
              cu::EngineConfig e;
              e.settings =
                  core::resolve_settings(sc, {.world = 2, .grad_accum = 1, .workload = core::WorkloadType::kSynthetic});
              e.rank = r;
              e.device = r;
              e.nccl_id = id;
              e.ratio = ratio;
              e.cpu_threads = 2;
              e.pin_threads = false;
              auto eng = cu::Engine::create(e);
              for (int s = 0; s < steps; ++s) eng->step();
              for (const auto& [i, v] : eng->master_weights()) master[size_t(i)] = v;  // disjoint shards
              if (r == 0) settings = e.settings;
            } catch (...) {
              errors[size_t(r)] = std::current_exception();
            }
          });
      }
      for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
      const backend::sim::FunctionalResult ref = backend::sim::run_functional(
          settings.model, backend::sim::functional_config(settings, ratio, steps, settings.step.grad_accum * 2));
      EXPECT_EQ(differing(master, ref.master), 0) << "stage " << stage << " ratio " << ratio;
    }
}

}  // namespace tf
