// The cost-only simulator backend: hand-computed timings, joins, queue order, traces, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/sim/choices.h"
#include "backends/sim/sim_backend.h"
#include "core/error.h"
#include "core/local_kernels.h"
#include "core/memory.h"
#include "core/plan_hazards.h"
#include "core/rank_plan.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "sim/cost_model.h"

namespace {

using tf::backend::sim::executed_queue_order;
using tf::backend::sim::SimOptions;
using tf::backend::sim::SimPoint;
using tf::backend::sim::simulate_step;
using tf::core::plan_queue_order;
using tf::core::Queue;

constexpr size_t qi(Queue q) { return static_cast<size_t>(q); }

// One linear layer 64 -> 64 with bias: 64*64 + 64 = 4160 params. World 1, align 2048: the layer pads
// to ceil(4160/2048)*2048 = 6144 elements, all of them rank 0's shard. Clipping is on, so the
// optimizers wait for the norm all-reduce. 4 CPU threads: 2.89 Gparam/s (the profile's measured point).
tf::core::Scenario mlp_scenario() {
  return tf::core::parse_scenario(
      "model: {type: mlp, dims: [64, 64]}\n"
      "cluster: {profile: h100-80gb-16core, cpu_cores_per_gpu: 4}\n"
      "training: {micro_batch: 2, gradient_clipping: 1.0}\n"
      "optimizer: {type: adamw}\n"
      "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}\n",
      {}, "mlp.yaml");
}

// A small decoder on one DGX-H100 node (NVLink collectives), large enough that compute dominates.
tf::core::Scenario decoder_scenario(int gpus = 2) {
  return tf::core::parse_scenario(
      "model: {type: decoder, layers: 4, hidden: 1024, heads: 16, vocab: 1000, seq: 512}\n"
      "cluster: {profile: dgx-h100-80gb, gpus_per_node: " +
          std::to_string(gpus) +
          ", cpu_cores_per_gpu: 8}\n"
          "training: {micro_batch: 4, gradient_clipping: 1.0, activation_checkpointing: true}\n"
          "optimizer: {type: adamw}\n"
          "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}\n",
      {}, "decoder.yaml");
}

TEST(SimBackend, RatioZeroHasNoPcieAndNoCpuWork) {
  const SimPoint p = simulate_step(mlp_scenario(), 0.0);
  EXPECT_EQ(p.ratio, 0.0);
  EXPECT_EQ(p.pcie_bytes_each_way, 0);
  EXPECT_EQ(p.busy_ns[qi(Queue::kD2H)], 0);
  EXPECT_EQ(p.busy_ns[qi(Queue::kH2D)], 0);
  EXPECT_EQ(p.busy_ns[qi(Queue::kCpu)], 0);
  EXPECT_EQ(p.exposed_transfer_ns, 0);
  EXPECT_FALSE(p.oom);
}

TEST(SimBackend, HandComputedMlpStepAtOneThird) {
  // cpu_elems = round(6144/3 / 2048) * 2048 = 2048, gpu_elems = 4096.
  const SimPoint p = simulate_step(mlp_scenario(), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(p.ratio, 2048.0 / 6144.0);
  EXPECT_EQ(p.pcie_bytes_each_way, 2 * 2048);  // 2 B per CPU element each way
  // d2h and h2d run alone on the link: 4096 B / 55 GB/s = 74.47 -> 75 ns each.
  EXPECT_EQ(p.busy_ns[qi(Queue::kD2H)], 75);
  EXPECT_EQ(p.busy_ns[qi(Queue::kH2D)], 75);
  // cpu: AdamW 2048 / 2.89 = 708.65 -> 709 ns (the link is idle: the H2D follows the update).
  EXPECT_EQ(p.busy_ns[qi(Queue::kCpu)], 709);
  // After the last backward (world 1: no data moves between ranks): the reduce-scatter's local sum
  // reads and writes the 6144-element bf16 slice, 4000 + 24576/3000 = 4008.2 -> 4009 ns; the GPU grad
  // stats over the whole shard 4000 + 6144*2/3000 = 4004.1 -> 4005; the norm: the non-finite count
  // stored into the table and the fold of 3 tiles (core::norm_local_launches = 2 kernels, 8000 +
  // 2*32/3000 -> 8001) and the 16-byte copy home (16/55 -> 1), 8002; GPU AdamW 4000 + 4096*28/3000 =
  // 4038.2 -> 4039. The CPU path (75 + 709 + 75, after the norm) hides under it.
  EXPECT_EQ(p.optimizer_phase_ns, 4009 + 4005 + 8002 + 4039);
  // The compute queue waits only for the reduction and the norm.
  EXPECT_EQ(p.exposed_ns, 4009 + 8002);
  EXPECT_EQ(p.exposed_transfer_ns, 0);
  EXPECT_EQ(p.step_ns, p.busy_ns[qi(Queue::kCompute)] + 4009 + 8002);
}

TEST(SimBackend, HandComputedMlpStepAllOnCpuIsExposed) {
  // ratio 1: 6144 CPU elements, no GPU optimizer. After backward: the local sum 4009 (as at one
  // third), then the GPU grad stats over the shard 4000 + 12288/3000 -> 4005 ns, with the d2h
  // 12288/55 = 223.4 -> 224 under it; the norm 8002; then AdamW 6144/2.89 = 2125.95 -> 2126 and the
  // h2d 224, with the GPU idle: exposed. One step: its tail is not carried into a next one.
  tf::core::Scenario s = mlp_scenario();
  s.training.carry_tail = false;
  const SimPoint p = simulate_step(s, 1.0);
  EXPECT_EQ(p.pcie_bytes_each_way, 2 * 6144);
  EXPECT_EQ(p.optimizer_phase_ns, 4009 + 4005 + 8002 + 2126 + 224);
  EXPECT_EQ(p.exposed_transfer_ns, 2126 + 224);
  EXPECT_EQ(p.exposed_ns, 4009 + 8002 + 2126 + 224);
  EXPECT_EQ(p.step_ns, p.busy_ns[qi(Queue::kCompute)] + 4009 + 8002 + 2126 + 224);
}

TEST(SimBackend, PcieBytesAreTwoBytesPerCpuElement) {
  const tf::core::Scenario s = decoder_scenario();
  for (double r : {0.0, 0.1, 0.3, 0.77, 1.0}) {
    const SimPoint p = simulate_step(s, r, {.keep_plans = true});
    // the actual ratio times the (equal) shard size gives the CPU elements
    int64_t cpu_elems = 0;
    for (const auto& op : p.plans[0].ops)
      if (op.kind == tf::core::OpKind::kCpuOptimizer) cpu_elems += op.elems;
    EXPECT_EQ(p.pcie_bytes_each_way, 2 * cpu_elems) << r;
    EXPECT_EQ(p.plans[0].pcie_h2d_bytes, p.pcie_bytes_each_way) << r;
  }
}

TEST(SimBackend, CollectivesJoinAndUseTheRingModel) {
  // World 2 on NVLink (450 GB/s, 30 us per step). The 64x64 layer pads to a multiple of 2*2048:
  // 8192 elements, 4096 per rank; the all-gather's buffer is 8192 * 2 B = 16384 B.
  // Ring all-gather: 30000 * (2-1) + 16384 * (1/2) / 450 = 30018.2 -> 30019 ns.
  tf::core::Scenario s = tf::core::parse_scenario(
      "model: {type: mlp, dims: [64, 64]}\n"
      "cluster: {profile: dgx-h100-80gb, gpus_per_node: 2}\n"
      "training: {micro_batch: 1}\n"
      "optimizer: {type: adamw}\n"
      "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}\n",
      {}, "mlp2.yaml");
  const SimPoint p = simulate_step(s, 0.5, {.record_ops = true, .keep_plans = true});
  ASSERT_EQ(p.ranks.size(), 2u);
  for (const auto& rank : p.ranks) {
    EXPECT_EQ(p.plans[0].ops[0].kind, tf::core::OpKind::kAllGather);
    EXPECT_EQ(rank.ops[0].start_ns, 0);
    EXPECT_EQ(rank.ops[0].end_ns, 30019);
    EXPECT_EQ(rank.end_ns, p.ranks[0].end_ns);  // symmetric ranks end together
  }
}

// With a CPU and PCIe that cost nothing, moving optimizer work to the CPU only removes GPU work:
// the step does not grow with the ratio (a few ns of ceil rounding forgiven). Not "constant": the GPU
// segment's AdamW is memory-bound work on the compute queue (26M elements x 28 B / 3350 GB/s ~ 0.2 ms).
// With HBM free too, the optimizer costs ~nothing wherever it runs, and the ratio changes the step by
// at most the two GPU kernel launches (8 us of ~1.9 ms): within 1%.
TEST(SimBackend, HugeCpuAndPcieMakeTheRatioIrrelevant) {
  tf::core::Scenario s = decoder_scenario();
  auto& hw = s.cluster.hardware;
  hw.cpu.optimizer_gparam_s_by_threads.clear();
  hw.cpu.optimizer_gparam_s_per_core = hw.cpu.optimizer_gparam_s_all_cores = 1e6;
  hw.cpu.mem_gbps = 1e9;
  hw.pcie.h2d_gbps = hw.pcie.d2h_gbps = 1e9;
  hw.pcie.bidir_total_gbps = 2e9;
  int64_t prev = simulate_step(s, 0.0).step_ns;
  for (double r : {0.25, 0.5, 0.75, 1.0}) {
    const int64_t t = simulate_step(s, r).step_ns;
    EXPECT_LE(t, prev + 10) << r;
    prev = t;
  }
  hw.gpu.hbm_gbps = 1e9;
  int64_t lo = INT64_MAX, hi = 0;
  for (double r : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const int64_t t = simulate_step(s, r).step_ns;
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  EXPECT_LE(double(hi), 1.01 * double(lo));
}

TEST(SimBackend, TinyCpuRateMakesTheStepGrowWithTheRatio) {
  tf::core::Scenario s = decoder_scenario();
  auto& hw = s.cluster.hardware;
  hw.cpu.optimizer_gparam_s_by_threads.clear();
  hw.cpu.optimizer_gparam_s_per_core = hw.cpu.optimizer_gparam_s_all_cores = 1e-3;
  int64_t prev = 0;
  for (double r : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const SimPoint p = simulate_step(s, r);
    EXPECT_GT(p.step_ns, prev) << r;
    prev = p.step_ns;
  }
}

TEST(SimBackend, QueueOrderIsThePlanOrder) {
  for (int world : {1, 2, 8}) {
    const SimPoint p = simulate_step(decoder_scenario(8), 0.4,
                                     {.record_ops = true, .keep_plans = true, .overrides = {.world = world}});
    const auto executed = executed_queue_order(p);
    ASSERT_EQ(executed.size(), size_t(world));
    for (int r = 0; r < world; ++r) EXPECT_EQ(executed[size_t(r)], plan_queue_order(p.plans[size_t(r)])) << r;
  }
}

TEST(SimBackend, WorldsOneTwoEightRun) {
  for (int world : {1, 2, 8}) {
    const SimPoint p = simulate_step(decoder_scenario(8), 0.3, {.overrides = {.world = world}});
    EXPECT_EQ(p.world, world);
    EXPECT_GT(p.step_ns, 0);
    ASSERT_EQ(p.ranks.size(), size_t(world));
    for (const auto& r : p.ranks) EXPECT_EQ(r.end_ns, p.step_ns);
    EXPECT_GT(p.busy_ns[qi(Queue::kCpu)], 0);
    EXPECT_LE(p.exposed_transfer_ns, p.exposed_ns);
    EXPECT_LE(p.optimizer_phase_ns, p.step_ns);
  }
}

TEST(SimBackend, DeterministicTwice) {
  const tf::core::Scenario s = decoder_scenario(8);
  const SimOptions o{.record_ops = true, .keep_plans = true};
  const SimPoint a = simulate_step(s, 0.35, o), b = simulate_step(s, 0.35, o);
  EXPECT_EQ(a.step_ns, b.step_ns);
  EXPECT_EQ(a.busy_ns, b.busy_ns);
  EXPECT_EQ(a.exposed_ns, b.exposed_ns);
  EXPECT_EQ(a.exposed_transfer_ns, b.exposed_transfer_ns);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    ASSERT_EQ(a.ranks[r].ops.size(), b.ranks[r].ops.size());
    for (size_t i = 0; i < a.ranks[r].ops.size(); ++i) {
      EXPECT_EQ(a.ranks[r].ops[i].start_ns, b.ranks[r].ops[i].start_ns);
      EXPECT_EQ(a.ranks[r].ops[i].end_ns, b.ranks[r].ops[i].end_ns);
    }
  }
}

TEST(SimBackend, ChromeTraceHasOneEventPerOpPerRank) {
  const SimPoint p = simulate_step(decoder_scenario(2), 0.5, {.record_ops = true, .keep_plans = true});
  const std::string path = (std::filesystem::path(testing::TempDir()) / "tf_sim_trace.json").string();
  tf::backend::sim::write_chrome_trace(p, path);
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);  // throws if not valid JSON
  size_t complete = 0, thread_names = 0;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "X") {
      ++complete;
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      EXPECT_LT(e.at("pid").get<int>(), 2);
      EXPECT_LT(e.at("tid").get<int>(), tf::core::kQueueCount);
      EXPECT_TRUE(e.at("args").contains("bytes"));
      EXPECT_TRUE(e.at("args").contains("flops"));
    } else if (e.at("name") == "thread_name") {
      ++thread_names;
    }
  }
  EXPECT_EQ(complete, p.plans[0].ops.size() + p.plans[1].ops.size());
  EXPECT_EQ(thread_names, size_t(2 * tf::core::kQueueCount));
  std::filesystem::remove(path);
}

