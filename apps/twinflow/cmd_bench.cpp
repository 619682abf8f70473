// `twinflow bench`: optimizer throughput against the memory bound measured in the same run, and
// against peers (a naive in-process loop; torch's fused AdamW when its figures are given).
#include <boost/program_options.hpp>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "apps/twinflow/bench_ranks.h"
#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "apps/twinflow/cpu_ranks.h"
#include "apps/twinflow/measure.h"
#include "apps/twinflow/table.h"
#include "backends/cpu/host_topology.h"
#include "core/config_node.h"
#include "core/error.h"
#include "core/hardware.h"
#include "core/strings.h"
#if defined(TWINFLOW_HAVE_CUDA)
#include "backends/cuda/cuda_backend.h"
#endif

namespace tf::app {

namespace {
std::vector<std::string> split_list(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, sep);)
    if (!x.empty()) out.push_back(x);
  return out;
}

// torch fused AdamW figures written by bench/peer/torch_adamw.py: {"rows": [{"where": "cuda"|"cpu",
// "n": N, "tensors": T, "gparam_per_s": x}, ...]}. Returns the best layout's throughput at size n
// (or, if torch was not run at n, at its largest size).
std::optional<double> peer_value(const nlohmann::json& j, const std::string& where, size_t n) {
  if (!j.contains("rows") || !j["rows"].is_array()) return std::nullopt;
  std::optional<double> at_n, at_max;
  size_t max_n = 0;
  for (const auto& r : j["rows"]) {
    if (!r.is_object() || r.value("where", "") != where || !r.contains("gparam_per_s")) continue;
    const size_t rn = r.value("n", size_t(0));
    const double g = r["gparam_per_s"].get<double>();
    if (rn == n) at_n = std::max(at_n.value_or(0.0), g);
    if (rn > max_n)
      max_n = rn, at_max = g;
    else if (rn == max_n)
      at_max = std::max(at_max.value_or(0.0), g);
  }
  return at_n ? at_n : at_max;
}

// ---- the command line ---------------------------------------------------------------------------------

struct BenchOptions {
  size_t n = 0, gpu_n = 0;
  int iters = 1;
  std::vector<core::OptimizerKind> kinds;
  std::vector<core::DType> grads;
  std::string gpu_mode;
  std::vector<core::StepValues> values;  // --values: the data each optimizer row updates, a row each
  nlohmann::json peer = nlohmann::json::object();
  backend::cpu::CpuOptions cpu;
  bool cpu_variants = false;
  OutputFiles out;                         // csv, json
  std::optional<RanksBenchOptions> ranks;  // --cpu-ranks: the node table instead
};

const IntOption kCpuN{"n", 1, int64_t(1) << 32, int64_t(1) << 25, "elements per CPU measurement"};
const IntOption kGpuN{"gpu-n", 1, int64_t(1) << 32, int64_t(1) << 28, "elements per GPU measurement"};
const IntOption kIters{"iters", 1, 100000, 10, "timed repetitions (median reported)"};
const IntOption kLayers{"layers", 1, 100000, 32, "with --cpu-ranks and no scenario: CPU ops per rank"};
const IntOption kPrefetch{"prefetch", 0, int64_t(1) << 20, backend::cpu::CpuOptions{}.tuning.prefetch_elems,
                          "CPU software prefetch distance in elements (0: off)"};

