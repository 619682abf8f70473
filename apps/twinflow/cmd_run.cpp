// `twinflow run`: trains a scenario on this process's GPU (one rank of ZeRO-3 + Twin-Flow) with the
// real backend, printing per-step loss, step time, phase times, a decoder's tokens/s and MFU, and
// predicted against measured memory; optionally checks the final master weights bit for bit against
// the functional simulator, or dumps a decoder's batches and gradients for the Hugging Face oracle.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include "apps/twinflow/auto_ratio_report.h"
#include "apps/twinflow/checkpoint_cli.h"
#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "apps/twinflow/cpu_order_report.h"
#include "apps/twinflow/cpu_ranks.h"
#include "apps/twinflow/loss_curve_svg.h"
#include "apps/twinflow/master_weights.h"
#include "apps/twinflow/run_decoder.h"
#include "apps/twinflow/run_overlap.h"
#include "apps/twinflow/steady_steps.h"
#include "apps/twinflow/step_timeline_svg.h"
#include "apps/twinflow/stop_signals.h"
#include "apps/twinflow/table.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/host_topology.h"
#include "backends/launch/rank_env.h"
#include "backends/launch/rendezvous.h"
#include "backends/sim/choices.h"
#include "backends/sim/cpu_order.h"
#include "backends/sim/functional.h"
#include "backends/sim/sim_backend.h"
#include "core/error.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "core/speculation.h"
#include "metrics/gpu_telemetry.h"
#include "metrics/http_server.h"
#include "metrics/sim_samples.h"
#include "metrics/step_metrics.h"
#ifdef TWINFLOW_HAVE_CUDA
#include "apps/twinflow/run_checkpoint.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/engine.h"
#endif

namespace tf::app {

#ifndef TWINFLOW_HAVE_CUDA
int cmd_run(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << "twinflow run SCENARIO [--steps N] [--ratio R] [--json F] [--trace F]: needs the CUDA backend\n";
      return kExitOk;
    }
  throw core::RuntimeFailure(
      "this twinflow was built without the CUDA backend (no nvcc at configure time): `run` trains on GPUs; "
      "rebuild with the CUDA toolkit installed, or use `twinflow simulate`");
}
#else

namespace {

namespace cu = backend::cuda;

std::string num(double v, int prec = 2) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}
double ms(int64_t ns) { return double(ns) / 1e6; }
double kind_ms(const backend::StepTimeline& t, core::OpKind k) { return ms(t.kind_ns[size_t(k)]); }

// ---- the command line ---------------------------------------------------------------------------------

struct RunOptions {
  core::Scenario sc;
  int steps = 1;
  std::vector<double> ratios;                         // empty while the ratio is auto
  bool ratio_auto = false;                            // chosen in cmd_run, once the launched world is known
  std::optional<backend::sim::AutoRatio> auto_ratio;  // how it was chosen
  core::WorkloadType workload = core::WorkloadType::kSynthetic;
  std::optional<int> grad_accum;
  std::optional<int> staging_slots;  // slots per host staging ring; 0: full-size; core::kStagingAuto
  std::optional<size_t> threads;
  std::string cpu_tuning = "default";       // --cpu-tuning: over backends/cpu/cpu_tuning.h's defaults
  std::string cuda_sync = "block";          // --cuda-sync: how the rank's threads wait for the GPU
  OutputFiles out;                          // json, trace
  std::optional<std::string> timeline_svg;  // the last step's timeline (rank 0), an SVG
  int trace_steps = 1;                      // --trace: the last this many steps on one time axis
  std::optional<std::string> loss_svg;      // the loss and lr per step (rank 0), an SVG
  bool verify = false, no_pin = false;
  bool host_probe = false;   // --host-probe: the node's CPU rate before every ratio and after the last
  bool pages_probe = false;  // --pages-probe: each engine's CPU pass over its own pages before its first step
  std::optional<std::string> save_master;
  std::optional<std::string> dump_step, dump_batches;  // decoder: the oracle's files
  int inject_inf_at = -1;
  int timeout_s = 120;
  MetricsOptions metrics;
  std::optional<int64_t> speculation;              // --speculation: the scenario's training.speculation otherwise
  std::optional<bool> carry_tail;                  // --carry-tail: the scenario's training.carry_tail otherwise
  std::optional<core::CpuOrderSetting> cpu_order;  // --cpu-order: the scenario's training.cpu_order otherwise
  std::optional<bool> ring_forward_order;          // --ring-order: the scenario's training.ring_order otherwise
  int ranks_per_host = 1;                          // LOCAL_WORLD_SIZE: the ranks sharing this host's memory bandwidth
  std::optional<std::filesystem::path> resume;     // --resume's checkpoint
  bool checkpoints() const { return !sc.checkpoint.dir.empty() || resume; }
};

// The rendezvous's all_ok channels (docs/ARCHITECTURE.md, "Checkpoints"): the stop vote after each step
// on the training thread, the checkpoint writer's phases on its own thread, --save-master's shared file
// (core::write_shared_output_file) after training.
constexpr uint32_t kStopChannel = 1;
constexpr uint32_t kCheckpointChannel = 2;
constexpr uint32_t kSaveMasterChannel = 3;
constexpr uint32_t kHostProbeChannel = 4;  // --host-probe: local rank 0 measured, or says why not
constexpr int kPagesProbePasses = 3;       // --pages-probe: timed passes (the median counts) after a warm-up
// A shared write's phases (a checkpoint, --save-master) wait for the slowest rank's writing: longer than
// a rendezvous timeout.
constexpr std::chrono::milliseconds kFileBarrierTimeout = std::chrono::minutes(30);

CommandOptions run_options() {
  CommandOptions o(
      "twinflow run SCENARIO [options]: train on this process's GPU (one rank; start several with "
      "`twinflow launch --nproc-per-node N -- run SCENARIO`)");
  auto add = o.desc.add_options();
  add("help,h", "show this help");
  add_scenario_option(o.desc, o.pos, "scenario YAML (default: the embedded default scenario)");
  add("steps", po::value<int>(), "training steps (default: the scenario's)");
  add("ratio", po::value<std::string>(), kRatioHelp);
  add_profile_option(o.desc,
                     "hardware profile in place of the scenario's (a built-in name or a .yaml path): what ratio auto "
                     "predicts with and MFU's peak; e.g. this machine's from `twinflow calibrate`");
  add("ratios", po::value<std::string>(), "a sweep: comma-separated ratios, each trained from scratch");
  add("workload", po::value<std::string>(), "synthetic | mlp | decoder (default: the scenario's workload)");
  add("grad-accum", po::value<int>(),
      "micro-batches per rank per step (default: the scenario's); keep grad_accum x ranks fixed to compare world "
      "sizes");
  add_staging_slots_option(o.desc);
  add("threads", po::value<long long>(),
      "CPU optimizer threads, 1 to 4 x the host's cores (default: the scenario's cpu_cores_per_gpu, capped by this "
      "rank's share of the host's cores: LOCAL_RANK's part of LOCAL_WORLD_SIZE)");
  add("cpu-tuning", po::value<std::string>()->default_value("default"),
      "the CPU optimizer's tuning over backends/cpu/cpu_tuning.h's defaults, as `twinflow bench --tuning` takes it "
      "(e.g. nt=1,spin=50; idle=0 keeps the workers in the normal scheduling class; huge= does not apply here)");
  add("cuda-sync", po::value<std::string>()->default_value("block"),
      "how the rank's threads wait for the GPU: block (sleep until it is done: a waiting thread never takes a core "
      "from the CPU optimizer's workers, which run below the issuing threads), spin, yield, or auto "
      "(CUDA's choice: spin on a host with more CPUs than GPUs)");
  add_output_options(
      o.desc,
      {.json = "write every step's figures as JSON (ranks > 0 write FILE.rankN)",
       .trace = "Chrome/Perfetto trace of the last step (ranks > 0 write FILE.rankN; with --ratios one file per "
                "ratio, FILE's stem + -rRATIO)"});
  add("trace-steps", po::value<int>()->default_value(1),
      "--trace holds the last N steps on one time axis (1 to --steps; each op named sSTEP LABEL): with a carried "
      "tail a step's last ops run into the next step, which only a window of steps shows");
  add("timeline-svg", po::value<std::string>(),
      "the last step's timeline as an SVG (rank 0: a lane per queue, a bar per op; with --ratios one file per ratio, "
      "FILE's stem + -rRATIO)");
  add("loss-svg", po::value<std::string>(),
      "the training curve as an SVG: loss and learning rate per step (rank 0; mlp and decoder workloads; with "
      "--ratios one file per ratio, FILE's stem + -rRATIO)");
  add("verify", po::bool_switch(),
      "check the final fp32 master weights bit for bit against the functional simulator (synthetic workload; small "
      "models)");
  add("save-master", po::value<std::string>(),
      "write the final fp32 master weights (model order, raw float32) to FILE");
  add("dump-step", po::value<std::string>(),
      "decoder, one rank: after step 1 write its global batch to FILE (bench/peer/hf_decoder.py's batch file) and "
      "the step's reduced gradients, unscaled, before the optimizer, to FILE.grads.safetensors (Hugging Face names, "
      "fp32)");
  add("dump-batches", po::value<std::string>(),
      "decoder: write every step's global batch to FILE (for `hf_decoder.py train`)");
  add("no-pin", po::bool_switch(), "leave the CPU segment in pageable memory (to measure what pinning buys)");
  add("host-probe", po::bool_switch(),
      "before every ratio and after the last, with every rank idle: the node's CPU optimizer rate as `twinflow "
      "calibrate` measures its rank curve (local rank 0 runs LOCAL_WORLD_SIZE worker processes over the host's "
      "cores on calibrate's segments; a few seconds each), in --json as each point's host_probe: what `validate` "
      "compares the profile's rate with (it passes this when measuring)");
  const std::string pages_help =
      "each ratio's engine, before it writes its state: its CPU segment filled with the CPU measurements' values, "
      "one warm-up and " +
      std::to_string(kPagesProbePasses) +
      " timed CPU optimizer passes over the pages this run got (every rank at once; a few seconds), then every byte "
      "zeroed again (the training does not change), in --json as each point's pages_probe: what `validate` compares "
      "the profile's rate with (it passes this when measuring)";
  add("pages-probe", po::bool_switch(), pages_help.c_str());
  add_speculation_option(o.desc);
  add_carry_tail_option(o.desc);
  add_cpu_order_option(o.desc);
  add_ring_order_option(o.desc);
  add("inject-inf-at-step", po::value<int>(), "synthetic workload: make one gradient +Inf at this step (fault test)");
  add("timeout", po::value<int>()->default_value(120), "rendezvous timeout in seconds (multi-rank)");
  add_resume_option(o.desc);
  add_metrics_options(o.desc, "serve Prometheus metrics on this port (0: a free port; rank r uses PORT + r)",
                      "address the metrics endpoint binds", "keep serving metrics this many seconds after the run");
  return o;
}

