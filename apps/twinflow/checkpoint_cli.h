// The command line of checkpoints, shared by `twinflow run` and `simulate --functional`
// (docs/ARCHITECTURE.md, "Checkpoints"): --resume, what a checkpoint records of the scenario, and the
// figures of a save.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "apps/twinflow/cli.h"
#include "core/checkpoint.h"
#include "core/scenario.h"

namespace tf::app {

void add_resume_option(po::options_description& desc);
// --resume latest|DIR: the checkpoint to continue from (core::resolve_checkpoint). `latest` is the
// newest complete checkpoint in the scenario's checkpoint.dir (an InputError when the scenario has
// none); DIR is a checkpoint or a directory of them. Incomplete checkpoints passed over are printed as
// warnings. Nothing without --resume.
std::optional<std::filesystem::path> resume_option(const po::variables_map& vm, const core::Scenario& sc);

// What every checkpoint records of the run's input: the scenario as given (its file, or the built-in
// default's text) and its ds_config file's text (empty when the ds_config is embedded or absent).
struct ScenarioTexts {
  std::string scenario;
  std::string ds_config;
};
ScenarioTexts scenario_texts(const core::Scenario& sc);

// One line about a save: "checkpoint DIR: X GB in W s (Y GB/s), the run stalled S ms for the snapshot".
// stall_s < 0: a synchronous save (no stall figure).
std::string save_summary(const core::SaveStats& st, double stall_s);

}  // namespace tf::app