po::options_description bench_description() {
  po::options_description desc("twinflow bench: optimizer kernels vs the memory bound and peers");
  auto add = desc.add_options();
  add("help,h", "show this help");
  for (const IntOption* io : {&kCpuN, &kGpuN, &kIters}) add_int_option(desc, *io);
  add("optimizers", po::value<std::string>()->default_value("adamw,adam,adagrad,lion"), "comma list");
  add("grads", po::value<std::string>()->default_value("bf16,fp32"),
      "gradient dtypes; bf16/fp16 grads write a copy of the same dtype, fp32 grads write none (torch's setting)");
  add("threads", po::value<long long>(),
      "CPU threads, 1 to 4 x the host's cores (default: all allowed CPUs; with --cpu-ranks: per rank, its share's "
      "cores)");
  add("pin", po::bool_switch(), "pin CPU threads to cores (--cpu-ranks always pins)");
  add("isa", po::value<std::string>(), "force a SIMD path: scalar|avx2|avx512");
  add_int_option(desc, kPrefetch);
  add("stream-copy", po::value<bool>()->default_value(backend::cpu::CpuOptions{}.tuning.stream_copy),
      "CPU non-temporal stores for the bf16/fp16 copy (true|false)");
  add("cpu-variants", po::bool_switch(), "also time AdamW under each CPU tuning variant (pin, prefetch, streaming)");
  add("cpu-ranks", po::value<std::string>(),
      "node mode: comma list of rank counts k; for each, k processes run the engine's CPU path at once, each on its "
      "share of the cores (the elements are --n over all ranks, or --scenario's CPU segments at world k)");
  add("scenario", po::value<std::string>(), "with --cpu-ranks: each rank's CPU layers from this scenario");
  add("footprints", po::bool_switch(),
      "with --scenario, in place of --cpu-ranks: the node rate of the scenario's ranks at the host memory it pins at "
      "ratios 0.5 and 1 (its CPU segments and the rest of its planned pinned bytes) against small segments (--n over "
      "those ranks, --layers ops each), --iters alternating pairs: calibrate's footprint curve, without a GPU");
  add("ratio", po::value<double>(), "with --scenario: the CPU share (default: the scenario's)");
  add_int_option(desc, kLayers);
  add("tuning", po::value<std::string>()->default_value("default"),
      "CPU tuning knobs for every row over cpu_tuning.h's defaults: key=value pairs of prefetch (elements), level "
      "(0: L1, 1: L2), unroll (1|2|4), interleave (1|2), nt (streamed copy 0|1), block (work-stealing tiles, 0: "
      "off), spin (pool spin, us), nice (workers' nice levels, 0-19), idle (workers in the idle scheduling class "
      "0|1), huge (0|1), exact (the exact path for values near the subnormals: 0 off, 1 on, 2 this CPU's probe "
      "decides)");
  add("variants", po::value<std::string>(),
      "with --cpu-ranks: AdamW bf16 variants, ';'-separated tuning specs applied over --tuning");
  add("blocks", po::value<std::string>(), "with --cpu-ranks: AdamW variants, work-stealing blocks in tiles (0: off)");
  add("prefetches", po::value<std::string>(), "with --cpu-ranks: AdamW variants, prefetch distances in elements");
  add("huge-pages", po::value<std::string>()->default_value(backend::cpu::kCpuTuning.huge_pages ? "on" : "off"),
      "with --cpu-ranks: on | off | both (a second group of processes with the other setting: the AdamW bf16 row)");
  add("dma", po::value<std::string>()->default_value("off"),
      "with --cpu-ranks: off | on | both: H2D and D2H copies on GPU 0 during the passes");
  add("per-layer", po::bool_switch(), "with --cpu-ranks: also each CPU op's time and rate (rank 0)");
  add("out-of-place", po::bool_switch(),
      "with --cpu-ranks: every row also out of place, each layer read from its state slot and written to a spare "
      "one (the engine's speculative update), the two alternating pass by pass");
  add("alternate", po::bool_switch(),
      "with --cpu-ranks and --variants: AdamW bf16 under --tuning and under each variant, each in a group of "
      "processes of its own, one pass of each in turn (a drift of the host moves them alike); with --out-of-place "
      "out of place");
  add("register", po::bool_switch(),
      "with --cpu-ranks or --footprints: page-lock each rank's memory for the copy engines (cudaHostRegister in "
      "place, as the engine pins its host buffers) before measuring; needs CUDA");
  add("pinning", po::value<std::string>()->default_value("partitioned"),
      "with --cpu-ranks: partitioned (each rank its share of the cores) | identical (every rank pins cores / k "
      "threads to the same first CPUs: the engine before the shares, for comparison)");
  add("profile", po::value<std::string>(),
      "with --cpu-ranks: the simulator's node time from this hardware profile beside the AdamW bf16 rows");
  add("gpu", po::value<std::string>()->default_value("auto"), "auto|on|off");
  add("values", po::value<std::string>()->default_value("random"),
      "comma list of the data the optimizer rows (CPU and GPU) update, a row each: random (calibrate's: "
      "every gradient finite, non-zero) | half-zero (half the elements g = m = v = 0, as units that never "
      "had a gradient) | subnormal (every gradient +-1e-20: v is subnormal) | decayed (every g = 0 on subnormal "
      "m and v: a unit whose gradients stopped long ago)");
  add("peer-json", po::value<std::string>(), "torch figures from bench/peer/torch_adamw.py, shown as ratios");
  add_output_options(desc, {.csv = "write the table as CSV", .json = "write the table as JSON"});
  return desc;
}