// run --trace-steps: several steps of one rank on one time axis, each shifted by the periods before it.
TEST(SimBackend, ChromeTraceOfAWindowOfStepsShiftsEachStepByThePeriodsBeforeIt) {
  const SimPoint p = simulate_step(decoder_scenario(1), 0.5, {.record_ops = true, .keep_plans = true});
  const std::vector<tf::backend::sim::OpTiming>& ops = p.ranks[0].ops;
  const int64_t period = p.step_ns - 1000;  // a carried step's period is shorter than its last op's end
  const std::vector<tf::backend::sim::TracedStep> steps = {{4, 0, period, ops}, {5, period, p.step_ns, ops}};
  const std::string path = (std::filesystem::path(testing::TempDir()) / "tf_sim_trace_steps.json").string();
  tf::backend::sim::write_chrome_trace(p, steps, path);
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::map<int, size_t> per_step;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int step = e.at("args").at("step").get<int>();
    const size_t i = per_step[step]++;
    const int64_t shift = step == 5 ? period : 0;
    EXPECT_EQ(e.at("args").at("start_ns").get<int64_t>(), ops[i].start_ns + shift);
    EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), double(ops[i].start_ns + shift) / 1e3);
    EXPECT_EQ(e.at("name").get<std::string>(), "s" + std::to_string(step) + " " + p.plans[0].ops[i].label());
  }
  EXPECT_EQ(per_step[4], ops.size());
  EXPECT_EQ(per_step[5], ops.size());
  ASSERT_EQ(doc.at("otherData").at("steps").size(), 2u);
  EXPECT_EQ(doc.at("otherData").at("steps")[1].at("offset_ns").get<int64_t>(), period);
  EXPECT_EQ(doc.at("otherData").at("world").get<int>(), p.world);
  EXPECT_DOUBLE_EQ(doc.at("otherData").at("ratio").get<double>(), p.ratio);
  std::filesystem::remove(path);
  // nothing to trace, or a step whose timings are not its plan's
  EXPECT_THROW(tf::backend::sim::write_chrome_trace(p, std::vector<tf::backend::sim::TracedStep>{}, path),
               std::invalid_argument);
  EXPECT_THROW(tf::backend::sim::write_chrome_trace(SimPoint{}, steps, path), std::invalid_argument);
  std::vector<tf::backend::sim::TracedStep> short_step = {{1, 0, period, ops}};
  short_step[0].ops.pop_back();
  EXPECT_THROW(tf::backend::sim::write_chrome_trace(p, short_step, path), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

// run --trace: the GPU's telemetry (host-clock samples) placed on the traced steps' axis, as counter tracks.
TEST(SimBackend, CounterSamplesLandOnTheStepThatHoldsThem) {
  using tf::backend::sim::TracedStep;
  // two steps of 100 ns at host times 1000 and 1150 (a 50 ns gap between them), the second drawn at offset 100
  std::vector<TracedStep> steps = {{7, 0, 100, {}, 1000}, {8, 100, 100, {}, 1150}};
  const std::vector<std::pair<int64_t, double>> samples = {{999, 1.0},  {1000, 2.0}, {1099, 3.0}, {1100, 4.0},
                                                           {1149, 5.0}, {1150, 6.0}, {1249, 7.0}, {1250, 8.0}};
  const std::vector<std::pair<int64_t, double>> expected = {{0, 2.0}, {99, 3.0}, {100, 6.0}, {199, 7.0}};
  EXPECT_EQ(tf::backend::sim::counter_points(steps, samples), expected);
  // out of order samples come out in time order; a step whose start is unknown takes none
  const std::vector<std::pair<int64_t, double>> reversed(samples.rbegin(), samples.rend());
  EXPECT_EQ(tf::backend::sim::counter_points(steps, reversed), expected);
  steps[0].host_t0_ns = -1;
  EXPECT_EQ(tf::backend::sim::counter_points(steps, samples),
            (std::vector<std::pair<int64_t, double>>{{100, 6.0}, {199, 7.0}}));

  // the trace writers emit them as counter events of process 0, in microseconds
  const SimPoint p = simulate_step(decoder_scenario(1), 0.5, {.record_ops = true, .keep_plans = true});
  const std::vector<tf::backend::sim::TraceCounter> counters = {{"SM clock", "MHz", {{0, 1980.0}, {2500, 1740.0}}},
                                                                {"GPU power", "W", {{1000, 690.0}}}};
  const std::string path = (std::filesystem::path(testing::TempDir()) / "tf_sim_trace_counters.json").string();
  for (const bool window : {false, true}) {
    if (window)
      tf::backend::sim::write_chrome_trace(p, {{1, 0, p.step_ns, p.ranks[0].ops}}, path, "--trace", counters);
    else
      tf::backend::sim::write_chrome_trace(p, path, "--trace", counters);
    std::ifstream in(path);
    const nlohmann::json doc = nlohmann::json::parse(in);
    std::vector<std::tuple<std::string, double, double>> seen;
    for (const auto& e : doc.at("traceEvents"))
      if (e.at("ph") == "C") {
        EXPECT_EQ(e.at("pid").get<int>(), 0);
        const std::string unit = e.at("name") == "SM clock" ? "MHz" : "W";
        seen.emplace_back(e.at("name").get<std::string>(), e.at("ts").get<double>(),
                          e.at("args").at(unit).get<double>());
      }
    const std::vector<std::tuple<std::string, double, double>> want = {
        {"SM clock", 0.0, 1980.0}, {"SM clock", 2.5, 1740.0}, {"GPU power", 1.0, 690.0}};
    EXPECT_EQ(seen, want) << (window ? "window of steps" : "one step");
  }
  std::filesystem::remove(path);
}

// ---- terms fed by `twinflow calibrate` ---------------------------------------------------------------

TEST(SimBackend, MeasuredGemmRatesAndOneLaunchPerGemm) {
  // The 64x64 layer, micro-batch 2. Forward Y (2, 64) = X (2, 64) Wt: shape (2, 64, 64), 16384 FLOP.
  // Backward: input gradient (m, k, n) = (2, 64, 64) and weight gradient (n, k, m) = (64, 64, 2).
  tf::core::Scenario s = mlp_scenario();
  s.cluster.hardware.gpu.bf16_gemm_tflops_by_shape = {{2, 64, 64, 1.0}, {64, 64, 2, 0.5}};
  const SimPoint p = simulate_step(s, 1.0 / 3.0, {.record_ops = true, .keep_plans = true});
  // The layer is the model's first and last, so besides its GEMM its forward runs the workload's
  // input generator (2*64*2 = 256 B written), bias + ReLU (2*2*64*2 + 64*2 = 640 B) and the loss with
  // dY (2 kernels, 2*2*64*2 = 512 B): 5 kernels, 1408 B; work 16384/1e3 + 1408/3000 = 16.85 ns, while the
  // host takes 5 x 4000 = 20000 ns to issue them: the forward takes the longer, 20000 (PassCost::ns).
  // Backward: no input gradient (the input is data), the weight gradient 16384/0.5e3 = 32.768 and the
  // bias gradient (2 kernels, 2*64*2 + 64*2 = 384 B): 3 kernels, work 32.9 ns, issue 12000. The compute
  // queue also runs the GPU grad stats (4005) and AdamW (4039) of HandComputedMlpStepAtOneThird.
  EXPECT_EQ(p.busy_ns[qi(Queue::kCompute)], 20000 + 12000 + 4005 + 4039);
  for (size_t i = 0; i < p.plans[0].ops.size(); ++i) {
    const auto& op = p.plans[0].ops[i];
    const int64_t ns = p.ranks[0].ops[i].end_ns - p.ranks[0].ops[i].start_ns;
    if (op.kind == tf::core::OpKind::kForward) {
      EXPECT_EQ(ns, 20000);
    } else if (op.kind == tf::core::OpKind::kBackward) {
      EXPECT_EQ(ns, 12000);
    }
  }
  // fp16 training does not use the bf16 table: the same step as without one.
  tf::core::Scenario fp16 = mlp_scenario();
  fp16.training.precision = tf::core::Precision::kFP16;
  const int64_t plain = simulate_step(fp16, 1.0 / 3.0).step_ns;
  fp16.cluster.hardware.gpu.bf16_gemm_tflops_by_shape = s.cluster.hardware.gpu.bf16_gemm_tflops_by_shape;
  EXPECT_EQ(simulate_step(fp16, 1.0 / 3.0).step_ns, plain);
  // The table sets the GEMMs' work (hidden here behind the issue time): each at its measured shape's rate.
  const std::vector<tf::backend::sim::LayerCost> lc = tf::backend::sim::layer_costs(s);
  ASSERT_EQ(lc[0].fwd.gemms.size(), 1u);
  EXPECT_EQ(lc[0].fwd.gemms[0].tflops, 1.0);
  EXPECT_TRUE(lc[0].fwd.gemms[0].exact_shape);
  ASSERT_EQ(lc[0].bwd.gemms.size(), 1u);
  EXPECT_EQ(lc[0].bwd.gemms[0].tflops, 0.5);
  EXPECT_NEAR(lc[0].fwd.work_ns(), 16.384 + 1408 / 3000.0, 1e-9);
  EXPECT_EQ(lc[0].fwd.issue_ns, 20000);
  EXPECT_NE(lc[0].fwd.work_ns(), tf::backend::sim::layer_costs(mlp_scenario())[0].fwd.work_ns());
}

TEST(SimBackend, HostWaitsOnDeviceEventsAndCopiesPayTheirLatency) {
  // HandComputedMlpStepAllOnCpuIsExposed with gpu.event_sync_ns = 5000 and pcie.copy_latency_ns = 1000:
  // the local sum 4009; the GPU grad stats 4005 with the d2h 1000 + 224 under them; the norm's two
  // kernels 8001 and its 16-byte copy 1000 + 1; the CPU AdamW waits on the norm (a device op) and the
  // d2h: 5000 + 2126; the h2d 1000 + 224.
  tf::core::Scenario s = mlp_scenario();
  s.training.carry_tail = false;  // one step, as hand-computed
  s.cluster.hardware.gpu.event_sync_ns = 5000;
  s.cluster.hardware.pcie.copy_latency_ns = 1000;
  const SimPoint p = simulate_step(s, 1.0);
  EXPECT_EQ(p.optimizer_phase_ns, 4009 + 4005 + (8001 + 1001) + (5000 + 2126) + (1000 + 224));
  EXPECT_EQ(p.busy_ns[qi(Queue::kCpu)], 5000 + 2126);
  EXPECT_EQ(p.busy_ns[qi(Queue::kD2H)], 1000 + 224);
}

TEST(SimBackend, MeasuredCollectiveCurvesCarryTheirOwnLatency) {
  // World 2 on the measured 2x H200 link. The 64x64 layer's all-gather moves 16384 B, below the
  // smallest measured message (2 MiB at 28 GB/s): it takes 2 MiB's time, 2097152 * 1/2 / 28 =
  // 37449.14 -> 37450 ns, and the profile's fitted 30 us latency is not added on top (the measured
  // bus bandwidth already contains it).
  tf::core::Scenario s = tf::core::parse_scenario(
      "model: {type: mlp, dims: [64, 64]}\n"
      "cluster: {profile: h200x2-32core, gpus_per_node: 2}\n"
      "training: {micro_batch: 1}\n"
      "optimizer: {type: adamw}\n"
      "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}\n",
      {}, "mlp2.yaml");
  SimPoint p = simulate_step(s, 0.5, {.record_ops = true, .keep_plans = true});
  ASSERT_EQ(p.plans[0].ops[0].kind, tf::core::OpKind::kAllGather);
  EXPECT_EQ(p.ranks[0].ops[0].end_ns, 37450);
  // Per-collective curves override the shared one: all-gather 1048576 * 1/2 / 20 = 26214.4 -> 26215.
  s.cluster.hardware.intra_node.all_gather_bus_gbps_by_message_bytes = {{1 << 20, 20.0}};
  p = simulate_step(s, 0.5, {.record_ops = true, .keep_plans = true});
  EXPECT_EQ(p.ranks[0].ops[0].end_ns, 26215);
  // The reduce-scatters keep the shared curve, 37450 ns, then sum the two ranks' 4096-element slices
  // (read 2 x 8192 B, write 8192 B at 4800 GB/s: 4000 + 24576/4800 = 4005.12 -> 4006): 41456 ns each.
  for (size_t i = 0; i < p.plans[0].ops.size(); ++i) {
    if (p.plans[0].ops[i].kind == tf::core::OpKind::kReduceScatter) {
      EXPECT_EQ(p.ranks[0].ops[i].end_ns - p.ranks[0].ops[i].start_ns, 37450 + 4006);
    }
  }
}

TEST(SimBackend, BadInputsThrow) {
  const tf::core::Scenario s = mlp_scenario();
  EXPECT_THROW(simulate_step(s, 1.5), tf::core::InputError);
  EXPECT_THROW(simulate_step(s, -0.1), tf::core::InputError);
  // the single-H100 profile has no GPU-to-GPU link (intra and inter node: none, 0 GB/s)
  EXPECT_THROW(simulate_step(s, 0.5, {.overrides = {.world = 2}}), tf::core::InputError);
  // a trace needs record_ops and keep_plans
  EXPECT_THROW(tf::backend::sim::write_chrome_trace(simulate_step(s, 0.5), "/nonexistent/x.json"),
               std::invalid_argument);
}

TEST(SimBackend, DefaultScenarioSweepRuns) {
  const tf::core::Scenario s = tf::core::load_default_scenario();
  for (int i = 0; i <= 10; ++i) {
    const SimPoint p = simulate_step(s, i / 10.0);
    EXPECT_EQ(p.world, 8);
    EXPECT_GT(p.step_ns, 0);
  }
}

}  // namespace