const char kRunEpilog[] =
    "\nColumns (ms unless stated): step = wall time of the step; fwd/bwd/gpu_opt/cpu_opt/d2h/h2d/ag/rs =\n"
    "summed durations of those ops (measured with CUDA events on the streams, host clocks on the CPU\n"
    "optimizer's queue); opt_phase = from the end of the last backward to the end of the step;\n"
    "exp_xfer = time when only PCIe copies or the CPU optimizer ran (compute and comm idle);\n"
    "spec = the CPU optimizer's speculation (held: its updates during backward stood; failed: the step\n"
    "clipped or was skipped, so they were redone; off: the step after such a step does not speculate;\n"
    "-: none planned); cpu_hid = share of the CPU optimizer's busy time during which the compute stream\n"
    "was busy too; bound = the step time no schedule beats: max(compute stream busy, the CPU pass at the\n"
    "profile's host memory bandwidth), and at least bwd + the pass of the CPU elements whose update waited\n"
    "for the gradient norm (clipping or loss scaling without a holding speculation: the next backward needs\n"
    "their new parameters).\n";

core::WorkloadType workload_option(const po::variables_map& vm, const core::Scenario& sc) {
  if (!vm.count("workload")) return sc.workload.resolved(sc.model.type);
  const std::string w = vm["workload"].as<std::string>();
  const bool mlp = sc.model.type == core::ModelType::kMlp;
  if (w == "synthetic") return core::WorkloadType::kSynthetic;
  if (w == "mlp" && mlp) return core::WorkloadType::kMlp;
  if (w == "decoder" && !mlp) return core::WorkloadType::kDecoder;
  throw core::InputError("--workload '" + w + "': allowed synthetic, " +
                         std::string(mlp ? "mlp (the model is an MLP)" : "decoder (the model is a decoder)"));
}

// What the real backend can train, and the options that need the synthetic workload.
void check_run_options(const RunOptions& o) {
  if (o.steps < 1 || o.steps > 1000000) throw core::InputError("--steps must be in [1, 1000000]");
  if (o.sc.training.precision == core::Precision::kFP32)
    throw core::InputError(
        o.sc.file.string() +
        ": training.precision fp32 runs in the simulator only; the real backend trains bf16 or fp16");
  if (o.verify && o.workload != core::WorkloadType::kSynthetic)
    throw core::InputError("--verify compares bits with the functional simulator: it needs --workload synthetic");
  if (o.inject_inf_at >= 0 && o.workload != core::WorkloadType::kSynthetic)
    throw core::InputError("--inject-inf-at-step needs --workload synthetic");
  if ((o.dump_step || o.dump_batches) && o.workload != core::WorkloadType::kDecoder)
    throw core::InputError(
        "--dump-step and --dump-batches write a decoder's tokens and gradients: they need the "
        "decoder workload (a decoder model)");
  if (o.dump_step && o.ratios.size() > 1) throw core::InputError("--dump-step takes one ratio, not --ratios");
  for (double r : o.ratios)
    if (!(r >= 0 && r <= 1)) throw core::InputError("--ratio must be in [0, 1]");
  if (o.grad_accum && (*o.grad_accum < 1 || *o.grad_accum > 4096))
    throw core::InputError("--grad-accum must be in [1, 4096]");
  if (o.checkpoints() && o.host_probe)
    throw core::InputError(
        "--host-probe measures the host between the points of a sweep, every rank idle; a run with checkpoints "
        "(checkpoint.dir, --resume) is one training run that a stop signal must end promptly: leave one of them "
        "out");
  if (o.checkpoints() && o.ratios.size() > 1)
    throw core::InputError(
        "checkpoints (checkpoint.dir, --resume) follow one training run: give --ratio, not --ratios");
  if (o.resume && (o.dump_step || o.dump_batches))
    throw core::InputError("--dump-step and --dump-batches write the batches from step 1: drop --resume");
}

std::optional<RunOptions> parse_run_options(const std::vector<std::string>& args) {
  const std::optional<po::variables_map> parsed = parse_command(args, run_options(), kRunEpilog);
  if (!parsed) return std::nullopt;
  const po::variables_map& vm = *parsed;
  if (vm.count("ratio") && vm.count("ratios")) throw core::InputError("give --ratio or --ratios, not both");
  RunOptions o;
  o.sc = load_scenario_option(vm);
  apply_profile_option(vm, o.sc);
  o.steps = vm.count("steps") ? vm["steps"].as<int>() : int(o.sc.training.steps);
  o.workload = workload_option(vm, o.sc);
  o.verify = vm["verify"].as<bool>();
  o.inject_inf_at = vm.count("inject-inf-at-step") ? vm["inject-inf-at-step"].as<int>() : -1;
  if (vm.count("ratios")) {
    o.ratios = parse_ratio_list(vm["ratios"].as<std::string>());
  } else if (const std::optional<double> r = ratio_option(vm, o.sc)) {
    o.ratios = {*r};
  } else {
    o.ratio_auto = true;
  }
  if (vm.count("grad-accum")) o.grad_accum = vm["grad-accum"].as<int>();
  o.staging_slots = read_staging_slots(vm);
  if (vm.count("threads"))
    o.threads = backend::cpu::checked_thread_count(vm["threads"].as<long long>(),
                                                   backend::cpu::host_topology().physical_cores(), "--threads");
  o.cpu_tuning = vm["cpu-tuning"].as<std::string>();
  o.cuda_sync = vm["cuda-sync"].as<std::string>();
  (void)cu::parse_cuda_sync(o.cuda_sync, "--cuda-sync");  // a bad value fails before any GPU is touched
  backend::cpu::CpuOptions checked;                       // bad knobs fail before any GPU is touched
  backend::cpu::apply_tuning_spec(checked, o.cpu_tuning, "--cpu-tuning");
  o.out = read_output_options(vm);
  if (vm.count("timeline-svg")) o.timeline_svg = vm["timeline-svg"].as<std::string>();
  o.trace_steps = vm["trace-steps"].as<int>();
  if (o.trace_steps < 1 || o.trace_steps > o.steps)
    throw core::InputError("--trace-steps " + std::to_string(o.trace_steps) + ": must be in [1, " +
                           std::to_string(o.steps) + "] (the run's --steps)");
  if (!vm["trace-steps"].defaulted() && !o.out.trace)
    throw core::InputError("--trace-steps: applies to --trace FILE, which is not given");
  if (vm.count("loss-svg")) o.loss_svg = vm["loss-svg"].as<std::string>();
  if (o.loss_svg && o.workload == core::WorkloadType::kSynthetic)
    throw core::InputError(
        "--loss-svg: the synthetic workload computes no loss; run the scenario with --workload "
        "mlp or decoder, or leave --loss-svg out");
  if (vm.count("save-master")) o.save_master = vm["save-master"].as<std::string>();
  if (vm.count("dump-step")) o.dump_step = vm["dump-step"].as<std::string>();
  if (vm.count("dump-batches")) o.dump_batches = vm["dump-batches"].as<std::string>();
  o.no_pin = vm["no-pin"].as<bool>();
  o.host_probe = vm["host-probe"].as<bool>();
  o.pages_probe = vm["pages-probe"].as<bool>();
  o.timeout_s = vm["timeout"].as<int>();
  o.metrics = read_metrics_options(vm);
  o.speculation = read_speculation_option(vm);
  o.carry_tail = read_carry_tail_option(vm);
  o.cpu_order = read_cpu_order_option(vm);
  o.ring_forward_order = read_ring_order_option(vm);
  o.resume = resume_option(vm, o.sc);
  check_run_options(o);
  return o;
}

// ---- set-up: ranks, settings, engine configuration ------------------------------------------------------

// The run's options over the scenario's settings, in one place for the engine (base_config) and the cost
// model's choices (ratio auto, cpu_order auto): the launched world, the workload and accumulation, the
// plan options, and the CPU threads when --threads gives them (base_config sets the ones it resolved).
core::SettingsOverrides run_overrides(const RunOptions& o, const backend::launch::RankEnv& env) {
  core::SettingsOverrides s;
  s.world = env.world_size;
  s.world_from = "the launched world (WORLD_SIZE)";
  s.ranks_per_node = env.local_world_size;  // one host's ranks share its link, cores and memory
  s.grad_accum = o.grad_accum;
  s.grad_accum_from = "--grad-accum";
  s.workload = o.workload;
  s.staging_slots = o.staging_slots;
  s.speculation_bytes = o.speculation;  // the spare slots' host bytes change what fits
  s.carry_tail = o.carry_tail;
  s.cpu_order = o.cpu_order;
  s.ring_forward_order = o.ring_forward_order;
  if (o.threads) s.cpu_threads = int(*o.threads);
  return s;
}

backend::sim::SimOptions run_sim_options(const RunOptions& o, const backend::launch::RankEnv& env) {
  backend::sim::SimOptions so;
  so.overrides = run_overrides(o, env);
  return so;
}

