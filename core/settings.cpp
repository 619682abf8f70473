// Scenario -> step settings, in one place (see settings.h).
#include "core/settings.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/optim/grad_stats.h"
#include "core/strings.h"

namespace tf::core {

DType grad_dtype_of(Precision p) {
  switch (p) {
    case Precision::kBF16: return DType::kBF16;
    case Precision::kFP16: return DType::kF16;
    case Precision::kFP32: return DType::kF32;
  }
  return DType::kBF16;
}

namespace {

// fp16: DeepSpeed's dynamic loss scaling (or its static scale); otherwise a fixed scale of 1.
LossScaler loss_scaler_of(const TrainingConfig& t) {
  if (t.precision != Precision::kFP16) return {1.0, 0, 1.0, 0};
  const LossScaleConfig& ls = t.loss_scaling;
  return {ls.initial_loss_scale(), ls.dynamic() ? ls.loss_scale_window : 0, ls.min_loss_scale, 0};
}

WorkloadType workload_of(const Scenario& sc, const SettingsOverrides& o) {
  WorkloadConfig w = sc.workload;
  if (o.workload) w.type = *o.workload;
  const WorkloadType resolved = w.resolved(sc.model.type);
  if (resolved == WorkloadType::kMlp && sc.model.type != ModelType::kMlp)
    throw InputError("workload mlp: the model is a decoder; allowed: synthetic, decoder");
  if (resolved == WorkloadType::kDecoder && sc.model.type != ModelType::kDecoder)
    throw InputError("workload decoder: the model is an MLP; allowed: synthetic, mlp");
  return resolved;
}

}  // namespace

int ranks_per_node(const Scenario& s, int world) {
  return std::max(1, world == s.cluster.world_size() ? s.cluster.gpus_per_node : s.cluster.hardware.gpus_per_node);
}

RunSettings resolve_settings(const Scenario& sc, const SettingsOverrides& o) {
  RunSettings s;
  s.model = describe_model(sc.model);
  s.world = o.world.value_or(sc.cluster.world_size());
  if (s.world < 1 || s.world > kMaxWorld)
    throw InputError(o.world_from + " " + std::to_string(s.world) + ": ranks must be in [1, " +
                     std::to_string(kMaxWorld) + "]");
  s.ranks_per_node = o.ranks_per_node.value_or(ranks_per_node(sc, s.world));
  if (o.ranks_per_node && (s.ranks_per_node < 1 || s.ranks_per_node > s.world))
    throw InputError("ranks per node " + std::to_string(s.ranks_per_node) + " (LOCAL_WORLD_SIZE) must be in [1, " +
                     std::to_string(s.world) + "], the world size");
  const int grad_accum = o.grad_accum.value_or(int(sc.training.grad_accum));
  if (grad_accum < 1 || grad_accum > kMaxBatch)
    throw InputError(o.grad_accum_from + " " + std::to_string(grad_accum) + ": micro-batches per step must be in [1, " +
                     std::to_string(kMaxBatch) + "]");
  s.partition = {sc.zero.stage, s.world, int64_t(kStatsTile)};
  const DType grad = grad_dtype_of(sc.training.precision);
  s.policy =
      make_step_policy(sc.optimizer.kind, sc.optimizer.hp, sc.training.gradient_clipping, grad, sc.optimizer.schedule);
  const int64_t speculation = o.speculation_bytes.value_or(sc.training.speculation_bytes.value_or(kSpeculationAuto));
  if (speculation < 0 && speculation != kSpeculationMax && speculation != kSpeculationAuto)
    throw InputError("speculation must be auto, max or >= 0 bytes, got " + std::to_string(speculation));
  s.speculation_auto = speculation == kSpeculationAuto && !o.speculation_layers;
  s.step = make_step_config(s.policy, grad, sc.training.micro_batch, grad_accum, sc.training.activation_checkpointing,
                            speculation == kSpeculationAuto ? kSpeculationMax : speculation);
  s.step.speculation_layers = o.speculation_layers.value_or(kEveryEligibleLayer);
  if (s.step.speculation_layers < kEveryEligibleLayer)
    throw InputError("speculated layers must be >= 0, got " + std::to_string(s.step.speculation_layers));
  s.step.staging_slots = o.staging_slots.value_or(kStagingAuto);
  s.step.carry_tail = o.carry_tail.value_or(sc.training.carry_tail);
  s.step.ring_forward_order = o.ring_forward_order.value_or(sc.training.ring_forward_order);
  const CpuOrderSetting order = o.cpu_order.value_or(CpuOrderSetting{sc.training.cpu_order_auto, {}});
  check_cpu_pass_order(order.order, "the CPU pass order");
  s.cpu_order_auto = order.automatic;
  s.step.cpu_order = order.order;
  if (s.step.staging_slots != kStagingAuto) check_staging_slots(s.step.staging_slots);
  s.loss_scaler = loss_scaler_of(sc.training);
  s.workload = workload_of(sc, o);
  s.seed = sc.workload.seed;
  s.data_train = sc.data.train;
  s.init_from = sc.init.from;
  s.cpu_threads = o.cpu_threads.value_or(sc.cluster.cpu_cores_per_gpu);
  if (s.cpu_threads < 1) throw InputError("CPU optimizer threads must be >= 1, got " + std::to_string(s.cpu_threads));
  s.unnamed_gpu = unnamed_gpu_memory(sc.cluster.hardware.gpu, s.world);
  s.gpu_headroom = sc.training.gpu_headroom;
  s.host_reserve = sc.training.host_reserve;
  return s;
}

void check_simulation_size(const Scenario& sc, const SettingsOverrides& o) {
  const int64_t world = o.world.value_or(sc.cluster.world_size());
  const int64_t grad_accum = o.grad_accum.value_or(sc.training.grad_accum);
  const std::optional<std::string> issue = simulation_size_issue(sc, world, grad_accum);
  if (!issue) return;
  const std::string world_key = o.world ? o.world_from : "cluster.nodes x gpus_per_node";
  const std::string accum_key = o.grad_accum ? o.grad_accum_from : "training.grad_accum";
  const std::string first = o.world           ? o.world_from + " " + std::to_string(world)
                            : o.grad_accum    ? o.grad_accum_from + " " + std::to_string(grad_accum)
                            : sc.file.empty() ? std::string("the scenario")
                                              : printable(sc.file.string());
  throw InputError(first + ": " + *issue + "; reduce " + world_key + " or " + accum_key);
}

}  // namespace tf::core