namespace {
// Every rank the simulator runs is core::plan_rank's, the call the CUDA engine builds its rank with, after
// the cost model's choices `run` makes before the engine plans (training.speculation and cpu_order auto).
TEST(SimBackend, RanksRunThePlanTheEngineBuilds) {
  const tf::core::Scenario s = decoder_scenario(4);
  const SimPoint p = simulate_step(s, 0.3, {.record_ops = true, .keep_plans = true});
  tf::core::RunSettings rs = tf::core::resolve_settings(s);
  const auto chosen = tf::backend::sim::resolve_model_choices(rs, s, 0.3, {});
  ASSERT_TRUE(chosen.speculation.has_value());
  ASSERT_GT(chosen.speculation->eligible, 0);
  const tf::core::Partition part = tf::core::make_partition(rs.model, rs.partition);
  ASSERT_EQ(p.plans.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    tf::core::MemoryOptions mo = rs.memory_options();
    // what a rank may pin, which `speculation: auto` fills: the host less its reserve, over its 4 ranks
    mo.host_bytes_per_rank =
        tf::core::pinnable_host_bytes_per_rank(s.cluster.hardware.host_memory_bytes, 4, s.training.host_reserve);
    const tf::core::RankPlan rp = tf::core::plan_rank(rs.model, part, r, 0.3, mo);
    EXPECT_EQ(p.plans[size_t(r)], rp.step) << r;
    EXPECT_TRUE(tf::core::check_plan_hazards(rp.step).empty()) << r;
  }
}
// ---- the host shared by its ranks (docs/ARCHITECTURE.md, "The simulator: the host is shared") -------------

// 16 cores; one process: 1, 1.8, 3, 4, 4.5 Gparam/s at 1, 2, 4, 8, 16 threads; k processes at once on
// their shares: 4.4, 4.2 and 4.0 in total for k = 1, 2, 4.
tf::core::CpuProfile shared_host_cpu() {
  tf::core::CpuProfile c;
  c.cores = 16;
  c.mem_gbps = 140;
  c.optimizer_gparam_s_per_core = 1;
  c.optimizer_gparam_s_all_cores = 4.5;
  c.optimizer_gparam_s_by_threads = {{1, 1}, {2, 1.8}, {4, 3}, {8, 4}, {16, 4.5}};
  c.optimizer_node_gparam_s_by_ranks = {{1, 4.4}, {2, 4.2}, {4, 4.0}};
  return c;
}

TEST(SimHost, RatesByActiveRanksFollowTheRankCurveOrTheStaticShare) {
  tf::core::CpuProfile c = shared_host_cpu();
  const std::vector<double> r = tf::backend::sim::cpu_rates_by_active(c, 8, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[0], 4.4 * 4.0 / 4.5);      // alone: min(4, 4.4 x single(8) / single(16))
  EXPECT_DOUBLE_EQ(r[1], 4.2 * 4.5 / 4.5 / 2);  // both: 2.1
  c.optimizer_node_gparam_s_by_ranks.clear();   // today's model: min(single(8), 4.5 / 2) whatever is active
  EXPECT_EQ(tf::backend::sim::cpu_rates_by_active(c, 8, 2), (std::vector<double>{2.25, 2.25}));
}

// Rank 0: two ops of 10e6, rank 1: one op of 5e6, all from 0: rank 1 ends after 5e6 / 2.1 ns, when rank 0
// has done 5e6 too; its other 15e6 run alone.
TEST(SimHost, PredictedNodeTimeIsProcessorSharing) {
  const tf::core::CpuProfile c = shared_host_cpu();
  const std::vector<double> r = tf::backend::sim::cpu_rates_by_active(c, 8, 2);
  const double want_ns = 5e6 / r[1] + 15e6 / r[0];
  const double got = tf::backend::sim::predict_host_cpu_seconds(c, 8, {{10'000'000, 10'000'000}, {5'000'000}});
  EXPECT_NEAR(got * 1e9, want_ns, 3.0);
  EXPECT_THROW(tf::backend::sim::predict_host_cpu_seconds(c, 8, {}), std::invalid_argument);
}

// The bench's check (bench --cpu-ranks K --profile): k ranks, each on 16 / k threads with 32 equal ops,
// all busy until the end: the predicted node time is the elements over the rank curve's node rate at k,
// with nothing else (no DMA factor, no second curve) applied on top.
TEST(SimHost, EqualRanksTakeTheElementsOverTheNodeRate) {
  const tf::core::CpuProfile c = shared_host_cpu();
  const int64_t total = int64_t(1) << 28;
  for (const auto& [k, node] : c.optimizer_node_gparam_s_by_ranks) {
    const std::vector<std::vector<int64_t>> ops(size_t(k), std::vector<int64_t>(32, total / k / 32));
    const double got = tf::backend::sim::predict_host_cpu_seconds(c, 16 / k, ops);
    EXPECT_NEAR(got, double(total) / node * 1e-9, 1e-9 * 32 * k) << k << " ranks";
  }
}

// Two GPUs of one host, clipping on: after the norm both ranks run their CPU updates at once, each at
// the two-rank rate for its whole CPU pass.
TEST(SimHost, BothRanksOfAHostRunAtTheTwoRankRate) {
  tf::core::Scenario s = decoder_scenario(2);
  tf::core::CpuProfile& cpu = s.cluster.hardware.cpu;
  cpu = shared_host_cpu();
  cpu.dma_slowdown_factor = 1;  // no DMA term: the host's share alone
  s.cluster.cpu_cores_per_gpu = 8;
  SimOptions opt;
  opt.keep_plans = true;
  const SimPoint p = simulate_step(s, 0.5, opt);
  double want_ns = 0;
  int ops = 0;
  for (const tf::core::Op& op : p.plans[0].ops)
    if (op.kind == tf::core::OpKind::kCpuOptimizer) want_ns += double(op.elems) / 2.1, ++ops;
  ASSERT_GT(ops, 0);
  EXPECT_NEAR(double(p.kind_ns[size_t(tf::core::OpKind::kCpuOptimizer)]), want_ns, ops + 1.0);
  // without the rank curve, the static share 2.25
  cpu.optimizer_node_gparam_s_by_ranks.clear();
  const SimPoint q = simulate_step(s, 0.5, opt);
  EXPECT_NEAR(double(q.kind_ns[size_t(tf::core::OpKind::kCpuOptimizer)]), want_ns * 2.1 / 2.25, ops + 1.0);
}

// The footprint factor (cpu.optimizer_rate_factor_by_node_bytes) is looked up at the node's planned pinned
// bytes, the largest shard's host memory x the host's ranks, and scales every CPU optimizer op's rate: the
// same run with the rank curve of BothRanksOfAHostRunAtTheTwoRankRate takes elements / (2.1 x factor).
TEST(SimHost, TheFootprintFactorScalesThePassAtTheNodesPinnedBytes) {
  tf::core::Scenario s = decoder_scenario(2);
  s.training.speculation_bytes = tf::core::kSpeculationMax;  // the host bytes do not follow the CPU rate
  tf::core::CpuProfile& cpu = s.cluster.hardware.cpu;
  cpu = shared_host_cpu();
  cpu.dma_slowdown_factor = 1;
  s.cluster.cpu_cores_per_gpu = 8;
  SimOptions opt;
  opt.keep_plans = true;
  const SimPoint base = simulate_step(s, 0.5, opt);
  EXPECT_EQ(base.cpu_footprint_factor, 1.0);  // not measured
  EXPECT_EQ(base.cpu_node_host_bytes, base.memory.host_total * 2);
  ASSERT_GT(base.cpu_node_host_bytes, 0);
  // 1 up to the half of the node's bytes, 0.5 at twice them: 0.75 at the node's bytes
  cpu.optimizer_rate_factor_by_node_bytes = {{base.cpu_node_host_bytes / 2, 1.0}, {base.cpu_node_host_bytes * 2, 0.5}};
  const SimPoint p = simulate_step(s, 0.5, opt);
  EXPECT_DOUBLE_EQ(p.cpu_footprint_factor, 1.0 - 0.5 * (0.5 / 1.5));
  double want_ns = 0;
  int ops = 0;
  for (const tf::core::Op& op : p.plans[0].ops)
    if (op.kind == tf::core::OpKind::kCpuOptimizer) want_ns += double(op.elems) / (2.1 * p.cpu_footprint_factor), ++ops;
  ASSERT_GT(ops, 0);
  EXPECT_NEAR(double(p.kind_ns[size_t(tf::core::OpKind::kCpuOptimizer)]), want_ns, ops + 1.0);
  EXPECT_GT(p.step_ns, base.step_ns);
}

// The CPU pass's DMA slowdown by direction (cpu.dma_slowdown_factor_d2h / _h2d): a profile without them
// slows by the both-ways figure whatever the link carries, and so does one whose one-way figures equal it
// (the same step to the ns); a larger D2H figure slows the passes that run beside the ranks' D2Hs (with
// speculation the CPU layers update during backward, while the next layers' gradients come down).
TEST(SimHost, TheDmaSlowdownOfAPassFollowsTheDirectionItsLinkCarries) {
  tf::core::Scenario s = decoder_scenario(2);
  tf::core::CpuProfile& cpu = s.cluster.hardware.cpu;
  cpu.dma_slowdown_factor = 1.25;
  const auto cpu_ns = [](const SimPoint& p) { return p.kind_ns[size_t(tf::core::OpKind::kCpuOptimizer)]; };
  const SimPoint base = simulate_step(s, 1.0);
  cpu.dma_slowdown_factor_d2h = cpu.dma_slowdown_factor_h2d = 1.25;
  const SimPoint same = simulate_step(s, 1.0);
  EXPECT_EQ(same.step_ns, base.step_ns);
  EXPECT_EQ(cpu_ns(same), cpu_ns(base));
  cpu.dma_slowdown_factor_d2h = 3;
  const SimPoint d2h = simulate_step(s, 1.0);
  EXPECT_GT(cpu_ns(d2h), cpu_ns(base));
}

// ---- compute slowed by collectives and copies ----------------------------------------------------------

// Two GPUs: the collectives overlap backward. A slowdown of (almost) 1 takes the rate-based path and
// gives the fixed durations' step within rounding; 1.5 stretches forward and backward, by at most 1.5.
TEST(SimCompute, CollectivesSlowTheComputeTheyOverlap) {
  tf::core::Scenario s = decoder_scenario(2);
  auto& gpu = s.cluster.hardware.gpu;
  const auto compute_ns = [](const SimPoint& p) {
    return double(p.kind_ns[size_t(tf::core::OpKind::kForward)] + p.kind_ns[size_t(tf::core::OpKind::kBackward)]);
  };
  const SimPoint fixed = simulate_step(s, 0.25);
  gpu.compute_slowdown_during_collectives = 1 + 1e-12;
  const SimPoint same = simulate_step(s, 0.25);
  const tf::core::RunSettings rs = tf::core::resolve_settings(s);
  const tf::core::RankPlan rp =
      tf::core::plan_rank(rs.model, tf::core::make_partition(rs.model, rs.partition), 0, 0.25, rs.memory_options());
  int compute_ops = 0;
  for (const tf::core::Op& op : rp.step.ops)
    compute_ops += op.kind == tf::core::OpKind::kForward || op.kind == tf::core::OpKind::kBackward;
  EXPECT_NEAR(compute_ns(same), compute_ns(fixed), compute_ops);
  gpu.compute_slowdown_during_collectives = 1.5;
  const SimPoint slowed = simulate_step(s, 0.25);
  EXPECT_GT(compute_ns(slowed), compute_ns(fixed) * 1.01);
  EXPECT_LE(compute_ns(slowed), compute_ns(fixed) * 1.5 + compute_ops);
  EXPECT_GT(slowed.step_ns, fixed.step_ns);
  gpu.compute_slowdown_during_collectives = 0;  // not measured: the fixed durations again
  gpu.compute_slowdown_during_dma = 1.25;       // copies run during backward (the CPU part's D2H)
  EXPECT_GT(compute_ns(simulate_step(s, 0.25)), compute_ns(fixed));
}

// ---- collectives wait for the running kernel -----------------------------------------------------------

// Five 4096-wide layers with bias on two GPUs of the built-in 2 x H200 profile (no compute slowdowns:
// fixed durations), ratio 0, one step. The rule (docs/ARCHITECTURE.md, "Collectives wait for the running
// kernel"): a comm-stream kernel that becomes eligible while a compute kernel runs starts when that kernel
// ends; at the same ns, the op whose own queue's op just ended goes first. Every time below follows from
// the layers' kernel costs (layer_costs), the measured bus bandwidth curve and the sum's bytes.
TEST(SimCollectives, ACommKernelWaitsForTheComputeKernelRunningWhenItBecameEligible) {
  tf::core::Scenario s = tf::core::parse_scenario(
      "model: {type: mlp, dims: [4096, 4096, 4096, 4096, 4096], bias: true}\n"
      "cluster: {profile: h200x2-32core, gpus_per_node: 2}\n"
      "training: {micro_batch: 4096, gradient_clipping: 1.0}\n"
      "optimizer: {type: adamw}\n"
      "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0}}\n",
      {}, "mlp5.yaml");
  s.training.carry_tail = false;
  const tf::core::HardwareProfile& hw = s.cluster.hardware;
  ASSERT_LE(hw.gpu.compute_slowdown_during_collectives, 1.0);  // the fixed durations this test computes with
  const SimPoint p = simulate_step(s, 0.0, {.record_ops = true, .keep_plans = true});
  const std::vector<tf::core::Op>& ops = p.plans[0].ops;
  // the n-th op (0-based) of this kind and layer on rank 0: [start, end)
  const auto at = [&](tf::core::OpKind kind, int layer, int nth = 0) {
    for (const tf::core::Op& op : ops)
      if (op.kind == kind && op.layer == layer && nth-- == 0) return p.ranks[0].ops[op.id];
    ADD_FAILURE() << "no such op";
    return tf::backend::sim::OpTiming{};
  };
  using K = tf::core::OpKind;
  // One all-gather alone: half the 2 x 16.8 MB layer over the measured bus bandwidth at its size.
  const int64_t layer_bytes = ops[0].bytes;
  std::vector<tf::sim::BusBandwidthPoint> curve;
  for (const tf::core::BusPoint& b : hw.intra_node.bus_gbps_by_message_bytes)
    curve.push_back({b.message_bytes, b.bus_gbps});
  tf::sim::CollectiveParams cp;
  cp.curve = tf::sim::BusBandwidthCurve(curve);
  const auto exchange_ns = [&](tf::sim::CollectiveKind k) {
    return tf::sim::collective_ns(cp, k, tf::sim::CollectiveAlgorithm::kRing, 2, layer_bytes);
  };
  const int64_t gather = exchange_ns(tf::sim::CollectiveKind::kAllGather);
  // Layer 1's kernels: the forward's GEMM, then its bias + ReLU; the backward's weight gradient, its input
  // gradient, then its memory-bound kernels. Each ends at its cumulative work, in whole ns of the op.
  const std::vector<tf::backend::sim::LayerCost> costs = tf::backend::sim::layer_costs(s);
  const tf::backend::sim::PassCost& fwd1 = costs[1].fwd;
  const tf::backend::sim::PassCost& bwd1 = costs[1].bwd;
  ASSERT_EQ(fwd1.gemms.size(), 1u);
  ASSERT_EQ(bwd1.gemms.size(), 2u);
  ASSERT_EQ(bwd1.gemms[1].gemm.pass, tf::core::GemmPass::kWeightGrad);  // listed second, run first
  const auto kernel_end = [](const tf::backend::sim::PassCost& c, double work) {
    return int64_t(std::ceil(work / c.work_ns() * double(tf::sim::ceil_ns(c.ns()))));
  };
  // The gathers before the first forward: AG L0 at 0; AG L1 follows it on the comm stream at the ns
  // forward L0 (which waited for AG L0 on another stream) starts, so it goes first and runs at once.
  EXPECT_EQ(at(K::kAllGather, 0).start_ns, 0);
  EXPECT_EQ(at(K::kAllGather, 0).end_ns, gather);
  EXPECT_EQ(at(K::kForward, 0).start_ns, gather);
  EXPECT_EQ(at(K::kAllGather, 1).start_ns, gather);
  EXPECT_EQ(at(K::kAllGather, 1).end_ns, 2 * gather);
  // AG L2 waits for its prefetch slot, which forward L0 frees as it ends: forward L1, its own queue's
  // next op, starts at that ns and goes first; the gather's exchange starts when forward L1's GEMM ends,
  // and forward L2 waits for it.
  const int64_t f1 = at(K::kForward, 1).start_ns;
  EXPECT_EQ(f1, at(K::kForward, 0).end_ns);
  EXPECT_EQ(at(K::kAllGather, 2).start_ns, f1);
  ASSERT_LT(kernel_end(fwd1, fwd1.gemms[0].ns) + gather, at(K::kForward, 1).end_ns - f1 + gather);
  EXPECT_NEAR(double(at(K::kAllGather, 2).end_ns), double(f1 + kernel_end(fwd1, fwd1.gemms[0].ns) + gather), 1);
  EXPECT_EQ(at(K::kForward, 2).start_ns, at(K::kAllGather, 2).end_ns);
  // Backward L1 starts with the backward gather of layer 0 beside it; RS L2 follows that gather on the comm
  // stream while backward L1's weight-gradient GEMM runs: its exchange starts when that GEMM ends. Its sum,
  // the next kernel on the comm stream, becomes eligible while the input-gradient GEMM (started meanwhile)
  // runs, and waits for that one too: the op ends at that GEMM's end + the sum alone.
  const int64_t b1 = at(K::kBackward, 1).start_ns;
  const int64_t wgrad_end = kernel_end(bwd1, bwd1.gemms[1].ns);
  const int64_t dgrad_end = kernel_end(bwd1, bwd1.gemms[1].ns + bwd1.gemms[0].ns);
  const tf::backend::sim::OpTiming gather0 = at(K::kAllGather, 0, 1), rs2 = at(K::kReduceScatter, 2);
  ASSERT_LT(gather0.end_ns, b1 + wgrad_end);
  EXPECT_EQ(rs2.start_ns, gather0.end_ns);
  const int64_t scatter = exchange_ns(tf::sim::CollectiveKind::kReduceScatter);
  ASSERT_LT(wgrad_end + scatter, dgrad_end);
  const int64_t slice = layer_bytes / 4;  // elements per rank, bf16
  const int64_t sum =
      tf::sim::ceil_ns(tf::core::kSliceSumLaunches * hw.gpu.kernel_launch_ns +
                       double(tf::core::slice_sum_bytes(2, slice, 2, tf::core::slice_sum_io(1, 0))) / hw.gpu.hbm_gbps);
  EXPECT_NEAR(double(rs2.end_ns), double(b1 + dgrad_end + sum), 1);
  // Without the rule the gather would have run beside forward L1's GEMM and forward L2 started at once.
  EXPECT_GT(at(K::kForward, 2).start_ns, at(K::kForward, 1).end_ns);
}

}  // namespace