// ratio auto, before anything runs: the fastest predicted ratio that fits, at the launched world, with the
// run's workload and accumulation, by the profile (which must be calibrated). Every rank computes the same
// choice (the simulator is deterministic); rank 0 prints it.
void choose_auto_ratio(RunOptions& o, const backend::launch::RankEnv& env) {
  backend::sim::AutoRatioOptions ao;
  ao.sim = run_sim_options(o, env);
  std::ostringstream quiet;
  o.auto_ratio = resolve_auto_ratio(o.sc, ao, Calibration::kRequired, env.rank == 0 ? std::cout : quiet);
  o.sc = backend::sim::with_ratio(o.sc, o.auto_ratio->ratio);
  o.ratios = {o.auto_ratio->ratio};
}

// Rank 0's NCCL ids (one per ratio) reach every rank; a lost rank stops the others.
std::unique_ptr<backend::launch::Rendezvous> rendezvous(const backend::launch::RankEnv& env, int timeout_s,
                                                        std::vector<cu::NcclId>& ids) {
  if (env.world_size <= 1) return nullptr;
  std::vector<uint8_t> blob;
  if (env.rank == 0)
    for (cu::NcclId& id : ids) {
      id = cu::make_nccl_id();
      blob.insert(blob.end(), id.begin(), id.end());
    }
  backend::launch::RendezvousOptions ro;
  ro.master_addr = env.master_addr;
  ro.master_port = env.master_port;
  ro.rank = env.rank;
  ro.world_size = env.world_size;
  ro.local_rank = env.local_rank;
  ro.local_world_size = env.local_world_size;
  ro.timeout_ms = std::chrono::milliseconds(int64_t(timeout_s) * 1000);
  auto rdv = std::make_unique<backend::launch::Rendezvous>(ro, blob);
  const std::vector<uint8_t>& got = rdv->blob();
  if (got.size() != ids.size() * sizeof(cu::NcclId))
    throw core::RuntimeFailure("rendezvous: rank 0 sent " + std::to_string(got.size()) +
                               " bytes of NCCL ids, expected " + std::to_string(ids.size() * sizeof(cu::NcclId)) +
                               " (do all ranks run the same command?)");
  for (size_t i = 0; i < ids.size(); ++i)
    std::memcpy(ids[i].data(), got.data() + i * sizeof(cu::NcclId), sizeof(cu::NcclId));
  const int rank = env.rank;
  rdv->start_watch([rank](const std::string& what) {
    std::fprintf(stderr, "rank %d: stopping: %s\n", rank, what.c_str());
    std::fflush(stderr);
    std::_Exit(kExitRuntime);
  });
  return rdv;
}

// This rank's part of the host (docs/ARCHITECTURE.md, "CPU path"): LOCAL_RANK's contiguous share of the
// physical cores of LOCAL_WORLD_SIZE ranks. The whole process is confined to it before CUDA and NCCL
// start their threads, so no thread of this rank preempts another rank's optimizer threads.
backend::cpu::CpuShare take_cpu_share(const backend::launch::RankEnv& env) {
  const backend::cpu::HostTopology topo = backend::cpu::host_topology();
  backend::cpu::CpuShare share = backend::cpu::rank_cpu_share(topo, env.local_rank, env.local_world_size);
  if (env.local_world_size > topo.physical_cores())
    std::cerr << "warning: " << env.local_world_size << " ranks on this host share its " << topo.physical_cores()
              << " physical cores: their CPU optimizers will slow each other down\n";
  backend::cpu::confine_calling_thread(share.cpus);
  return share;
}

// --threads when given; else the scenario's CPU threads per GPU, capped by the rank's share of cores.
size_t cpu_threads(const RunOptions& o, const backend::cpu::CpuShare& share) {
  if (o.threads) return *o.threads;
  return std::max<size_t>(1, std::min<size_t>(size_t(o.sc.cluster.cpu_cores_per_gpu), size_t(share.cores)));
}

// Every ratio's engine configuration but the ratio and its NCCL id: the scenario's settings as
// core::resolve_settings maps them, at the launched world.
cu::EngineConfig base_config(const RunOptions& o, const backend::launch::RankEnv& env, size_t threads,
                             const backend::cpu::CpuShare& share) {
  core::SettingsOverrides overrides = run_overrides(o, env);
  overrides.cpu_threads = int(threads);
  cu::EngineConfig base;
  base.settings = core::resolve_settings(o.sc, overrides);
  base.rank = env.rank;
  base.device = env.local_rank;
  base.cpu_threads = threads;
  base.cpu_cpus = share.worker_cpus;
  base.cpu_tuning = o.cpu_tuning;
  base.cuda_sync = cu::parse_cuda_sync(o.cuda_sync, "--cuda-sync");
  base.pin_memory = !o.no_pin;
  base.overflow_at_step = o.inject_inf_at;
  // what this rank may pin of the machine: its memory less training.host_reserve, shared by the host's ranks
  const int64_t phys = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
  base.host_bytes_limit = core::pinnable_host_bytes_per_rank(phys, env.local_world_size, o.sc.training.host_reserve);
  return base;
}

void print_banner(const RunOptions& o, const cu::EngineConfig& base, const std::string& gpu, size_t threads,
                  const backend::cpu::CpuShare& share) {
  const core::Scenario& sc = o.sc;
  const core::ModelDesc& model = base.settings.model;
  std::cout << "run: " << (sc.name.empty() ? sc.file.string() : sc.name) << " | " << sc.model.name << " ("
            << model.total_params / 1000000 << "M params, " << model.layers.size() << " layers) | "
            << base.settings.world << " rank(s), " << gpu << " | workload " << core::workload_type_name(o.workload)
            << " | " << core::precision_name(sc.training.precision) << " | " << optimizer_name(sc.optimizer.kind)
            << " | clip " << sc.training.gradient_clipping << " | micro_batch " << sc.training.micro_batch
            << " x grad_accum " << sc.training.grad_accum << " | " << threads
            << " CPU optimizer threads (rank 0 on CPUs " << backend::cpu::cpu_list_text(share.cpus) << ")\n";
}

// ---- Prometheus exposition: one sample per step (rank r serves on PORT + r when PORT > 0) -------------

class RunMetrics {
 public:
  // tokens_per_step: this rank's tokens in one step (micro-batch x tokens per sample x accumulation);
  // telemetry: this rank's GPU's sampler (metrics/gpu_telemetry.h), or nullptr where NVML is not there.
  RunMetrics(const MetricsOptions& m, const core::Scenario& sc, const core::RunSettings& rs, int rank,
             int64_t tokens_per_step, metrics::GpuTelemetry* telemetry)
      : job_(sc.name.empty() ? sc.file.stem().string() : sc.name),
        rank_(rank),
        tokens_per_step_(tokens_per_step),
        telemetry_(telemetry) {
    if (!m.port) return;
    if (*m.port + rs.world - 1 > 65535) throw core::InputError("--metrics-port must be in [0, 65535 - ranks + 1]");
    config_ = metrics_run_config(sc, rs, sc.cpu_ratio());
    metrics::publish_run_config(registry_, {rank_, job_, "cuda"}, config_);  // before the first step
    metrics::ServerOptions so;
    so.address = m.address;
    so.port = uint16_t(*m.port == 0 ? 0 : *m.port + rank);
    server_ = std::make_unique<metrics::MetricsServer>(registry_, so);
    std::cerr << "rank " << rank << ": metrics on http://" << so.address << ":" << server_->port() << "/metrics\n";
    warn_if_exposed(so, server_->port());
  }
  bool serving() const { return server_ != nullptr; }

  // A sweep's next ratio: the configuration gauges say which runs.
  void set_ratio(double ratio) {
    if (!server_) return;
    config_.offload_ratio = ratio;
    metrics::publish_run_config(registry_, {rank_, job_, "cuda"}, config_);
  }

  // The GPU since the previous call (one step's period between two reports); empty without telemetry. The
  // sampler's own samples only: no NVML call on the training thread at the step boundary.
  metrics::GpuWindow gpu_window() { return telemetry_ ? telemetry_->take() : metrics::GpuWindow{}; }
  bool has_telemetry() const { return telemetry_ != nullptr; }

  void publish(const cu::StepReport& r, const cu::Engine& eng, const metrics::GpuWindow& gpu) {
    if (!server_) return;
    const backend::StepTimeline& tl = r.timeline;
    metrics::StepSample smp = metrics::timeline_sample(eng.plan(), tl.ops, tl.step_ns, eng.memory().planned);
    smp.step = r.step;
    smp.step_seconds = double(tl.step_ns) / 1e9;
    smp.offload_ratio = eng.split().actual_ratio;
    smp.pcie_d2h_bytes = r.d2h_bytes;
    smp.pcie_h2d_bytes = r.h2d_bytes;
    smp.loss = r.loss;
    smp.loss_scale = r.loss_scale;
    smp.learning_rate = r.lr;
    smp.skipped = r.skipped;
    smp.speculated = r.speculated;
    smp.speculation_failed = r.speculated && !r.speculation_held;
    smp.tokens = tokens_per_step_;
    if (!gpu.empty()) {
      smp.gpu_sm_clock_hz = gpu.sm_mhz_median * 1e6;
      smp.gpu_power_watts = gpu.power_w;
      smp.gpu_power_limit_watts = gpu.power_limit_w;
      smp.gpu_temperature_celsius = gpu.temperature_c_max;
      smp.gpu_power_capped_ratio = gpu.power_capped_fraction;
    }
    metrics::publish(registry_, smp, {rank_, job_, "cuda"});
  }

 private:
  std::string job_;
  int rank_;
  int64_t tokens_per_step_;
  metrics::GpuTelemetry* telemetry_;
  metrics::RunConfig config_;
  metrics::Registry registry_;
  std::unique_ptr<metrics::MetricsServer> server_;
};

// ---- one ratio ------------------------------------------------------------------------------------------

