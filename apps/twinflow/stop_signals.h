// SIGTERM and SIGINT during training, as schedulers such as Slurm send them before they kill a job: the
// first asks the training loop to stop after the current step (it saves a checkpoint and exits 0); a
// second one ends the process at once.
#pragma once

namespace tf::app {

// Installs the handlers for its lifetime (one instance at a time) and puts the previous ones back.
// The first SIGTERM or SIGINT is recorded (requested()) and `announce` is written to stderr; a second
// one writes a line and exits at once with 128 + the signal (what a shell reports for a killed job).
class StopSignals {
 public:
  // What training loops announce: the step finishes and a checkpoint is saved.
  static constexpr const char* kTrainingStop =
      "\ntwinflow: stop requested: finishing the current step, then saving a checkpoint when checkpoint.dir is "
      "set (signal again to exit at once)\n";
  // `announce` must outlive the instance (a string literal).
  explicit StopSignals(const char* announce = kTrainingStop);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const;  // a first signal arrived
  int signal() const;      // which one (SIGTERM, SIGINT); 0 when none
};

}  // namespace tf::app
