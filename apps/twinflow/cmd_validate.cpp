// `twinflow validate`: measures a ratio sweep with the real backend (or reads one that `twinflow run
// --json` wrote), simulates the same points with a hardware profile, and prints both side by side with
// the error of each point, the MAPE and the worst point against goals; CSV, JSON and an SVG plot.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/twinflow/breakdown.h"
#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "apps/twinflow/cpu_ranks.h"
#include "apps/twinflow/svg_plot.h"
#include "apps/twinflow/table.h"
#include "apps/twinflow/validate.h"
#include "backends/sim/sim_backend.h"
#include "core/error.h"
#include "core/hardware.h"
#include "core/memory_fit.h"
#include "core/scenario.h"
#include "core/settings.h"

namespace fs = std::filesystem;

namespace tf::app {
namespace {

std::string ratio_text(double r) {
  std::ostringstream os;
  os << r;
  return os.str();
}

// Runs this executable with `args` (a twinflow subcommand); a SIGINT or SIGTERM that reaches validate
// meanwhile stops the measuring run too (run_passing_stop_signals).
ChildExit run_self(const std::vector<std::string>& args) {
  std::vector<std::string> all = {self_executable("validate")};
  all.insert(all.end(), args.begin(), args.end());
  std::cout << "validate: measuring:";
  for (size_t i = 1; i < all.size(); ++i) std::cout << " " << all[i];
  std::cout << "\n" << std::flush;
  return run_passing_stop_signals("validate", all);
}

// ---- the command line ---------------------------------------------------------------------------------

struct ValidateOptions {
  std::string scenario_file, profile;
  core::Scenario sc;  // with the profile to validate
  std::optional<std::string> measured;
  std::optional<std::string> ratios;
  int steps = 8;
  std::optional<int> nproc;
  std::string run_json;
  OutputFiles out;                          // csv, json, svg; trace when measuring
  std::optional<std::string> memory_svg;    // measured and predicted peak GPU memory against the ratio
  std::optional<std::string> speculation;   // when measuring: run's --speculation, as given
  std::optional<std::string> timeline_svg;  // when measuring: run's --timeline-svg (one file per ratio)
  std::optional<int> trace_steps;           // when measuring: run's --trace-steps (with --trace)
  std::string host_check = "auto";          // on | off | auto (on when measuring): check_host
  bool host_check_on() const { return host_check == "on" || (host_check == "auto" && !measured); }
  double mape_goal = 5, max_goal = 10;
  std::vector<std::string> breakdown;  // Chrome traces of measured steps: per-layer time against the costs
};

const IntOption kSteps{"steps", 2, 1000, 8,
                       "steps per ratio when measuring (the first is not counted; with the tail carried, 8 leave "
                       "three steps of the held case after a clipped warm-up)"};
const IntOption kNproc{"nproc", 1, 1024, std::nullopt, "ranks to measure on this node (default: the scenario's GPUs)"};

CommandOptions validate_options() {
  CommandOptions o("twinflow validate SCENARIO --profile P [options]: a measured ratio sweep against the simulator");
  auto add = o.desc.add_options();
  add("help,h", "show this help");
  add_scenario_option(o.desc, o.pos, "scenario YAML (the model, batch and optimizer that ran)");
  add("profile", po::value<std::string>(),
      "hardware profile to validate: a built-in name or a .yaml path (e.g. what `twinflow calibrate --out` wrote)");
  add("measured", po::value<std::string>(),
      "compare this `twinflow run --json` file instead of measuring (no GPU needed)");
  add("ratios", po::value<std::string>(),
      "ratios to measure (default 0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.8,1 less those the memory model rejects)");
  add_int_option(o.desc, kSteps);
  add_int_option(o.desc, kNproc);
  add("run-json", po::value<std::string>()->default_value("validate-measured.json"),
      "where the measured sweep is kept when measuring");
  add("host-check", po::value<std::string>()->default_value("auto"),
      "on | off | auto (on when measuring): the node's CPU optimizer rate on calibrate's rank-curve segments on "
      "this host against the profile's, i.e. how far the host moved since calibrate; when measuring, before every "
      "ratio and after the last (run --host-probe), and each point is also simulated with the host's rate around "
      "it (host_%, tracked_%); with --measured: once, only where this is the host that measured. When measuring it "
      "also passes run --pages-probe: each point's engine times its CPU pass over its own pages before its first "
      "step, and the point is simulated with that rate too (pages_%, placed_%)");
  add_output_options(o.desc, {.csv = "write the table as CSV",
                              .json = "write the table, MAPE and goals as JSON",
                              .svg = "plot measured and simulated step time against the ratio",
                              .trace = "when measuring: a Chrome trace per ratio (passed to `twinflow run --trace`)"});
  add("memory-svg", po::value<std::string>(), "plot measured and predicted peak GPU memory against the ratio");
  add_speculation_option(o.desc);
  add("trace-steps", po::value<int>(),
      "when measuring, with --trace: each ratio's last N steps on one time axis (passed to `twinflow run "
      "--trace-steps`; 1 to --steps): the held steps validate compares, not only the drained last one");
  add("timeline-svg", po::value<std::string>(),
      "when measuring: each ratio's last step as an SVG timeline (passed to `twinflow run --timeline-svg`: FILE's "
      "stem + -rRATIO)");
  add("breakdown", po::value<std::vector<std::string>>()->multitoken(),
      "TRACE...: Chrome traces of measured steps (`twinflow run --trace`): rank 0's forward/backward time per layer "
      "kind against the simulator's per-layer costs by op class, and the GEMMs' rates; alone (no --measured) it "
      "measures nothing");
  add("mape-goal", po::value<double>()->default_value(5.0),
      "goal for the mean absolute percentage error of the step time and of the peak GPU memory, %");
  add("max-goal", po::value<double>()->default_value(10.0),
      "goal for the worst point's absolute error of the step time and of the peak GPU memory, %");
  return o;
}

const char kValidateEpilog[] =
    "\nEach point's measured step is the median of its compared steps (steps): its steady steps (not the first;\n"
    "with the tail carried, not the second nor the drained last) in the speculation case it is simulated in,\n"
    "each after a step of that case; spread = (max - min) / median of those. error = (simulated - measured) /\n"
    "measured. Phase columns (ms, measured/simulated):\n"
    "compute = forward + backward op time, opt = end of the last backward to the end of the step,\n"
    "cpu = CPU optimizer op time (passes and commits), d2h/h2d = copy op time. gpu_GB m/s: peak GPU memory after step "
    "1\n"
    "(cudaMemGetInfo) against the memory model's; its MAPE and worst point are held to the same goals.\n"
    "Exit codes: 0 every goal met, 1 a goal missed, 2 bad input, 3 the measuring run failed, 4 internal error,\n"
    "128 + N a signal N stopped validate while it measured (passed on to the measuring run, which stops too).\n";

std::optional<ValidateOptions> parse_validate_options(const std::vector<std::string>& args) {
  const std::optional<po::variables_map> parsed = parse_command(args, validate_options(), kValidateEpilog);
  if (!parsed) return std::nullopt;
  const po::variables_map& vm = *parsed;
  if (!has_scenario(vm)) throw core::InputError("a SCENARIO is required (the scenario that ran or will run)");
  if (!vm.count("profile"))
    throw core::InputError("--profile is required: the hardware profile to validate (e.g. from twinflow calibrate)");
  ValidateOptions o;
  o.scenario_file = scenario_arg(vm);
  o.sc = load_scenario_option(vm);
  o.profile = vm["profile"].as<std::string>();
  o.sc.cluster.hardware = core::find_hardware_profile(o.profile);
  o.sc.cluster.profile = o.profile;
  for (const std::string& w : o.sc.cluster.hardware.warnings) warn(w);
  o.mape_goal = vm["mape-goal"].as<double>();
  o.max_goal = vm["max-goal"].as<double>();
  if (!(o.mape_goal > 0) || !(o.max_goal > 0)) throw core::InputError("--mape-goal and --max-goal must be > 0");
  o.out = read_output_options(vm);
  if (vm.count("breakdown")) o.breakdown = vm["breakdown"].as<std::vector<std::string>>();
  if (vm.count("memory-svg")) o.memory_svg = vm["memory-svg"].as<std::string>();
  o.host_check = vm["host-check"].as<std::string>();
  if (o.host_check != "on" && o.host_check != "off" && o.host_check != "auto")
    throw core::InputError("--host-check '" + o.host_check + "': allowed on, off, auto");
  if (vm.count("measured")) {
    if (vm.count("ratios") || vm.count("nproc") || o.out.trace || vm.count("trace-steps") || vm.count("speculation") ||
        vm.count("timeline-svg"))
      throw core::InputError(
          "--measured compares an existing sweep: --ratios, --nproc, --trace, --trace-steps, --speculation and "
          "--timeline-svg apply only to measuring");
    o.measured = vm["measured"].as<std::string>();
    return o;
  }
  o.steps = int(int_option(vm, kSteps));
  if (const std::optional<int64_t> nproc = optional_int_option(vm, kNproc)) o.nproc = int(*nproc);
  if (vm.count("ratios")) o.ratios = vm["ratios"].as<std::string>();
  if (vm.count("speculation")) {
    (void)read_speculation_option(vm);  // checked here, before anything runs
    o.speculation = vm["speculation"].as<std::string>();
  }
  if (vm.count("timeline-svg")) o.timeline_svg = vm["timeline-svg"].as<std::string>();
  if (vm.count("trace-steps")) {
    o.trace_steps = vm["trace-steps"].as<int>();
    if (!o.out.trace) throw core::InputError("--trace-steps: applies to --trace FILE, which is not given");
    if (*o.trace_steps < 1 || *o.trace_steps > o.steps)
      throw core::InputError("--trace-steps " + std::to_string(*o.trace_steps) + ": must be in [1, " +
                             std::to_string(o.steps) + "] (--steps)");
  }
  o.run_json = vm["run-json"].as<std::string>();
  return o;
}

// ---- measuring ------------------------------------------------------------------------------------------

// The default ratios less those the memory model rejects on `nproc` ranks of one node (with the
// --speculation budget the run will plan with).
std::vector<double> feasible_ratios(const core::Scenario& sc, int nproc, std::optional<int64_t> speculation) {
  core::Scenario probe = sc;
  backend::sim::SimOptions opt;
  opt.overrides.speculation_bytes = speculation;
  if (nproc != probe.cluster.world_size()) {
    probe.cluster.nodes = 1, probe.cluster.gpus_per_node = nproc;
    opt.overrides.world = nproc;
    opt.overrides.world_from = "--nproc";
  }
  std::vector<double> ratios;
  for (double r : {0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0}) {
    const backend::sim::SimPoint sp = backend::sim::simulate_step(probe, r, opt);
    if (sp.oom)
      std::cout << "validate: ratio " << r << " left out: " << sp.oom_reason << "\n";
    else
      ratios.push_back(r);
  }
  if (ratios.empty()) throw core::InputError("no ratio fits this machine by the memory model; give --ratios");
  return ratios;
}

// The sweep measured by `twinflow run` (through `twinflow launch` with several ranks); returns the exit
// code to leave with when it failed.
std::optional<int> measure(const ValidateOptions& o) {
  const int nproc = o.nproc.value_or(o.sc.cluster.world_size());
  std::optional<int64_t> speculation;
  if (o.speculation) speculation = parse_speculation_text(*o.speculation);
  const std::vector<double> ratios = o.ratios ? parse_ratio_list(*o.ratios) : feasible_ratios(o.sc, nproc, speculation);
  std::string list;
  for (double r : ratios) list += (list.empty() ? "" : ",") + ratio_text(r);
  std::vector<std::string> cmd;
  if (nproc > 1) cmd = {"launch", "--nproc-per-node", std::to_string(nproc), "--"};
  for (const std::string& a : {std::string("run"), o.scenario_file, std::string("--ratios"), list,
                               std::string("--steps"), std::to_string(o.steps), std::string("--json"), o.run_json})
    cmd.push_back(a);
  if (o.out.trace) cmd.insert(cmd.end(), {"--trace", *o.out.trace});
  if (o.trace_steps) cmd.insert(cmd.end(), {"--trace-steps", std::to_string(*o.trace_steps)});
  if (o.speculation) cmd.insert(cmd.end(), {"--speculation", *o.speculation});
  if (o.timeline_svg) cmd.insert(cmd.end(), {"--timeline-svg", *o.timeline_svg});
  if (o.host_check_on()) cmd.insert(cmd.end(), {"--host-probe", "--pages-probe"});
  const ChildExit e = run_self(cmd);
  if (e.stop_signal) {
    std::cerr << "twinflow validate: stopped by signal " << e.stop_signal << "; the measuring run was stopped too\n";
    return 128 + e.stop_signal;
  }
  const int rc = e.code;
  if (rc == 0) return std::nullopt;
  std::cerr << "twinflow validate: the measuring run exited with " << rc
            << "; validate measures on a GPU machine (pass --measured FILE to compare an earlier "
               "`twinflow run --json` sweep without one)\n";
  return rc == kExitBadInput || rc == kExitInternal ? rc : kExitRuntime;
}

// After the sweep, on the same host: the node rate of its ranks' CPU passes on calibrate's rank-curve segments
// (CpuRankGroup, the engine's CPU path), against the profile's rank curve at that many ranks. On two H200s
// the host's rate moved 10-35% within minutes of a calibration (bench/results/2026-11-28-h200x2-footprints):
// a simulated CPU time is then off by about that much, whatever the model.
struct HostCheck {
  int ranks = 0;
  double now_gparam_s = 0, profile_gparam_s = 0;
  bool from_run = false;  // the run's probe after its last ratio (run --host-probe), not measured again here
  double moved_pct() const { return (now_gparam_s - profile_gparam_s) / profile_gparam_s * 100; }
};

std::optional<HostCheck> check_host(const ValidateOptions& o, const MeasuredSweep& m) {
  HostCheck h;
  h.ranks = std::max(1, std::min(m.world, core::ranks_per_node(o.sc, m.world)));
  h.profile_gparam_s = o.sc.cluster.hardware.cpu.optimizer_node_gparam_s(h.ranks);
  if (!(h.profile_gparam_s > 0)) {
    std::cout << "host check: skipped (profile " << o.sc.cluster.hardware.name
              << " has no cpu.optimizer_node_gparam_s_by_ranks: twinflow calibrate measures it)\n";
    return std::nullopt;
  }
  if (const auto& last = m.points.back().host_probe; last && last->ranks == h.ranks) {
    h.now_gparam_s = last->after_gparam_s;  // the run measured it after its last ratio
    h.from_run = true;
    return h;
  }
  std::cerr << "validate: host check, " << h.ranks << " rank process(es) on calibrate's rank-curve segments\n";
  h.now_gparam_s = measure_node_cpu_rate(engine_cpu_op({o.sc}).elems, h.ranks).gparam_s;
  return h;
}

void print_host_check(const HostCheck& h) {
  std::cout << "host check: " << h.ranks << " rank process" << (h.ranks > 1 ? "es" : "")
            << " on calibrate's rank-curve segments after the sweep" << (h.from_run ? " (the run's last probe)" : "")
            << ": " << fmt(h.now_gparam_s, 3) << " Gparam/s, the profile " << fmt(h.profile_gparam_s, 3) << " ("
            << (h.moved_pct() >= 0 ? "+" : "") << fmt(h.moved_pct(), 1) << "%)";
  if (std::abs(h.moved_pct()) > 5)
    std::cout << ": this host's CPU rate is not the profile's (it moved since calibrate, or calibrate ran elsewhere); "
                 "the simulated CPU times (cpu m/s) are off by about that much whatever the model (calibrate right "
                 "before the sweep)";
  std::cout << "\n";
}

// ---- the comparison --------------------------------------------------------------------------------------

// The rows' host probes: how far the host moved, and the error left once that drift in time is measured.
void print_host_tracked(const Validation& v) {
  if (v.host_tracked.points == 0) return;
  int moved = 0;
  for (const ValidationRow& r : v.rows) moved += r.has_host && std::abs(r.host_moved_pct) > 5;
  std::cout << "host-tracked (each point re-simulated with the profile's CPU rates scaled to the node rate probed "
               "on calibrate's segments before and after it, host_%): MAPE "
            << fmt(v.host_tracked.mape_pct, 2) << "% over " << v.host_tracked.points << " points, worst "
            << fmt(v.host_tracked.worst_pct, 2) << "% at ratio " << fmt(v.host_tracked.worst_ratio, 3)
            << ": the error left once the host's drift in time is measured (not the goal, which holds the profile as "
               "calibrated; the pages of the engine's own allocation can run at another rate than the probe's: "
               "docs/ARCHITECTURE.md, \"Validation\")";
  if (moved > 0)
    std::cout << "; at " << moved << " point" << (moved > 1 ? "s" : "")
              << " the host's CPU rate was more than 5% off the profile's";
  std::cout << "\n";
}

// The rows' own-pages probes: how far the pages the run got were from the profile's, and the error left once
// their rate is measured.
void print_pages_tracked(const Validation& v) {
  if (v.pages_tracked.points == 0) return;
  std::cout << "pages-tracked (each point re-simulated with the profile's CPU rates scaled to the node rate of the "
               "engine's CPU pass over its own pages, timed before its first step, pages_%): MAPE "
            << fmt(v.pages_tracked.mape_pct, 2) << "% over " << v.pages_tracked.points << " points, worst "
            << fmt(v.pages_tracked.worst_pct, 2) << "% at ratio " << fmt(v.pages_tracked.worst_ratio, 3)
            << ": the error left once the rate of the pages the run got is measured (not the goal, which holds "
               "the profile as calibrated: docs/ARCHITECTURE.md, \"Validation\")\n";
}

// The run's SM clock by point against the one calibrate timed the GEMM table at (gpu.gemm_sm_clock_mhz), a sign of
// a power or thermal limit the simulator does not model (docs/ARCHITECTURE.md, "GPU telemetry"). Nothing where the
// run read no clock.
void print_clock(const Validation& v, double gemm_mhz) {
  std::string by_ratio;
  std::vector<double> all;
  for (const ValidationRow& r : v.rows)
    if (std::isfinite(r.meas_sm_mhz)) {
      by_ratio += (by_ratio.empty() ? "" : ", ") + fmt(r.ratio, 3) + ": " + fmt(r.meas_sm_mhz, 0);
      all.push_back(r.meas_sm_mhz);
    }
  if (all.empty()) return;
  std::sort(all.begin(), all.end());
  std::cout << "SM clock (NVML, the compared steps' median, MHz) by ratio: " << by_ratio;
  if (gemm_mhz > 0) {
    const double lo = all.front() / gemm_mhz, hi = all.back() / gemm_mhz;
    std::cout << "; calibrate timed the GEMM table at " << fmt(gemm_mhz, 0) << " MHz (gpu.gemm_sm_clock_mhz): the run "
              << "ran at " << fmt(lo, 3) << (hi - lo > 0.0005 ? "-" + fmt(hi, 3) : "") << " of it";
    if (lo < 0.97)
      std::cout << ": the GPU's power or thermal limit held this run below calibrate's clock, which the simulator "
                   "has no term for (how much slower its kernels ran is not the clock ratio alone: calibrate's GEMMs "
                   "are power-limited too)";
  } else {
    std::cout << "; the profile has no gpu.gemm_sm_clock_mhz to compare with (twinflow calibrate reads it)";
  }
  std::cout << "\n";
}

struct Verdict {
  bool mape_ok = false, max_ok = false;
  bool memory_mape_ok = true, memory_max_ok = true;  // true where the sweep has no memory to compare
  bool all() const { return mape_ok && max_ok && memory_mape_ok && memory_max_ok; }
};

Verdict print_validation(const ValidateOptions& o, const MeasuredSweep& m, const std::string& measured_file,
                         const Validation& v, Table& t) {
  std::cout << "validate: " << (o.sc.name.empty() ? o.scenario_file : o.sc.name) << " | profile "
            << o.sc.cluster.hardware.name << " | measured " << measured_file << " (" << (m.gpu.empty() ? "?" : m.gpu)
            << ", " << m.world << " rank(s), " << m.threads << " CPU threads, workload "
            << (m.workload.empty() ? "?" : m.workload) << ")\n";
  auto pair = [](double a, double b) { return fmt(a, 1) + "/" + fmt(b, 1); };
  for (const ValidationRow& r : v.rows)
    t.add({fmt(r.ratio, 3), fmt(r.actual_ratio, 4), fmt(r.measured.median_ms, 1), fmt(r.measured.spread * 100, 1),
           std::to_string(r.measured.steps), fmt(r.simulated_ms, 1), fmt(r.error_pct, 1),
           pair(r.meas_compute_ms, r.sim_compute_ms), pair(r.meas_opt_phase_ms, r.sim_opt_phase_ms),
           pair(r.meas_cpu_opt_ms, r.sim_cpu_opt_ms), pair(r.meas_d2h_ms, r.sim_d2h_ms),
           pair(r.meas_h2d_ms, r.sim_h2d_ms), r.has_memory ? fmt(r.meas_gpu_gb, 2) + "/" + fmt(r.sim_gpu_gb, 2) : "-",
           r.has_memory ? fmt(r.gpu_error_pct, 1) : "-", r.has_host ? fmt(r.host_moved_pct, 1) : "-",
           r.has_host ? fmt(r.host_tracked_error_pct, 1) : "-", r.has_pages ? fmt(r.pages_pct, 1) : "-",
           r.has_pages ? fmt(r.pages_tracked_error_pct, 1) : "-"});
  t.print(std::cout);
  int fewest = std::numeric_limits<int>::max();
  for (const ValidationRow& r : v.rows) fewest = std::min(fewest, r.measured.steps);
  if (fewest < 2)
    std::cout << "note: a point is compared over " << fewest
              << " step: its steps of the simulated speculation case, each after one of that case (after a "
                 "clipped first step, the held ones from step 5 on); measure 8 or more steps (--steps) for a "
                 "median\n";
  Verdict verdict{v.mape_pct <= o.mape_goal, v.worst_pct <= o.max_goal};
  std::cout << "step time: MAPE " << fmt(v.mape_pct, 2) << "% over " << v.rows.size()
            << " points (goal <= " << fmt(o.mape_goal, 1) << "%): " << (verdict.mape_ok ? "met" : "MISSED")
            << "; worst " << fmt(v.worst_pct, 2) << "% at ratio " << fmt(v.worst_ratio, 3)
            << " (goal <= " << fmt(o.max_goal, 1) << "%): " << (verdict.max_ok ? "met" : "MISSED") << "\n";
  print_host_tracked(v);
  print_pages_tracked(v);
  print_clock(v, o.sc.cluster.hardware.gpu.gemm_sm_clock_mhz);
  if (v.memory.points > 0) {
    verdict.memory_mape_ok = v.memory.mape_pct <= o.mape_goal;
    verdict.memory_max_ok = v.memory.worst_pct <= o.max_goal;
    std::cout << "peak GPU memory: MAPE " << fmt(v.memory.mape_pct, 2) << "% over " << v.memory.points
              << " points (goal <= " << fmt(o.mape_goal, 1) << "%): " << (verdict.memory_mape_ok ? "met" : "MISSED")
              << "; worst " << fmt(v.memory.worst_pct, 2) << "% at ratio " << fmt(v.memory.worst_ratio, 3)
              << " (goal <= " << fmt(o.max_goal, 1) << "%): " << (verdict.memory_max_ok ? "met" : "MISSED") << "\n";
  } else {
    std::cout << "peak GPU memory: not in the measured sweep (a run from before memory_check)\n";
  }
  return verdict;
}

void write_validation_json(const ValidateOptions& o, const MeasuredSweep& m, const std::string& measured_file,
                           const Validation& v, const Verdict& verdict, const std::optional<HostCheck>& host) {
  nlohmann::json doc;
  doc["scenario"] = o.sc.name;
  doc["profile"] = o.sc.cluster.hardware.name;
  doc["profile_arg"] = o.profile;
  doc["measured_file"] = measured_file;
  doc["gpu"] = m.gpu;
  doc["world"] = m.world;
  doc["threads"] = m.threads;
  doc["mape_pct"] = v.mape_pct;
  doc["worst_pct"] = v.worst_pct;
  doc["worst_ratio"] = v.worst_ratio;
  doc["goals"] = {{"mape_pct", o.mape_goal},
                  {"worst_pct", o.max_goal},
                  {"met", verdict.all()},
                  {"step_met", verdict.mape_ok && verdict.max_ok},
                  {"memory_met", verdict.memory_mape_ok && verdict.memory_max_ok}};
  const auto summary = [](const ErrorSummary& e) {
    return nlohmann::json{
        {"mape_pct", e.mape_pct}, {"worst_pct", e.worst_pct}, {"worst_ratio", e.worst_ratio}, {"points", e.points}};
  };
  if (v.memory.points > 0) doc["memory"] = summary(v.memory);
  if (host)
    doc["host_check"] = {{"ranks", host->ranks},
                         {"now_gparam_s", host->now_gparam_s},
                         {"profile_gparam_s", host->profile_gparam_s},
                         {"moved_pct", host->moved_pct()},
                         {"from_run", host->from_run}};
  if (v.host_tracked.points > 0) doc["host_tracked"] = summary(v.host_tracked);
  if (v.pages_tracked.points > 0) doc["pages_tracked"] = summary(v.pages_tracked);
  add_scenario_record(doc, o.sc);
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
                             {"h2d_ms", {r.meas_h2d_ms, r.sim_h2d_ms}},
                             {"sm_mhz", std::isfinite(r.meas_sm_mhz) ? nlohmann::json(r.meas_sm_mhz)
                                                                     : nlohmann::json()}});
  for (size_t i = 0; i < v.rows.size(); ++i)
    if (v.rows[i].has_memory)
      doc["points"][i]["gpu_gb"] = {{"measured", v.rows[i].meas_gpu_gb},
                                    {"simulated", v.rows[i].sim_gpu_gb},
                                    {"error_pct", v.rows[i].gpu_error_pct}};
  const auto tracked = [](double moved_pct, double ms, double error_pct) {
    return nlohmann::json{{"moved_pct", moved_pct}, {"tracked_ms", ms}, {"tracked_error_pct", error_pct}};
  };
  for (size_t i = 0; i < v.rows.size(); ++i) {
    const ValidationRow& r = v.rows[i];
    if (r.has_host) doc["points"][i]["host"] = tracked(r.host_moved_pct, r.host_tracked_ms, r.host_tracked_error_pct);
    if (r.has_pages) doc["points"][i]["pages"] = tracked(r.pages_pct, r.pages_tracked_ms, r.pages_tracked_error_pct);
  }
  write_json_file(doc, *o.out.json, 1);
}