// summarize_timeline splits the exposed transfer time: the CPU optimizer while compute and comm are idle,
// and copies while those and the CPU optimizer are idle. A one-layer MLP at ratio 1 (forward, backward,
// d2h, CPU update, h2d), by hand: forward [0, 100), d2h [50, 150), CPU update [120, 200), h2d [190, 260),
// the rest empty: transfer exposed 100..260 = 160 = CPU 120..200 (80) + copies 100..120 and 200..260 (80).
TEST(Timeline, ExposedCpuOptimizerAndCopiesSplitTheExposedTransfer) {
  using tf::core::OpKind;
  const tf::core::ModelDesc m = tf::core::describe_model(tf::core::make_mlp({64, 64}));
  const tf::core::Partition part = tf::core::make_partition(m, {3, 1, 2048});
  const tf::core::StepPlan plan =
      tf::core::plan_step(m, part, tf::core::split_shard(part.ranks[0], 1.0, 2048), tf::core::StepConfig{});
  std::vector<tf::backend::OpInterval> iv(plan.ops.size());
  for (const tf::core::Op& op : plan.ops) {
    iv[op.id].op = op.id;
    const std::pair<int64_t, int64_t> at = op.kind == OpKind::kForward        ? std::pair{0, 100}
                                           : op.kind == OpKind::kD2HGrad      ? std::pair{50, 150}
                                           : op.kind == OpKind::kCpuOptimizer ? std::pair{120, 200}
                                           : op.kind == OpKind::kH2DParam     ? std::pair{190, 260}
                                                                              : std::pair{0, 0};
    iv[op.id].start_ns = at.first;
    iv[op.id].end_ns = at.second;
  }
  const tf::backend::StepTimeline t = tf::backend::summarize_timeline(plan, iv);
  EXPECT_EQ(t.exposed_transfer_ns, 160);
  EXPECT_EQ(t.exposed_cpu_optimizer_ns, 80);
  EXPECT_EQ(t.exposed_copies_ns, 80);
}