struct RunPoint {
  double requested = 0, actual = 0;
  std::vector<cu::StepReport> steps;
  std::vector<Throughput> throughput;   // decoder: per step
  std::vector<OverlapFigures> overlap;  // per step
  std::vector<metrics::GpuWindow> gpu;  // per step: the GPU between the step's report and the previous one
  int64_t speculation_bytes = 0;        // the budget the plan resolved to (core::resolve_speculation_bytes)
  bool carry_tail = false;              // the plan carried its tail into the next step (core::carries)
  bool ring_forward_order = false;      // its StepConfig::ring_forward_order
  size_t speculated_layers = 0;         // the CPU layers that speculate (core::speculated_layers)
  int64_t speculated_elems = 0;         // their CPU elements (core::spare_range)
  core::CpuPassOrder cpu_order;         // the speculated passes' order the plan ran (StepConfig::cpu_order)
  std::optional<backend::sim::CpuOrderChoice> cpu_order_choice;  // how the cost model chose it (auto)
  int speculation_layers = core::kEveryEligibleLayer;  // the plan's cap on them (StepConfig::speculation_layers)
  std::optional<backend::sim::SpeculationChoice> speculation_choice;  // how the cost model chose it (auto)
  int64_t speculated_steps = 0, failed_speculations = 0;
  std::optional<MemoryCheck> memory_check;  // after step 1
  // --host-probe: the node's CPU optimizer rate (Gparam/s, local rank 0's probe) right before this ratio's
  // engine was built and right after it was freed; NaN without probes or on other ranks.
  double host_before_gparam_s = std::nan(""), host_after_gparam_s = std::nan("");
  cu::CpuPassProbe pages;  // --pages-probe: the engine's passes over its own pages (cu::EngineConfig)
  cu::EngineMemory memory;
  int64_t gpu_elems = 0, cpu_elems = 0;
  cu::SetupTimes setup;              // building the engine, by phase (rank 0's printed)
  double teardown_s = std::nan("");  // freeing it (unregistering and unmapping the host memory)
  std::string parity;                // empty: not checked
  bool parity_ok = true;
};

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Over the point's steady steps (steady_steps.h).
double steady_median(const RunPoint& p, const std::function<double(const cu::StepReport&)>& f) {
  const std::vector<bool> steady = steady_steps(p.steps.size(), p.carry_tail);
  std::vector<double> v;
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (steady[i]) v.push_back(f(p.steps[i]));
  return median(v);
}

// Compares this rank's master weights with the functional simulator's (the whole model's), run with
// the engine's own settings (core::resolve_settings), loss scaler included.
std::string check_parity(const cu::EngineConfig& ec, int steps, const std::vector<std::pair<int64_t, float> >& mine,
                         bool& ok) {
  const core::RunSettings& s = ec.settings;
  backend::sim::FunctionalConfig fc = backend::sim::functional_config(s, ec.ratio, steps, s.step.grad_accum * s.world);
  fc.overflow_at_step = ec.overflow_at_step;
  const backend::sim::FunctionalResult ref = backend::sim::run_functional(s.model, fc);
  int64_t differ = 0, first = -1;
  float a = 0, b = 0;
  for (const auto& [idx, v] : mine) {
    const float r = ref.master[size_t(idx)];
    if (std::memcmp(&r, &v, 4) != 0) {
      if (first < 0) first = idx, a = v, b = r;
      ++differ;
    }
  }
  ok = differ == 0;
  std::ostringstream os;
  if (ok)
    os << mine.size() << "/" << mine.size() << " fp32 master weights bit-identical to the functional simulator";
  else
    os << differ << " of " << mine.size() << " fp32 master weights differ from the functional simulator (first: "
       << "element " << first << " = " << a << " vs " << b << ")";
  return os.str();
}

// The last step's timeline (rank 0) as the simulator's SimPoint, for its trace writer and the timeline plot.
backend::sim::SimPoint last_step_point(const RunPoint& pt, const cu::Engine& eng, int world) {
  backend::sim::SimPoint sp;
  sp.requested_ratio = pt.requested;
  sp.ratio = pt.actual;
  sp.world = world;
  sp.step_ns = pt.steps.back().timeline.step_ns;
  sp.plans = {eng.plan()};
  backend::sim::RankTiming rt;
  for (const backend::OpInterval& o : pt.steps.back().timeline.ops) rt.ops.push_back({o.op, o.start_ns, o.end_ns});
  sp.ranks = {rt};
  return sp;
}

// FILE, or in a sweep FILE's stem + -rRATIO + its extension.
std::string per_ratio_path(std::filesystem::path path, double ratio, bool sweep) {
  if (sweep) path.replace_filename(path.stem().string() + "-r" + num(ratio, 3) + path.extension().string());
  return path.string();
}

// The last o.trace_steps steps of rank 0 on one time axis: each begins its predecessor's step_ns (a
// carried step's period) after it.
std::vector<backend::sim::TracedStep> traced_steps(const RunOptions& o, const RunPoint& pt) {
  const size_t n = std::min(pt.steps.size(), static_cast<size_t>(o.trace_steps));
  std::vector<backend::sim::TracedStep> out;
  int64_t offset = 0;
  for (size_t i = pt.steps.size() - n; i < pt.steps.size(); ++i) {
    const cu::StepReport& r = pt.steps[i];
    backend::sim::TracedStep s{r.step, offset, r.timeline.step_ns, {}, r.host.t0_steady_ns};
    for (const backend::OpInterval& op : r.timeline.ops) s.ops.push_back({op.op, op.start_ns, op.end_ns});
    offset += r.timeline.step_ns;
    out.push_back(std::move(s));
  }
  return out;
}

// The point's GPU telemetry readings (metrics::GpuWindow::readings) as (host steady-clock ns, value) series: its
// SM clock, whether the power cap held it, NVML's power reading and the temperature. Empty without telemetry.
struct GpuSeries {
  std::vector<std::pair<int64_t, double>> mhz, capped, watts, celsius;
};
GpuSeries gpu_series(const RunPoint& pt) {
  GpuSeries s;
  for (const metrics::GpuWindow& w : pt.gpu)
    for (const metrics::GpuSample& g : w.readings) {
      const int64_t t = std::llround(g.t_s * 1e9);  // the engine's steady clock (StepReport::HostTimes)
      s.mhz.emplace_back(t, g.sm_mhz);
      s.capped.emplace_back(t, (g.clock_reasons & metrics::kReasonPowerCap) ? 1.0 : 0.0);
      if (std::isfinite(g.power_w)) s.watts.emplace_back(t, g.power_w);
      if (std::isfinite(g.temperature_c)) s.celsius.emplace_back(t, g.temperature_c);
    }
  return s;
}

// The series on the traced steps' time axis, as the trace's counter tracks; none without telemetry.
std::vector<backend::sim::TraceCounter> trace_counters(const GpuSeries& g,
                                                       std::span<const backend::sim::TracedStep> steps) {
  if (g.mhz.empty()) return {};
  return {{"SM clock", "MHz", backend::sim::counter_points(steps, g.mhz)},
          {"clock held by the power cap", "capped", backend::sim::counter_points(steps, g.capped)},
          {"GPU power (NVML's ~1 s average)", "W", backend::sim::counter_points(steps, g.watts)},
          {"GPU temperature", "C", backend::sim::counter_points(steps, g.celsius)}};
}

// The last step's Chrome trace (--trace; --trace-steps: the last N; ranks > 0 write FILE.rankN, each on its
// own step's clock, with its own GPU's clock, power and temperature as counters) and timeline SVG
// (--timeline-svg, rank 0, with the SM clock as a lane).
void write_step_files(const RunOptions& o, const RunPoint& pt, const cu::Engine& eng, int world, int rank) {
  const bool sweep = o.ratios.size() > 1;
  const backend::sim::SimPoint sp = last_step_point(pt, eng, world);
  const std::string suffix = rank > 0 ? ".rank" + std::to_string(rank) : "";
  const bool svg = o.timeline_svg && rank == 0;
  if (!o.out.trace && !svg) return;
  const GpuSeries gpu = gpu_series(pt);
  const std::vector<backend::sim::TracedStep> steps = traced_steps(o, pt);
  if (o.out.trace) {
    const std::string path = per_ratio_path(*o.out.trace, pt.requested, sweep) + suffix;
    const std::vector<backend::sim::TraceCounter> counters = trace_counters(gpu, steps);
    if (o.trace_steps > 1)
      backend::sim::write_chrome_trace(sp, steps, path, "--trace", counters);
    else
      backend::sim::write_chrome_trace(sp, path, "--trace", counters);
  }
  if (svg) {
    TimelineSpec spec = step_timeline(sp, "measured", o.sc.name);
    if (!gpu.mhz.empty() && !steps.empty()) {
      const backend::sim::TracedStep& s = steps.back();  // the plotted step, from 0
      const backend::sim::TracedStep at_zero{s.step, 0, s.step_ns, {}, s.host_t0_ns};
      TimelineTrack track{"SM clock", "MHz", {}};
      for (const auto& [t_ns, mhz] : backend::sim::counter_points({&at_zero, 1}, gpu.mhz))
        track.points.emplace_back(double(t_ns) / 1e6, mhz);
      spec.tracks.push_back(std::move(track));
    }
    write_timeline_svg(spec, per_ratio_path(*o.timeline_svg, pt.requested, sweep));
  }
}

// --loss-svg: the point's loss and lr per step, rank 0.
void write_loss_curve(const RunOptions& o, const RunPoint& pt) {
  std::vector<LossPoint> points;
  for (const cu::StepReport& r : pt.steps) points.push_back({r.step, r.loss, r.lr});
  const std::string path = per_ratio_path(*o.loss_svg, pt.requested, o.ratios.size() > 1);
  try {
    write_svg(loss_curve(points, o.sc.name, pt.requested), path, "--loss-svg");
  } catch (const std::invalid_argument& e) {  // e.g. every step of an fp16 run skipped: the run itself stands
    std::cerr << "warning: --loss-svg: " << path << " not written: " << e.what() << "\n";
  }
}