const char kBenchEpilog[] =
    "\nColumns: Gparam/s = elements updated per second / 1e9; GB/s counts the bytes per element\n"
    "of the fused pass (e.g. AdamW, bf16 grad and copy: 14 read + 14 written = 28 B);\n"
    "% bound = GB/s over the bound row of the same streams measured in the same run (fp32 gradients: the\n"
    "same-streams bound; bf16/fp16: the streams bound with that gradient and copy); vs peer = time ratio.\n";

nlohmann::json read_peer_json(const std::string& path) {
  // a regular file of bounded size (never /dev/zero or a FIFO)
  const std::string text = core::config::read_document(path, "--peer-json");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw core::InputError("--peer-json '" + core::printable(path) + "': " + e.what());
  }
}

// A comma list of integers in [lo, hi] for `option` (each checked as cli's integer options are).
template <class T>
std::vector<T> int_list(const po::variables_map& vm, const char* option, int64_t lo, int64_t hi) {
  std::vector<T> out;
  for (const std::string& x : split_list(vm[option].as<std::string>()))
    out.push_back(T(checked_int(x, std::string("--") + option, lo, hi)));
  if (out.empty()) throw core::InputError(std::string("--") + option + ": an empty list");
  return out;
}

RanksBenchOptions ranks_options(const po::variables_map& vm, const BenchOptions& b) {
  RanksBenchOptions r;
  const int cores = backend::cpu::host_topology().physical_cores();
  r.footprints = vm["footprints"].as<bool>();
  if (r.footprints && vm.count("cpu-ranks"))
    throw core::InputError("--footprints measures the scenario's own ranks per node: give it or --cpu-ranks, not both");
  if (r.footprints && !vm.count("scenario"))
    throw core::InputError("--footprints needs --scenario: the scenario whose host memory to hold");
  if (!r.footprints) r.ranks = int_list<int>(vm, "cpu-ranks", 1, cores);
  if (vm.count("n") && !vm["n"].defaulted()) r.n = int64_t(b.n);
  if (vm.count("scenario")) r.scenario = vm["scenario"].as<std::string>();
  if (vm.count("ratio")) {
    r.ratio = vm["ratio"].as<double>();
    if (!(r.ratio >= 0 && r.ratio <= 1)) throw core::InputError("--ratio must be in [0, 1]");
  }
  r.layers = int(int_option(vm, kLayers));
  r.threads = b.cpu.threads;
  r.iters = b.iters;
  r.kinds = b.kinds;
  r.grads = b.grads;
  r.tuning = vm["tuning"].as<std::string>();
  if (vm.count("variants"))
    for (const std::string& x : split_list(vm["variants"].as<std::string>(), ';')) r.variants.push_back(x);
  // --blocks x --prefetches: their cross product as variants (each list alone: the other at its default)
  const backend::cpu::CpuOptions d;
  const std::vector<size_t> blocks =
      vm.count("blocks") ? int_list<size_t>(vm, "blocks", 0, 1 << 20) : std::vector<size_t>{d.steal_block_tiles};
  const std::vector<uint32_t> prefetches = vm.count("prefetches") ? int_list<uint32_t>(vm, "prefetches", 0, 1 << 20)
                                                                  : std::vector<uint32_t>{d.tuning.prefetch_elems};
  if (vm.count("blocks") || vm.count("prefetches"))
    for (size_t b : blocks)
      for (uint32_t pf : prefetches)
        r.variants.push_back("block=" + std::to_string(b) + ",prefetch=" + std::to_string(pf));
  const std::string huge = vm["huge-pages"].as<std::string>();
  if (huge == "on" || huge == "off")
    r.huge_pages = {huge == "on"};
  else if (huge == "both")
    r.huge_pages = {d.huge_pages, !d.huge_pages};
  else
    throw core::InputError("--huge-pages must be on, off or both, got '" + huge + "'");
  r.dma = vm["dma"].as<std::string>();
  if (r.dma != "off" && r.dma != "on" && r.dma != "both")
    throw core::InputError("--dma must be off, on or both, got '" + r.dma + "'");
  r.per_layer = vm["per-layer"].as<bool>();
  r.out_of_place = vm["out-of-place"].as<bool>();
  r.alternate = vm["alternate"].as<bool>();
  if (r.alternate && r.variants.empty())
    throw core::InputError("--alternate needs --variants (or --blocks/--prefetches): the tunings to alternate");
  r.register_memory = vm["register"].as<bool>();
  const std::string pinning = vm["pinning"].as<std::string>();
  if (pinning != "partitioned" && pinning != "identical")
    throw core::InputError("--pinning must be partitioned or identical, got '" + pinning + "'");
  r.identical_pinning = pinning == "identical";
  if (vm.count("profile")) {
    r.profile = vm["profile"].as<std::string>();
    (void)core::find_hardware_profile(*r.profile);  // bad input fails before any measuring
  }
  r.out = b.out;
  return r;
}

