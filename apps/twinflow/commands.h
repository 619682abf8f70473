// The subcommands of the twinflow CLI. Each returns a process exit code (see main.cpp); what escapes one
// as an exception is classified by classify_current_exception (cli.h).
#pragma once

#include <string>
#include <vector>

namespace tf::app {

enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,  // a verification or goal did not hold
  kExitBadInput = 2,     // usage, configuration or input error
  kExitRuntime = 3,      // the machine, a backend or I/O failed (out of memory included)
  kExitInternal = 4,     // a bug in twinflow: std::logic_error or anything unclassified (apps/twinflow/cli.h)
};

int cmd_bench(const std::vector<std::string>& args);
int cmd_verify(const std::vector<std::string>& args);
int cmd_simulate(const std::vector<std::string>& args);
int cmd_launch(const std::vector<std::string>& args);
int cmd_calibrate(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_validate(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);

// True for the name of one of the subcommands above (main.cpp holds the list).
bool is_command(const std::string& name);

}  // namespace tf::app
