// `twinflow run`'s checkpoints (docs/ARCHITECTURE.md, "Checkpoints"): the engine's optimizer state
// saved by this rank's core::CheckpointWriter (a pinned snapshot, then the writer's thread while
// training goes on), a synchronous save when a stop signal ends the run, and the resume.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "apps/twinflow/checkpoint_cli.h"
#include "apps/twinflow/stop_signals.h"
#include "backends/cuda/engine.h"
#include "core/checkpoint.h"
#include "core/scenario.h"
#include "core/settings.h"

namespace tf::app {

struct RunCheckpointOptions {
  core::CheckpointConfig config;                // the scenario's dir, every_steps, keep (dir empty: no saves)
  std::optional<std::filesystem::path> resume;  // --resume's checkpoint
  ScenarioTexts texts;                          // recorded in every manifest
  int64_t total_steps = 0;                      // the run ends after this step
  int rank = 0;
  double ratio = 0;
  // The ranks' AND for the writer's phases (the rendezvous's all_ok on its checkpoint channel); empty
  // with one rank.
  core::CheckpointBarrier barrier;
  // The ranks' AND of "go on" after each step (all_ok on the stop channel), so that a signal that
  // reached one rank stops every rank after the same step; empty with one rank.
  std::function<bool(bool)> continue_vote;
  const StopSignals* signals = nullptr;  // null: no stop on signals
};

// One rank's checkpoints. The constructor resumes the engine when asked (before the first step).
class RunCheckpoints {
 public:
  RunCheckpoints(backend::cuda::Engine& engine, const core::RunSettings& settings, RunCheckpointOptions options);
  ~RunCheckpoints();
  RunCheckpoints(const RunCheckpoints&) = delete;
  RunCheckpoints& operator=(const RunCheckpoints&) = delete;

  // The first step to train: 1, or the resumed checkpoint's step + 1.
  int64_t first_step() const { return first_step_; }
  // After `step`: saves when due (in the background; after the last step or on a stop, synchronously)
  // and returns true when the run must end here (a stop signal reached some rank).
  bool after_step(int64_t step);

 private:
  void save(int64_t step, bool synchronous);
  void report_pending();
  backend::cuda::Engine& engine_;
  RunCheckpointOptions o_;
  core::CheckpointRecord record_;
  std::unique_ptr<core::CheckpointWriter> writer_;  // null without checkpoint.dir
  int64_t first_step_ = 1;
  bool pending_ = false;        // a background save whose figures are not yet printed
  double pending_stall_s_ = 0;  // its snapshot: begin_snapshot + the engine's copy
  double pending_wait_s_ = 0;   // before it: the previous save still writing (saves faster than the disk)
  bool warned_cadence_ = false;
};

}  // namespace tf::app