std::optional<BenchOptions> parse_bench_options(const std::vector<std::string>& args) {
  const std::optional<po::variables_map> parsed = parse_command(args, bench_description(), nullptr, kBenchEpilog);
  if (!parsed) return std::nullopt;
  const po::variables_map& vm = *parsed;
  BenchOptions o;
  o.n = size_t(int_option(vm, kCpuN));
  o.gpu_n = size_t(int_option(vm, kGpuN));
  o.iters = int(int_option(vm, kIters));
  for (const auto& s : split_list(vm["optimizers"].as<std::string>())) o.kinds.push_back(core::parse_optimizer(s));
  for (const auto& s : split_list(vm["grads"].as<std::string>())) {
    const core::DType d = core::parse_dtype(s, "--grads");
    if (d == core::DType::kNone) throw core::InputError("--grads: 'none' is not a gradient dtype");
    o.grads.push_back(d);
  }
  o.gpu_mode = vm["gpu"].as<std::string>();
  if (o.gpu_mode != "auto" && o.gpu_mode != "on" && o.gpu_mode != "off")
    throw core::InputError("--gpu must be auto, on or off, got '" + o.gpu_mode + "'");
  for (const std::string& v : split_list(vm["values"].as<std::string>())) {
    const std::optional<core::StepValues> sv = core::parse_step_values(v);
    if (!sv) throw core::InputError("--values: '" + v + "' is not one of random, half-zero, subnormal, decayed");
    o.values.push_back(*sv);
  }
  if (o.values.empty()) throw core::InputError("--values: give at least one of random, half-zero, subnormal, decayed");
  if (vm.count("peer-json")) o.peer = read_peer_json(vm["peer-json"].as<std::string>());
  if (vm.count("threads"))
    o.cpu.threads = backend::cpu::checked_thread_count(vm["threads"].as<long long>(),
                                                       backend::cpu::host_topology().physical_cores(), "--threads");
  o.cpu.pin_threads = vm["pin"].as<bool>();
  if (vm.count("isa")) o.cpu.isa = int(backend::cpu::parse_isa(vm["isa"].as<std::string>()));
  o.cpu.tuning.prefetch_elems = uint32_t(int_option(vm, kPrefetch));
  o.cpu.tuning.stream_copy = vm["stream-copy"].as<bool>();
  backend::cpu::apply_tuning_spec(o.cpu, vm["tuning"].as<std::string>(), "--tuning");
  o.cpu_variants = vm["cpu-variants"].as<bool>();
  o.out = read_output_options(vm);
  if (vm.count("cpu-ranks") || vm["footprints"].as<bool>()) o.ranks = ranks_options(vm, o);
  return o;
}

