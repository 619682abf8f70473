// Command-line helpers shared by the twinflow subcommands (see cli.h).
#include "apps/twinflow/cli.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/system/system_error.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "apps/twinflow/commands.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/step.h"
#include "core/strings.h"

extern char** environ;  // the environment run_self_capture passes on (unistd.h)

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

// ---- integer options ------------------------------------------------------------------------------------

namespace {
std::string range_text(int64_t min, int64_t max) {
  return "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
}
}  // namespace

void add_int_option(po::options_description& desc, const IntOption& o) {
  // Read as text and converted by checked_int: boost's unsigned conversion would take "-1" as 2^64 - 1.
  auto* value = po::value<std::string>();
  if (o.fallback) value->default_value(std::to_string(*o.fallback));
  const std::string help = std::string(o.help) + " (an integer in " + range_text(o.min, o.max) + ")";
  desc.add_options()(o.name, value, help.c_str());
}

int64_t checked_int(std::string_view text, const std::string& what, int64_t min, int64_t max) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end || v < min || v > max)
    throw core::InputError(what + " '" + core::printable(text, 64) + "': expected an integer in " +
                           range_text(min, max));
  return v;
}

std::optional<int64_t> optional_int_option(const po::variables_map& vm, const IntOption& o) {
  if (!vm.count(o.name)) return std::nullopt;
  return checked_int(vm[o.name].as<std::string>(), std::string("--") + o.name, o.min, o.max);
}

int64_t int_option(const po::variables_map& vm, const IntOption& o) {
  const std::optional<int64_t> v = optional_int_option(vm, o);
  if (!v) throw std::logic_error(std::string("int_option: --") + o.name + " has no default; use optional_int_option");
  return *v;
}

// ---- the scenario ---------------------------------------------------------------------------------------

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
  for (const std::string& w : sc.warnings) warn(w);
  std::set<std::string> printed;
  for (const core::AppliedDefault& d : sc.applied_defaults)
    if (printed.insert(d.key).second) print_message(std::cerr, "default", d.key + " = " + d.value + " (" + d.why + ")");
  return sc;
}

void add_scenario_record(nlohmann::json& doc, const core::Scenario& sc) {
  nlohmann::json settings = nlohmann::json::object();
  for (const core::ReportedSetting& r : core::settings_report(sc)) {
    if (!r.number) {
      settings[r.key] = r.value;
      continue;
    }
    int64_t i = 0;  // a whole number stays an integer in JSON ("8", not 8.0)
    const char* end = r.value.data() + r.value.size();
    const auto [ptr, ec] = std::from_chars(r.value.data(), end, i);
    settings[r.key] = ec == std::errc() && ptr == end ? nlohmann::json(i) : nlohmann::json(std::stod(r.value));
  }
  nlohmann::json defaults = nlohmann::json::array();
  for (const core::AppliedDefault& d : sc.applied_defaults)
    defaults.push_back({{"key", d.key}, {"value", d.value}, {"why", d.why}});
  doc["settings"] = std::move(settings);
  doc["defaults"] = std::move(defaults);
  doc["warnings"] = warnings_given();
}

// ---- output files ---------------------------------------------------------------------------------------

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

