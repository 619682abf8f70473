// The simulator's timeline as step metrics: one StepSample per simulated rank from a SimPoint.
#include "metrics/sim_samples.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "core/settings.h"

namespace tf::metrics {

namespace {

using core::OpKind;

std::optional<Phase> phase_of(const core::Op& op) {
  switch (op.kind) {
    case OpKind::kForward: return Phase::kForward;
    case OpKind::kBackward: return Phase::kBackward;
    case OpKind::kAllGather: return Phase::kAllGather;
    case OpKind::kReduceScatter:
    case OpKind::kAllReduce: return Phase::kReduceScatter;
    case OpKind::kD2HGrad: return Phase::kD2H;
    case OpKind::kH2DParam: return Phase::kH2D;
    case OpKind::kGpuOptimizer: return Phase::kGpuOptimizer;
    case OpKind::kCpuOptimizer:
    case OpKind::kCpuCommit: return Phase::kCpuOptimizer;
    case OpKind::kGradStats: return op.queue == core::Queue::kCpu ? Phase::kCpuOptimizer : Phase::kGpuOptimizer;
    case OpKind::kNormAllReduce: return std::nullopt;
  }
  return std::nullopt;
}

QueueId queue_id(core::Queue q) {
  switch (q) {
    case core::Queue::kCompute: return QueueId::kCompute;
    case core::Queue::kComm: return QueueId::kComm;
    case core::Queue::kD2H: return QueueId::kD2H;
    case core::Queue::kH2D: return QueueId::kH2D;
    case core::Queue::kCpu: return QueueId::kCpu;
  }
  return QueueId::kCompute;
}

// Total length of the union of [start, end) intervals.
int64_t covered_ns(std::vector<std::pair<int64_t, int64_t>>& iv) {
  std::sort(iv.begin(), iv.end());
  int64_t total = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [s, e] : iv) {
    if (open && s <= cur_end) {
      cur_end = std::max(cur_end, e);
      continue;
    }
    if (open) total += cur_end - cur_start;
    cur_start = s;
    cur_end = e;
    open = true;
  }
  if (open) total += cur_end - cur_start;
  return total;
}

}  // namespace

StepSample timeline_sample(const core::StepPlan& plan, const std::vector<backend::OpInterval>& ops, int64_t step_ns,
                           const core::RankMemory& m) {
  if (ops.size() != plan.ops.size())
    throw std::invalid_argument("timeline_sample: " + std::to_string(ops.size()) + " intervals for a plan of " +
                                std::to_string(plan.ops.size()) + " ops");
  StepSample s;
  std::array<std::vector<std::pair<int64_t, int64_t>>, kPhaseCount> intervals;
  std::array<int64_t, core::kQueueCount> busy{};
  for (const backend::OpInterval& o : ops) {
    const core::Op& op = plan.ops.at(o.op);
    if (const auto ph = phase_of(op)) intervals[size_t(*ph)].emplace_back(o.start_ns, o.end_ns);
    busy[size_t(op.queue)] += o.end_ns - o.start_ns;
  }
  for (int ph = 0; ph < kPhaseCount; ++ph)
    s.phase_seconds[size_t(ph)] = double(covered_ns(intervals[size_t(ph)])) * 1e-9;
  for (int q = 0; q < core::kQueueCount; ++q)
    s.busy(queue_id(core::Queue(q))) = step_ns > 0 ? double(busy[size_t(q)]) / double(step_ns) : 0;
  s.memory = {{"gpu", "params", m.gpu_params},       {"gpu", "grads", m.gpu_grads},
              {"gpu", "optimizer", m.gpu_optimizer}, {"gpu", "activations", m.gpu_activations},
              {"gpu", "comm", m.gpu_comm},           {"gpu", "workspace", m.gpu_workspace},
              {"gpu", "context", m.gpu_context},     {"host", "optimizer", m.host_optimizer},
              {"host", "staging", m.host_staging},   {"host", "workspace", m.host_workspace}};
  return s;
}

std::vector<StepSample> sim_step_samples(const backend::sim::SimPoint& p, const core::Scenario& sc, int max_ranks) {
  const size_t n = std::min(p.ranks.size(), size_t(std::max(max_ranks, 0)));
  if (p.plans.size() < n)
    throw std::invalid_argument("sim_step_samples: the SimPoint has no plans; simulate with SimOptions::keep_plans");
  const core::RunSettings settings = core::resolve_settings(sc, {.world = p.world});
  const core::ModelDesc& model = settings.model;
  std::vector<StepSample> out;
  for (size_t r = 0; r < n; ++r) {
    const core::StepPlan& plan = p.plans[r];
    const backend::sim::RankTiming& t = p.ranks[r];
    if (t.ops.size() != plan.ops.size())
      throw std::invalid_argument("sim_step_samples: rank " + std::to_string(r) +
                                  " has no per-op timings; simulate with SimOptions::record_ops");
    std::vector<backend::OpInterval> iv;
    iv.reserve(t.ops.size());
    for (const backend::sim::OpTiming& ot : t.ops) iv.push_back({ot.op, ot.start_ns, ot.end_ns});
    StepSample s = timeline_sample(plan, iv, p.step_ns, p.memory);
    s.step_seconds = double(p.step_ns) * 1e-9;
    s.offload_ratio = p.ratio;
    s.pcie_d2h_bytes = plan.pcie_d2h_bytes;
    s.pcie_h2d_bytes = plan.pcie_h2d_bytes;
    s.loss_scale = settings.loss_scaler.scale;
    s.tokens = plan.config.micro_batch * plan.config.grad_accum * model.tokens_per_sample();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tf::metrics