// ---- the CPU ------------------------------------------------------------------------------------------

// A row's kernel column: the optimizer, and the data when it is not the random default ("adamw [half-zero]").
std::string kernel_label(core::OptimizerKind k, core::StepValues v) {
  return std::string(core::optimizer_name(k)) +
         (v == core::StepValues::kRandom ? "" : " [" + std::string(core::step_values_name(v)) + "]");
}

// The bounds and the naive loop, then every optimizer and gradient dtype, as rows of `t`.
void bench_cpu(const BenchOptions& o, backend::cpu::CpuBackend& cpu, Table& t,
               const std::function<void(const std::string&)>& progress) {
  const size_t n = o.n;
  progress("cpu: read-modify-write triad");
  const double triad = measure_rmw_gbps(cpu, n, o.iters);
  progress("cpu: same-streams bound (the optimizer's traffic, no math)");
  const double bound = measure_same_streams_gbps(cpu, n, o.iters);
  const double ss = same_streams_bytes();  // also the naive loop's (AdamW, fp32 gradients, no copy)
  t.add({"cpu", "same-streams bound", "fp32", "none", std::to_string(n), fmt(ss, 0), fmt(ss * n / bound / 1e6, 3),
         fmt(n / (ss * n / bound), 2), fmt(bound, 1), "100.0", "-", "-"});
  t.add({"cpu", "rmw triad x+=s*y", "-", "-", std::to_string(n), "12", fmt(12.0 * n / triad / 1e6, 3), "-",
         fmt(triad, 1), fmt(triad / bound * 100, 1), "-", "-"});
  progress("cpu: naive AdamW loop (peer)");
  const double naive_s = time_naive_adamw(cpu, n, o.iters);
  t.add({"cpu", "naive adamw loop", "fp32", "none", std::to_string(n), fmt(ss, 0), fmt(naive_s * 1e3, 3),
         fmt(n / naive_s / 1e9, 2), fmt(ss * n / naive_s / 1e9, 1), fmt(ss * n / naive_s / 1e9 / bound * 100, 1), "-",
         "-"});
  const std::string cpu_name =
      "cpu-" + std::string(backend::cpu::isa_name(cpu.isa())) + "x" + std::to_string(cpu.threads());
  std::map<core::DType, double> streams_gbps;  // the optimizer's streams with a 16-bit gradient and copy
  for (core::DType g : o.grads) {
    if (g == core::DType::kF32) continue;
    progress("cpu: the optimizer's streams bound, " + std::string(core::dtype_name(g)) + " gradient and copy");
    const double gb = streams_gbps[g] = measure_stream_gbps(cpu, g, g, n, o.iters);
    const double bytes = double(core::bytes_per_element(core::OptimizerKind::kAdamW, g, g).total());
    t.add({"cpu", "streams bound", std::string(core::dtype_name(g)), std::string(core::dtype_name(g)),
           std::to_string(n), fmt(bytes, 0), fmt(bytes * n / gb / 1e6, 3), fmt(gb / bytes, 2), fmt(gb, 1),
           fmt(gb / bound * 100, 1), "-", "-"});
  }
  for (core::OptimizerKind k : o.kinds)
    for (core::DType g : o.grads)
      for (core::StepValues values : o.values) {
        const core::DType c = g == core::DType::kF32 ? core::DType::kNone : g;
        const double row_bound = g == core::DType::kF32 ? bound : streams_gbps[g];
        const std::string kernel = kernel_label(k, values);
        progress("cpu: " + kernel + " grad " + std::string(core::dtype_name(g)));
        const double s = time_cpu_step(cpu, k, g, c, n, o.iters, nullptr, values);
        const auto b = core::bytes_per_element(k, g, c);
        const double gbps = double(b.total()) * n / s / 1e9;
        std::string vs = "-", peer_name = "-";
        if (k == core::OptimizerKind::kAdamW && g == core::DType::kF32 && values == core::StepValues::kRandom) {
          vs = fmt(naive_s / s, 2) + "x";
          peer_name = "naive loop";
          if (auto tp = peer_value(o.peer, "cpu", n)) {
            vs = fmt((n / s / 1e9) / *tp, 2) + "x";
            peer_name = "torch fused " + fmt(*tp, 2) + " Gp/s";
          }
        }
        t.add({cpu_name, kernel, std::string(core::dtype_name(g)), std::string(core::dtype_name(c)), std::to_string(n),
               std::to_string(b.total()), fmt(s * 1e3, 3), fmt(n / s / 1e9, 2), fmt(gbps, 1),
               fmt(gbps / row_bound * 100, 1), vs, peer_name});
      }
}

