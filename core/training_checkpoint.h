// What training code shares around the checkpoint store (docs/ARCHITECTURE.md, "Checkpoints"): when a
// run saves, what a save records besides the arrays, and the checks a resume makes before it loads.
// The functional simulator and `twinflow run` (the CUDA engine) both call these.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/model.h"
#include "core/optim/optimizer.h"
#include "core/step_decision.h"

namespace tf::core {

// Where training stands after a step: what a resumed run continues from.
struct TrainingPosition {
  int64_t step = 0;            // steps completed (the next one is step + 1)
  int64_t optimizer_step = 0;  // updates applied (fp16 skipped steps excluded)
  LossScaler loss_scaler;      // as it stands after `step`
};

// Whether a run that ends after `last_step` saves after `step`: every `every_steps` steps (0: none in
// between) and after the last one.
bool checkpoint_due(int64_t every_steps, int64_t step, int64_t last_step);

// What a run records in every checkpoint besides its position and arrays.
struct CheckpointRecord {
  uint64_t seed = 0;         // the run's seed: initial weights, the sampler, the synthetic workload
  int64_t micro_shards = 0;  // the global batch's micro-shards (world x grad_accum): the sampler's index space
  WrittenLayout layout;      // world, stage, ratio (informational)
  std::string scenario_text;
  std::string ds_config_text;
};
// The manifest's meta of a save after pos.step: the data position is (seed, pos.step + 1, micro_shards).
CheckpointMeta checkpoint_meta(const TrainingPosition& pos, const CheckpointRecord& record);

// What a run resuming from a checkpoint must agree with.
struct ResumeExpectation {
  const ModelDesc* model = nullptr;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  uint64_t seed = 0;
  int64_t micro_shards = 0;
  int64_t total_steps = 0;  // training.steps: the step the resumed run ends after
  LossScaler loss_scaler;   // the run's configured scaler (its growth window and minimum are kept)
};
// Checks `reader`'s checkpoint against the run before anything is loaded and returns the position to
// continue from. InputError naming the checkpoint and what differs: another model (what differs),
// another optimizer, another seed or micro-shard count (the data would differ from the uninterrupted
// run's), or no steps left (meta.step >= total_steps). The scaler's scale and clean-step counter come
// from the checkpoint; its window and minimum from the run.
TrainingPosition check_resume(const CheckpointReader& reader, const ResumeExpectation& run);

// Splits a rank's assembled arrays (core::checkpoint_arrays order: master, then the states) at the
// Twin-Flow boundary: the GPU segment is [0, gpu_elems), the CPU segment [gpu_elems, elems).
struct SegmentArrays {
  std::vector<std::span<const float>> gpu, cpu;
};
SegmentArrays split_segments(std::span<const std::vector<float>> arrays, int64_t gpu_elems);

}  // namespace tf::core