void write_validation_svg(const ValidateOptions& o, const MeasuredSweep& m, const Validation& v) {
  PlotSpec spec;
  spec.title = "validate: " + (o.sc.name.empty() ? o.scenario_file : o.sc.name) + " on " +
               (m.gpu.empty() ? "?" : m.gpu) + " x" + std::to_string(m.world) + ", profile " +
               o.sc.cluster.hardware.name;
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
  if (m.tokens_per_step > 0) {  // a decoder: tokens/s on the right axis, measured and simulated
    spec.right_label = "tokens/s (dashed)";
    spec.series[0].name = "measured ms";  // four legend entries: short names
    spec.series[1].name = "simulated ms";
    Series meas_tps{"measured tok/s", {}, {}, true, "#1f77b4", {}};
    Series sim_tps{"simulated tok/s", {}, {}, true, "#ff7f0e", {}};
    for (const ValidationRow& r : v.rows) {
      meas_tps.x.push_back(r.actual_ratio);
      meas_tps.y.push_back(double(m.tokens_per_step) / (r.measured.median_ms / 1e3));
      sim_tps.x.push_back(r.actual_ratio);
      sim_tps.y.push_back(double(m.tokens_per_step) / (r.simulated_ms / 1e3));
    }
    spec.series.push_back(meas_tps);
    spec.series.push_back(sim_tps);
  }
  spec.note = "MAPE " + fmt(v.mape_pct, 2) + "%, worst " + fmt(v.worst_pct, 2) + "% at ratio " + fmt(v.worst_ratio, 3) +
              " (" + std::to_string(v.rows.size()) + " points)";
  write_svg(spec, *o.out.svg);
}