// After step 1: the plan's GPU and pinned host bytes against what the run holds, and (--dump-step) the
// oracle's batch and gradient files.
void after_first_step(cu::Engine& eng, const RunOptions& o, const cu::EngineConfig& ec, RunPoint& pt) {
  const cu::EngineMemory& m = eng.memory();
  pt.memory_check = MemoryCheck{m.planned.gpu_total,      eng.gpu_bytes_in_use(),
                                m.planned.host_total,     m.host_pinned,
                                process_rss_bytes(),      core::host_bytes_per_cpu_param(m.plan, eng.split().cpu_elems),
                                eng.split().cpu_elems > 0};
  if (ec.rank == 0) std::cout << memory_report(*pt.memory_check) << "\n";
  if (!o.dump_step) return;
  if (ec.settings.world != 1)
    throw core::InputError("--dump-step writes the whole model's gradients: run it on one rank (world " +
                           std::to_string(ec.settings.world) + ")");
  write_batch_file(*o.dump_step, ec.settings, 1, 1, "--dump-step");
  write_gradients(*o.dump_step + ".grads.safetensors", ec.settings.model, eng.last_gradients());
  std::cerr << "dump: step 1's batch in " << *o.dump_step << ", its gradients in " << *o.dump_step
            << ".grads.safetensors (loss " << num(pt.steps.front().loss, 6) << ")\n";
}

// The allocation plan's second state slots (the speculated layers', core/speculation.h).
int64_t spare_bytes(const core::AllocPlan& p) {
  namespace buf = core::buf;
  int64_t n = 0;
  for (std::string_view name : {buf::kHostMasterSpare, buf::kHostState1Spare, buf::kHostState2Spare})
    if (p.has(name)) n += p.at(name).bytes;
  return n;
}

// The telemetry readings the trace of the point's last o.trace_steps steps (and the timeline of its last) can show
// are those of their windows and the window after (a step's report, which takes the window, can trail its end by a
// step with the tail carried): older windows drop theirs, and every window does without --trace and
// --timeline-svg, so a long run keeps its summaries only.
void keep_traced_readings(const RunOptions& o, std::vector<metrics::GpuWindow>& windows) {
  const size_t keep = std::max(o.out.trace ? size_t(o.trace_steps) + 2 : 0, o.timeline_svg ? size_t(3) : 0);
  if (windows.size() > keep) {
    std::vector<metrics::GpuSample>& old = windows[windows.size() - 1 - keep].readings;
    std::vector<metrics::GpuSample>().swap(old);
  }
}

// What the step's CPU speculation did: "held", "failed", "off" (planned, not run), "-" (none planned).
std::string speculation_text(const cu::StepReport& r, bool planned) {
  if (!planned) return "-";
  if (!r.speculated) return "off";
  return r.speculation_held ? "held" : "failed";
}

// The steps of one ratio, with the per-step table (rank 0) and metrics.
void train(cu::Engine& eng, const RunOptions& o, const cu::EngineConfig& ec, RunMetrics& metrics, RunPoint& pt,
           RunCheckpoints* ck) {
  const bool decoder = ec.settings.workload == core::WorkloadType::kDecoder;
  const bool planned = pt.speculated_layers > 0;
  std::vector<std::string> head = {"step",      "loss",     "grad_norm", "scale",   "lr",      "step",    "fwd",
                                   "bwd",       "ag",       "rs",        "d2h",     "cpu_opt", "gpu_opt", "h2d",
                                   "opt_phase", "exp_xfer", "spec",      "cpu_hid", "bound"};
  if (decoder) head.insert(head.end(), {"tok/s", "MFU"});
  if (metrics.has_telemetry()) head.insert(head.end(), {"SM_MHz", "GPU_W"});
  Table t(head);
  // One step's report, in step order: with a carried tail (docs/ARCHITECTURE.md, "Carrying the optimizer
  // tail into the next step") step t's comes from step t + 1's step() or from the drain after the loop.
  const auto take = [&](cu::StepReport r) {
    const backend::StepTimeline& tl = r.timeline;
    const int64_t waited = norm_waited_elems(ec.settings.step, pt.cpu_elems, pt.speculated_elems, r.speculated,
                                             r.speculation_held, r.skipped);
    const OverlapFigures ov =
        overlap_figures(tl, ec.settings.step, pt.cpu_elems, waited, o.sc.cluster.hardware.cpu, o.ranks_per_host);
    pt.overlap.push_back(ov);
    std::vector<std::string> row = {std::to_string(r.step) + (r.skipped ? " skip" : ""),
                                    num(r.loss, 5),
                                    num(r.grad_norm, 4),
                                    num(r.loss_scale, 0),
                                    fmt_lr(r.lr),
                                    num(ms(tl.step_ns)),
                                    num(kind_ms(tl, core::OpKind::kForward)),
                                    num(kind_ms(tl, core::OpKind::kBackward)),
                                    num(kind_ms(tl, core::OpKind::kAllGather)),
                                    num(kind_ms(tl, core::OpKind::kReduceScatter)),
                                    num(kind_ms(tl, core::OpKind::kD2HGrad)),
                                    num(kind_ms(tl, core::OpKind::kCpuOptimizer)),
                                    num(kind_ms(tl, core::OpKind::kGpuOptimizer)),
                                    num(kind_ms(tl, core::OpKind::kH2DParam)),
                                    num(ms(tl.optimizer_phase_ns)),
                                    num(ms(tl.exposed_transfer_ns)),
                                    speculation_text(r, planned),
                                    num(ov.overlap_fraction, 3),
                                    num(ov.bound_ms)};
    std::string rate;
    if (decoder) {
      const Throughput th = throughput(ec.settings, o.sc.cluster.hardware.gpu, tl.step_ns);
      row.insert(row.end(), {num(th.tokens_per_s, 0), num(th.mfu, 3)});
      rate = ", " + num(th.tokens_per_s, 0) + " tokens/s, MFU " + num(th.mfu, 3);
      pt.throughput.push_back(th);
    }
    const metrics::GpuWindow gpu = metrics.gpu_window();
    if (metrics.has_telemetry()) {
      row.insert(row.end(), {num(gpu.sm_mhz_median, 0), num(gpu.power_w, 0)});
      if (!gpu.empty()) rate += ", SM " + num(gpu.sm_mhz_median, 0) + " MHz, " + num(gpu.power_w, 0) + " W";
    }
    pt.gpu.push_back(gpu);
    keep_traced_readings(o, pt.gpu);
    t.add(row);
    if (ec.rank == 0)
      std::cerr << "  step " << r.step << "/" << o.steps << ": " << num(ms(tl.step_ns)) << " ms"
                << (std::isnan(r.loss) ? "" : ", loss " + num(r.loss, 5)) << ", lr " << fmt_lr(r.lr) << rate
                << (r.skipped ? " (skipped: overflow)" : "")
                << (planned ? ", speculation " + speculation_text(r, planned) : "") << ", CPU pass "
                << num(100 * ov.overlap_fraction, 0) << "% hidden\n";
    metrics.publish(r, eng, gpu);
    pt.steps.push_back(std::move(r));
    if (pt.steps.size() == 1) after_first_step(eng, o, ec, pt);
  };
  const int first = ck ? int(ck->first_step()) : 1;
  metrics.gpu_window();  // the engine's set-up until now: no step's
  for (int s = first; s <= o.steps; ++s) {
    std::optional<cu::StepReport> r = eng.step();
    if (s == first && o.dump_step && !r) r = eng.drain();  // --dump-step reads step 1's gradients
    if (r) take(std::move(*r));
    if (ck && ck->after_step(s)) break;  // a stop signal: saved (a drain point), the run ends here
  }
  if (std::optional<cu::StepReport> r = eng.drain()) take(std::move(*r));  // the last step's tail
  if (ec.rank == 0) {
    std::cout << "\nratio " << num(pt.requested, 3) << " (actual " << num(pt.actual, 4) << ")\n";
    t.print(std::cout);
    if (decoder)
      std::cout << "tokens/s: all ranks' tokens of a step over its wall time; MFU: "
                << num(model_flops_per_token(ec.settings) / 1e9, 3)
                << " GFLOP per token (6 x matmul parameters + causal attention, no recompute) over the profile's "
                << core::dtype_name(ec.settings.step.param_dtype) << " peak of "
                << o.sc.cluster.hardware.gpu.gemm_peak_tflops(ec.settings.step.param_dtype) << " TFLOP/s per GPU ("
                << o.sc.cluster.hardware.name << "; the GEMMs' dtype)\n";
  }
}

// The checkpoints of one run (docs/ARCHITECTURE.md, "Checkpoints"): the scenario's, a resume, and with
// several ranks the rendezvous's votes.
std::unique_ptr<RunCheckpoints> make_checkpoints(cu::Engine& eng, const RunOptions& o, const cu::EngineConfig& ec,
                                                 backend::launch::Rendezvous* rdv, const StopSignals* signals) {
  if (!o.checkpoints()) return nullptr;
  RunCheckpointOptions co;
  co.config = o.sc.checkpoint;
  co.resume = o.resume;
  co.texts = scenario_texts(o.sc);
  co.total_steps = o.steps;
  co.rank = ec.rank;
  co.ratio = ec.ratio;
  co.signals = signals;
  if (rdv) {
    co.barrier = backend::launch::rank_barrier(*rdv, kCheckpointChannel, kFileBarrierTimeout);
    co.continue_vote = [rdv](bool go_on) { return rdv->all_ok(go_on, kStopChannel); };
  }
  return std::make_unique<RunCheckpoints>(eng, ec.settings, std::move(co));
}

// The node's CPU optimizer rate over the run's own pages (--pages-probe): every local rank's elements (the
// ranks' shards are equal) over the median pass from the barrier before it to the one after it.
double pages_node_gparam_s(const cu::CpuPassProbe& p, int ranks_per_host) {
  return double(p.elems) * ranks_per_host / median(p.all_s) / 1e9;
}