void write_json_file(const nlohmann::json& doc, const std::string& path, int indent, const std::string& option) {
  core::write_output_file(path, doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", option);
}

// ---- Prometheus metrics ---------------------------------------------------------------------------------

namespace {
const IntOption kMetricsPort{"metrics-port", 0, 65535, std::nullopt, ""};
}

void add_metrics_options(po::options_description& desc, const char* port_help, const char* addr_help,
                         const char* linger_help) {
  IntOption port = kMetricsPort;
  port.help = port_help;
  add_int_option(desc, port);
  auto add = desc.add_options();
  add("metrics-addr", po::value<std::string>()->default_value("127.0.0.1"), addr_help);
  add("metrics-linger", po::value<double>()->default_value(0.0), linger_help);
}

MetricsOptions read_metrics_options(const po::variables_map& vm) {
  MetricsOptions m;
  if (const std::optional<int64_t> port = optional_int_option(vm, kMetricsPort)) m.port = int(*port);
  m.address = vm["metrics-addr"].as<std::string>();
  m.linger_s = vm["metrics-linger"].as<double>();
  m.address_given = !vm["metrics-addr"].defaulted();
  m.linger_given = !vm["metrics-linger"].defaulted();
  // checked before it becomes a std::chrono duration, which 1e10 s would overflow
  if (!(m.linger_s == -1 || (m.linger_s >= 0 && m.linger_s <= kMaxLingerSeconds)))
    throw core::InputError("--metrics-linger " + core::number_text(m.linger_s) +
                           ": allowed -1 (serve until interrupted) or [0, " + core::number_text(kMaxLingerSeconds) +
                           "] seconds");
  return m;
}

metrics::RunConfig metrics_run_config(const core::Scenario& sc, const core::RunSettings& rs, double ratio) {
  metrics::RunConfig c;
  c.world_size = rs.world;
  c.zero_stage = rs.partition.stage;
  c.micro_batch = rs.step.micro_batch;
  c.grad_accum = rs.step.grad_accum;
  c.offload_ratio = ratio;
  c.precision = std::string(core::precision_name(sc.training.precision));
  c.optimizer = std::string(core::optimizer_name(sc.optimizer.kind));
  c.offload_device = std::string(core::offload_device_name(sc.zero.offload_optimizer.device));
  return c;
}

void warn_if_exposed(const metrics::ServerOptions& options, uint16_t bound_port) {
  if (const std::optional<std::string> w = metrics::exposure_warning(options.address, bound_port)) warn(*w);
}

// ---- ratios ---------------------------------------------------------------------------------------------

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
    throw core::InputError("--ratio '" + core::printable(text, 40) + "': expected a number in [0, 1] or auto");
  return r;
}

void add_staging_slots_option(po::options_description& desc) {
  const std::string help =
      "slots per host staging ring of the CPU segment (gradient landing and bf16 copy): auto (the default: "
      "full-size staging where the host's memory holds it, else " +
      std::to_string(core::kStagingSlots) + "), 1 to " + std::to_string(core::kMaxStagingSlots) +
      ", or 0 for full-size staging, one slot per CPU layer";
  desc.add_options()("staging-slots", po::value<std::string>(), help.c_str());
}

std::optional<int> read_staging_slots(const po::variables_map& vm) {
  if (!vm.count("staging-slots")) return std::nullopt;
  const std::string v = vm["staging-slots"].as<std::string>();
  if (core::ascii_lower(v) == "auto") return core::kStagingAuto;
  try {
    return int(checked_int(v, "--staging-slots", 0, core::kMaxStagingSlots));
  } catch (const core::InputError& e) {
    throw core::InputError(std::string(e.what()) + ", or auto");
  }
}

void add_profile_option(po::options_description& desc, const char* help) {
  desc.add_options()("profile", po::value<std::string>(), help);
}

void apply_profile_option(const po::variables_map& vm, core::Scenario& sc) {
  if (!vm.count("profile")) return;
  sc.cluster.profile = vm["profile"].as<std::string>();
  sc.cluster.hardware = core::find_hardware_profile(sc.cluster.profile);
}

void add_speculation_option(po::options_description& desc) {
  desc.add_options()("speculation", po::value<std::string>(),
                     "the speculated CPU layers (their second state slot, host bytes per rank): auto (as many as "
                     "the cost model predicts fastest, within max), max (every eligible layer the host has room "
                     "for beyond the plan), 0 (off) or a number of bytes (default: the scenario's "
                     "training.speculation)");
}

std::optional<int64_t> read_speculation_option(const po::variables_map& vm) {
  if (!vm.count("speculation")) return std::nullopt;
  return parse_speculation_text(vm["speculation"].as<std::string>());
}

int64_t parse_speculation_text(const std::string& v) {
  if (core::ascii_lower(v) == "auto") return core::kSpeculationAuto;
  if (core::ascii_lower(v) == "max") return core::kSpeculationMax;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || n < 0)
    throw core::InputError("--speculation '" + core::printable(v, 40) +
                           "': expected auto, max or a number of bytes >= 0 (0 turns speculation off)");
  return int64_t(n);
}