namespace {

// Issue 16, the staging rings in the cost-only simulator: on a slow CPU (0.05 Gparam/s against PCIe's
// tens of GB/s) with 2 slots, the D2H of the i-th CPU layer waits for the update of layer i - 2 to free
// its slot: it starts after that update's end, later than with full-size staging (where every D2H runs
// as soon as its reduction has); two slots hide the wait behind the slow updates (the step time stays).
TEST(SimBackend, StagingRingStallsTheD2HBehindASlowCpu) {
  tf::core::Scenario s = decoder_scenario(1);
  s.training.carry_tail = false;  // the step's own D2Hs and passes, not the next step's forward
  auto& hw = s.cluster.hardware;
  hw.cpu.optimizer_gparam_s_by_threads.clear();
  hw.cpu.optimizer_node_gparam_s_by_ranks.clear();
  hw.cpu.optimizer_gparam_s_per_core = hw.cpu.optimizer_gparam_s_all_cores = 0.05;
  for (bool clip : {true, false}) {
    s.training.gradient_clipping = clip ? 1.0 : 0.0;
    SimOptions ring{.record_ops = true, .keep_plans = true}, full = ring;
    ring.overrides.staging_slots = 2;
    ring.overrides.speculation_bytes = 0;  // every CPU layer's pass is one kCpuOptimizer after the norm
    full = ring;
    full.overrides.staging_slots = tf::core::kUnboundedStaging;
    const SimPoint a = simulate_step(s, 1.0, ring), b = simulate_step(s, 1.0, full);
    const tf::core::StepPlan& pa = a.plans[0];
    const tf::core::StepPlan& pb = b.plans[0];
    const auto& ta = a.ranks[0].ops;
    const auto& tb = b.ranks[0].ops;
    // the D2Hs of both plans, in CPU-layer order (backward), and the CPU updates of the ring's
    std::vector<uint32_t> d2h_a, d2h_b, cpu_a;
    for (const auto& o : pa.ops) {
      if (o.kind == tf::core::OpKind::kD2HGrad) d2h_a.push_back(o.id);
      if (o.kind == tf::core::OpKind::kCpuOptimizer) cpu_a.push_back(o.id);
    }
    for (const auto& o : pb.ops)
      if (o.kind == tf::core::OpKind::kD2HGrad) d2h_b.push_back(o.id);
    std::sort(d2h_a.begin(), d2h_a.end(), [&](uint32_t x, uint32_t y) { return pa.ops[x].layer > pa.ops[y].layer; });
    std::sort(d2h_b.begin(), d2h_b.end(), [&](uint32_t x, uint32_t y) { return pb.ops[x].layer > pb.ops[y].layer; });
    ASSERT_EQ(d2h_a.size(), 6u);  // embed, 4 blocks, head
    ASSERT_EQ(d2h_b.size(), 6u);
    size_t stalled = 0;  // D2Hs that start later than without the ring
    for (size_t i = 2; i < d2h_a.size(); ++i) {
      const int64_t freed = ta[cpu_a[i - 2]].end_ns;  // the update that last read the slot
      EXPECT_GE(ta[d2h_a[i]].start_ns, freed) << "clip " << clip << " CPU layer " << i;
      stalled += ta[d2h_a[i]].start_ns > tb[d2h_b[i]].start_ns;
    }
    // with the norm wait every D2H beyond the first two waits for an update; without it the first
    // update (the head's final LayerNorm) is short, so from the fourth CPU layer on
    EXPECT_EQ(stalled, clip ? 4u : 3u);
    // the CPU is the bottleneck: its updates run back to back either way, and the step time stays
    EXPECT_NEAR(double(a.step_ns), double(b.step_ns), 0.01 * double(b.step_ns)) << clip;
    EXPECT_LT(a.memory.host_staging, b.memory.host_staging) << clip;
  }
}

}  // namespace