void print_pages_probe(const cu::CpuPassProbe& p, int ranks_per_host) {
  std::cerr << "pages probe: the CPU pass over this run's own pages (" << p.all_s.size() << " passes, median): rank 0 "
            << num(double(p.elems) / median(p.own_s) / 1e9, 3) << " Gparam/s, node "
            << num(pages_node_gparam_s(p, ranks_per_host), 3) << " Gparam/s with " << ranks_per_host
            << " rank(s) at once\n";
}

// "engine built in 72.5 s: host memory first touched 10.1 s, page-locked 30.2 s, initial weights 25.3 s, ..."
std::string setup_text(const cu::SetupTimes& t) {
  const double rest = t.total_s - t.plan_s - t.gpu_s - t.host_touch_s - t.host_pin_s - t.weights_s;
  return "engine built in " + num(t.total_s, 1) + " s: plan " + num(t.plan_s, 1) + " s, GPU buffers " +
         num(t.gpu_s, 1) + " s, host memory first touched " + num(t.host_touch_s, 1) + " s and page-locked " +
         num(t.host_pin_s, 1) + " s, initial weights " + num(t.weights_s, 1) + " s" +
         (t.weights_host_s + t.weights_upload_s > 0
              ? " (drawn on the host " + num(t.weights_host_s, 1) + " s, uploaded " + num(t.weights_upload_s, 1) + " s)"
              : "") +
         ", the rest " + num(std::max(0.0, rest), 1) + " s";
}

// The point as the engine built it: its split, memory, set-up times, speculation and CPU pass order.
RunPoint describe_point(const cu::Engine& eng, double ratio, const backend::sim::ModelChoices& chosen) {
  RunPoint pt;
  pt.setup = eng.setup_times();
  pt.requested = ratio;
  pt.actual = eng.split().actual_ratio;
  pt.memory = eng.memory();
  pt.gpu_elems = eng.split().gpu_elems;
  pt.cpu_elems = eng.split().cpu_elems;
  pt.speculation_bytes = eng.plan().config.speculation_bytes;
  pt.carry_tail = core::carries(eng.plan());
  pt.ring_forward_order = eng.plan().config.ring_forward_order;
  const std::vector<int32_t> speculated = core::speculated_layers(eng.split(), eng.plan().config);
  pt.speculated_layers = speculated.size();
  pt.speculated_elems = core::spare_range(eng.split(), speculated).elems;
  pt.cpu_order = eng.plan().config.cpu_order;
  pt.cpu_order_choice = chosen.cpu_order;
  pt.speculation_layers = eng.plan().config.speculation_layers;
  pt.speculation_choice = chosen.speculation;
  pt.pages = eng.cpu_pass_probe();
  return pt;
}

// Rank 0's lines about the engine built for a ratio, before its steps.
void print_point(const RunOptions& o, const RunPoint& pt, const cu::Engine& eng) {
  if (pt.pages.elems > 0 && !pt.pages.all_s.empty()) print_pages_probe(pt.pages, o.ranks_per_host);
  std::cerr << "ratio " << num(pt.requested, 3) << " (actual " << num(pt.actual, 4) << "): GPU segment " << pt.gpu_elems
            << ", CPU segment " << pt.cpu_elems << " elements; GPU " << core::format_gb(pt.memory.gpu_used_by_process)
            << " in use (model " << core::format_gb(pt.memory.planned.gpu_total) << "), host pinned "
            << core::format_gb(pt.memory.host_pinned) << "\n";
  std::cerr << setup_text(pt.setup) << "\n";
  std::cerr << "model's " << core::unnamed_gpu_text(pt.memory.plan) << "\n";
  if (pt.cpu_elems > 0) std::cerr << core::staging_choice_text(pt.memory.staging) << "\n";
  if (pt.speculation_choice && pt.speculation_choice->eligible > 0)
    std::cerr << speculation_choice_text(*pt.speculation_choice) << "\n";
  if (pt.speculated_layers > 0)
    std::cerr << "speculation: " << pt.speculated_layers << " CPU layer(s) update during backward, "
              << core::format_gb(spare_bytes(pt.memory.plan)) << " of host memory for their second state slot\n";
  if (core::ordered_cpu_passes(eng.plan()) > 0) std::cerr << cpu_order_text(pt.cpu_order, pt.cpu_order_choice) << "\n";
}

// One ratio from scratch (or from --resume's checkpoint): the engine, its steps, then the checks and
// files that need its state.
RunPoint run_ratio(const RunOptions& o, const cu::EngineConfig& ec, const backend::sim::ModelChoices& chosen,
                   RunMetrics& metrics, backend::launch::Rendezvous* rdv, const StopSignals* signals) {
  const int rank = ec.rank;
  if (rank == 0)  // a large model takes a minute or more to set up: say what is happening
    std::cerr << "ratio " << num(ec.ratio, 3)
              << ": building the engine (GPU buffers; host memory placed by the CPU optimizer's threads, then "
                 "page-locked; the initial weights)\n";
  std::unique_ptr<cu::Engine> eng = cu::Engine::create(ec);
  RunPoint pt = describe_point(*eng, ec.ratio, chosen);
  std::unique_ptr<RunCheckpoints> ck = make_checkpoints(*eng, o, ec, rdv, signals);
  if (rank == 0) print_point(o, pt, *eng);
  train(*eng, o, ec, metrics, pt, ck.get());
  pt.speculated_steps = eng->speculated_steps();
  pt.failed_speculations = eng->failed_speculations();
  // (index, value) pairs of every owned weight: 16 B each, so only when asked for
  const bool need_master = o.verify || o.save_master;
  const auto mine = need_master ? eng->master_weights() : std::vector<std::pair<int64_t, float> >{};
  if (o.verify) {
    pt.parity = check_parity(ec, pt.steps.back().step, mine, pt.parity_ok);  // the last step reached
    std::cout << "rank " << rank << ": parity at ratio " << num(pt.requested, 3) << ": " << pt.parity << "\n";
  }
  if (o.save_master) {  // the ranks write one file together (nothing to wait for with one rank)
    const core::RankBarrier barrier =
        rdv ? backend::launch::rank_barrier(*rdv, kSaveMasterChannel, kFileBarrierTimeout) : core::RankBarrier{};
    write_master_weights(*o.save_master + (o.ratios.size() > 1 ? ".r" + num(pt.requested, 3) : ""),
                         ec.settings.model.total_params, mine, rank, ec.settings.world, barrier);
  }
  if (o.out.trace || (o.timeline_svg && rank == 0)) write_step_files(o, pt, *eng, ec.settings.world, rank);
  if (o.loss_svg && rank == 0) write_loss_curve(o, pt);
  ck.reset();
  const auto freed = std::chrono::steady_clock::now();
  eng.reset();  // unregisters and unmaps the host memory: seconds on a large CPU segment
  pt.teardown_s = seconds_since(freed);
  if (rank == 0) std::cerr << "ratio " << num(ec.ratio, 3) << ": engine freed in " << num(pt.teardown_s, 1) << " s\n";
  return pt;
}

// ---- the results ----------------------------------------------------------------------------------------

// Each point's steady steps by number (steady_steps.h), e.g. "2..6", or "3..5 (carried: ...)" per point
// where they differ.
std::string steady_step_list(const std::vector<RunPoint>& points) {
  std::string out;
  for (const RunPoint& p : points) {
    const std::vector<bool> steady = steady_steps(p.steps.size(), p.carry_tail);
    std::vector<int> nums;
    for (size_t i = 0; i < p.steps.size(); ++i)
      if (steady[i]) nums.push_back(p.steps[i].step);
    if (nums.empty()) continue;
    std::string one =
        nums.size() == 1 ? std::to_string(nums[0]) : std::to_string(nums.front()) + ".." + std::to_string(nums.back());
    if (p.carry_tail)
      one += " (carried: a step's time is its period; the first period holds step 1's tail, the last step is drained)";
    if (out.find(one) == std::string::npos) out += (out.empty() ? "" : "; ") + one;
  }
  return out.empty() ? "none" : out;
}

// The GPU over the point's steady steps (metrics::combine of their windows; empty without telemetry).
metrics::GpuWindow steady_gpu(const RunPoint& p) {
  const std::vector<bool> steady = steady_steps(p.steps.size(), p.carry_tail);
  std::vector<metrics::GpuWindow> w;
  for (size_t i = 0; i < p.gpu.size() && i < steady.size(); ++i)
    if (steady[i]) w.push_back(p.gpu[i]);
  return metrics::combine(w);
}

// run_overlap.h's clip note of a point, over its steady steps.
void print_clip_note(const RunPoint& p) {
  const std::vector<bool> steady = steady_steps(p.steps.size(), p.carry_tail);
  std::vector<ClipSample> samples;
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (steady[i]) samples.push_back({p.steps[i].clipped, p.steps[i].grad_norm});
  const std::string note = clip_note(p.requested, p.actual > 0, samples);
  if (!note.empty()) std::cout << note << "\n";
}

