// `twinflow validate`: measures a ratio sweep with the real backend (or reads one that `twinflow run
// --json` wrote), simulates the same points with a hardware profile, and prints both side by side with
// the error of each point, the MAPE and the worst point against goals; CSV, JSON and an SVG plot.
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "apps/twinflow/svg_plot.h"
#include "apps/twinflow/table.h"
#include "apps/twinflow/validate.h"
#include "backends/sim/sim_backend.h"
#include "core/error.h"
#include "core/hardware.h"
#include "core/scenario.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace tf::app {
namespace {

std::string ratio_text(double r) {
  std::ostringstream os;
  os << r;
  return os.str();
}

// Runs this executable with `args` (a twinflow subcommand) and returns its exit code.
int run_self(const std::vector<std::string>& args) {
  std::vector<std::string> all = {self_executable("validate")};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout << "validate: measuring:";
  for (size_t i = 1; i < all.size(); ++i) std::cout << " " << all[i];
  std::cout << "\n" << std::flush;
  const pid_t pid = ::fork();
  if (pid < 0) throw core::RuntimeFailure(std::string("validate: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    std::_Exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw core::RuntimeFailure(std::string("validate: waitpid: ") + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

int cmd_validate(const std::vector<std::string>& args) {
  po::options_description desc(
      "twinflow validate SCENARIO --profile P [options]: a measured ratio sweep against the simulator");
  auto add = desc.add_options();
  add("help,h", "show this help");
  add("scenario", po::value<std::string>(), "scenario YAML (the model, batch and optimizer that ran)");
  add("profile", po::value<std::string>(),
      "hardware profile to validate: a built-in name or a .yaml path (e.g. what `twinflow calibrate --out` wrote)");
  add("measured", po::value<std::string>(),
      "compare this `twinflow run --json` file instead of measuring (no GPU needed)");
  add("ratios", po::value<std::string>(),
      "ratios to measure (default 0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.8,1 less those the memory model rejects)");
  add("steps", po::value<int>()->default_value(6), "steps per ratio when measuring (the first is not counted)");
  add("nproc", po::value<int>(), "ranks to measure on this node (default: the scenario's GPUs)");
  add("run-json", po::value<std::string>()->default_value("validate-measured.json"),
      "where the measured sweep is kept when measuring");
  add("trace", po::value<std::string>(), "when measuring: a Chrome trace per ratio (passed to `twinflow run --trace`)");
  add("csv", po::value<std::string>(), "write the table as CSV");
  add("json", po::value<std::string>(), "write the table, MAPE and goals as JSON");
  add("svg", po::value<std::string>(), "plot measured and simulated step time against the ratio");
  add("mape-goal", po::value<double>()->default_value(5.0), "goal for the mean absolute percentage error, %");
  add("max-goal", po::value<double>()->default_value(10.0), "goal for the worst point's absolute error, %");
  po::positional_options_description pos;
  pos.add("scenario", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << desc
              << "\nEach point's measured step is the median of its steps after the first; spread = (max - min) /\n"
                 "median of those. error = (simulated - measured) / measured. Phase columns (ms, measured/simulated):\n"
                 "compute = forward + backward op time, opt = end of the last backward to the end of the step,\n"
                 "cpu = CPU optimizer op time, d2h/h2d = copy op time.\n"
                 "Exit codes: 0 both goals met, 1 a goal missed, 2 bad input, 3 the measuring run failed.\n";
    return kExitOk;
  }
  po::notify(vm);
  if (!vm.count("scenario")) throw core::InputError("a SCENARIO is required (the scenario that ran or will run)");
  if (!vm.count("profile"))
    throw core::InputError("--profile is required: the hardware profile to validate (e.g. from twinflow calibrate)");
  const std::string scenario_file = vm["scenario"].as<std::string>();
  core::Scenario sc = core::load_scenario(scenario_file);
  for (const std::string& w : sc.warnings) std::cerr << "warning: " << w << "\n";
  const std::string profile_arg = vm["profile"].as<std::string>();
  sc.cluster.hardware = core::find_hardware_profile(profile_arg);
  sc.cluster.profile = profile_arg;
  const double mape_goal = vm["mape-goal"].as<double>(), max_goal = vm["max-goal"].as<double>();
  if (!(mape_goal > 0) || !(max_goal > 0)) throw core::InputError("--mape-goal and --max-goal must be > 0");

  std::string measured_file;
  if (vm.count("measured")) {
    if (vm.count("ratios") || vm.count("nproc") || vm.count("trace"))
      throw core::InputError(
          "--measured compares an existing sweep: --ratios, --nproc and --trace apply only to measuring");
    measured_file = vm["measured"].as<std::string>();
  } else {
    const int steps = vm["steps"].as<int>();
    if (steps < 2 || steps > 1000) throw core::InputError("--steps must be in [2, 1000] (the first is not counted)");
    const int nproc = vm.count("nproc") ? vm["nproc"].as<int>() : sc.cluster.world_size();
    if (nproc < 1 || nproc > 1024) throw core::InputError("--nproc must be in [1, 1024]");
    std::vector<double> ratios;
    if (vm.count("ratios")) {
      ratios = parse_ratio_list(vm["ratios"].as<std::string>());
    } else {
      core::Scenario probe = sc;
      if (nproc != probe.cluster.world_size()) probe.cluster.nodes = 1, probe.cluster.gpus_per_node = nproc;
      for (double r : {0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0}) {
        const backend::sim::SimPoint sp = backend::sim::simulate_step(probe, r);
        if (sp.oom)
          std::cout << "validate: ratio " << r << " left out: " << sp.oom_reason << "\n";
        else
          ratios.push_back(r);
      }
      if (ratios.empty()) throw core::InputError("no ratio fits this machine by the memory model; give --ratios");
    }
    std::string list;
    for (double r : ratios) list += (list.empty() ? "" : ",") + ratio_text(r);
    measured_file = vm["run-json"].as<std::string>();
    std::vector<std::string> cmd;
    if (nproc > 1) cmd = {"launch", "--nproc-per-node", std::to_string(nproc), "--"};
    for (const std::string& a :
         {std::string("run"), scenario_file, std::string("--ratios"), list, std::string("--steps"),
          std::to_string(steps), std::string("--json"), measured_file})
      cmd.push_back(a);
    if (vm.count("trace")) cmd.insert(cmd.end(), {"--trace", vm["trace"].as<std::string>()});
    const int rc = run_self(cmd);
    if (rc != 0) {
      std::cerr << "twinflow validate: the measuring run exited with " << rc
                << "; validate measures on a GPU machine (pass --measured FILE to compare an earlier "
                   "`twinflow run --json` sweep without one)\n";
      return rc == kExitBadInput ? kExitBadInput : kExitRuntime;
    }
  }

  const MeasuredSweep m = load_measured_sweep(measured_file);
  const Validation v = validate_sweep(sc, m);

  std::cout << "validate: " << (sc.name.empty() ? scenario_file : sc.name) << " | profile "
            << sc.cluster.hardware.name << " | measured " << measured_file << " (" << (m.gpu.empty() ? "?" : m.gpu)
            << ", " << m.world << " rank(s), " << m.threads << " CPU threads, workload "
            << (m.workload.empty() ? "?" : m.workload) << ")\n";
  Table t({"ratio", "actual", "measured_ms", "spread_%", "simulated_ms", "error_%", "compute m/s", "opt m/s",
           "cpu m/s", "d2h m/s", "h2d m/s"});
  auto pair = [](double a, double b) { return fmt(a, 1) + "/" + fmt(b, 1); };
  for (const ValidationRow& r : v.rows)
    t.add({fmt(r.ratio, 3), fmt(r.actual_ratio, 4), fmt(r.measured.median_ms, 1), fmt(r.measured.spread * 100, 1),
           fmt(r.simulated_ms, 1), fmt(r.error_pct, 1), pair(r.meas_compute_ms, r.sim_compute_ms),
           pair(r.meas_opt_phase_ms, r.sim_opt_phase_ms), pair(r.meas_cpu_opt_ms, r.sim_cpu_opt_ms),
           pair(r.meas_d2h_ms, r.sim_d2h_ms), pair(r.meas_h2d_ms, r.sim_h2d_ms)});
  t.print(std::cout);
  const bool mape_ok = v.mape_pct <= mape_goal, max_ok = v.worst_pct <= max_goal;
  std::cout << "MAPE " << fmt(v.mape_pct, 2) << "% over " << v.rows.size() << " points (goal <= " << fmt(mape_goal, 1)
            << "%): " << (mape_ok ? "met" : "MISSED") << "; worst " << fmt(v.worst_pct, 2) << "% at ratio "
            << fmt(v.worst_ratio, 3) << " (goal <= " << fmt(max_goal, 1) << "%): " << (max_ok ? "met" : "MISSED")
            << "\n";

  if (vm.count("csv")) t.write_csv(vm["csv"].as<std::string>());
  if (vm.count("json")) {
    nlohmann::json doc;
    doc["scenario"] = sc.name;
    doc["profile"] = sc.cluster.hardware.name;
    doc["profile_arg"] = profile_arg;
    doc["measured_file"] = measured_file;
    doc["gpu"] = m.gpu;
    doc["world"] = m.world;
    doc["threads"] = m.threads;
    doc["mape_pct"] = v.mape_pct;
    doc["worst_pct"] = v.worst_pct;
    doc["worst_ratio"] = v.worst_ratio;
    doc["goals"] = {{"mape_pct", mape_goal}, {"worst_pct", max_goal}, {"met", mape_ok && max_ok}};
    for (const ValidationRow& r : v.rows)
      doc["points"].push_back({{"ratio", r.ratio},
                               {"actual_ratio", r.actual_ratio},
                               {"measured_ms", r.measured.median_ms},
                               {"measured_spread", r.measured.spread},
                               {"measured_steps", r.measured.steps},
                               {"simulated_ms", r.simulated_ms},
                               {"error_pct", r.error_pct},
                               {"compute_ms", {r.meas_compute_ms, r.sim_compute_ms}},
                               {"optimizer_phase_ms", {r.meas_opt_phase_ms, r.sim_opt_phase_ms}},
                               {"cpu_optimizer_ms", {r.meas_cpu_opt_ms, r.sim_cpu_opt_ms}},
                               {"d2h_ms", {r.meas_d2h_ms, r.sim_d2h_ms}},
                               {"h2d_ms", {r.meas_h2d_ms, r.sim_h2d_ms}}});
    std::ofstream out(vm["json"].as<std::string>());
    if (!(out << doc.dump(1) << "\n")) throw core::InputError("--json " + vm["json"].as<std::string>() + ": cannot write");
  }
  if (vm.count("svg")) {
    PlotSpec spec;
    spec.title = "validate: " + (sc.name.empty() ? scenario_file : sc.name) + " on " + (m.gpu.empty() ? "?" : m.gpu) +
                 " x" + std::to_string(m.world) + ", profile " + sc.cluster.hardware.name;
    spec.x_label = "ratio (CPU share of the optimizer)";
    spec.left_label = "step time (ms)";
    Series meas{"measured (median of steps 2..)", {}, {}, false, "#1f77b4", {}};
    Series sim{"simulated", {}, {}, false, "#ff7f0e", {}};
    for (const ValidationRow& r : v.rows) {
      meas.x.push_back(r.actual_ratio);
      meas.y.push_back(r.measured.median_ms);
      sim.x.push_back(r.actual_ratio);
      sim.y.push_back(r.simulated_ms);
    }
    spec.series = {meas, sim};
    spec.note = "MAPE " + fmt(v.mape_pct, 2) + "%, worst " + fmt(v.worst_pct, 2) + "% at ratio " +
                fmt(v.worst_ratio, 3) + " (" + std::to_string(v.rows.size()) + " points)";
    write_svg(spec, vm["svg"].as<std::string>());
  }
  return mape_ok && max_ok ? kExitOk : kExitCheckFailed;
}

}  // namespace tf::app