// The speculative schedule from the same plan (docs/ARCHITECTURE.md, "Speculation"): with clipping, a held
// speculation moves the CPU passes of the last layers into backward, so the step and its optimizer phase
// shrink and more of the CPU queue runs under compute; the step after a clipped one (no speculative work,
// every commit redoes) costs what the plan without speculation costs; a failed speculation costs more.
// Ratios where backward outlasts the speculated passes (0.6 no longer does since the launches hide behind
// the kernels' work, PassCost::ns: backward is shorter): at ratio 1 on this small decoder the CPU pass is
// several times backward, the last speculated layer's gradient lands after the norm, and the commits
// (hence the H2Ds) queue behind it on the FIFO cpu queue (docs/ARCHITECTURE.md, "When it does not help").
TEST(SimSpeculation, HeldSpeculationHidesTheCpuPassAndTheOtherCasesCostWhatTheyDo) {
  using tf::backend::sim::SpeculationCase;
  tf::core::Scenario s = decoder_scenario(1);
  s.training.carry_tail = false;  // the speculation cases on their own, without a carried tail
  SimOptions off;
  off.overrides.speculation_bytes = 0;
  SimOptions held;
  SimOptions after_clip;
  after_clip.speculation = SpeculationCase::kNotSpeculating;
  SimOptions failed;
  failed.speculation = SpeculationCase::kFails;
  for (double ratio : {0.3, 0.5}) {
    const SimPoint p_off = simulate_step(s, ratio, off);
    const SimPoint p_held = simulate_step(s, ratio, held);
    const SimPoint p_after = simulate_step(s, ratio, after_clip);
    const SimPoint p_failed = simulate_step(s, ratio, failed);
    const auto cpu_busy = [](const SimPoint& p) { return p.busy_ns[qi(Queue::kCpu)]; };
    EXPECT_LT(p_held.step_ns, p_off.step_ns) << ratio;
    EXPECT_LT(p_held.optimizer_phase_ns, p_off.optimizer_phase_ns) << ratio;
    EXPECT_GT(p_held.cpu_overlapped_ns, p_off.cpu_overlapped_ns) << ratio;
    EXPECT_EQ(p_after.step_ns, p_off.step_ns) << ratio;
    EXPECT_GT(p_failed.step_ns, p_held.step_ns) << ratio;
    EXPECT_GE(p_failed.step_ns, p_off.step_ns) << ratio;
    // the CPU pass's elements are the same in every case but the failed one (twice for the speculated layers)
    EXPECT_GT(cpu_busy(p_failed), cpu_busy(p_off)) << ratio;
    EXPECT_EQ(p_held.pcie_bytes_each_way, p_off.pcie_bytes_each_way) << ratio;
    // the second state slot is host memory only
    EXPECT_GT(p_held.memory.host_optimizer, p_off.memory.host_optimizer) << ratio;
    EXPECT_EQ(p_held.memory.gpu_total, p_off.memory.gpu_total) << ratio;
  }
  // without clipping or loss scaling nothing waits for the norm: nothing to speculate, the same step
  tf::core::Scenario plain = s;
  plain.training.gradient_clipping = 0;
  EXPECT_EQ(simulate_step(plain, 0.6, held).step_ns, simulate_step(plain, 0.6, off).step_ns);
}