void write_memory_svg(const ValidateOptions& o, const MeasuredSweep& m, const Validation& v) {
  PlotSpec spec;
  spec.title = "validate: peak GPU memory, " + (o.sc.name.empty() ? o.scenario_file : o.sc.name) + " on " +
               (m.gpu.empty() ? "?" : m.gpu) + " x" + std::to_string(m.world);
  spec.x_label = "ratio (CPU share of the optimizer)";
  spec.left_label = "GPU memory per rank (GB)";
  Series meas{"measured after step 1 (cudaMemGetInfo)", {}, {}, false, "#1f77b4", {}};
  Series sim{"memory model", {}, {}, false, "#ff7f0e", {}};
  for (const ValidationRow& r : v.rows) {
    if (!r.has_memory) continue;
    meas.x.push_back(r.actual_ratio);
    meas.y.push_back(r.meas_gpu_gb);
    sim.x.push_back(r.actual_ratio);
    sim.y.push_back(r.sim_gpu_gb);
  }
  spec.series = {meas, sim};
  spec.note = v.memory.points > 0
                  ? "MAPE " + fmt(v.memory.mape_pct, 2) + "%, worst " + fmt(v.memory.worst_pct, 2) + "% at ratio " +
                        fmt(v.memory.worst_ratio, 3) + " (" + std::to_string(v.memory.points) + " points)"
                  : "the measured sweep recorded no memory";
  write_svg(spec, *o.memory_svg, "--memory-svg");
}

}  // namespace

