// The checks and records training code shares around the checkpoint store.
#include "core/training_checkpoint.h"

#include "core/error.h"
#include "core/optim/optimizer.h"

namespace tf::core {

bool checkpoint_due(int64_t every_steps, int64_t step, int64_t last_step) {
  return step == last_step || (every_steps > 0 && step % every_steps == 0);
}

CheckpointMeta checkpoint_meta(const TrainingPosition& pos, const CheckpointRecord& record) {
  CheckpointMeta m;
  m.step = pos.step;
  m.optimizer_step = pos.optimizer_step;
  m.loss_scaler = pos.loss_scaler;
  m.data = {record.seed, pos.step + 1, record.micro_shards};
  m.seed = record.seed;
  m.layout = record.layout;
  m.scenario_text = record.scenario_text;
  m.ds_config_text = record.ds_config_text;
  return m;
}

TrainingPosition check_resume(const CheckpointReader& reader, const ResumeExpectation& run) {
  const CheckpointMeta& m = reader.meta();
  const std::string where = "--resume " + reader.dir().string();
  if (run.model) reader.expect_model(*run.model);
  reader.expect_optimizer(run.optimizer);
  if (m.data.seed != run.seed)
    throw InputError(where + ": written by a run with seed " + std::to_string(m.data.seed) + "; this run's is " +
                     std::to_string(run.seed) + ", so its data would differ; set workload.seed: " +
                     std::to_string(m.data.seed) + " to continue that run");
  if (m.data.micro_shards != run.micro_shards)
    throw InputError(where + ": written by a run whose global batch was cut into " +
                     std::to_string(m.data.micro_shards) +
                     " micro-shards (ranks x grad_accum); this run's is cut into " + std::to_string(run.micro_shards) +
                     ", so its batches would differ; keep ranks x grad_accum equal (change grad_accum with the world)");
  if (m.step >= run.total_steps)
    throw InputError(where + ": it holds step " + std::to_string(m.step) + " and training.steps is " +
                     std::to_string(run.total_steps) + ": nothing is left to train; raise training.steps (or --steps)");
  TrainingPosition pos;
  pos.step = m.step;
  pos.optimizer_step = m.optimizer_step;
  pos.loss_scaler = run.loss_scaler;
  pos.loss_scaler.scale = m.loss_scaler.scale;
  pos.loss_scaler.clean = m.loss_scaler.clean;
  return pos;
}

SegmentArrays split_segments(std::span<const std::vector<float>> arrays, int64_t gpu_elems) {
  SegmentArrays s;
  for (const std::vector<float>& a : arrays) {
    if (gpu_elems < 0 || size_t(gpu_elems) > a.size())
      throw InputError("checkpoint: a GPU segment of " + std::to_string(gpu_elems) + " elements in an array of " +
                       std::to_string(a.size()));
    s.gpu.emplace_back(a.data(), size_t(gpu_elems));
    s.cpu.emplace_back(a.data() + gpu_elems, a.size() - size_t(gpu_elems));
  }
  return s;
}

}  // namespace tf::core
