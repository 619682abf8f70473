// The cost-only simulator backend: runs the core's step plan of every rank on simulated resources
// (tf::sim) and reports step time, per-queue busy time, exposed time and memory.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/gemm.h"
#include "core/memory.h"
#include "core/model.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "core/step.h"

namespace tf::backend::sim {

// One op's simulated execution on one rank.
struct OpTiming {
  uint32_t op = 0;  // index into the rank's StepPlan::ops
  int64_t start_ns = 0, end_ns = 0;
};

using core::QueueOrder;

struct RankTiming {
  std::vector<OpTiming> ops;                         // empty unless SimOptions::record_ops; ops[i].op == i
  QueueOrder queue_order;                            // ids in the order each queue ran them (record_ops)
  std::array<int64_t, core::kQueueCount> busy_ns{};  // per queue (core::Queue order)
  int64_t end_ns = 0;                                // when this rank's last op finished
};

// How `training.cpu_order: auto` chose the speculated CPU passes' order (backends/sim/cpu_order.h).
struct CpuOrderChoice {
  core::CpuPassOrder order;  // the chosen order (today's where nothing is faster or the order does not apply)
  int passes = 0;            // n: the passes it orders (core::ordered_cpu_passes of rank 0's plan); 0: none
  int64_t step_ns = 0;       // its predicted step, the speculation holding
  int64_t arrival_ns = 0;    // the predicted step in today's order (every pass in arrival order)
  int candidates = 0;        // orders simulated
};

// How `training.speculation: auto` chose how many CPU layers speculate (backends/sim/speculation_budget.h).
struct SpeculationChoice {
  int layers = core::kEveryEligibleLayer;  // the chosen count (StepConfig::speculation_layers)
  int eligible = 0;      // the most layers a rank's plan speculates without a count (0: nothing to choose)
  int suggested = 0;     // the pilot's suggestion (choose_speculation)
  int64_t step_ns = 0;   // the chosen count's predicted step
  int64_t every_ns = 0;  // every eligible layer's (`speculation: max`)
  int64_t none_ns = 0;   // no layer's (what `speculation: 0` plans, the speculation case aside)
  int candidates = 0;    // counts simulated, the pilot included
  // The chosen count's CPU pass order where training.cpu_order is auto: chosen with that count while it was
  // simulated, so whoever plans the count takes it instead of choosing it again.
  std::optional<CpuOrderChoice> cpu_order;
};

struct SimPoint {
  double requested_ratio = 0;
  double ratio = 0;  // actual (element-granular split of the largest shard)
  int world = 1;
  bool oom = false;                                   // GPU or host memory does not fit (the step is still simulated)
  std::string oom_reason;                             // core::check_ratio_fits' message when oom
  int64_t step_ns = 0;                                // the slowest rank's step
  std::array<int64_t, core::kQueueCount> busy_ns{};   // rank 0, per queue
  std::array<int64_t, core::kOpKindCount> kind_ns{};  // rank 0, summed op durations per op kind
  // Optimizer phase: from the end of the last backward op to the end of the step (rank 0).
  int64_t optimizer_phase_ns = 0;
  // Exposed (non-overlapped) time: the part of the step when rank 0's compute queue is idle.
  int64_t exposed_ns = 0;
  // Exposed transfer: the part of the step when a PCIe copy or the CPU optimizer runs while the
  // compute and comm queues are both idle (rank 0).
  int64_t exposed_transfer_ns = 0;
  // The CPU queue's busy time while the compute queue is busy too (rank 0; StepTimeline::cpu_overlapped_ns)
  int64_t cpu_overlapped_ns = 0;
  core::RankMemory memory;                     // of the largest shard
  std::string unnamed_gpu;                     // its GPU memory no buffer names, in words (core::unnamed_gpu_text)
  core::HostBytesPerParam host_per_cpu_param;  // of the largest shard's CPU segment (issue 16)
  core::StagingChoice staging;                 // of the largest shard (core::choose_staging)
  int64_t pcie_bytes_each_way = 0;
  // The node's pinned host bytes (memory.host_total x the host's ranks) and the CPU optimizer's rate factor
  // the profile gives at them (core::CpuProfile::optimizer_footprint_factor; 1 when not measured)
  int64_t cpu_node_host_bytes = 0;
  double cpu_footprint_factor = 1;
  core::CpuPassOrder cpu_order;                    // the speculated CPU passes' order planned (StepConfig::cpu_order)
  std::optional<CpuOrderChoice> cpu_order_choice;  // how it was chosen (training.cpu_order auto)
  int speculation_layers = core::kEveryEligibleLayer;   // the cap planned (StepConfig::speculation_layers)
  std::optional<SpeculationChoice> speculation_choice;  // how it was chosen (training.speculation auto)
  std::vector<core::StepPlan> plans;                    // per rank (only with SimOptions::keep_plans)
  std::vector<RankTiming> ranks;                        // per rank
};

// What the plan's speculated CPU layers do in the simulated step (core/speculation.h).
enum class SpeculationCase : uint8_t {
  kHolds,           // the speculative updates run during backward and each commit only learns of the norm
  kFails,           // the step clips (or overflows) after speculating: the speculative pass and the redo run
  kNotSpeculating,  // the step after a clipped or skipped one: no speculative work, every commit redoes
};

struct SimOptions {
  bool record_ops = false;  // keep per-op timings (for traces)
  bool keep_plans = false;  // keep the per-rank plans (for traces)
  // The simulator assumes the speculation holds unless told otherwise (the previous step clipped:
  // kNotSpeculating). overrides.speculation_bytes 0 plans no speculation at all.
  SpeculationCase speculation = SpeculationCase::kHolds;
  // What to change of the scenario's settings (core::resolve_settings): a world other than the
  // scenario's cluster size (ranks then fill nodes of the profile's gpus_per_node), another grad_accum.
  core::SettingsOverrides overrides = {};
  // The best fraction of the profile's dense peak a layer's GEMMs reach (GemmParams::max_efficiency):
  // our H100 ran a bf16 GEMM at ~790 TFLOP/s against the 989 of the datasheet (docs/ARCHITECTURE.md,
  // "Simulator foundation"), 0.8.
  // Unused when the profile has measured GEMM rates (gpu.bf16_gemm_tflops_by_shape, bf16 training):
  // those set the level themselves.
  double gemm_max_efficiency = 0.8;
};

// One GEMM of a layer's pass as the simulator times it.
struct GemmCost {
  core::LayerGemm gemm;
  double tflops = 0;         // the rate it runs at
  double ns = 0;             // its FLOPs over that rate
  bool measured = false;     // the rate came from gpu.bf16_gemm_tflops_by_shape
  bool exact_shape = false;  // ... at this very shape and pass (else the nearest point, carried by the shape model)
};

// What one layer's forward or backward costs on the GPU, by op class (docs/ARCHITECTURE.md, "Simulator
// foundation": GEMMs, the fused attention, the memory-bound kernels by core::KernelClass, launches).
struct PassCost {
  std::vector<GemmCost> gemms;  // cuBLAS GEMMs (and the attention's products when its rate is not measured)
  double attention_ns = 0;      // the fused attention at its measured rate, its own traffic included
  std::array<double, core::kKernelClassCount> class_ns{};  // memory-bound kernels, by core::KernelClass
  int kernels = 0;                                         // kernels launched
  double issue_ns = 0;  // kernels x gpu.kernel_launch_ns: what the host takes to issue them
  double gemm_ns() const;
  double work_ns() const;  // GEMMs + attention + memory-bound kernels: what the GPU executes
  // What the op takes: max(work, issue). The engine's issuing thread enqueues a layer's kernels while
  // the GPU runs earlier ones, and the measured rates (GEMM table, kernel classes, attention) were timed
  // over back-to-back launches, so they hold each kernel's GPU-side cost; only a pass whose kernels
  // are shorter than the host's issue interval waits for the host (a tiny layer).
  double ns() const { return std::max(work_ns(), issue_ns); }
  // The part of ns() the host's issuing adds beyond the GPU's work.
  double exposed_issue_ns() const { return ns() - work_ns(); }
};

struct LayerCost {
  size_t layer = 0;  // index into core::ModelDesc::layers
  core::LayerKind kind = core::LayerKind::kBlock;
  PassCost fwd;
  PassCost bwd;  // with activation checkpointing, the recomputed forward's entries included
};

// Every layer's forward and backward cost for one micro-batch, with the settings simulate_step uses
// (core::resolve_settings with opt.overrides) and the scenario's profile: the numbers the simulator's
// forward and backward ops take (before the slowdowns under collectives and copies).
std::vector<LayerCost> layer_costs(const core::Scenario& s, const SimOptions& opt = {});

// Simulates one training step of the scenario at `ratio` (the CPU share of every rank's optimizer
// shard): every rank's core::plan_step plan, with the settings of core::resolve_settings. Memory counts
// the model trained for real (core::workload_buffers' kAuto), whatever `run` would train. Throws
// core::InputError for a ratio outside [0, 1] or a world the profile cannot hold.
SimPoint simulate_step(const core::Scenario& s, double ratio, const SimOptions& opt = {});

// Why the profile cannot cost the collectives of `world` ranks, `ranks_per_node` to a node (no measured curve
// and no bandwidth for the link they cross: one node's, or between nodes), or nullopt when it can. simulate_step
// throws core::InputError with it; `run` keeps its auto choices' defaults (backends/sim/choices.h).
std::optional<std::string> collective_cost_issue(const core::HardwareProfile& hw, int world, int ranks_per_node);

// One rank's CPU optimizer rate (Gparam/s, before any DMA slowdown) while a = 1..ranks_per_host ranks of
// its host run their passes at once ([a - 1]): the simulator's host model (docs/ARCHITECTURE.md, "The
// simulator: the host is shared"); the static share of each rank when the profile has no rank curve.
std::vector<double> cpu_rates_by_active(const core::CpuProfile& cpu, int threads, int ranks_per_host);

// The host model alone: the ranks of one host (one list of CPU op sizes, in elements, per rank) each
// run their ops back to back, all starting together, at the rates above (no DMA). Returns the node's
// CPU time (the last rank's end), in seconds: what `twinflow bench --cpu-ranks --profile` holds the
// measured node time to.
double predict_host_cpu_seconds(const core::CpuProfile& cpu, int threads_per_rank,
                                const std::vector<std::vector<int64_t>>& op_elems_per_rank);

// A quantity sampled beside a measured run's ops (the GPU's SM clock, power and temperature from the run's NVML
// sampler): one Chrome counter track of rank 0's process, e.g. {"SM clock", "MHz", ...}.
struct TraceCounter {
  std::string name;
  std::string unit;                                // the track's series name
  std::vector<std::pair<int64_t, double>> points;  // (ns on the trace's time axis, value), in time order
};

// Writes a Chrome/Perfetto trace (JSON, "traceEvents") of one simulated step: one process per
// rank, one thread per queue, one complete event per op. Needs record_ops and keep_plans. The file is
// written whole or not at all (core::write_output_file; `option` names the path's origin in errors).
// `counters` become counter events of process 0.
void write_chrome_trace(const SimPoint& p, const std::string& path, const std::string& option = "--trace",
                        std::span<const TraceCounter> counters = {});

// One of several consecutive steps of one rank (a measured run), for the trace of a window of steps:
// `ops` from the step's start (ops[i].op == i, one per plan op), the step beginning `offset_ns` after the
// window's first. With a carried tail a step's ops run on past the next step's start: the window shows
// which of step t's carried ops step t + 1's forward waited for.
struct TracedStep {
  int step = 0;  // 1-based, as the run numbers it
  int64_t offset_ns = 0;
  int64_t step_ns = 0;  // its time (a carried step's: its period)
  std::vector<OpTiming> ops;
  int64_t host_t0_ns = -1;  // its start on the host clock that `counter_points` samples are on (-1: unknown)
};

// Samples (host-clock ns, value) placed on the steps' time axis: a sample at t lands at offset_ns + t - host_t0_ns
// of the step whose [host_t0_ns, host_t0_ns + step_ns) holds it; samples in no step (before the first, between a
// step's end and the next start, or in a step whose start is unknown) are left out. In time order.
std::vector<std::pair<int64_t, double>> counter_points(std::span<const TracedStep> steps,
                                                       std::span<const std::pair<int64_t, double>> samples);

// The same trace over `steps` of one rank on one time axis: one thread per queue, one event per op of
// p.plans[0] named "sSTEP LABEL" with its step in the args (and the label alone), the steps' periods and p's
// ratio and world in "otherData" (what `validate --breakdown` simulates the trace at). Throws
// std::invalid_argument when p has no plan, `steps` is empty or a step's ops do not match the plan.
void write_chrome_trace(const SimPoint& p, const std::vector<TracedStep>& steps, const std::string& path,
                        const std::string& option = "--trace", std::span<const TraceCounter> counters = {});

// Per rank, the op ids per queue in the order the simulation ran them (needs record_ops); equal to
// core::plan_queue_order of its plan.
std::vector<QueueOrder> executed_queue_order(const SimPoint& p);

}  // namespace tf::backend::sim
