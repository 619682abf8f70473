// Command-line helpers shared by the twinflow subcommands (see cli.h).
#include "apps/twinflow/cli.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace tf::app {

std::optional<po::variables_map> parse_command(const std::vector<std::string>& args,
                                               const po::options_description& desc,
                                               const po::positional_options_description* pos,
                                               const std::string& epilog) {
  po::command_line_parser parser(args);
  parser.options(desc);
  if (pos) parser.positional(*pos);
  po::variables_map vm;
  po::store(parser.run(), vm);
  if (vm.count("help")) {
    std::cout << desc << epilog;
    return std::nullopt;
  }
  po::notify(vm);
  return vm;
}

std::optional<po::variables_map> parse_command(const std::vector<std::string>& args, const CommandOptions& options,
                                               const std::string& epilog) {
  return parse_command(args, options.desc, &options.pos, epilog);
}

void add_scenario_option(po::options_description& desc, po::positional_options_description& pos, const char* help) {
  desc.add_options()("scenario", po::value<std::string>(), help);
  pos.add("scenario", 1);
}

bool has_scenario(const po::variables_map& vm) { return vm.count("scenario") > 0; }

std::string scenario_arg(const po::variables_map& vm) {
  return has_scenario(vm) ? vm["scenario"].as<std::string>() : std::string();
}

core::Scenario load_scenario_option(const po::variables_map& vm) {
  const core::Scenario sc = has_scenario(vm) ? core::load_scenario(scenario_arg(vm)) : core::load_default_scenario();
  for (const std::string& w : sc.warnings) std::cerr << "warning: " << w << "\n";
  return sc;
}

void add_output_options(po::options_description& desc, const OutputHelp& help) {
  auto add = desc.add_options();
  if (help.csv) add("csv", po::value<std::string>(), help.csv);
  if (help.json) add("json", po::value<std::string>(), help.json);
  if (help.svg) add("svg", po::value<std::string>(), help.svg);
  if (help.trace) add("trace", po::value<std::string>(), help.trace);
}

OutputFiles read_output_options(const po::variables_map& vm) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    if (!vm.count(name)) return std::nullopt;
    return vm[name].as<std::string>();
  };
  return {get("csv"), get("json"), get("svg"), get("trace")};
}

void write_json_file(const nlohmann::json& doc, const std::string& path, int indent) {
  std::ofstream out(path);
  if (!(out << doc.dump(indent) << "\n")) throw core::InputError("--json " + path + ": cannot write");
}

void add_metrics_options(po::options_description& desc, const char* port_help, const char* addr_help,
                         const char* linger_help) {
  auto add = desc.add_options();
  add("metrics-port", po::value<int>(), port_help);
  add("metrics-addr", po::value<std::string>()->default_value("127.0.0.1"), addr_help);
  add("metrics-linger", po::value<double>()->default_value(0.0), linger_help);
}

MetricsOptions read_metrics_options(const po::variables_map& vm) {
  MetricsOptions m;
  if (vm.count("metrics-port")) m.port = vm["metrics-port"].as<int>();
  m.address = vm["metrics-addr"].as<std::string>();
  m.linger_s = vm["metrics-linger"].as<double>();
  m.address_given = !vm["metrics-addr"].defaulted();
  m.linger_given = !vm["metrics-linger"].defaulted();
  return m;
}

std::vector<double> parse_ratio_list(const std::string& text, const std::string& option) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0 && v <= 1))
      throw core::InputError(option + " '" + text + "': expected comma-separated ratios in [0, 1], e.g. 0,0.3,1");
    out.push_back(v);
  }
  if (out.empty()) throw core::InputError(option + ": no ratio given");
  return out;
}

std::optional<double> ratio_option(const po::variables_map& vm, const core::Scenario& sc) {
  if (!vm.count("ratio")) return sc.ratio_auto() ? std::nullopt : std::optional<double>(sc.cpu_ratio());
  const std::string text = vm["ratio"].as<std::string>();
  if (text == "auto") return std::nullopt;
  char* end = nullptr;
  const double r = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(r >= 0 && r <= 1))
    throw core::InputError("--ratio '" + text + "': expected a number in [0, 1] or auto");
  return r;
}

void add_profile_option(po::options_description& desc, const char* help) {
  desc.add_options()("profile", po::value<std::string>(), help);
}

void apply_profile_option(const po::variables_map& vm, core::Scenario& sc) {
  if (!vm.count("profile")) return;
  sc.cluster.profile = vm["profile"].as<std::string>();
  sc.cluster.hardware = core::find_hardware_profile(sc.cluster.profile);
}

std::string self_executable(const std::string& who) {
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) throw core::RuntimeFailure(who + ": cannot find this executable (/proc/self/exe)");
  return std::string(self, size_t(len));
}

}  // namespace tf::app