// AdamW under each CPU tuning variant (pin, prefetch, streaming stores).
void bench_cpu_variants(const BenchOptions& o) {
  const size_t n = o.n;
  Table v({"pin", "prefetch", "stream copy", "adamw bf16/bf16 Gparam/s", "adamw fp32/none Gparam/s"});
  for (bool pin : {false, true})
    for (uint32_t pf : {0u, 256u, 1024u})
      for (bool nt : {false, true}) {
        backend::cpu::CpuOptions co = o.cpu;
        co.pin_threads = pin;
        co.tuning.prefetch_elems = pf;
        co.tuning.stream_copy = nt;
        backend::cpu::CpuBackend be(co);
        const double a =
            time_cpu_step(be, core::OptimizerKind::kAdamW, core::DType::kBF16, core::DType::kBF16, n, o.iters);
        const double b =
            time_cpu_step(be, core::OptimizerKind::kAdamW, core::DType::kF32, core::DType::kNone, n, o.iters);
        v.add({pin ? "yes" : "no", std::to_string(pf), nt ? "yes" : "no", fmt(n / a / 1e9, 2), fmt(n / b / 1e9, 2)});
        std::cerr << "variant pin=" << pin << " prefetch=" << pf << " stream=" << nt << " done\n";
      }
  std::cout << "\nCPU tuning variants (" << n << " elements, median of " << o.iters << "):\n";
  v.print(std::cout);
}

// ---- the GPU ------------------------------------------------------------------------------------------