void add_ring_order_option(po::options_description& desc) {
  desc.add_options()("ring-order", po::value<std::string>(),
                     "forward|backward: with host staging rings and clipping, the CPU passes after the norm in the "
                     "order the next forward needs them (after those whose gradients landed before it) or in the "
                     "order their gradients land (default: the scenario's training.ring_order, forward)");
}

std::optional<bool> read_ring_order_option(const po::variables_map& vm) {
  if (!vm.count("ring-order")) return std::nullopt;
  const std::string v = core::ascii_lower(vm["ring-order"].as<std::string>());
  if (v == "forward") return true;
  if (v == "backward") return false;
  throw core::InputError("--ring-order '" + core::printable(v, 40) + "': expected forward or backward");
}

void add_carry_tail_option(po::options_description& desc) {
  desc.add_options()("carry-tail", po::value<std::string>(),
                     "on|off: carry each step's CPU optimizer tail (CPU passes, H2Ds, replica refreshes) into the "
                     "next step (default: the scenario's training.carry_tail, on)");
}

std::optional<bool> read_carry_tail_option(const po::variables_map& vm) {
  if (!vm.count("carry-tail")) return std::nullopt;
  const std::string v = core::ascii_lower(vm["carry-tail"].as<std::string>());
  if (v == "on" || v == "true") return true;
  if (v == "off" || v == "false") return false;
  throw core::InputError("--carry-tail '" + core::printable(v, 40) + "': expected on or off");
}

void add_cpu_order_option(po::options_description& desc) {
  desc.add_options()("cpu-order", po::value<std::string>(),
                     "the speculated CPU passes' order: auto (the cost model's: the shortest simulated step), "
                     "arrival (each as its gradient lands) or M,K (M in arrival order, the rest in forward order, "
                     "K passes before the commits) (default: the scenario's training.cpu_order, auto)");
}

std::optional<core::CpuOrderSetting> read_cpu_order_option(const po::variables_map& vm) {
  if (!vm.count("cpu-order")) return std::nullopt;
  const std::string v = core::ascii_lower(vm["cpu-order"].as<std::string>());
  if (v == "auto") return core::CpuOrderSetting{true, {}};
  if (v == "arrival") return core::CpuOrderSetting{};
  const size_t comma = v.find(',');
  if (comma == std::string::npos)
    throw core::InputError("--cpu-order '" + core::printable(v, 40) + "': expected auto, arrival or M,K");
  const auto count = [&](std::string_view t) { return int(checked_int(t, "--cpu-order", 0, 1 << 20)); };
  return core::CpuOrderSetting{
      false, {count(std::string_view(v).substr(0, comma)), count(std::string_view(v).substr(comma + 1))}};
}

std::string self_executable(const std::string& who) {
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) throw core::RuntimeFailure(who + ": cannot find this executable (/proc/self/exe)");
  return std::string(self, size_t(len));
}