// The out-of-place factor (cpu.optimizer_out_of_place_factor) lengthens the speculative passes (state slot 1,
// out of place into the spare slot) by itself and nothing else: with the DMA slowdowns off each such pass
// takes 1.25x its time without the factor (to the ns), an in-place pass and a held commit what they took;
// the step after a clipped one (no speculative pass, every commit redoes in place) does not change.
TEST(SimSpeculation, TheOutOfPlaceFactorLengthensTheSpeculativePassesOnly) {
  using tf::backend::sim::SpeculationCase;
  tf::core::Scenario s = decoder_scenario(1);
  s.training.carry_tail = false;
  tf::core::CpuProfile& cpu = s.cluster.hardware.cpu;
  cpu.dma_slowdown_factor = 1;
  cpu.dma_slowdown_factor_d2h = cpu.dma_slowdown_factor_h2d = 0;
  const SimOptions rec{.record_ops = true, .keep_plans = true};
  const SimPoint base = simulate_step(s, 0.5, rec);
  cpu.optimizer_out_of_place_factor = 1.25;
  const SimPoint slow = simulate_step(s, 0.5, rec);
  int speculative = 0;
  for (size_t i = 0; i < base.plans[0].ops.size(); ++i) {
    const tf::core::Op& op = base.plans[0].ops[i];
    if (op.queue != Queue::kCpu) continue;
    const auto ns = [i](const SimPoint& p) { return double(p.ranks[0].ops[i].end_ns - p.ranks[0].ops[i].start_ns); };
    if (op.kind == tf::core::OpKind::kCpuOptimizer && op.state_slot == 1) {
      ++speculative;
      EXPECT_NEAR(ns(slow), ns(base) * 1.25, 2.0) << op.label();
    } else {
      EXPECT_EQ(ns(slow), ns(base)) << op.label();
    }
  }
  EXPECT_GT(speculative, 0);
  EXPECT_GT(slow.step_ns, base.step_ns);
  SimOptions after_clip;
  after_clip.speculation = SpeculationCase::kNotSpeculating;
  cpu.optimizer_out_of_place_factor = 0;  // not measured: 1
  const int64_t after = simulate_step(s, 0.5, after_clip).step_ns;
  cpu.optimizer_out_of_place_factor = 1.25;
  EXPECT_EQ(simulate_step(s, 0.5, after_clip).step_ns, after);
}

namespace {

// A tiny decoder on one H100 at ratio 0: T = 64 rows (micro-batch 1, s 64), h 64, H 4 (d 16), f 256, V 512.
// Its kernels are far shorter than the host's issue interval, so its ops would take the issue time alone
// (PassCost::ns); with the launch cost 0 they take their work, which these tests compare.
tf::core::Scenario tiny_decoder(bool checkpointing) {
  tf::core::Scenario s = tf::core::parse_scenario(
      "model: {type: decoder, layers: 2, hidden: 64, heads: 4, vocab: 512, seq: 64}\n"
      "cluster: {profile: h100-80gb-16core, cpu_cores_per_gpu: 4}\n"
      "training: {micro_batch: 1, gradient_clipping: 1.0, activation_checkpointing: " +
          std::string(checkpointing ? "true" : "false") +
          "}\n"
          "optimizer: {type: adamw}\n"
          "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0}}\n",
      {}, "tiny.yaml");
  s.cluster.hardware.gpu.kernel_launch_ns = 0;
  return s;
}

// The duration of layer `layer`'s first op of `kind` (rank 0).
int64_t op_ns(const tf::core::Scenario& s, tf::core::OpKind kind, int layer) {
  const SimPoint p = simulate_step(s, 0.0, {.record_ops = true, .keep_plans = true});
  for (size_t i = 0; i < p.plans[0].ops.size(); ++i) {
    const auto& op = p.plans[0].ops[i];
    if (op.kind == kind && op.layer == layer) return p.ranks[0].ops[i].end_ns - p.ranks[0].ops[i].start_ns;
  }
  ADD_FAILURE() << "no op of layer " << layer;
  return 0;
}

}  // namespace

// The fused attention at its measured rate (gpu.attention_tflops_by_shape): its FLOPs are those of the
// causal half, forward QK^T and PV of (s + 1) x s/2 x d per (sample, head): 2 x 2 x 65 x 32 x 16 x 4 =
// 532,480 FLOP; backward 5 products, 1,331,200 FLOP. At 2 and 1 TFLOP/s (2e3 and 1e3 FLOP/ns) the passes
// take 266.24 and 1331.2 ns, at twice the rates half that: the block's ops differ by 133.12 and 665.6 ns
// (each op's time is rounded up to a whole ns: within 1 ns). With checkpointing the backward runs the
// forward again: 665.6 + 133.12.
TEST(SimDecoder, MeasuredAttentionRateSetsTheFusedKernelsTime) {
  using tf::core::OpKind;
  for (bool ckpt : {false, true}) {
    SCOPED_TRACE(ckpt);
    tf::core::Scenario slow = tiny_decoder(ckpt), fast = tiny_decoder(ckpt);
    slow.cluster.hardware.gpu.attention_tflops_by_shape = {{16, 64, 2.0, false}, {16, 64, 1.0, true}};
    fast.cluster.hardware.gpu.attention_tflops_by_shape = {{16, 64, 4.0, false}, {16, 64, 2.0, true}};
    EXPECT_NEAR(double(op_ns(slow, OpKind::kForward, 1) - op_ns(fast, OpKind::kForward, 1)), 133.12, 1.0);
    EXPECT_NEAR(double(op_ns(slow, OpKind::kBackward, 1) - op_ns(fast, OpKind::kBackward, 1)),
                665.6 + (ckpt ? 133.12 : 0.0), 1.0);
    // the embedding and the head have no attention
    EXPECT_EQ(op_ns(slow, OpKind::kForward, 3), op_ns(fast, OpKind::kForward, 3));
  }
}

