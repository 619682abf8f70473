// `twinflow simulate`: one ratio or a sweep of a scenario on the cost-only simulator: a table, CSV,
// JSON, an SVG plot of step time and memory against the ratio, a Chrome trace of one step, and a replay of
// the simulated steps as Prometheus metrics (--metrics-port).
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "apps/twinflow/auto_ratio_report.h"
#include "apps/twinflow/checkpoint_cli.h"
#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "apps/twinflow/cpu_order_report.h"
#include "apps/twinflow/run_decoder.h"
#include "apps/twinflow/step_timeline_svg.h"
#include "apps/twinflow/stop_signals.h"
#include "apps/twinflow/svg_plot.h"
#include "apps/twinflow/table.h"
#include "backends/sim/functional.h"
#include "backends/sim/parallel.h"
#include "backends/sim/sim_backend.h"
#include "core/error.h"
#include "core/memory_fit.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "metrics/http_server.h"
#include "metrics/sim_samples.h"

namespace tf::app {

namespace {

std::vector<double> parse_sweep(const std::string& s) {
  double a, b, step;
  char c1, c2;
  std::istringstream is(s);
  if (!(is >> a >> c1 >> b >> c2 >> step) || c1 != ':' || c2 != ':' || !is.eof())
    throw core::InputError("--sweep '" + s + "': expected START:STOP:STEP, e.g. 0:1:0.05");
  if (!(a >= 0 && a <= 1 && b >= 0 && b <= 1 && a <= b))
    throw core::InputError("--sweep '" + s + "': START and STOP must satisfy 0 <= START <= STOP <= 1");
  if (!(step > 0)) throw core::InputError("--sweep '" + s + "': STEP must be > 0");
  const double n = std::floor((b - a) / step + 1e-9) + 1;
  if (n > 10001) throw core::InputError("--sweep '" + s + "': more than 10001 points; use a larger STEP");
  std::vector<double> r;
  for (int64_t i = 0; i < int64_t(n); ++i) r.push_back(std::min(1.0, a + double(i) * step));
  if (b - r.back() > 1e-9 * std::max(1.0, b)) r.push_back(b);
  return r;
}

double ms(int64_t ns) { return double(ns) / 1e6; }

// ---- --metrics-port: the simulated steps replayed as Prometheus metrics ----
struct ReplayOptions {
  metrics::ServerOptions server;
  core::SettingsOverrides overrides;  // --world
  double pace = 1;                    // wall seconds per simulated second
  double linger_s = 0;                // serve this long after the replay; < 0: until SIGINT/SIGTERM
  int64_t steps = 1;                  // per replayed ratio
  int ranks = 8;                      // ranks published
};

// Sleeps `seconds` of wall time (forever if negative); false when a stop signal arrived. A pace times a
// long simulated step can exceed what a clock duration holds (~292 years in ns): beyond 1e9 s (~32
// years) it sleeps until stopped.
bool sleep_unless_stopped(double seconds, const StopSignals& signals) {
  using Clock = std::chrono::steady_clock;
  const bool forever = seconds < 0 || !(seconds <= 1e9);
  const auto end = Clock::now() +
                   std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(forever ? 0.0 : seconds));
  while (!signals.requested()) {
    const auto now = Clock::now();
    if (!forever && now >= end) return true;
    std::this_thread::sleep_for(forever ? std::chrono::milliseconds(50)
                                        : std::min<Clock::duration>(end - now, std::chrono::milliseconds(50)));
  }
  return false;
}

void replay_metrics(const core::Scenario& sc, const std::vector<backend::sim::SimPoint>& pts, const ReplayOptions& ro) {
  std::vector<const backend::sim::SimPoint*> feasible;
  for (const auto& p : pts)
    if (!p.oom) feasible.push_back(&p);
  if (feasible.empty())
    throw core::InputError("--metrics-port: no simulated ratio fits in memory, so there is no step to replay");
  metrics::Registry registry;
  const core::RunSettings rs = core::resolve_settings(sc, ro.overrides);
  // build info and the configuration before the first step (and again for each replayed ratio)
  const auto publish_config = [&](double ratio, size_t ranks) {
    for (size_t r = 0; r < ranks; ++r)
      metrics::publish_run_config(registry, {int(r), sc.name, "sim"}, metrics_run_config(sc, rs, ratio));
  };
  publish_config(feasible.front()->requested_ratio, metrics::sim_step_samples(*feasible.front(), sc, ro.ranks).size());
  // SIGINT/SIGTERM end the replay (and the linger) cleanly
  const StopSignals signals("\nmetrics: stopping (signal again to exit at once)\n");
  metrics::MetricsServer server(registry, ro.server);
  std::cout << "metrics: serving " << server.url() << " (health: /healthz)" << std::endl;
  warn_if_exposed(ro.server, server.port());
  int64_t step = 0;
  bool stopped = false;
  for (const backend::sim::SimPoint* p : feasible) {
    const std::vector<metrics::StepSample> samples = metrics::sim_step_samples(*p, sc, ro.ranks);
    publish_config(p->requested_ratio, samples.size());
    const double step_s = double(p->step_ns) * 1e-9;
    std::cout << "metrics: replaying " << ro.steps << " step(s) at ratio " << fmt(p->ratio, 3) << " for "
              << samples.size() << " rank(s): " << fmt(step_s * 1e3, 1) << " ms simulated, "
              << fmt(step_s * ro.pace * 1e3, 1) << " ms wall per step (pace " << ro.pace << ")" << std::endl;
    for (int64_t i = 0; i < ro.steps && !stopped; ++i) {
      stopped = !sleep_unless_stopped(step_s * ro.pace, signals);  // the step runs, then its metrics appear
      if (stopped) break;
      ++step;
      for (size_t r = 0; r < samples.size(); ++r) {
        metrics::StepSample s = samples[r];
        s.step = step;
        s.learning_rate = core::lr_at(rs.policy.schedule, step);  // the cost model skips no step
        metrics::publish(registry, s, {int(r), sc.name, "sim"});
      }
    }
    if (stopped) break;
  }
  if (!stopped) {
    std::cout << "metrics: replay done (" << step << " steps); "
              << (ro.linger_s < 0 ? std::string("serving until interrupted (Ctrl-C)")
                                  : "serving for " + fmt(ro.linger_s, 1) + " s more")
              << std::endl;
    stopped = !sleep_unless_stopped(ro.linger_s, signals);
  }
  if (stopped)
    std::cout << "metrics: stopped by signal " << signals.signal() << " after " << step << " steps" << std::endl;
  const metrics::ServerStats st = server.stats();
  server.stop();
  std::cout << "metrics: served " << st.scrapes << " scrape(s)" << std::endl;
}

// ---- the command line ---------------------------------------------------------------------------------

struct SimulateOptions {
  core::Scenario sc;
  std::vector<double> ratios;
  bool sweep = false;  // --sweep: a point that does not fit is shown, not refused
  backend::sim::SimOptions sim;
  OutputFiles out;
  std::optional<std::string> timeline_svg;  // one step's timeline (rank 0), an SVG
  bool functional = false;
  std::optional<int> steps;
  std::optional<ReplayOptions> replay;                // --metrics-port
  std::optional<std::filesystem::path> resume;        // --functional --resume: the checkpoint to continue from
  std::optional<backend::sim::AutoRatio> auto_ratio;  // the ratio was auto: how it was chosen
  bool fit = false;                                   // --fit: the memory model's verdict only
  std::optional<std::string> largest_preset;          // --largest-preset PREFIX
  std::optional<double> at_ratio;                     // --at-ratio: the ratio a preset must fit at
};

const IntOption kWorld{"world", 1, core::kMaxWorld, std::nullopt,
                       "simulated ranks (default: the scenario's nodes x GPUs per node)"};
const IntOption kSteps{"steps", 1, 1000000, std::nullopt,
                       "functional mode: training steps (default: the scenario's, at most 20); with --metrics-port: "
                       "steps replayed per ratio (default: the scenario's training.steps)"};
const IntOption kMetricsRanks{"metrics-ranks", 1, core::kMaxWorld, 8, "publish ranks 0..N-1 of the simulated ranks"};

CommandOptions simulate_options() {
  CommandOptions o("twinflow simulate [SCENARIO] [options]: a ZeRO + Twin-Flow step on the simulator");
  auto add = o.desc.add_options();
  add("help,h", "show this help");
  add_scenario_option(o.desc, o.pos, "scenario YAML (default: the embedded OPT-30B DGX-H100 scenario)");
  add("ratio", po::value<std::string>(), kRatioHelp);
  add_profile_option(o.desc, "hardware profile in place of the scenario's: a built-in name or a .yaml path");
  add("fit", po::bool_switch(),
      "the memory model's verdict only: the ratios that fit per rank, else by how much it misses and the changes "
      "that fit (exit 1 when nothing fits)");
  add("largest-preset", po::value<std::string>(),
      "walk the decoder presets whose name starts with PREFIX (opt, gpt2, or '' for all), largest first, with the "
      "scenario's training shape and machine, and name the first that fits by the memory model");
  add("at-ratio", po::value<double>(), "with --largest-preset: the preset must fit at this ratio (e.g. 1)");
  add("sweep", po::value<std::string>(), "START:STOP:STEP ratios, e.g. 0:1:0.05");
  add_int_option(o.desc, kWorld);
  add_staging_slots_option(o.desc);
  add_speculation_option(o.desc);
  add_carry_tail_option(o.desc);
  add_cpu_order_option(o.desc);
  add_ring_order_option(o.desc);
  add("previous-step-clipped", po::bool_switch(),
      "cost-only: simulate a step after a clipped or skipped one, which does not speculate (every speculated "
      "layer's commit redoes its update after the norm); without it the speculation is assumed to hold");
  add_output_options(o.desc, {.csv = "write the table as CSV",
                              .json = "write points, best ratio and assumptions as JSON",
                              .svg = "plot step time and GPU memory against the ratio",
                              .trace = "Chrome/Perfetto trace of one step (the --ratio, or the best ratio)"});
  add("timeline-svg", po::value<std::string>(),
      "one step's timeline as an SVG, rank 0: a lane per queue, a bar per op (the --ratio, or the best ratio)");
  add("functional", po::bool_switch(),
      "run the math for real on the simulated ranks (small models) and check the final fp32 master weights "
      "bit for bit against a plain single-process training loop, for each ratio");
  add_int_option(o.desc, kSteps);
  add_resume_option(o.desc);
  add_metrics_options(o.desc,
                      "serve Prometheus metrics on this port (0: a free one, printed) and replay the simulated steps "
                      "in simulated time",
                      "address to serve metrics on (numeric; 0.0.0.0 exposes it to the network)",
                      "seconds to keep serving after the replay, so a scraper gets the last step (-1: until Ctrl-C)");
  add("pace", po::value<double>()->default_value(1.0),
      "replay pace: wall seconds per simulated second (1: real time, 10: ten times slower, 0: at once)");
  add_int_option(o.desc, kMetricsRanks);
  return o;
}

const char kSimulateEpilog[] =
    "\nColumns: step = the slowest rank's step; compute/comm/d2h/h2d/cpu = busy time of each queue\n"
    "(rank 0); cpu hid = share of the cpu queue's busy time during which compute is busy too; exposed =\n"
    "step time with the GPU compute queue idle; optim = from the last backward op\n"
    "to the end of the step; GPU/host GB = memory per rank (largest shard); host B/cpu param = host bytes\n"
    "per CPU-side parameter (fp32 master and states + the speculated layers' spare slot + the staging\n"
    "rings; --staging-slots); fits = memory fits the profile (OOM otherwise, still simulated); x vs r=1 =\n"
    "step time at ratio 1 over this step time.\n"
    "With clipping or loss scaling, the CPU layers that speculate (training.speculation, --speculation) update\n"
    "during backward and the simulator assumes their speculation holds (each commit costs only its wait for\n"
    "the norm); --previous-step-clipped simulates the step after a clipped or skipped one instead. With\n"
    "staging rings of N slots only the first N CPU layers (backward order) speculate: a later one's D2H\n"
    "waits for a commit. --staging-slots auto (the default) stages full-size where the host holds it.\n"
    "With a carried tail at full-size staging, the speculated layers' CPU passes run in the order the cost\n"
    "model predicts fastest (--cpu-order auto, the default: printed below the table); --cpu-order arrival\n"
    "runs each as its gradient lands, every commit after them (the order before).\n";

// --metrics-port and the options that need it.
std::optional<ReplayOptions> replay_options(const po::variables_map& vm) {
  const MetricsOptions m = read_metrics_options(vm);
  if (!m.port) {
    for (const char* o : {"metrics-addr", "pace", "metrics-linger", "metrics-ranks"})
      if (!vm[o].defaulted())
        throw core::InputError(std::string("--") + o + " needs --metrics-port (e.g. --metrics-port 9464, or 0)");
    return std::nullopt;
  }
  if (vm["functional"].as<bool>())
    throw core::InputError("--metrics-port replays the cost-only simulation; drop --functional");
  ReplayOptions replay;
  replay.server.port = uint16_t(*m.port);
  replay.server.address = m.address;
  replay.pace = vm["pace"].as<double>();
  if (!(replay.pace >= 0 && std::isfinite(replay.pace)))
    throw core::InputError("--pace must be a finite number >= 0 (wall seconds per simulated second)");
  replay.linger_s = m.linger_s;  // -1 or [0, kMaxLingerSeconds]: read_metrics_options checked it
  replay.ranks = int(int_option(vm, kMetricsRanks));
  return replay;
}

std::optional<SimulateOptions> parse_simulate_options(const std::vector<std::string>& args) {
  const std::optional<po::variables_map> parsed = parse_command(args, simulate_options(), kSimulateEpilog);
  if (!parsed) return std::nullopt;
  const po::variables_map& vm = *parsed;
  if (vm.count("ratio") && vm.count("sweep")) throw core::InputError("give --ratio or --sweep, not both");
  SimulateOptions o;
  o.replay = replay_options(vm);
  o.sc = load_scenario_option(vm);
  apply_profile_option(vm, o.sc);
  if (const std::optional<int64_t> world = optional_int_option(vm, kWorld)) {
    o.sim.overrides.world = int(*world);
    o.sim.overrides.world_from = "--world";
  }
  o.sim.overrides.staging_slots = read_staging_slots(vm);
  core::check_simulation_size(o.sc, o.sim.overrides);  // before anything is simulated
  if (const std::optional<int64_t> steps = optional_int_option(vm, kSteps)) o.steps = int(*steps);
  o.sim.overrides.speculation_bytes = read_speculation_option(vm);
  o.sim.overrides.carry_tail = read_carry_tail_option(vm);
  o.sim.overrides.cpu_order = read_cpu_order_option(vm);
  o.sim.overrides.ring_forward_order = read_ring_order_option(vm);
  if (vm["previous-step-clipped"].as<bool>()) o.sim.speculation = backend::sim::SpeculationCase::kNotSpeculating;
  if (o.replay) {
    o.sim.record_ops = o.sim.keep_plans = true;  // per-op timings give the phase durations
    o.replay->steps = o.steps ? *o.steps : o.sc.training.steps;
    o.replay->overrides = o.sim.overrides;
  }
  o.sweep = vm.count("sweep") > 0;
  o.out = read_output_options(vm);
  if (vm.count("timeline-svg")) o.timeline_svg = vm["timeline-svg"].as<std::string>();
  o.functional = vm["functional"].as<bool>();
  if (vm.count("resume") && !o.functional)
    throw core::InputError(
        "--resume continues a training run: it needs --functional (the cost-only simulator "
        "keeps no state)");
  o.resume = resume_option(vm, o.sc);
  o.fit = vm["fit"].as<bool>();
  if (vm.count("largest-preset")) o.largest_preset = vm["largest-preset"].as<std::string>();
  if (vm.count("at-ratio")) {
    o.at_ratio = vm["at-ratio"].as<double>();
    if (!o.largest_preset) throw core::InputError("--at-ratio needs --largest-preset");
    if (!(*o.at_ratio >= 0 && *o.at_ratio <= 1)) throw core::InputError("--at-ratio must be in [0, 1]");
  }
  if (o.fit || o.largest_preset) return o;  // the memory model alone: no ratio to choose
  if (o.sweep) {
    o.ratios = parse_sweep(vm["sweep"].as<std::string>());
    return o;
  }
  if (const std::optional<double> r = ratio_option(vm, o.sc)) {
    o.ratios = {*r};
    return o;
  }
  // ratio auto: chosen before anything else runs
  o.auto_ratio = resolve_auto_ratio(o.sc, {.sim = o.sim}, Calibration::kWarn, std::cout);
  o.sc = backend::sim::with_ratio(o.sc, o.auto_ratio->ratio);
  o.ratios = {o.auto_ratio->ratio};
  return o;
}

// ---- --functional: the math for real, against the plain loop --------------------------------------------

// Elements of the run's master weights whose bits differ from the plain loop's.
size_t differing(const backend::sim::FunctionalResult& got, const backend::sim::FunctionalResult& ref) {
  size_t diff = 0;
  for (size_t i = 0; i < got.master.size(); ++i) diff += std::memcmp(&got.master[i], &ref.master[i], 4) != 0;
  return diff + (got.master.size() != ref.master.size() ? 1 : 0);
}

Table functional_table() {
  return Table({"ratio", "world", "stage", "steps", "skipped", "last grad norm", "last loss", "last lr",
                "PCIe MB each way", "master vs loop"});
}
void add_functional_row(Table& t, double ratio, const backend::sim::FunctionalConfig& fc,
                        const backend::sim::FunctionalResult& got, size_t diff) {
  t.add({fmt(ratio, 3), std::to_string(fc.world), std::to_string(fc.stage),
         std::to_string(got.first_step) + ".." + std::to_string(got.last_step),
         std::to_string(got.skipped_steps.size()), fmt(got.grad_norms.back(), 6),
         got.losses.empty() ? "-" : fmt(got.losses.back(), 5), fmt_lr(got.lrs.back()),
         fmt(double(got.d2h_bytes) / 1e6, 2), diff ? std::to_string(diff) + " differ" : "bit-identical"});
}

// With checkpoints (the scenario's checkpoint.dir, or --resume): one ratio, saved as `run` saves
// (docs/ARCHITECTURE.md, "Checkpoints"); SIGTERM/SIGINT finish the step, save and exit 0; the weights
// reached are held to the plain loop trained from step 1 to the same step.
int functional_with_checkpoints(const SimulateOptions& o, const core::ModelDesc& model,
                                backend::sim::FunctionalConfig fc) {
  if (o.sweep)
    throw core::InputError(
        "--functional with checkpoints (checkpoint.dir or --resume) trains one ratio: "
        "give --ratio, not --sweep");
  const core::CheckpointConfig& cc = o.sc.checkpoint;
  backend::sim::FunctionalCheckpoints& ck = fc.checkpoints;
  ck.dir = cc.dir;
  ck.every_steps = cc.every_steps;
  ck.keep = cc.keep;
  if (o.resume) ck.resume = *o.resume;
  const ScenarioTexts texts = scenario_texts(o.sc);
  ck.scenario_text = texts.scenario;
  ck.ds_config_text = texts.ds_config;
  std::optional<StopSignals> signals;
  if (!ck.dir.empty()) {
    signals.emplace();
    ck.stop_requested = [&signals] { return signals->requested(); };
  }
  if (o.resume) std::cerr << "functional: resuming from " << o.resume->string() << "\n";
  const backend::sim::FunctionalResult got = backend::sim::run_functional(model, fc);
  for (const core::SaveStats& st : got.saves) std::cerr << save_summary(st, -1) << "\n";
  if (got.stopped)
    std::cout << "functional: stopped after step " << got.last_step << " (signal " << signals->signal()
              << "); resume with --resume latest\n";
  fc.steps = got.last_step;
  std::cerr << "functional: reference loop, steps 1.." << fc.steps << "\n";
  const size_t diff = differing(got, backend::sim::run_reference_loop(model, fc));
  Table ft = functional_table();
  add_functional_row(ft, fc.ratio, fc, got, diff);
  ft.print(std::cout);
  if (o.out.csv) ft.write_csv(*o.out.csv);
  if (o.out.json) ft.write_json(*o.out.json);
  std::cout << (diff == 0 ? "functional: bit-identical to the single-process loop\n"
                          : "functional: MISMATCH against the single-process loop\n");
  return diff == 0 ? kExitOk : kExitCheckFailed;
}

int simulate_functional(const SimulateOptions& o) {
  const core::RunSettings rs = core::resolve_settings(o.sc, o.sim.overrides);
  const core::ModelDesc& model = rs.model;
  if (model.total_params > 200'000'000)
    throw core::InputError("--functional runs the math on this machine: " + std::to_string(model.total_params) +
                           " parameters is too many (at most 2e8); use the cost-only mode for large models");
  const int steps = o.steps ? *o.steps : int(std::min<int64_t>(o.sc.training.steps, 20));
  // the global batch cut into at least 8 micro-shards, a multiple of the world
  backend::sim::FunctionalConfig fc =
      backend::sim::functional_config(rs, o.ratios.front(), steps, (8 + rs.world - 1) / rs.world * rs.world);
  const bool decoder = fc.workload == core::WorkloadType::kDecoder;
  if (decoder) {  // the CPU reference decoder runs every micro-shard's forward and backward
    const double flops = model.train_flops_per_token(false) * double(fc.micro_batch * model.tokens_per_sample()) *
                         fc.micro_shards * steps * double(o.ratios.size() + 1);
    if (flops > 1e12)
      throw core::InputError("--functional trains the decoder with the CPU reference: " + fmt(flops / 1e12, 1) +
                             " TFLOP is too many (at most 1); use a smaller model, seq, micro_batch or --steps");
  }
  if (!o.sc.checkpoint.dir.empty() || o.resume) return functional_with_checkpoints(o, model, fc);
  std::cerr << "functional: reference loop, " << fc.steps << " steps over " << model.total_params << " parameters"
            << (decoder ? " (decoder: the CPU reference decoder's gradients)" : "") << "\n";
  const auto ref = backend::sim::run_reference_loop(model, fc);
  Table ft = functional_table();
  bool all_equal = true;
  for (double r : o.ratios) {
    fc.ratio = r;
    const auto got = backend::sim::run_functional(model, fc);
    const size_t diff = differing(got, ref);
    all_equal = all_equal && diff == 0;
    add_functional_row(ft, r, fc, got, diff);
  }
  ft.print(std::cout);
  if (o.out.csv) ft.write_csv(*o.out.csv);
  if (o.out.json) {
    nlohmann::json j;
    j["scenario"] = o.sc.name;
    j["world"] = fc.world;
    j["points"] = nlohmann::json::parse(ft.to_json());
    j["all_bit_identical"] = all_equal;
    add_scenario_record(j, o.sc);
    write_json_file(j, *o.out.json, 2);
  }
  std::cout << (all_equal ? "functional: every ratio bit-identical to the single-process loop\n"
                          : "functional: MISMATCH against the single-process loop\n");
  return all_equal ? kExitOk : kExitCheckFailed;
}

// ---- the cost-only sweep -----------------------------------------------------------------------------

struct Sweep {
  std::vector<backend::sim::SimPoint> pts;
  backend::sim::SimPoint full;  // ratio 1, the baseline
  size_t best = 0;              // the fastest point that fits; pts.size() when none does
  double wall_s = 0;
  int world = 1;
};

Sweep simulate_sweep(const SimulateOptions& o) {
  Sweep w;
  const auto t0 = std::chrono::steady_clock::now();
  // the ratios several at once (backends/sim/parallel.h), each kept at its index; progress as they finish
  w.pts.resize(o.ratios.size());
  std::mutex progress_mu;
  size_t done = 0;
  backend::sim::for_each_index(o.ratios.size(), backend::sim::simulation_threads(o.sc, o.sim), [&](size_t i) {
    w.pts[i] = backend::sim::simulate_step(o.sc, o.ratios[i], o.sim);
    const std::lock_guard lock(progress_mu);
    if (o.ratios.size() >= 20 && ++done % 10 == 0)
      std::cerr << "simulate: " << done << "/" << o.ratios.size() << " ratios\n";
  });
  w.full = o.ratios.back() == 1.0 ? w.pts.back() : backend::sim::simulate_step(o.sc, 1.0, o.sim);
  w.wall_s = seconds_since(t0);
  w.best = w.pts.size();
  for (size_t i = 0; i < w.pts.size(); ++i)
    if (!w.pts[i].oom && (w.best == w.pts.size() || w.pts[i].step_ns < w.pts[w.best].step_ns)) w.best = i;
  w.world = o.sim.overrides.world.value_or(o.sc.cluster.world_size());
  return w;
}

// The share of rank 0's CPU queue busy time that its compute queue hides ("-" without CPU work).
std::string cpu_hidden(const backend::sim::SimPoint& p) {
  const int64_t cpu = p.busy_ns[size_t(core::Queue::kCpu)];
  return cpu > 0 ? fmt(double(p.cpu_overlapped_ns) / double(cpu), 2) : "-";
}

Table sweep_table(const Sweep& w) {
  Table t({"ratio", "step ms", "compute", "comm", "d2h", "h2d", "cpu", "cpu hid", "exposed", "optim", "GPU GB",
           "host GB", "host B/cpu param", "fits", "x vs r=1"});
  using core::Queue;
  for (const auto& p : w.pts) {
    auto q = [&](Queue x) { return fmt(ms(p.busy_ns[size_t(x)]), 1); };
    t.add({fmt(p.ratio, 3), fmt(ms(p.step_ns), 1), q(Queue::kCompute), q(Queue::kComm), q(Queue::kD2H), q(Queue::kH2D),
           q(Queue::kCpu), cpu_hidden(p), fmt(ms(p.exposed_ns), 1), fmt(ms(p.optimizer_phase_ns), 1),
           fmt(double(p.memory.gpu_total) / 1e9, 1), fmt(double(p.memory.host_total) / 1e9, 1),
           p.ratio > 0 ? fmt(p.host_per_cpu_param.total(), 2) : "-", p.oom ? "OOM" : "yes",
           fmt(double(w.full.step_ns) / double(p.step_ns), 2)});
  }
  return t;
}

// The CPU optimizer's rate factor by the node's pinned memory where the profile measured one, e.g. "CPU
// optimizer rate at the node's pinned memory (the profile's footprint curve): x0.991 at ratio 0.1 (24.6 GB)
// to x0.874 at ratio 1 (224.8 GB)"; empty when every point's factor is 1.
std::string footprint_line(const Sweep& w) {
  const auto at = [](const backend::sim::SimPoint& p) {
    return "x" + fmt(p.cpu_footprint_factor, 3) + " at ratio " + fmt(p.ratio, 3) + " (" +
           core::format_gb(p.cpu_node_host_bytes) + ")";
  };
  const auto ne1 = [](const backend::sim::SimPoint& p) { return p.cpu_footprint_factor != 1.0; };
  if (std::none_of(w.pts.begin(), w.pts.end(), ne1)) return {};
  return "CPU optimizer rate at the node's pinned memory (the profile's footprint curve): " + at(w.pts.front()) +
         (w.pts.size() > 1 ? " to " + at(w.pts.back()) : std::string());
}

// For a decoder on a profile without the measured decoder terms (a built-in estimate, or a calibrate run without
// --scenario): which terms are missing and what the simulator uses instead; empty when it has them all.
std::string decoder_compute_note(const core::Scenario& sc) {
  if (sc.model.type != core::ModelType::kDecoder) return {};
  const core::GpuProfile& g = sc.cluster.hardware.gpu;
  std::string missing;
  const auto add = [&](bool absent, const char* what) {
    if (absent) missing += (missing.empty() ? "" : ", ") + std::string(what);
  };
  add(g.bf16_gemm_tflops_by_shape.empty(), "GEMM rates by shape (the roofline-and-tiles model instead)");
  add(g.attention_tflops_by_shape.empty(), "fused attention rates (its products costed as cuBLAS GEMMs)");
  add(g.decoder_kernel_gbps.empty(), "memory-bound kernel rates (the HBM rate instead)");
  if (missing.empty()) return {};
  return "note: profile '" + sc.cluster.hardware.name + "' has no measured " + missing +
         ": the decoder's compute is an optimistic estimate; `twinflow calibrate --scenario SCENARIO` on the machine "
         "measures them (docs/decoder.md, \"Simulating a decoder\")";
}

// For a profile with a GEMM table that lacks some of the model's GEMMs (shape and pass): how many, each costed at
// the nearest measured shape's rate carried over by the roofline-and-tiles model; empty when every one is measured or
// the profile has no table (decoder_compute_note says that).
std::string unmeasured_gemms_note(const core::Scenario& sc) {
  if (sc.cluster.hardware.gpu.bf16_gemm_tflops_by_shape.empty()) return {};
  std::vector<core::LayerGemm> all, missing;
  for (const backend::sim::LayerCost& l : backend::sim::layer_costs(sc))
    for (const backend::sim::PassCost* p : {&l.fwd, &l.bwd})
      for (const backend::sim::GemmCost& g : p->gemms) {
        if (std::find(all.begin(), all.end(), g.gemm) == all.end()) all.push_back(g.gemm);
        if (g.measured && !g.exact_shape && std::find(missing.begin(), missing.end(), g.gemm) == missing.end())
          missing.push_back(g.gemm);
      }
  if (missing.empty()) return {};
  return "note: " + std::to_string(missing.size()) + " of this model's " + std::to_string(all.size()) +
         " GEMM shapes are not in profile '" + sc.cluster.hardware.name +
         "''s table: each runs at its nearest measured shape's rate, carried over by the roofline-and-tiles model; "
         "`twinflow calibrate --scenario SCENARIO` on the machine measures them";
}

// A note when the profile measured the fused attention, but not at this decoder's (head dim, seq, micro-batch x
// heads): it names the point whose rate the simulator uses instead (core::GpuProfile::attention_point_at).
std::string unmeasured_attention_note(const core::Scenario& sc) {
  const core::ModelDesc m = core::describe_model(sc.model);
  if (m.spec.type != core::ModelType::kDecoder || m.spec.decoder.heads <= 0) return {};
  const core::DecoderShape& d = m.spec.decoder;
  const int64_t hd = core::head_dim(d), pairs = core::attention_pairs(d, sc.training.micro_batch);
  const core::AttentionPoint* p = sc.cluster.hardware.gpu.attention_point_at(hd, d.seq, pairs, false);
  if (!p || (p->head_dim == hd && p->seq == d.seq && (p->pairs == pairs || p->pairs == 0))) return {};
  return "note: profile '" + sc.cluster.hardware.name + "' did not measure the fused attention at head dim " +
         std::to_string(hd) + ", seq " + std::to_string(d.seq) + ", " + std::to_string(pairs) +
         " (micro-batch x heads) pairs: it runs at the rate of the nearest measured point, head dim " +
         std::to_string(p->head_dim) + ", seq " + std::to_string(p->seq) +
         (p->pairs ? ", " + std::to_string(p->pairs) + " pairs" : std::string()) +
         "; `twinflow calibrate --scenario SCENARIO` on the machine measures it";
}

// The table, the first OOM, and the best ratio against the published figure; returns the best as JSON.
nlohmann::json print_sweep(const core::Scenario& sc, const Sweep& w, const Table& t) {
  const core::HardwareProfile& hw = sc.cluster.hardware;
  const double params = double(core::parameter_count(sc.model));
  const std::string psize = params >= 1e9 ? fmt(params / 1e9, 2) + "B" : fmt(params / 1e6, 1) + "M";
  std::cout << "scenario " << sc.name << ": " << psize << " params, ZeRO-" << sc.zero.stage << ", " << w.world
            << " ranks on " << hw.name << ", micro-batch " << sc.training.micro_batch << " x accumulation "
            << sc.training.grad_accum << ", " << core::precision_name(sc.training.precision) << ", "
            << core::optimizer_name(sc.optimizer.kind) << "\n\n";
  t.print(std::cout);
  std::cout << "\n" << w.pts.size() << " point(s) simulated in " << fmt(w.wall_s, 3) << " s\n";
  if (!w.pts.empty())
    std::cout << "GPU GB includes the " << w.pts.front().unnamed_gpu << " (ratio " << fmt(w.pts.front().ratio, 3)
              << ")\n";
  if (const std::string note = decoder_compute_note(sc); !note.empty()) std::cout << note << "\n";
  if (const std::string note = unmeasured_gemms_note(sc); !note.empty()) std::cout << note << "\n";
  if (const std::string note = unmeasured_attention_note(sc); !note.empty()) std::cout << note << "\n";
  for (const auto& p : w.pts)
    if (p.oom) {
      std::cout << "OOM at ratio " << fmt(p.ratio, 3) << ": " << p.oom_reason << "\n";
      break;
    }
  if (w.best >= w.pts.size()) {
    std::cout << "no simulated ratio fits in memory\n";
    return nullptr;
  }
  const backend::sim::SimPoint& b = w.pts[w.best];
  const double speedup = double(w.full.step_ns) / double(b.step_ns);
  std::cout << "best feasible ratio " << fmt(b.ratio, 3) << ": step " << fmt(ms(b.step_ns), 1) << " ms, "
            << fmt(speedup, 2) << "x faster than full offload (ratio 1, " << fmt(ms(w.full.step_ns), 1) << " ms)\n";
  if (sc.reference)
    std::cout << "published: " << fmt(sc.reference->speedup_vs_full_offload, 1) << "x (" << sc.reference->source
              << "); predicted here: " << fmt(speedup, 2) << "x. Assumptions: profile '" << hw.name
              << "' (sources in its YAML file), the scenario's batch and sequence length (the blog gives none), "
                 "GEMMs plus the layers' memory-bound kernels ("
              << (hw.gpu.decoder_kernel_gbps.empty() ? "a decoder's at the HBM rate"
                                                     : "a decoder's at the profile's class rates")
              << ", the fused attention "
              << (hw.gpu.attention_tflops_by_shape.empty() ? "as GEMMs of the table" : "at the profile's measured rate")
              << "), our own engine at ratio 1 as the baseline (not DeepSpeed's slower full offload), no framework "
                 "overheads; the model was not tuned to the published figure.\n";
  if (b.ratio > 0)
    std::cout << "at ratio " << fmt(b.ratio, 3) << ": " << host_bytes_line(b.host_per_cpu_param) << "; "
              << core::staging_choice_text(b.staging) << "\n";
  for (const auto& p : w.pts) {
    if (p.speculation_choice && p.speculation_choice->eligible > 0)
      std::cout << "at ratio " << fmt(p.ratio, 3) << ": " << speculation_choice_text(*p.speculation_choice) << "\n";
    if (p.cpu_order_choice && p.cpu_order_choice->passes > 0)
      std::cout << "at ratio " << fmt(p.ratio, 3) << ": " << cpu_order_text(p.cpu_order, p.cpu_order_choice) << "\n";
  }
  if (const std::string f = footprint_line(w); !f.empty()) std::cout << f << "\n";
  return {{"ratio", b.ratio},
          {"step_ms", ms(b.step_ns)},
          {"speedup_vs_ratio_1", speedup},
          {"host_bytes_per_cpu_param",
           {{"state", b.host_per_cpu_param.optimizer},
            {"spare", b.host_per_cpu_param.spare},
            {"staging", b.host_per_cpu_param.staging},
            {"total", b.host_per_cpu_param.total()}}},
          {"staging_slots", b.staging.slots},
          {"cpu_order", cpu_order_json(b.cpu_order, b.cpu_order_choice)},
          {"speculation_layers", b.speculation_layers},
          {"speculation_choice", b.speculation_choice ? speculation_choice_json(*b.speculation_choice) : nullptr}};
}

void write_sweep_json(const core::Scenario& sc, const Sweep& w, const Table& t, const nlohmann::json& best,
                      const std::optional<backend::sim::AutoRatio>& auto_ratio, const std::string& path) {
  nlohmann::json j;
  j["scenario"] = sc.name;
  j["profile"] = sc.cluster.hardware.name;
  j["world"] = w.world;
  j["points"] = nlohmann::json::parse(t.to_json());
  j["best"] = best;
  j["step_ms_at_ratio_1"] = ms(w.full.step_ns);
  j["cpu_orders"] = nlohmann::json::array();  // per point, as simulated (and as `run` would plan it)
  for (const auto& p : w.pts) j["cpu_orders"].push_back(cpu_order_json(p.cpu_order, p.cpu_order_choice));
  j["speculation"] = nlohmann::json::array();  // per point: the cap planned and how it was chosen (auto)
  for (const auto& p : w.pts)
    j["speculation"].push_back(
        {{"layers", p.speculation_layers},
         {"chosen", p.speculation_choice ? speculation_choice_json(*p.speculation_choice) : nullptr}});
  j["cpu_footprint"] = nlohmann::json::array();  // per point: the node's pinned bytes and the CPU rate's factor
  for (const auto& p : w.pts)
    j["cpu_footprint"].push_back({{"node_host_bytes", p.cpu_node_host_bytes}, {"factor", p.cpu_footprint_factor}});
  if (auto_ratio) j["auto_ratio"] = auto_ratio_json(*auto_ratio);
  if (sc.reference)
    j["published"] = {{"speedup_vs_full_offload", sc.reference->speedup_vs_full_offload},
                      {"source", sc.reference->source}};
  add_scenario_record(j, sc);
  write_json_file(j, path, 2);
}

void write_sweep_svg(const core::Scenario& sc, const Sweep& w, const std::string& path) {
  const core::HardwareProfile& hw = sc.cluster.hardware;
  PlotSpec spec;
  spec.title = sc.name + ": step time and GPU memory vs Twin-Flow ratio (" + std::to_string(w.world) +
               (w.world == 1 ? " rank)" : " ranks)");
  spec.x_label = "ratio (CPU share of the optimizer)";
  spec.left_label = "step time (ms)";
  spec.right_label = "GPU memory per rank (GB)";
  Series step{"step time (ms)", {}, {}, false, "#1f77b4", {}}, mem{"GPU memory (GB)", {}, {}, true, "#ff7f0e", {}};
  for (const auto& p : w.pts) {
    step.x.push_back(p.ratio);
    step.y.push_back(ms(p.step_ns));
    step.marked.push_back(p.oom);
    mem.x.push_back(p.ratio);
    mem.y.push_back(double(p.memory.gpu_total) / 1e9);
    mem.marked.push_back(p.oom);
  }
  spec.series = {step, mem};
  spec.note =
      "hollow red points: out of memory on " + hw.name + " (" + fmt(double(hw.gpu.hbm_bytes) / 1e9, 0) + " GB per GPU)";
  write_svg(spec, path);
}

// One step's trace and timeline SVG: the --ratio's, else the best ratio's (the first when none fits).
void write_step_files(const SimulateOptions& o, const Sweep& w) {
  backend::sim::SimOptions so = o.sim;
  so.record_ops = so.keep_plans = true;
  const double r = !o.sweep || w.best >= w.pts.size() ? w.pts.front().requested_ratio : w.pts[w.best].requested_ratio;
  const backend::sim::SimPoint sp = backend::sim::simulate_step(o.sc, r, so);
  if (o.out.trace) {
    backend::sim::write_chrome_trace(sp, *o.out.trace);
    std::cout << "trace of ratio " << fmt(r, 3) << " written to " << *o.out.trace << "\n";
  }
  if (o.timeline_svg) {
    write_timeline_svg(step_timeline(sp, "simulated", o.sc.name), *o.timeline_svg);
    std::cout << "timeline of ratio " << fmt(r, 3) << " written to " << *o.timeline_svg << "\n";
  }
}

// ---- --fit and --largest-preset: the memory model alone --------------------------------------------------

std::string machine_text(const core::Scenario& sc, const core::RankBudget& b, int world) {
  return sc.cluster.hardware.name + ", " + std::to_string(world) + " rank(s): " + core::format_gb(b.gpu_bytes) +
         " GPU (" + core::format_gb(b.gpu_headroom_bytes) + " of it kept free: training.gpu_headroom) and " +
         core::format_gb(b.host_bytes) + " pinnable host memory per rank (the node's less training.host_reserve " +
         core::format_gb(b.host_reserve_bytes) + ")";
}

std::string training_text(const core::Scenario& sc) {
  return "micro-batch " + std::to_string(sc.training.micro_batch) + ", activation checkpointing " +
         (sc.training.activation_checkpointing ? "on" : "off") + ", ZeRO-" + std::to_string(sc.zero.stage) + ", " +
         std::string(core::precision_name(sc.training.precision)) + ", " +
         std::string(core::optimizer_name(sc.optimizer.kind));
}

int print_fit(const SimulateOptions& o) {
  const core::FitReport r = core::check_fit(o.sc, o.sim.overrides);
  const int world = o.sim.overrides.world.value_or(o.sc.cluster.world_size());
  std::cout << "fit: " << o.sc.name << " (" << o.sc.model.name << ", " << training_text(o.sc) << ") on "
            << machine_text(o.sc, r.budget, world) << "\n";
  nlohmann::json j = {{"scenario", o.sc.name},
                      {"profile", o.sc.cluster.hardware.name},
                      {"world", world},
                      {"gpu_bytes_per_rank", r.budget.gpu_bytes},
                      {"host_bytes_per_rank", r.budget.host_bytes},
                      {"gpu_headroom_bytes", r.budget.gpu_headroom_bytes},
                      {"host_reserve_bytes", r.budget.host_reserve_bytes},
                      {"fits", r.range.feasible}};
  if (r.range.feasible) {
    std::cout << "fits at ratios " << core::ratio_range_text(r.range) << ": at " << fmt(r.range.min_ratio, 3) << " GPU "
              << core::format_gb(r.at_min.gpu_total) << ", host " << core::format_gb(r.at_min.host_total) << "; at "
              << fmt(r.range.max_ratio, 3) << " GPU " << core::format_gb(r.at_max.gpu_total) << ", host "
              << core::format_gb(r.at_max.host_total) << "\n";
    j["ratios"] = {r.range.min_ratio, r.range.max_ratio};
  } else {
    const std::vector<std::string> changes = core::fit_suggestions(o.sc, o.sim.overrides);
    std::cout << "does not fit: " << r.shortfall << "\n";
    for (const std::string& c : changes) std::cout << "  change: " << c << "\n";
    if (changes.empty()) std::cout << "  no single change (checkpointing, micro-batch, stage 3, more ranks) fits\n";
    j["shortfall"] = r.shortfall;
    j["gpu_short_bytes"] = r.gpu_short_bytes;
    j["host_short_bytes"] = r.host_short_bytes;
    j["changes_that_fit"] = changes;
  }
  if (o.out.json) write_json_file(j, *o.out.json, 2);
  return r.range.feasible ? kExitOk : kExitCheckFailed;
}

// "GPU 69.8 + host 12.0 GB at ratio 1": what an infeasible fit lacks per rank (empty when it fits).
std::string short_text(const core::FitReport& f) {
  if (f.range.feasible) return "";
  std::string t;
  if (f.gpu_short_bytes > 0) t = "GPU " + fmt(double(f.gpu_short_bytes) / 1e9, 1);
  if (f.host_short_bytes > 0) t += (t.empty() ? "host " : " + host ") + fmt(double(f.host_short_bytes) / 1e9, 1);
  return t + " GB at ratio " + core::format_ratio(f.shortfall_ratio);
}

int print_preset_walk(const SimulateOptions& o) {
  const core::PresetWalk walk = core::largest_fitting_preset(o.sc, *o.largest_preset, o.at_ratio, o.sim.overrides);
  const int world = o.sim.overrides.world.value_or(o.sc.cluster.world_size());
  std::cout << "largest preset '" << *o.largest_preset << "*' that fits"
            << (o.at_ratio ? " at ratio " + fmt(*o.at_ratio, 3) : "") << " (" << training_text(o.sc) << ") on "
            << machine_text(o.sc, walk.tried.front().fit.budget, world) << ":\n";
  Table t({"preset", "params (B)", "seq", "fits at ratios", "GPU GB at min", "host GB at min", "short by"});
  nlohmann::json j = {{"scenario", o.sc.name}, {"profile", o.sc.cluster.hardware.name}, {"world", world}};
  for (const core::PresetFit& p : walk.tried) {
    const core::FitReport& f = p.fit;
    t.add({p.preset, fmt(double(p.params) / 1e9, 3), std::to_string(p.seq),
           f.range.feasible ? core::ratio_range_text(f.range) : "none",
           f.range.feasible ? fmt(double(f.at_min.gpu_total) / 1e9, 1) : "-",
           f.range.feasible ? fmt(double(f.at_min.host_total) / 1e9, 1) : "-", short_text(f)});
    j["tried"].push_back({{"preset", p.preset},
                          {"params", p.params},
                          {"seq", p.seq},
                          {"fits", f.range.feasible},
                          {"qualifies", p.qualifies},
                          {"ratios", f.range.feasible ? nlohmann::json{f.range.min_ratio, f.range.max_ratio} : nullptr},
                          {"shortfall", f.shortfall}});
  }
  t.print(std::cout);
  if (walk.found)
    std::cout << "answer: " << walk.tried[*walk.found].preset << " fits at ratios "
              << core::ratio_range_text(walk.tried[*walk.found].fit.range) << "\n";
  else
    std::cout << "answer: none of them fits" << (o.at_ratio ? " at that ratio" : "") << "\n";
  j["answer"] = walk.found ? nlohmann::json(walk.tried[*walk.found].preset) : nlohmann::json();
  if (o.out.csv) t.write_csv(*o.out.csv);
  if (o.out.json) write_json_file(j, *o.out.json, 2);
  return walk.found ? kExitOk : kExitCheckFailed;
}

}  // namespace