// The device-to-device copy bound, then every optimizer and gradient dtype; nothing without a GPU
// (--gpu on: an error).
void bench_gpu(const BenchOptions& o, Table& t) {
#if defined(TWINFLOW_HAVE_CUDA)
  std::string why;
  const bool gpu = o.gpu_mode != "off" && backend::cuda::cuda_available(&why);
  if (o.gpu_mode == "on" && !gpu) throw core::RuntimeFailure("--gpu on, but no usable CUDA device: " + why);
  if (!gpu && o.gpu_mode == "auto") std::cerr << "gpu: skipped (" << why << ")\n";
  if (!gpu) return;
  const size_t gpu_n = o.gpu_n;
  const auto info = backend::cuda::gpu_info(0);
  const double copy_gbps = backend::cuda::measure_copy_gbps(size_t(1) << 31, o.iters, 0);
  t.add({info.name, "d2d copy bound", "-", "-", std::to_string(size_t(1) << 29), "8",
         fmt(double(size_t(1) << 31) * 2 / copy_gbps / 1e6, 3), "-", fmt(copy_gbps, 1), "100.0", "-", "-"});
  for (core::OptimizerKind k : o.kinds)
    for (core::DType g : o.grads)
      for (core::StepValues sv : o.values) {
        const core::DType c = g == core::DType::kF32 ? core::DType::kNone : g;
        const double s = backend::cuda::time_step_seconds(k, g, c, gpu_n, o.iters, 0, nullptr, sv);
        const auto b = core::bytes_per_element(k, g, c);
        const double gbps = double(b.total()) * gpu_n / s / 1e9;
        std::string vs = "-", peer_name = "-";
        if (k == core::OptimizerKind::kAdamW && g == core::DType::kF32 && sv == core::StepValues::kRandom)
          if (auto tp = peer_value(o.peer, "cuda", gpu_n)) {
            vs = fmt((gpu_n / s / 1e9) / *tp, 2) + "x";
            peer_name = "torch fused " + fmt(*tp, 2) + " Gp/s";
          }
        const std::string kernel = kernel_label(k, sv);
        t.add({info.name, kernel, std::string(core::dtype_name(g)), std::string(core::dtype_name(c)),
               std::to_string(gpu_n), std::to_string(b.total()), fmt(s * 1e3, 3), fmt(gpu_n / s / 1e9, 2), fmt(gbps, 1),
               fmt(gbps / copy_gbps * 100, 1), vs, peer_name});
      }
#else
  (void)t;
  if (o.gpu_mode == "on") throw core::RuntimeFailure("--gpu on, but this build has no CUDA backend");
#endif
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  if (args.size() == 1 && args[0] == "--cpu-rank-worker") {
#if defined(TWINFLOW_HAVE_CUDA)
    return run_cpu_rank_worker(std::cin, std::cout, {backend::cuda::host_register, backend::cuda::host_unregister});
#else
    return run_cpu_rank_worker(std::cin, std::cout);
#endif
  }
  const std::optional<BenchOptions> parsed = parse_bench_options(args);
  if (!parsed) return kExitOk;
  const BenchOptions& o = *parsed;
  if (o.ranks) return bench_cpu_ranks(*o.ranks);
  backend::cpu::CpuBackend cpu(o.cpu);
  Table t({"device", "kernel", "grad", "copy", "n", "B/elem", "ms", "Gparam/s", "GB/s", "% bound", "vs peer", "peer"});
  size_t streams_rows = 0;
  for (core::DType g : o.grads) streams_rows += g == core::DType::kF32 ? 0 : 1;
  const size_t total = 3 + streams_rows + o.kinds.size() * o.grads.size() * o.values.size();
  size_t done = 0;
  auto progress = [&](const std::string& what) {
    std::cerr << "[" << ++done << "/" << total << "] " << what << "\n" << std::flush;
  };
  bench_cpu(o, cpu, t, progress);
  if (o.cpu_variants) bench_cpu_variants(o);
  bench_gpu(o, t);
  std::cout << "\n";
  t.print(std::cout);
  std::cout << "cpu: vectors near the subnormals " << (cpu.tuning().exact_path ? "take" : "do not take")
            << " the exact path (the rules in double, backends/cpu/exact_ops.h; tuning exact="
            << (o.cpu.tuning.exact_path == 2 ? "2: this CPU's probe decided" : std::to_string(o.cpu.tuning.exact_path))
            << ")\n";
  if (o.out.csv) t.write_csv(*o.out.csv);
  if (o.out.json) t.write_json(*o.out.json);
  return kExitOk;
}

}  // namespace tf::app
