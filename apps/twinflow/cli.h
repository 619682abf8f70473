// Command-line helpers shared by the twinflow subcommands: parsing with --help, and the option groups
// several commands offer (the scenario, output files, Prometheus metrics, ratios).
#pragma once

#include <boost/program_options.hpp>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario.h"

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

// ---- the scenario: the first positional argument or --scenario ----------------------------------------
void add_scenario_option(po::options_description& desc, po::positional_options_description& pos, const char* help);
bool has_scenario(const po::variables_map& vm);
std::string scenario_arg(const po::variables_map& vm);  // "" when none was given
// The scenario named, else the embedded default one (core::load_default_scenario); its warnings go to
// stderr.
core::Scenario load_scenario_option(const po::variables_map& vm);

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
// Writes `doc` indented by `indent` to `path`; core::InputError "--json PATH: cannot write" on failure.
void write_json_file(const nlohmann::json& doc, const std::string& path, int indent);

// ---- Prometheus metrics (--metrics-port, --metrics-addr, --metrics-linger) --------------------------
struct MetricsOptions {
  std::optional<int> port;                           // none: no endpoint
  std::string address;                               // --metrics-addr (default 127.0.0.1)
  double linger_s = 0;                               // --metrics-linger
  bool address_given = false, linger_given = false;  // given on the command line (not the defaults)
};
void add_metrics_options(po::options_description& desc, const char* port_help, const char* addr_help,
                         const char* linger_help);
MetricsOptions read_metrics_options(const po::variables_map& vm);

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

// This executable's path (/proc/self/exe), to run another twinflow subcommand; core::RuntimeFailure
// naming `who` when it cannot be read.
std::string self_executable(const std::string& who);

}  // namespace tf::app