// fp16 training gathers and computes in bf16 (core::StepConfig::param_dtype): its layers cost what bf16 training's
// do, with the bf16 attention rates and peak, however far the profile's fp16 peak is from bf16's.
TEST(SimDecoder, Fp16TrainingComputesInBf16) {
  using tf::core::OpKind;
  tf::core::Scenario bf16 = tiny_decoder(false);
  bf16.cluster.hardware.gpu.attention_tflops_by_shape = {{16, 64, 2.0, false}, {16, 64, 1.0, true}};
  bf16.cluster.hardware.gpu.fp16_tflops = bf16.cluster.hardware.gpu.bf16_tflops / 3;
  tf::core::Scenario fp16 = bf16;
  fp16.training.precision = tf::core::Precision::kFP16;
  for (int layer : {0, 1, 3}) {
    SCOPED_TRACE(layer);
    EXPECT_EQ(op_ns(fp16, OpKind::kForward, layer), op_ns(bf16, OpKind::kForward, layer));
    EXPECT_EQ(op_ns(fp16, OpKind::kBackward, layer), op_ns(bf16, OpKind::kBackward, layer));
  }
}

// A class's measured rate (gpu.decoder_kernel_gbps) replaces the HBM rate for that class's bytes only.
// The block's two LayerNorm forwards move 2 x (2Th e + 2h e + 8T) = 2 x (16384 + 256 + 512) = 34,304 B;
// at half the HBM rate they take 34,304 / hbm_gbps ns longer. The head's fused cross-entropy (one kernel in
// the forward, as the workload runs it) moves the loss's T V e + 12 T = 66,304 B and dlogits' 2 T V e + 8 T =
// 131,584 B, all in the forward; the head's backward has none of it.
TEST(SimDecoder, MeasuredKernelClassRatesReplaceTheHbmRate) {
  using tf::core::KernelClass;
  using tf::core::OpKind;
  const tf::core::Scenario base = tiny_decoder(false);
  const double hbm = base.cluster.hardware.gpu.hbm_gbps;
  tf::core::Scenario ln = base;
  ln.cluster.hardware.gpu.decoder_kernel_gbps = {{KernelClass::kLayerNormForward, hbm / 2}};
  EXPECT_NEAR(double(op_ns(ln, OpKind::kForward, 1) - op_ns(base, OpKind::kForward, 1)), 34304 / hbm, 1.0);
  EXPECT_EQ(op_ns(ln, OpKind::kBackward, 1), op_ns(base, OpKind::kBackward, 1));  // LayerNorm backward: not this class
  tf::core::Scenario ce = base;
  ce.cluster.hardware.gpu.decoder_kernel_gbps = {{KernelClass::kCrossEntropy, hbm / 4}};
  EXPECT_NEAR(double(op_ns(ce, OpKind::kForward, 3) - op_ns(base, OpKind::kForward, 3)), 3 * (66304 + 131584) / hbm,
              1.0);
  EXPECT_EQ(op_ns(ce, OpKind::kBackward, 3), op_ns(base, OpKind::kBackward, 3));
  EXPECT_EQ(op_ns(ce, OpKind::kForward, 1), op_ns(base, OpKind::kForward, 1));
}
// Carrying the tail into the next step (docs/ARCHITECTURE.md, "Carrying the optimizer tail into the next
// step"): the simulator runs three steps and reports the second's period. Where every step clips (no
// speculative work) the CPU pass after the norm then overlaps the next step's forward: the period is
// shorter than the step without carry, more of the CPU pass runs under compute, and each queue still
// runs the reported step's ops in plan order. At ratio 0 there is nothing to carry: the same step.
TEST(SimCarry, TheCarriedTailHidesBehindTheNextForward) {
  using tf::backend::sim::SpeculationCase;
  tf::core::Scenario s = decoder_scenario(1);
  for (SpeculationCase sc : {SpeculationCase::kNotSpeculating, SpeculationCase::kHolds, SpeculationCase::kFails}) {
    SimOptions on{.record_ops = true, .keep_plans = true}, off = on;
    on.speculation = off.speculation = sc;
    off.overrides.carry_tail = false;
    on.overrides.carry_tail = true;
    const SimPoint z_on = simulate_step(s, 0.0, on), z_off = simulate_step(s, 0.0, off);
    EXPECT_EQ(z_on.step_ns, z_off.step_ns);
    const SimPoint p_on = simulate_step(s, 0.5, on), p_off = simulate_step(s, 0.5, off);
    ASSERT_TRUE(tf::core::carries(p_on.plans[0]));
    ASSERT_FALSE(tf::core::carries(p_off.plans[0]));
    EXPECT_LE(p_on.step_ns, p_off.step_ns) << int(sc);
    EXPECT_GE(p_on.cpu_overlapped_ns, p_off.cpu_overlapped_ns) << int(sc);
    if (sc == SpeculationCase::kNotSpeculating) {
      EXPECT_LT(p_on.step_ns, p_off.step_ns);
      EXPECT_GT(p_on.cpu_overlapped_ns, p_off.cpu_overlapped_ns);
    }
    EXPECT_EQ(tf::backend::sim::executed_queue_order(p_on)[0], tf::core::plan_queue_order(p_on.plans[0]));
  }
}

// One OPT-1.3B block's forward (seq 1024, micro-batch 8: T 8192, h 2048, f 8192, 32 heads of 64) with the
// profile calibrated in the 2026-11-24 decval call, by hand from its figures: the four GEMMs at their
// measured shapes (forward) QKV 2*8192*6144*2048 / 770.6e3 = 267529.76, out 2*8192*2048*2048 / 750e3 =
// 91625.97, fc1 2*8192*8192*2048 / 644.2e3 = 426696.53, fc2 2*8192*2048*8192 / 712.1e3 = 386010.26 ns; the
// fused attention 4 * 1025 * 512 * 64 * 256 FLOP / 187.6e3 = 183333.12; LayerNorm 2 * (2Th e + 2h e + 8T) =
// 134365184 B / 2257 = 59532.65, bias/activation 6Th e + 3h e + 3Tf e + f e = 604008448 B / 2847 =
// 212156.11, bias + residual 2 * (3Th e + h e) = 201334784 B / 2724 = 73911.45: work 1700795.84 ns. Its 11
// kernels take the host 11 x 4136 = 45496 ns to issue, within the work: the op costs the work (the model of
// the decval call added the 45496 to it, 1746291.84).
TEST(SimDecoder, Opt13bBlockForwardCostsItsKernelsWork) {
  const std::string dir = std::string(TWINFLOW_SOURCE_DIR);
  tf::core::Scenario s = tf::core::load_scenario(dir + "/scenarios/real/opt-1.3b-h100.yaml");
  s.cluster.hardware = tf::core::find_hardware_profile(dir + "/bench/results/2026-11-24-decval-h100/h100-decval.yaml");
  const std::vector<tf::backend::sim::LayerCost> costs = tf::backend::sim::layer_costs(s);
  const tf::backend::sim::PassCost& fwd = costs.at(1).fwd;
  ASSERT_EQ(costs.at(1).kind, tf::core::LayerKind::kBlock);
  ASSERT_EQ(fwd.gemms.size(), 4u);
  const double gemm_ns[] = {267529.76, 91625.97, 426696.53, 386010.26};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(fwd.gemms[i].ns, gemm_ns[i], 0.01) << i;
    EXPECT_TRUE(fwd.gemms[i].exact_shape) << i;
  }
  EXPECT_NEAR(fwd.attention_ns, 183333.12, 0.01);
  using tf::core::KernelClass;
  EXPECT_NEAR(fwd.class_ns[size_t(KernelClass::kLayerNormForward)], 59532.65, 0.01);
  EXPECT_NEAR(fwd.class_ns[size_t(KernelClass::kBiasActForward)], 212156.11, 0.01);
  EXPECT_NEAR(fwd.class_ns[size_t(KernelClass::kBiasResidualForward)], 73911.45, 0.01);
  EXPECT_EQ(fwd.kernels, 11);
  EXPECT_DOUBLE_EQ(fwd.issue_ns, 45496);
  EXPECT_NEAR(fwd.ns(), 1700795.84, 0.02);
  EXPECT_NEAR(fwd.exposed_issue_ns(), 0.0, 1e-9);
}

// A pass whose kernels are shorter than the host's issue interval takes the issue time: the tiny decoder's
// block forward (12 kernels: 4 GEMMs, the attention's 2 products as GEMMs (no measured attention rate in
// this profile), 6 memory-bound kernels) at 4000 ns per kernel takes 48000 ns, whatever its work.
TEST(SimDecoder, ATinyLayerWaitsForTheHostToIssueItsKernels) {
  tf::core::Scenario s = tiny_decoder(false);
  s.cluster.hardware.gpu.kernel_launch_ns = 4000;
  const tf::backend::sim::PassCost fwd = tf::backend::sim::layer_costs(s).at(1).fwd;
  EXPECT_EQ(fwd.kernels, 12);
  EXPECT_LT(fwd.work_ns(), 48000);
  EXPECT_DOUBLE_EQ(fwd.ns(), 48000);
  EXPECT_EQ(op_ns(s, tf::core::OpKind::kForward, 1), 48000);
}
