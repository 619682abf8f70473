// Twin-Flow's training metrics: what one rank measured in one step (StepSample), and publish(), which turns it
// into the Prometheus metrics the dashboards read. No CUDA here: the real backend (`twinflow run`) and the
// simulator (`twinflow simulate --metrics-port`) both fill a StepSample per step and call publish().
//
// Use from a training loop (one process per rank; each serves its own /metrics):
//
//   tf::metrics::Registry registry;
//   tf::metrics::MetricsServer server(registry, {.address = "127.0.0.1", .port = port});   // http_server.h
//   const tf::metrics::RunLabels labels{.rank = rank, .scenario = scenario.name, .backend = "cuda"};
//   for (int64_t step = 1; step <= steps; ++step) {
//     ... run the step, timing it with CUDA events / the host clock ...
//     tf::metrics::StepSample s;
//     s.step = step;
//     s.step_seconds = 0.412;
//     s.phase(tf::metrics::Phase::kForward) = 0.120;          // phases not measured stay NaN (not published)
//     s.busy(tf::metrics::QueueId::kCompute) = 0.91;          // busy time / step time, 0..1
//     s.offload_ratio = 0.4;                                  // CPU share of the optimizer shard
//     s.memory = {{"gpu", "params", bytes}, {"host", "optimizer", bytes}};
//     s.pcie_d2h_bytes = ...; s.pcie_h2d_bytes = ...;         // moved in this step
//     s.loss = loss;  s.loss_scale = scaler.scale();  s.skipped = overflow;  s.tokens = tokens_this_rank;
//     s.learning_rate = decision.lr;                          // NaN (the default): not published
//     tf::metrics::publish(registry, s, labels);
//   }
//
// publish() is thread-safe (the server reads the registry concurrently) and cheap (a few map look-ups).
//
// Before the first step, publish_run_config() sets the build and what the run is set up to do, so a scrape
// says what runs from the start:
//   twinflow_build_info{version,backend,compiler}  gauge, always 1 (publish() sets it too)
//   twinflow_config_info{precision,optimizer,offload_device}  gauge, always 1
//   twinflow_config_world_size, twinflow_config_zero_stage, twinflow_config_micro_batch,
//   twinflow_config_grad_accum, twinflow_config_offload_ratio  gauges
//
// Metrics (every sample carries rank and scenario labels; base units; ratios in 0..1):
//   twinflow_build_info{version,backend,compiler}  gauge, always 1
//   twinflow_steps_total                           counter: steps published
//   twinflow_last_step                             gauge: StepSample::step of the last sample
//   twinflow_step_seconds                          histogram: step duration
//   twinflow_phase_seconds{phase}                  histogram: time during which the phase's work ran (Phase)
//   twinflow_queue_busy_ratio{queue}               gauge: busy fraction of the last step per queue (QueueId)
//   twinflow_offload_ratio                         gauge: CPU share of the rank's optimizer shard
//   twinflow_memory_bytes{device,kind}             gauge: bytes allocated (MemoryUse)
//   twinflow_pcie_bytes_total{direction}           counter: bytes over PCIe, direction d2h or h2d
//   twinflow_loss                                  gauge: last loss (NaN when the backend has none)
//   twinflow_loss_scale                            gauge: loss scale of the last step (1 without scaling)
//   twinflow_learning_rate                         gauge: lr of the last step's update (its lr schedule's)
//   twinflow_skipped_steps_total                   counter: steps skipped (fp16 overflow)
//   twinflow_speculated_steps_total                counter: steps whose CPU optimizer speculated
//   twinflow_failed_speculations_total             counter: ... whose speculation did not hold
//   twinflow_tokens_total                          counter: tokens this rank processed
//   twinflow_gpu_sm_clock_hertz                    gauge: the GPU's SM clock in the last step (median of its samples)
//   twinflow_gpu_power_watts                       gauge: the GPU's mean power in the last step
//   twinflow_gpu_power_limit_watts                 gauge: the GPU's enforced power limit
//   twinflow_gpu_temperature_celsius               gauge: the GPU's largest die temperature in the last step
//   twinflow_gpu_power_capped_ratio                gauge: share of the last step's samples held by the power cap
//   (the twinflow_gpu_* gauges come from `twinflow run` only, where NVML answers: metrics/gpu_telemetry.h)
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "metrics/registry.h"