// Over steady steps (steady_steps.h), rank 0.
void print_summary(const std::vector<RunPoint>& points) {
  Table s(
      {"ratio",          "actual",        "step_ms",    "fwd_ms",         "bwd_ms",       "opt_phase_ms", "exp_xfer_ms",
       "exp_cpu_opt_ms", "exp_copies_ms", "cpu_opt_ms", "gpu_opt_ms",     "busy_compute", "busy_cpu",     "cpu_hid",
       "bound_ms",       "spec_held",     "gpu_GB",     "host_pinned_GB", "tok/s",        "MFU",          "x_vs_r1",
       "SM_MHz",         "GPU_W"});
  const auto step_ms = [](const cu::StepReport& r) { return ms(r.timeline.step_ns); };
  double r1 = std::nan("");
  for (const RunPoint& p : points)
    if (p.requested == 1.0) r1 = steady_median(p, step_ms);
  for (const RunPoint& p : points) {
    const double step = steady_median(p, step_ms);
    auto busy = [&](core::Queue q) {
      return steady_median(p, [q](const cu::StepReport& r) {
        return r.timeline.step_ns ? double(r.timeline.busy_ns[size_t(q)]) / double(r.timeline.step_ns) : 0.0;
      });
    };
    auto kind = [&](core::OpKind k) {
      return num(steady_median(p, [k](const cu::StepReport& r) { return kind_ms(r.timeline, k); }));
    };
    auto field = [&](int64_t backend::StepTimeline::*f) {
      return num(steady_median(p, [f](const cu::StepReport& r) { return ms(r.timeline.*f); }));
    };
    auto rate = [&](double Throughput::*f) {  // a decoder's, per step
      if (p.throughput.size() != p.steps.size()) return std::nan("");
      return steady_median(
          p, [&](const cu::StepReport& r) { return p.throughput[size_t(r.step - p.steps.front().step)].*f; });
    };
    const double tok_s = rate(&Throughput::tokens_per_s), mfu = rate(&Throughput::mfu);
    const metrics::GpuWindow gpu = steady_gpu(p);
    auto overlap = [&](double OverlapFigures::*f) {
      return steady_median(
          p, [&](const cu::StepReport& r) { return p.overlap[size_t(r.step - p.steps.front().step)].*f; });
    };
    const std::string held = p.speculated_layers == 0 ? "-"
                                                      : std::to_string(p.speculated_steps - p.failed_speculations) +
                                                            "/" + std::to_string(p.steps.size());
    s.add({num(p.requested, 3),
           num(p.actual, 4),
           num(step),
           kind(core::OpKind::kForward),
           kind(core::OpKind::kBackward),
           field(&backend::StepTimeline::optimizer_phase_ns),
           field(&backend::StepTimeline::exposed_transfer_ns),
           field(&backend::StepTimeline::exposed_cpu_optimizer_ns),
           field(&backend::StepTimeline::exposed_copies_ns),
           kind(core::OpKind::kCpuOptimizer),
           kind(core::OpKind::kGpuOptimizer),
           num(busy(core::Queue::kCompute), 3),
           num(busy(core::Queue::kCpu), 3),
           num(overlap(&OverlapFigures::overlap_fraction), 3),
           num(overlap(&OverlapFigures::bound_ms)),
           held,
           num(double(p.memory.gpu_used_by_process) / 1e9),
           num(double(p.memory.host_pinned) / 1e9),
           num(tok_s, 0),
           num(mfu, 3),
           num(r1 / step, 2),
           num(gpu.sm_mhz_median, 0),
           num(gpu.power_w, 0)});
  }
  std::cout << "\nsummary (median of the steady steps, steady_steps.h: " << steady_step_list(points)
            << ", rank 0; spec_held: steps whose speculation held of all steps; SM_MHz, GPU_W: the GPU's SM clock and "
               "mean power over them, from NVML, '-' where it did not answer)\n";
  s.print(std::cout);
  for (const RunPoint& p : points) print_clip_note(p);
}

// A GPU telemetry window (metrics/gpu_telemetry.h); null for what was not read.
nlohmann::json gpu_window_json(const metrics::GpuWindow& w) {
  const auto value = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  return {{"samples", w.samples},
          {"seconds", value(w.seconds)},
          {"sm_mhz_median", value(w.sm_mhz_median)},
          {"sm_mhz_min", value(w.sm_mhz_min)},
          {"sm_mhz_max", value(w.sm_mhz_max)},
          {"power_w", value(w.power_w)},
          {"power_limit_w", value(w.power_limit_w)},
          {"temperature_c_max", value(w.temperature_c_max)},
          {"power_capped_fraction", value(w.power_capped_fraction)},
          {"thermal_fraction", value(w.thermal_fraction)}};
}

nlohmann::json step_json(const cu::StepReport& r) {
  nlohmann::json js;
  js["step"] = r.step;
  js["loss"] = std::isnan(r.loss) ? nlohmann::json() : nlohmann::json(r.loss);
  js["grad_norm"] = std::isfinite(r.grad_norm) ? nlohmann::json(r.grad_norm) : nlohmann::json();
  js["loss_scale"] = r.loss_scale;
  js["lr"] = r.lr;
  js["skipped"] = r.skipped;
  js["clipped"] = r.clipped;
  js["speculated"] = r.speculated;
  js["speculation_held"] = r.speculation_held;
  js["cpu_overlapped_ns"] = r.timeline.cpu_overlapped_ns;
  js["step_ns"] = r.timeline.step_ns;
  js["optimizer_phase_ns"] = r.timeline.optimizer_phase_ns;
  js["host_boundary_ns"] = {{"begin", r.host.begin_ns},
                            {"begin_wait", r.host.begin_wait_ns},
                            {"body_done_to_next_start", r.host.body_done_to_next_start_ns}};
  js["exposed_ns"] = r.timeline.exposed_ns;
  js["exposed_transfer_ns"] = r.timeline.exposed_transfer_ns;
  js["exposed_cpu_optimizer_ns"] = r.timeline.exposed_cpu_optimizer_ns;
  js["exposed_copies_ns"] = r.timeline.exposed_copies_ns;
  js["d2h_bytes"] = r.d2h_bytes;
  js["h2d_bytes"] = r.h2d_bytes;
  for (int q = 0; q < core::kQueueCount; ++q)
    js["busy_ns"][core::queue_name(core::Queue(q))] = r.timeline.busy_ns[size_t(q)];
  for (int k = 0; k < core::kOpKindCount; ++k)
    js["kind_ns"][core::op_kind_name(core::OpKind(k))] = r.timeline.kind_ns[size_t(k)];
  return js;
}

// Every step's figures (what `twinflow validate --measured` reads); ranks > 0 write FILE.rankN.
void write_run_json(const RunOptions& o, const cu::EngineConfig& base, const std::string& gpu, size_t threads,
                    const std::vector<RunPoint>& points) {
  nlohmann::json doc;
  doc["scenario"] = o.sc.name;
  doc["scenario_file"] = o.sc.file.string();
  doc["rank"] = base.rank;
  doc["world"] = base.settings.world;
  doc["gpu"] = gpu;
  doc["workload"] = core::workload_type_name(o.workload);
  backend::cpu::CpuOptions tuned;  // every CPU tuning knob as the engine ran it
  backend::cpu::apply_tuning_spec(tuned, o.cpu_tuning, "--cpu-tuning");
  doc["cpu_tuning"] = backend::cpu::tuning_spec(tuned);
  doc["cuda_sync"] = o.cuda_sync;
  doc["threads"] = threads;
  doc["grad_accum"] = base.settings.step.grad_accum;
  doc["micro_batch"] = base.settings.step.micro_batch;
  doc["pinned"] = base.pin_memory;
  doc["params"] = base.settings.model.total_params;
  if (o.auto_ratio) doc["auto_ratio"] = auto_ratio_json(*o.auto_ratio);
  if (base.settings.workload == core::WorkloadType::kDecoder) {
    doc["tokens_per_step"] = tokens_per_step(base.settings);
    doc["model_flops_per_token"] = model_flops_per_token(base.settings);
    doc["peak_tflops"] = o.sc.cluster.hardware.gpu.gemm_peak_tflops(base.settings.step.param_dtype);
  }
  for (const RunPoint& p : points) {
    nlohmann::json jp;
    jp["ratio"] = p.requested;
    jp["actual_ratio"] = p.actual;
    jp["gpu_elems"] = p.gpu_elems;
    jp["cpu_elems"] = p.cpu_elems;
    jp["setup_s"] = {{"plan", p.setup.plan_s},
                     {"gpu", p.setup.gpu_s},
                     {"host_touch", p.setup.host_touch_s},
                     {"host_pin", p.setup.host_pin_s},
                     {"weights", p.setup.weights_s},
                     {"weights_host", p.setup.weights_host_s},
                     {"weights_upload", p.setup.weights_upload_s},
                     {"total", p.setup.total_s}};
    jp["teardown_s"] = p.teardown_s;
    if (std::isfinite(p.host_before_gparam_s) && std::isfinite(p.host_after_gparam_s))
      jp["host_probe"] = {{"ranks", o.ranks_per_host},
                          {"before_gparam_s", p.host_before_gparam_s},
                          {"after_gparam_s", p.host_after_gparam_s}};
    if (!p.pages.all_s.empty())
      jp["pages_probe"] = {{"ranks", o.ranks_per_host},
                           {"elems", p.pages.elems},
                           {"own_s", p.pages.own_s},
                           {"all_s", p.pages.all_s},
                           {"node_gparam_s", pages_node_gparam_s(p.pages, o.ranks_per_host)}};
    jp["memory"] = {{"gpu_used_by_process", p.memory.gpu_used_by_process},
                    {"gpu_allocated", p.memory.gpu_allocated},
                    {"gpu_planned", p.memory.planned.gpu_total},
                    {"host_pinned", p.memory.host_pinned},
                    {"host_pageable", p.memory.host_pageable},
                    {"host_planned", p.memory.planned.host_total},
                    {"host_staging_planned", p.memory.planned.host_staging}};
    if (p.memory_check)
      jp["memory_check"] = {
          {"gpu_predicted", p.memory_check->gpu_predicted},
          {"gpu_measured", p.memory_check->gpu_measured},
          {"gpu_diff_percent", percent_diff(p.memory_check->gpu_predicted, p.memory_check->gpu_measured)},
          {"host_pinned_predicted", p.memory_check->host_predicted},
          {"host_pinned_measured", p.memory_check->host_measured},
          {"host_diff_percent", percent_diff(p.memory_check->host_predicted, p.memory_check->host_measured)},
          {"host_rss", p.memory_check->host_rss}};
    // issue 16: the CPU segment's host bytes per parameter, from the allocation plan
    const core::HostBytesPerParam hb = core::host_bytes_per_cpu_param(p.memory.plan, p.cpu_elems);
    jp["host_bytes_per_cpu_param"] = {{"state", hb.optimizer},
                                      {"spare", hb.spare},
                                      {"staging", hb.staging},
                                      {"total", hb.total()},
                                      {"cpu_elems", p.cpu_elems}};
    if (!p.parity.empty()) jp["parity"] = {{"ok", p.parity_ok}, {"detail", p.parity}};
    // the budget the plan resolved to: what `validate` simulates this point with
    jp["speculation_bytes"] = p.speculation_bytes;
    jp["carry_tail"] = p.carry_tail;               // what `validate` simulates this point with
    jp["ring_order"] = p.ring_forward_order ? "forward" : "backward";  // ... and this
    jp["staging_slots"] = p.memory.staging.slots;  // the host staging it planned with (core::choose_staging)
    jp["speculated_layers"] = p.speculated_layers;
    jp["speculation_layers"] = p.speculation_layers;  // the cap: what `validate` simulates this point with
    if (p.speculation_choice) jp["speculation_choice"] = speculation_choice_json(*p.speculation_choice);
    jp["cpu_order"] = cpu_order_json(p.cpu_order, p.cpu_order_choice);  // what `validate` simulates this point with
    jp["spare_slot_bytes"] = spare_bytes(p.memory.plan);
    if (const metrics::GpuWindow g = steady_gpu(p); !g.empty()) jp["gpu_steady"] = gpu_window_json(g);
    jp["speculated_steps"] = p.speculated_steps;
    jp["failed_speculations"] = p.failed_speculations;
    const std::vector<bool> steady = steady_steps(p.steps.size(), p.carry_tail);
    for (size_t i = 0; i < p.steps.size(); ++i) {
      nlohmann::json js = step_json(p.steps[i]);
      js["steady"] = bool(steady[i]);  // what the summary's medians count (steady_steps.h)
      if (i < p.gpu.size() && !p.gpu[i].empty()) js["gpu"] = gpu_window_json(p.gpu[i]);
      if (i < p.overlap.size())
        js["overlap"] = {
            {"cpu_overlap_fraction", p.overlap[i].overlap_fraction},     {"gpu_work_ms", p.overlap[i].gpu_work_ms},
            {"cpu_pass_bound_ms", p.overlap[i].cpu_pass_bound_ms},       {"free_bound_ms", p.overlap[i].free_bound_ms},
            {"waited_pass_bound_ms", p.overlap[i].waited_pass_bound_ms}, {"bound_ms", p.overlap[i].bound_ms}};
      if (i < p.throughput.size()) {
        js["tokens_per_s"] = p.throughput[i].tokens_per_s;
        js["model_tflops"] = p.throughput[i].tflops;
        js["mfu"] = std::isfinite(p.throughput[i].mfu) ? nlohmann::json(p.throughput[i].mfu) : nlohmann::json();
      }
      jp["steps"].push_back(js);
    }
    doc["points"].push_back(jp);
  }
  add_scenario_record(doc, o.sc);
  write_json_file(doc, *o.out.json + (base.rank > 0 ? ".rank" + std::to_string(base.rank) : ""), 1);
}

