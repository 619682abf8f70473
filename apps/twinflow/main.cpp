// twinflow: the command-line entry point. `twinflow <command> --help` documents each command.
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*fn)(const std::vector<std::string>&);
};

const Command kCommands[] = {
    {"bench", "time the optimizer kernels (CPU SIMD, CUDA) against the memory bound and peers", tf::app::cmd_bench},
    {"verify", "check every backend bit for bit and against the double reference", tf::app::cmd_verify},
    {"simulate", "simulate a scenario's step at one ratio or over a sweep, without GPUs", tf::app::cmd_simulate},
    {"run", "train a scenario on this process's GPU (ZeRO-3 + Twin-Flow, real backend)", tf::app::cmd_run},
    {"launch", "start N ranks of a command on this node (torchrun-style variables)", tf::app::cmd_launch},
    {"calibrate", "measure this GPU machine and write a hardware profile", tf::app::cmd_calibrate},
    {"validate", "a measured ratio sweep against the simulator, per point, with the MAPE", tf::app::cmd_validate},
    {"export", "a checkpoint's weights as a Hugging Face safetensors file (GPT-2, OPT)", tf::app::cmd_export},
};

void usage(std::ostream& os) {
  os << "usage: twinflow <command> [options]\n\ncommands:\n";
  for (const Command& c : kCommands)
    os << "  " << c.name << std::string(10 - std::strlen(c.name), ' ') << c.summary << "\n";
  os << "\n`twinflow <command> --help` lists a command's options.\n"
        "exit codes: 0 ok, 1 a check failed, 2 bad input or usage, 3 runtime failure (the machine, a backend, "
        "I/O, out of memory), 4 internal error, 128+N a second stop signal N (README \"Exit codes\")\n";
}

}  // namespace

bool tf::app::is_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return true;
  return false;
}

int main(int argc, char** argv) {
  using namespace tf::app;
  if (argc < 2) {
    usage(std::cerr);
    return kExitBadInput;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(std::cout);
    return kExitOk;
  }
  if (cmd == "--version") {
    std::cout << "twinflow 0.1.0\n";
    return kExitOk;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (cmd != c.name) continue;
    try {
      return c.fn(args);
    } catch (...) {  // the one place errors are printed: escaped, with their exit code (README "Exit codes")
      const Failure f = classify_current_exception(cmd);
      print_message(std::cerr, "twinflow " + cmd + ": " + f.kind, f.message);
      return f.exit_code;
    }
  }
  print_message(std::cerr, "twinflow", "unknown command '" + cmd + "'\n");
  usage(std::cerr);
  return kExitBadInput;
}