int cmd_simulate(const std::vector<std::string>& args) {
  const std::optional<SimulateOptions> parsed = parse_simulate_options(args);
  if (!parsed) return kExitOk;
  const SimulateOptions& o = *parsed;
  if (o.fit) return print_fit(o);
  if (o.largest_preset) return print_preset_walk(o);
  if (o.functional) return simulate_functional(o);
  const Sweep w = simulate_sweep(o);
  const Table t = sweep_table(w);
  const nlohmann::json best = print_sweep(o.sc, w, t);
  if (o.out.csv) t.write_csv(*o.out.csv);
  if (o.out.json) write_sweep_json(o.sc, w, t, best, o.auto_ratio, *o.out.json);
  if (o.out.svg && o.auto_ratio) write_auto_ratio_svg(o.sc, *o.auto_ratio, *o.out.svg);
  if (o.out.svg && !o.auto_ratio) write_sweep_svg(o.sc, w, *o.out.svg);
  if (o.out.trace || o.timeline_svg) write_step_files(o, w);
  // One requested ratio that does not fit is refused (the table above shows what it would cost).
  if (!o.sweep && w.pts.front().oom) throw core::InputError(w.pts.front().oom_reason);
  if (o.replay) replay_metrics(o.sc, w.pts, *o.replay);
  return kExitOk;
}

}  // namespace tf::app