namespace {

volatile sig_atomic_t g_child_stop_signal = 0;
void record_stop_signal(int sig) { g_child_stop_signal = sig; }

// SIGINT and SIGTERM recorded in g_child_stop_signal for the scope, without SA_RESTART (a blocking waitpid
// returns EINTR, so the signal can be passed on); the previous handlers back at its end.
class RecordStopSignals {
 public:
  RecordStopSignals() {
    struct sigaction sa {};
    sa.sa_handler = record_stop_signal;
    sigemptyset(&sa.sa_mask);
    g_child_stop_signal = 0;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~RecordStopSignals() { restore(); }
  RecordStopSignals(const RecordStopSignals&) = delete;
  RecordStopSignals& operator=(const RecordStopSignals&) = delete;
  void restore() const {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace

ChildExit run_passing_stop_signals(const std::string& who, std::vector<std::string> args) {
  if (args.empty()) throw std::logic_error(who + ": run_passing_stop_signals: no command");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const RecordStopSignals handlers;
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid < 0) throw core::RuntimeFailure(who + ": fork failed: " + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    handlers.restore();
    ::execv(argv[0], argv.data());
    std::_Exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so the group exists before a signal is passed on
  ChildExit e;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw core::RuntimeFailure(who + ": waitpid: " + std::strerror(errno));
    if (g_child_stop_signal && !e.stop_signal) {
      e.stop_signal = g_child_stop_signal;
      ::kill(-pid, e.stop_signal);
    }
  }
  e.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return e;
}

std::string run_self_capture(const std::string& who, const std::vector<std::string>& args,
                             const std::vector<std::string>& env) {
  std::vector<std::string> all = {self_executable(who)};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs = env;  // `env` first: its names win over this process's
  for (char** e = environ; *e; ++e) {
    const std::string_view kv(*e);
    const std::string_view name = kv.substr(0, kv.find('=') + 1);
    bool replaced = false;
    for (const std::string& mine : env) replaced = replaced || std::string_view(mine).substr(0, name.size()) == name;
    if (!replaced) envs.emplace_back(kv);
  }
  std::vector<char*> envp;
  for (std::string& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw core::RuntimeFailure(who + ": pipe: " + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  std::string text;
  if (rc == 0) {
    char buf[4096];
    for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
      if (n > 0)
        text.append(buf, size_t(n));
      else if (errno != EINTR)
        break;
    }
  }
  ::close(out[0]);
  std::string command = "twinflow";
  for (const std::string& a : args) command += " " + a;
  if (rc != 0) throw core::RuntimeFailure(who + ": cannot start `" + command + "`: " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw core::RuntimeFailure(who + ": waitpid: " + std::strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw core::RuntimeFailure(who + ": `" + command + "` failed (" +
                               (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                                  : "signal " + std::to_string(WTERMSIG(status))) +
                               "); its output: " + core::printable(text, 400));
  return text;
}

// ---- messages for people and exit codes -----------------------------------------------------------------

namespace {
struct Warnings {
  std::mutex mu;
  std::set<std::string> seen;
  std::vector<std::string> given;
};
Warnings& warnings() {
  static Warnings w;
  return w;
}
}  // namespace

void print_message(std::ostream& os, std::string_view prefix, std::string_view message) {
  constexpr size_t kMaxMessageBytes = 64 * 1024;  // a message built from hostile input stays readable
  os << core::printable(prefix, kMaxMessageBytes) << ": " << core::printable(message, kMaxMessageBytes, true)
     << std::endl;
}

void warn(std::string_view text) {
  Warnings& w = warnings();
  {
    std::lock_guard lk(w.mu);
    if (!w.seen.insert(std::string(text)).second) return;
    w.given.emplace_back(text);
  }
  print_message(std::cerr, "warning", text);
}

std::vector<std::string> warnings_given() {
  Warnings& w = warnings();
  std::lock_guard lk(w.mu);
  return w.given;
}

Failure classify_current_exception(std::string_view command) {
  const std::string internal_hint =
      " (an internal error of twinflow: please report it with the command line and its input files)";
  try {
    throw;
  } catch (const po::error& e) {
    return {kExitBadInput, "error", std::string(e.what()) + " (see `twinflow " + std::string(command) + " --help`)"};
  } catch (const core::InputError& e) {
    return {kExitBadInput, "error", e.what()};
  } catch (const core::RuntimeFailure& e) {
    return {kExitRuntime, "failure", e.what()};
  } catch (const std::bad_alloc&) {
    return {kExitRuntime, "failure",
            "out of memory (std::bad_alloc): the machine could not give this much memory; use a smaller input or a "
            "larger machine"};
  } catch (const std::system_error& e) {  // std::filesystem::filesystem_error, std::ios_base::failure
    return {kExitRuntime, "failure", e.what()};
  } catch (const boost::system::system_error& e) {  // Boost.Asio
    return {kExitRuntime, "failure", e.what()};
  } catch (const std::exception& e) {  // std::logic_error (a broken invariant), or a type nobody classified
    return {kExitInternal, "internal error", std::string(e.what()) + internal_hint};
  } catch (...) {
    return {kExitInternal, "internal error", "an exception that is not a std::exception" + internal_hint};
  }
}

}  // namespace tf::app