namespace tf::metrics {

// Phases of a step, the `phase` label. A phase's duration is the time during which at least one of its
// operations ran on this rank (overlapping operations count once), not the span from first start to last end.
enum class Phase : uint8_t {
  kForward,       // forward compute of every layer and micro-batch
  kBackward,      // backward compute (recomputation included)
  kGpuOptimizer,  // the fused optimizer over the GPU segment (and its gradient statistics pass)
  kCpuOptimizer,  // the SIMD optimizer over the CPU segment (and its gradient statistics pass)
  kD2H,           // gradients of the CPU segment, device to host
  kH2D,           // updated low-precision parameters of the CPU segment, host to device
  kAllGather,     // parameter all-gathers
  kReduceScatter  // gradient reduction: reduce-scatter (ZeRO-2/3) or all-reduce (ZeRO-1)
};
inline constexpr int kPhaseCount = 8;
const char* phase_name(Phase p);  // "forward", "backward", "gpu_optimizer", "cpu_optimizer", "d2h", "h2d",
                                  // "allgather", "reduce_scatter"

// Work queues, the `queue` label (the same order as core::Queue).
enum class QueueId : uint8_t {
  kCompute,  // the GPU compute stream
  kComm,     // the collective stream (NCCL)
  kD2H,      // the device-to-host copy engine
  kH2D,      // the host-to-device copy engine
  kCpu       // the CPU optimizer threads
};
inline constexpr int kQueueCount = 5;
const char* queue_name(QueueId q);  // "compute", "comm", "d2h", "h2d", "cpu"

// Memory of one kind on one device. device: "gpu" (this rank's GPU) or "host" (its pinned host memory);
// kind: what the bytes hold, e.g. "params", "grads", "optimizer", "activations", "comm", "workspace", "staging".
struct MemoryUse {
  std::string device;
  std::string kind;
  int64_t bytes = 0;
};

inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

template <size_t N>
constexpr std::array<double, N> nan_array() {
  std::array<double, N> a{};
  for (double& x : a) x = kNotMeasured;
  return a;
}

// What one rank measured in one training step. Durations in seconds (wall time in a real run, simulated time
// in the simulator). NaN marks a value that was not measured: it is not published.
struct StepSample {
  int64_t step = 0;                                                          // 1-based index of the finished step
  double step_seconds = 0;                                                   // the whole step, >= 0
  std::array<double, kPhaseCount> phase_seconds = nan_array<kPhaseCount>();  // by Phase
  std::array<double, kQueueCount> queue_busy = nan_array<kQueueCount>();     // by QueueId, busy/step in 0..1
  double offload_ratio = kNotMeasured;                                       // 0..1
  std::vector<MemoryUse> memory;                                             // each (device, kind) once
  int64_t pcie_d2h_bytes = 0;                                                // moved during this step, >= 0
  int64_t pcie_h2d_bytes = 0;
  double loss = kNotMeasured;  // published as NaN when not measured (Grafana draws a gap)
  double loss_scale = 1;       // fp16 dynamic loss scale used in this step; 1 without loss scaling
  double learning_rate = kNotMeasured;  // the lr of this step's update (core::lr_at); NaN: not published
  bool skipped = false;        // the optimizer step was skipped (overflow)
  bool speculated = false;     // the CPU optimizer's speculative updates ran (docs/ARCHITECTURE.md, "Speculation")
  bool speculation_failed = false;  // ... and did not hold (the step clipped or was skipped: redone)
  int64_t tokens = 0;               // tokens this rank processed in this step
  // The GPU during the step (metrics/gpu_telemetry.h; the real backend only, NaN: not published): the SM clock's
  // median, the mean power, the enforced power limit, the largest die temperature, and the share of the samples
  // whose clock the software power cap held.
  double gpu_sm_clock_hz = kNotMeasured;
  double gpu_power_watts = kNotMeasured;
  double gpu_power_limit_watts = kNotMeasured;
  double gpu_temperature_celsius = kNotMeasured;
  double gpu_power_capped_ratio = kNotMeasured;

  double& phase(Phase p) { return phase_seconds[size_t(p)]; }
  double phase(Phase p) const { return phase_seconds[size_t(p)]; }
  double& busy(QueueId q) { return queue_busy[size_t(q)]; }
  double busy(QueueId q) const { return queue_busy[size_t(q)]; }
};

// The labels every sample carries, plus what twinflow_build_info says.
struct RunLabels {
  int rank = 0;
  std::string scenario;          // the scenario's name
  std::string backend = "none";  // twinflow_build_info only: "cuda", "sim", ...
};

// What a run is set up to do (the commands fill it from the scenario, as core::settings_report shows it).
struct RunConfig {
  int world_size = 1;
  int zero_stage = 3;
  int64_t micro_batch = 1;
  int64_t grad_accum = 1;
  double offload_ratio = 0;    // the CPU share asked for (a sweep: the ratio being run)
  std::string precision;       // "bf16", "fp16", "fp32"
  std::string optimizer;       // "adamw", ...
  std::string offload_device;  // "none", "cpu"
};

// Sets twinflow_build_info and the twinflow_config_* gauges: call it once, before the first step (and again
// when the configuration changes, e.g. a sweep's next ratio). Thread-safe like publish().
void publish_run_config(Registry& registry, const RunLabels& labels, const RunConfig& config);

// Updates every metric above from one sample: counters are incremented (steps by 1, pcie and tokens by the
// sample's bytes and tokens, skipped by 0 or 1), histograms observe the durations, gauges are set. Ratios are
// clamped to [0, 1]. std::invalid_argument (naming the field) for a negative or non-finite step_seconds, or
// negative bytes or tokens.
void publish(Registry& registry, const StepSample& sample, const RunLabels& labels);

// Bucket bounds of the duration histograms: 100 us to 100 s, 5 per decade (1, 1.6, 2.5, 4, 6.3).
const std::vector<double>& duration_buckets();

// The version twinflow_build_info reports (the CMake project version).
const char* build_version();

}  // namespace tf::metrics