// --host-probe, on every rank at once (between two ratios: no engine holds memory or threads): local rank 0
// measures the node's CPU optimizer rate on ops of op_elems (engine_cpu_op) with LOCAL_WORLD_SIZE worker
// processes spread over the host's CPUs as this process was launched with (measure_node_cpu_rate); the others
// wait, asleep, at the rendezvous. NaN on the other ranks. A probe that fails stops every rank with its reason.
double probe_host(int64_t op_elems, const backend::launch::RankEnv& env, backend::launch::Rendezvous* rdv,
                  std::span<const int> host_cpus, const std::string& when) {
  if (rdv) rdv->barrier();
  double rate = std::nan("");
  std::string failed;
  if (env.local_rank == 0) {
    try {
      const NodeCpuRate r = measure_node_cpu_rate(op_elems, env.local_world_size, host_cpus);
      rate = r.gparam_s;
      std::string cpus;
      for (const std::string& c : r.rank_cpus) cpus += (cpus.empty() ? "" : ", ") + c;
      std::cerr << "host probe " << when << ": " << num(rate, 3) << " Gparam/s, " << r.ranks
                << " rank process(es) on calibrate's rank-curve segments (CPUs " << cpus << ")\n";
    } catch (const std::exception& e) {
      failed = e.what();
    }
  }
  const bool ok = rdv ? rdv->all_ok(failed.empty(), kHostProbeChannel) : failed.empty();
  if (!ok)
    throw core::RuntimeFailure(
        "--host-probe " + when + ": " +
        (failed.empty() ? std::string("local rank 0's probe failed (its log says why)") : failed));
  return rate;
}

}  // namespace

int cmd_run(const std::vector<std::string>& args) {
  std::optional<RunOptions> parsed = parse_run_options(args);
  if (!parsed) return kExitOk;
  const backend::launch::RankEnv env = backend::launch::rank_env_from_process();
  parsed->ranks_per_host = env.local_world_size;
  const std::vector<int> host_cpus = backend::cpu::affinity_cpus();  // before this rank confines itself to its share
  if (parsed->ratio_auto) choose_auto_ratio(*parsed, env);
  const RunOptions& o = *parsed;
  const backend::cpu::CpuShare share = take_cpu_share(env);
  std::string why;
  if (!cu::cuda_available(&why))
    throw core::RuntimeFailure("no usable CUDA device (" + why +
                               "): `run` trains on GPUs; use `twinflow simulate` on machines without one");
  if (env.world_size != o.sc.cluster.world_size() && env.rank == 0)
    std::cerr << "note: the scenario plans " << o.sc.cluster.world_size() << " GPU(s); running on " << env.world_size
              << " rank(s) as launched\n";
  std::vector<cu::NcclId> ids(o.ratios.size());
  const std::unique_ptr<backend::launch::Rendezvous> rdv = rendezvous(env, o.timeout_s, ids);
  const size_t threads = cpu_threads(o, share);
  const cu::EngineConfig base = base_config(o, env, threads, share);
  const std::string gpu = cu::gpu_info(env.local_rank).name;
  if (env.rank == 0) print_banner(o, base, gpu, threads, share);
  std::string no_telemetry;  // each rank samples its own GPU: its clock, power and temperature per step
  const std::unique_ptr<metrics::GpuTelemetry> telemetry =
      metrics::GpuTelemetry::open_nvml(cu::pci_bus_id(env.local_rank), no_telemetry);
  if (!telemetry && env.rank == 0)
    std::cerr << "note: GPU telemetry off (" << no_telemetry << "): no SM clock or power in the tables\n";
  const core::StepConfig& step = base.settings.step;
  RunMetrics metrics(o.metrics, o.sc, base.settings, env.rank,
                     step.micro_batch * base.settings.model.tokens_per_sample() * step.grad_accum, telemetry.get());

  std::optional<StopSignals> signals;  // with checkpoints: SIGTERM/SIGINT end the run after a step, saved
  if (o.checkpoints()) signals.emplace();

  std::vector<RunPoint> points;
  bool all_ok = true;
  const int64_t probe_op = o.host_probe ? engine_cpu_op({o.sc}).elems : 0;  // planned once, not per probe
  const auto probe = [&](const std::string& when) {
    return o.host_probe ? probe_host(probe_op, env, rdv.get(), host_cpus, when) : std::nan("");
  };
  double host_rate = probe("before ratio " + num(o.ratios.front(), 3));
  for (size_t i = 0; i < o.ratios.size(); ++i) {  // one engine at a time: the previous one's memory is freed
    cu::EngineConfig ec = base;
    ec.ratio = o.ratios[i];
    ec.nccl_id = ids[i];
    if (o.pages_probe) {
      ec.cpu_probe_passes = kPagesProbePasses;
      if (rdv) ec.cpu_probe_barrier = [r = rdv.get()] { r->barrier(); };
    }
    // training.speculation and cpu_order auto, before the engine plans: the cost model's count of speculated
    // layers at this ratio, then their order with that count, as `simulate` chooses them. The engine resolves
    // the staging and the speculation bytes against this machine's memory where the simulator takes the
    // profile's: the counts then cap the engine's speculated layers (core::speculated_layers,
    // core::CpuPassOrder).
    const backend::sim::ModelChoices chosen =
        backend::sim::resolve_model_choices(ec.settings, o.sc, ec.ratio, run_sim_options(o, env));
    if (!chosen.not_costed.empty() && env.rank == 0 && i == 0)
      std::cerr << "note: " << chosen.not_costed
                << ": training.speculation and cpu_order auto keep their defaults (every eligible layer the host "
                   "holds speculates, in the plan's order); a profile of this machine (`twinflow calibrate`) lets "
                   "the cost model choose\n";
    metrics.set_ratio(ec.ratio);
    points.push_back(run_ratio(o, ec, chosen, metrics, rdv.get(), signals ? &*signals : nullptr));
    all_ok = all_ok && points.back().parity_ok;
    points.back().host_before_gparam_s = host_rate;
    host_rate = probe("after ratio " + num(ec.ratio, 3));  // and before the next
    points.back().host_after_gparam_s = host_rate;
  }
  if (env.rank == 0) print_summary(points);
  if (o.dump_batches && env.rank == 0) {
    write_batch_file(*o.dump_batches, base.settings, 1, o.steps, "--dump-batches");
    std::cerr << "dump: " << o.steps << " steps' batches in " << *o.dump_batches << "\n";
  }
  if (o.out.json) write_run_json(o, base, gpu, threads, points);
  if (metrics.serving() && o.metrics.linger_s > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(o.metrics.linger_s));
  if (rdv) {
    rdv->stop_watch();
    rdv->barrier();
  }
  return all_ok ? kExitOk : kExitCheckFailed;
}

#endif

}  // namespace tf::app