int cmd_validate(const std::vector<std::string>& args) {
  const std::optional<ValidateOptions> parsed = parse_validate_options(args);
  if (!parsed) return kExitOk;
  const ValidateOptions& o = *parsed;
  if (!o.breakdown.empty()) {
    const size_t layers = core::resolve_settings(o.sc).model.layers.size();
    std::vector<TraceLayerTimes> traces;
    for (const std::string& f : o.breakdown) traces.push_back(read_trace_layer_times(f, layers));
    print_breakdown(breakdown_traces(o.sc, traces), o.sc);
    if (!o.measured) return kExitOk;  // the traces alone: nothing to measure
    std::cout << "\n";
  }
  if (!o.measured)
    if (const std::optional<int> failed = measure(o)) return *failed;
  const std::string measured_file = o.measured.value_or(o.run_json);
  const MeasuredSweep m = load_measured_sweep(measured_file);
  const Validation v = validate_sweep(o.sc, m);
  const std::optional<HostCheck> host = o.host_check_on() ? check_host(o, m) : std::nullopt;
  Table t({"ratio", "actual", "measured_ms", "spread_%", "steps", "simulated_ms", "error_%", "compute m/s", "opt m/s",
           "cpu m/s", "d2h m/s", "h2d m/s", "gpu_GB m/s", "gpu_err_%", "host_%", "tracked_%", "pages_%", "placed_%"});
  const Verdict verdict = print_validation(o, m, measured_file, v, t);
  if (host) print_host_check(*host);
  if (o.out.csv) t.write_csv(*o.out.csv);
  if (o.out.json) write_validation_json(o, m, measured_file, v, verdict, host);
  if (o.out.svg) write_validation_svg(o, m, v);
  if (o.memory_svg) write_memory_svg(o, m, v);
  return verdict.all() ? kExitOk : kExitCheckFailed;
}

}  // namespace tf::app
