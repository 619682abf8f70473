// --resume, the texts a checkpoint records, and a save's figures.
#include "apps/twinflow/checkpoint_cli.h"

#include <cstdio>
#include <iostream>
#include <vector>

#include "core/config_node.h"
#include "core/error.h"

namespace tf::app {

void add_resume_option(po::options_description& desc) {
  desc.add_options()("resume", po::value<std::string>(),
                     "continue from a checkpoint: `latest` (the newest complete one in the scenario's checkpoint.dir) "
                     "or DIR (a checkpoint, or a directory of them: its newest complete one); training.steps (or "
                     "--steps) stays the total");
}

std::optional<std::filesystem::path> resume_option(const po::variables_map& vm, const core::Scenario& sc) {
  if (!vm.count("resume")) return std::nullopt;
  const std::string arg = vm["resume"].as<std::string>();
  if (arg.empty()) throw core::InputError("--resume: empty; give `latest` or a checkpoint directory");
  std::filesystem::path where = arg;
  if (arg == "latest") {
    if (sc.checkpoint.dir.empty())
      throw core::InputError("--resume latest looks in the scenario's checkpoint.dir, and " +
                             (sc.file.empty() ? std::string("the scenario") : sc.file.string()) +
                             " has no `checkpoint: {dir: ...}`; add it, or name the checkpoint: --resume DIR");
    where = sc.checkpoint.dir;
  }
  std::vector<std::string> skipped;
  const std::filesystem::path dir = core::resolve_checkpoint(where, &skipped);
  for (const std::string& s : skipped) std::cerr << "warning: --resume: skipped " << s << "\n";
  return dir;
}

ScenarioTexts scenario_texts(const core::Scenario& sc) {
  ScenarioTexts t;
  t.scenario =
      sc.file.empty() ? std::string(core::default_scenario_text()) : core::config::read_document(sc.file, "scenario");
  if (!sc.ds_config_file.empty()) t.ds_config = core::config::read_document(sc.ds_config_file, "ds_config");
  return t;
}

std::string save_summary(const core::SaveStats& st, double stall_s) {
  char b[512];
  const double gb = double(st.data_bytes) / 1e9;
  std::snprintf(b, sizeof b, "checkpoint %s: %.3f GB (this rank) written in %.3f s (%.2f GB/s), committed after %.3f s",
                st.dir.string().c_str(), gb, st.write_s, st.write_s > 0 ? gb / st.write_s : 0.0, st.total_s);
  std::string out = b;
  if (stall_s >= 0) {
    std::snprintf(b, sizeof b, "; training stalled %.1f ms for the snapshot", stall_s * 1e3);
    out += b;
  }
  for (const std::string& w : st.warnings) out += "\nwarning: " + w;
  return out;
}

}  // namespace tf::app
