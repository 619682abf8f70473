// Twin-Flow's training metrics: StepSample -> the Prometheus metrics the dashboards read.
#include "metrics/step_metrics.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#ifndef TWINFLOW_VERSION
#define TWINFLOW_VERSION "unknown"
#endif

namespace tf::metrics {

namespace {

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

double clamp01(double v) { return std::clamp(v, 0.0, 1.0); }

void check_count(int64_t v, const char* field) {
  if (v < 0)
    throw std::invalid_argument(std::string("StepSample::") + field + " = " + std::to_string(v) +
                                ": a count of what happened in the step cannot be negative");
}

const std::vector<std::string> kRankScenario = {"rank", "scenario"};

std::vector<std::string> with_labels(std::initializer_list<std::string> names) {
  std::vector<std::string> n = kRankScenario;
  n.insert(n.end(), names);
  return n;
}

// twinflow_build_info: one place for publish() and publish_run_config().
void publish_build_info(Registry& reg, const RunLabels& labels) {
  reg.gauge("twinflow_build_info", "Build of the process publishing these metrics (value 1).",
            with_labels({"version", "backend", "compiler"}))
      .with({std::to_string(labels.rank), labels.scenario, build_version(), labels.backend, compiler()})
      .set(1);
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kGpuOptimizer: return "gpu_optimizer";
    case Phase::kCpuOptimizer: return "cpu_optimizer";
    case Phase::kD2H: return "d2h";
    case Phase::kH2D: return "h2d";
    case Phase::kAllGather: return "allgather";
    case Phase::kReduceScatter: return "reduce_scatter";
  }
  return "unknown";
}

const char* queue_name(QueueId q) {
  switch (q) {
    case QueueId::kCompute: return "compute";
    case QueueId::kComm: return "comm";
    case QueueId::kD2H: return "d2h";
    case QueueId::kH2D: return "h2d";
    case QueueId::kCpu: return "cpu";
  }
  return "unknown";
}

const std::vector<double>& duration_buckets() {
  static const std::vector<double> b = decade_buckets(1e-4, 100, 5);
  return b;
}

const char* build_version() { return TWINFLOW_VERSION; }

void publish_run_config(Registry& reg, const RunLabels& labels, const RunConfig& c) {
  if (!std::isfinite(c.offload_ratio) || c.offload_ratio < 0 || c.offload_ratio > 1)
    throw std::invalid_argument("RunConfig::offload_ratio = " + format_value(c.offload_ratio) + ": allowed [0, 1]");
  const LabelValues rs = {std::to_string(labels.rank), labels.scenario};
  publish_build_info(reg, labels);
  reg.gauge("twinflow_config_info", "What the run is set up to do (value 1): precision, optimizer, offload device.",
            with_labels({"precision", "optimizer", "offload_device"}))
      .with({rs[0], rs[1], c.precision, c.optimizer, c.offload_device})
      .set(1);
  const struct {
    const char* name;
    const char* help;
    double value;
  } gauges[] = {
      {"twinflow_config_world_size", "Ranks of the run (data-parallel world size).", double(c.world_size)},
      {"twinflow_config_zero_stage", "ZeRO stage (1, 2 or 3).", double(c.zero_stage)},
      {"twinflow_config_micro_batch", "Samples per GPU per micro-step.", double(c.micro_batch)},
      {"twinflow_config_grad_accum", "Micro-steps per optimizer step (gradient accumulation).", double(c.grad_accum)},
      {"twinflow_config_offload_ratio", "Share of each rank's optimizer shard the run puts on the CPU (asked for).",
       c.offload_ratio},
  };
  for (const auto& g : gauges) reg.gauge(g.name, g.help, kRankScenario).with(rs).set(g.value);
}


// The twinflow_gpu_* gauges, each where the sample has it (the real backend with NVML).
static void publish_gpu_telemetry(Registry& reg, const StepSample& s, const LabelValues& rs) {
  const struct {
    const char* name;
    const char* help;
    double value;
  } gauges[] = {
      {"twinflow_gpu_sm_clock_hertz", "The GPU's SM clock in the last step (the median of its samples).",
       s.gpu_sm_clock_hz},
      {"twinflow_gpu_power_watts",
       "The GPU's mean power in the last step (NVML's power readings, each its own average over about a second).",
       s.gpu_power_watts},
      {"twinflow_gpu_power_limit_watts", "The GPU's enforced power limit.", s.gpu_power_limit_watts},
      {"twinflow_gpu_temperature_celsius", "The GPU's largest die temperature in the last step.",
       s.gpu_temperature_celsius},
      {"twinflow_gpu_power_capped_ratio",
       "Share of the last step's samples whose SM clock the GPU's software power cap held.",
       s.gpu_power_capped_ratio},
  };
  for (const auto& g : gauges)
    if (std::isfinite(g.value)) reg.gauge(g.name, g.help, kRankScenario).with(rs).set(g.value);
}
void publish(Registry& reg, const StepSample& s, const RunLabels& labels) {
  if (!std::isfinite(s.step_seconds) || s.step_seconds < 0)
    throw std::invalid_argument("StepSample::step_seconds = " + format_value(s.step_seconds) +
                                ": a step's duration must be finite and >= 0");
  check_count(s.pcie_d2h_bytes, "pcie_d2h_bytes");
  check_count(s.pcie_h2d_bytes, "pcie_h2d_bytes");
  check_count(s.tokens, "tokens");

  const std::string rank = std::to_string(labels.rank);
  const LabelValues rs = {rank, labels.scenario};
  const std::vector<std::string>& kRs = kRankScenario;
  const auto with = with_labels;

  publish_build_info(reg, labels);
  reg.counter("twinflow_steps_total", "Training steps finished.", kRs).with(rs).inc();
  reg.gauge("twinflow_last_step", "Index (1-based) of the last finished step.", kRs).with(rs).set(double(s.step));
  reg.histogram("twinflow_step_seconds", "Duration of a training step (simulated time in twinflow simulate).",
                duration_buckets(), kRs)
      .with(rs)
      .observe(s.step_seconds);

  auto& phases = reg.histogram(
      "twinflow_phase_seconds",
      "Time during which at least one operation of the phase ran on the rank, per step (simulated time in "
      "twinflow simulate).",
      duration_buckets(), with({"phase"}));
  for (int p = 0; p < kPhaseCount; ++p)
    if (!std::isnan(s.phase_seconds[size_t(p)]))
      phases.with({rank, labels.scenario, phase_name(Phase(p))}).observe(s.phase_seconds[size_t(p)]);

  auto& busy = reg.gauge("twinflow_queue_busy_ratio",
                         "Fraction of the last step during which the queue (GPU compute stream, collective stream, "
                         "copy direction, CPU optimizer threads) was busy.",
                         with({"queue"}));
  for (int q = 0; q < kQueueCount; ++q)
    if (!std::isnan(s.queue_busy[size_t(q)]))
      busy.with({rank, labels.scenario, queue_name(QueueId(q))}).set(clamp01(s.queue_busy[size_t(q)]));

  if (!std::isnan(s.offload_ratio))
    reg.gauge("twinflow_offload_ratio", "Share of the rank's optimizer shard updated on the CPU (Twin-Flow ratio).",
              kRs)
        .with(rs)
        .set(clamp01(s.offload_ratio));

  auto& mem = reg.gauge("twinflow_memory_bytes", "Memory the rank holds, by device (gpu, host) and kind.",
                        with({"device", "kind"}));
  for (const MemoryUse& m : s.memory) {
    check_count(m.bytes, "memory[].bytes");
    mem.with({rank, labels.scenario, m.device, m.kind}).set(double(m.bytes));
  }

  auto& pcie =
      reg.counter("twinflow_pcie_bytes_total", "Bytes moved over PCIe, by direction (d2h, h2d).", with({"direction"}));
  pcie.with({rank, labels.scenario, "d2h"}).inc(double(s.pcie_d2h_bytes));
  pcie.with({rank, labels.scenario, "h2d"}).inc(double(s.pcie_h2d_bytes));

  reg.gauge("twinflow_loss", "Training loss of the last step (NaN when the backend computes none).", kRs)
      .with(rs)
      .set(s.loss);
  reg.gauge("twinflow_loss_scale", "Loss scale of the last step (1 without loss scaling).", kRs)
      .with(rs)
      .set(s.loss_scale);
  if (std::isfinite(s.learning_rate))
    reg.gauge("twinflow_learning_rate", "Learning rate of the last step's update (its lr schedule's).", kRs)
        .with(rs)
        .set(s.learning_rate);
  reg.counter("twinflow_skipped_steps_total", "Optimizer steps skipped because of non-finite gradients.", kRs)
      .with(rs)
      .inc(s.skipped ? 1 : 0);
  reg.counter("twinflow_speculated_steps_total",
              "Steps whose CPU optimizer updated speculatively during backward (clipping or loss scaling on).", kRs)
      .with(rs)
      .inc(s.speculated ? 1 : 0);
  reg.counter("twinflow_failed_speculations_total",
              "Speculated steps that clipped or were skipped, so the speculative CPU updates were redone.", kRs)
      .with(rs)
      .inc(s.speculation_failed ? 1 : 0);
  reg.counter("twinflow_tokens_total", "Tokens the rank processed.", kRs).with(rs).inc(double(s.tokens));
  publish_gpu_telemetry(reg, s, rs);
}

}  // namespace tf::metrics
