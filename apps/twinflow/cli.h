// Command-line helpers shared by the twinflow subcommands: parsing with --help, range-checked integer
// options, the option groups several commands offer (the scenario, output files, Prometheus metrics,
// ratios), the messages printed to people (errors, warnings, defaults: escaped) and the exit code of
// each kind of failure.
#pragma once

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/scenario.h"
#include "core/settings.h"
#include "metrics/http_server.h"
#include "metrics/step_metrics.h"

namespace tf::app {

namespace po = boost::program_options;

// Parses `args` against `desc` (and the positional arguments `pos`, if any). On --help/-h prints
// `desc` then `epilog` and returns nothing; otherwise notifies and returns the values.
std::optional<po::variables_map> parse_command(const std::vector<std::string>& args,
                                               const po::options_description& desc,
                                               const po::positional_options_description* pos,
                                               const std::string& epilog = "");

// A command's options and its positional arguments.
struct CommandOptions {
  explicit CommandOptions(const std::string& caption) : desc(caption) {}
  po::options_description desc;
  po::positional_options_description pos;
};
std::optional<po::variables_map> parse_command(const std::vector<std::string>& args, const CommandOptions& options,
                                               const std::string& epilog);

// ---- integer options: read as int64 and range-checked, so that "-1" never wraps -----------------------
struct IntOption {
  const char* name;                 // "n" for --n
  int64_t min, max;                 // the range allowed, inclusive
  std::optional<int64_t> fallback;  // the default; none: the option is optional
  const char* help;                 // the range is appended to it
};
void add_int_option(po::options_description& desc, const IntOption& o);
// The value given, else the default: core::InputError "--n '-1': expected an integer in [1, 2147483648]"
// for text that is not a whole number in range (exit 2).
int64_t int_option(const po::variables_map& vm, const IntOption& o);
std::optional<int64_t> optional_int_option(const po::variables_map& vm, const IntOption& o);
// The same check for a value read another way (`what`: "--n"); the value when it is in [min, max].
int64_t checked_int(std::string_view text, const std::string& what, int64_t min, int64_t max);

// ---- the scenario: the first positional argument or --scenario ----------------------------------------
void add_scenario_option(po::options_description& desc, po::positional_options_description& pos, const char* help);
bool has_scenario(const po::variables_map& vm);
std::string scenario_arg(const po::variables_map& vm);  // "" when none was given
// The scenario named, else the embedded default one (core::load_default_scenario); its warnings go to
// stderr through warn(), and each default it applied as "default: KEY = VALUE (WHY)".
core::Scenario load_scenario_option(const po::variables_map& vm);
// What a scenario resolved to, added to a command's --json document: "settings" (core::settings_report;
// numbers as JSON numbers), "defaults" ([{key, value, why}]: Scenario::applied_defaults) and "warnings"
// (every warning this process printed, the scenario's among them).
void add_scenario_record(nlohmann::json& doc, const core::Scenario& sc);

// ---- output files ----------------------------------------------------------------------------------
// A command offers the files whose help it gives (null: not offered).
struct OutputHelp {
  const char* csv = nullptr;
  const char* json = nullptr;
  const char* svg = nullptr;
  const char* trace = nullptr;
};
struct OutputFiles {
  std::optional<std::string> csv, json, svg, trace;
};
void add_output_options(po::options_description& desc, const OutputHelp& help);
OutputFiles read_output_options(const po::variables_map& vm);
// Writes `doc` indented by `indent` to `path` through core::write_output_file (whole or not at all;
// core::RuntimeFailure naming `option` and the file otherwise). Invalid UTF-8 in strings is replaced.
void write_json_file(const nlohmann::json& doc, const std::string& path, int indent,
                     const std::string& option = "--json");

// ---- Prometheus metrics (--metrics-port, --metrics-addr, --metrics-linger) --------------------------
inline constexpr double kMaxLingerSeconds = 1e6;  // --metrics-linger: -1 or [0, this]
struct MetricsOptions {
  std::optional<int> port;                           // none: no endpoint; else in [0, 65535]
  std::string address;                               // --metrics-addr (default 127.0.0.1)
  double linger_s = 0;                               // --metrics-linger: -1 (until interrupted) or [0, 1e6]
  bool address_given = false, linger_given = false;  // given on the command line (not the defaults)
};
void add_metrics_options(po::options_description& desc, const char* port_help, const char* addr_help,
                         const char* linger_help);
// core::InputError for a port outside [0, 65535] or a linger that is not -1 or in [0, kMaxLingerSeconds].
MetricsOptions read_metrics_options(const po::variables_map& vm);
// What a run is set up to do, as /metrics publishes it before the first step (metrics::publish_run_config).
metrics::RunConfig metrics_run_config(const core::Scenario& sc, const core::RunSettings& rs, double ratio);
// After binding: metrics::exposure_warning's message, through warn(), when the address is reachable
// beyond this machine.
void warn_if_exposed(const metrics::ServerOptions& options, uint16_t bound_port);

// ---- ratios -----------------------------------------------------------------------------------------
// "0,0.3,1" -> {0, 0.3, 1}; core::InputError naming `option` unless every item is a number in [0, 1].
std::vector<double> parse_ratio_list(const std::string& text, const std::string& option = "--ratios");
// --ratio (a string option): a number in [0, 1], or auto (nothing returned: the ratio is to be chosen,
// backends/sim/auto_ratio.h); without --ratio the scenario's, auto when it says auto. core::InputError
// "--ratio 'x': expected a number in [0, 1] or auto" otherwise.
std::optional<double> ratio_option(const po::variables_map& vm, const core::Scenario& sc);
// The help text of such a --ratio.
inline constexpr const char* kRatioHelp =
    "CPU share of each rank's optimizer shard: a number in [0, 1], or auto (the fastest predicted ratio that fits "
    "in memory; needs a calibrated --profile) (default: the scenario's)";

// ---- --profile: the hardware profile in place of the scenario's -------------------------------------
void add_profile_option(po::options_description& desc, const char* help);
// With --profile P (a built-in name or a .yaml path): sc's cluster.profile and cluster.hardware become P's.
void apply_profile_option(const po::variables_map& vm, core::Scenario& sc);

// ---- host staging rings (issue 16) ------------------------------------------------------------------
// --staging-slots auto|N: slots per host staging ring (core::StepConfig::staging_slots), 0 for full-size
// staging (the schedule before the rings), auto (core::kStagingAuto, the default when not given):
// full-size where the host holds it (core::resolve_staging_slots). read: the value if given
// (core::InputError for anything else, or N outside [0, 1024]).
void add_staging_slots_option(po::options_description& desc);
std::optional<int> read_staging_slots(const po::variables_map& vm);

// ---- speculation (--speculation auto|max|BYTES) ----------------------------------------------------------
// The speculated CPU layers' host budget (docs/ARCHITECTURE.md, "Speculation"): overrides the scenario's
// training.speculation. `auto` gives core::kSpeculationAuto (the cost model's choice), `max`
// core::kSpeculationMax, 0 turns it off; none: not given.
void add_speculation_option(po::options_description& desc);
std::optional<int64_t> read_speculation_option(const po::variables_map& vm);
// One --speculation value: "auto" (core::kSpeculationAuto), "max" (core::kSpeculationMax) or bytes >= 0;
// InputError otherwise.
int64_t parse_speculation_text(const std::string& v);

// ---- carrying the tail (--carry-tail on|off) ----------------------------------------------------------
// Overrides the scenario's training.carry_tail (docs/ARCHITECTURE.md, "Carrying the optimizer tail into
// the next step"); none: not given. core::InputError for anything but on/off/true/false.
void add_carry_tail_option(po::options_description& desc);
// --ring-order forward|backward: overrides the scenario's training.ring_order (core::StepConfig::ring_forward_order).
void add_ring_order_option(po::options_description& desc);
std::optional<bool> read_ring_order_option(const po::variables_map& vm);
std::optional<bool> read_carry_tail_option(const po::variables_map& vm);

// ---- the speculated CPU passes' order (--cpu-order auto|arrival|M,K) ----------------------------------
// Overrides the scenario's training.cpu_order (docs/ARCHITECTURE.md, "Order after the norm";
// core::CpuPassOrder): auto (the cost model's choice), arrival (every pass in the order its gradient lands:
// the order before it) or M,K (M passes in arrival order, the rest in forward order, K of them before the
// commits). none: not given.
void add_cpu_order_option(po::options_description& desc);
std::optional<core::CpuOrderSetting> read_cpu_order_option(const po::variables_map& vm);

// This executable's path (/proc/self/exe), to run another twinflow subcommand; core::RuntimeFailure
// naming `who` when it cannot be read.
std::string self_executable(const std::string& who);
// Runs this executable with `args` (a twinflow subcommand) and `env` added to (or replacing in) this
// process's environment, and returns what it wrote to stdout (its stderr passes through). A non-zero exit
// is a core::RuntimeFailure naming `who`, the command and the exit status.
std::string run_self_capture(const std::string& who, const std::vector<std::string>& args,
                             const std::vector<std::string>& env = {});

// How a child run by run_passing_stop_signals ended: its exit code (128 + the signal that ended it), and
// the stop signal that reached this process meanwhile and was passed on to it (0: none).
struct ChildExit {
  int code = 0;
  int stop_signal = 0;
};
// Runs argv[0] (a path) with argv in a process group of its own and waits for it. A SIGINT or SIGTERM that
// reaches this process meanwhile is passed to that group once (a twinflow run stops after its current step;
// `launch` passes it to its ranks) and the wait goes on until the child has ended, so that a command stopped
// by a scheduler or `timeout` leaves nothing behind holding GPUs or pinned memory. The previous handlers
// are back on return. core::RuntimeFailure naming `who` when fork or waitpid fails.
ChildExit run_passing_stop_signals(const std::string& who, std::vector<std::string> argv);

// ---- messages for people and exit codes ---------------------------------------------------------------
// The one place text reaches the terminal as a diagnostic: "PREFIX: MESSAGE\n" with control characters
// escaped (core::printable; newlines kept, so a message may span lines).
void print_message(std::ostream& os, std::string_view prefix, std::string_view message);
// "warning: TEXT" on stderr, once per distinct text; recorded for --json (warnings_given).
void warn(std::string_view text);
std::vector<std::string> warnings_given();

// What an exception that escaped a command means (README "Exit codes").
struct Failure {
  int exit_code;        // 2 bad input or usage, 3 the machine or I/O (bad_alloc included), 4 internal
  std::string kind;     // "error", "failure", "internal error"
  std::string message;  // what() and, for an internal error, what to do
};
// Call inside a catch block: classifies the exception in flight. boost::program_options errors and
// core::InputError: 2; core::RuntimeFailure, std::bad_alloc and system errors (std::system_error,
// std::filesystem::filesystem_error, boost::system::system_error): 3; std::logic_error and anything else: 4.
// `command` names the subcommand in a usage error's hint.
Failure classify_current_exception(std::string_view command);

// Wall seconds since `t0` (steady clock): what the commands report of their long phases.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tf::app
