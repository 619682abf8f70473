// `twinflow calibrate`: microbenchmarks on a real GPU machine, written as a hardware profile
// (scenarios/hardware/*.yaml) whose every figure names its measurement, the command and the date.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "apps/twinflow/cpu_footprint.h"
#include "apps/twinflow/cpu_ranks.h"
#include "apps/twinflow/measure.h"
#include "apps/twinflow/table.h"
#include "core/alloc_plan.h"
#include "core/decoder_layout.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/hardware.h"
#include "core/memory.h"
#include "core/model.h"
#include "core/optim/grad_stats.h"
#include "core/output_file.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "core/strings.h"
#include "core/token_data.h"
#include "metrics/gpu_telemetry.h"
#if defined(TWINFLOW_HAVE_CUDA)
#include "backends/cuda/calibrate.h"
#include "backends/cuda/cuda_backend.h"
#endif

namespace fs = std::filesystem;

namespace tf::app {
namespace {

struct Options {
  fs::path out;
  std::string name;
  std::string command;  // as typed, for the sources
  int gpus = 0;         // 0: every visible GPU
  int reps = 20;
  bool quick = false;
  bool pin = true;
  std::vector<std::string> scenarios;  // their models' GEMM shapes join the table
  bool gemm_relu = true;               // the bf16 table on ReLU MLP-like operands (else random)
  bool footprints = false;             // the CPU rate at the scenarios' host footprints (measure_cpu_footprints)
};

#if defined(TWINFLOW_HAVE_CUDA)
std::string utc_date() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// "model name" of /proc/cpuinfo, else a generic name.
std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        if (!v.empty()) return v;
      }
    }
  return "x86-64 host";
}

std::string read_line(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

// Physical cores among the CPUs this process may run on (distinct package/core ids in sysfs);
// the number of allowed CPUs when sysfs does not say.
int physical_cores(int* allowed_cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int allowed = 0;
  std::set<std::pair<std::string, std::string>> cores;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      ++allowed;
      const fs::path topo = fs::path("/sys/devices/system/cpu") / ("cpu" + std::to_string(c)) / "topology";
      const std::string pkg = read_line(topo / "physical_package_id"), core = read_line(topo / "core_id");
      cores.emplace(pkg.empty() ? "?" : pkg, core.empty() ? std::to_string(c) : core);
    }
  }
  if (allowed == 0) allowed = std::max(1, int(sysconf(_SC_NPROCESSORS_ONLN)));
  if (allowed_cpus) *allowed_cpus = allowed;
  return cores.empty() ? allowed : int(cores.size());
}

int64_t host_memory_bytes() { return int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE)); }

// 4 significant digits: the figures' spreads are around 1%, more digits would be noise.
double sig4(double v) {
  if (!(v > 0) || !std::isfinite(v)) return v;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return std::stod(buf);
}

std::string with_units(double bytes) {
  if (bytes >= double(1 << 30)) return fmt(bytes / double(1 << 30), 0) + " GiB";
  if (bytes >= double(1 << 20)) return fmt(bytes / double(1 << 20), 0) + " MiB";
  return fmt(bytes / 1024, 0) + " KiB";
}

namespace cal = backend::cuda::calibrate;

// Collects figures: their sources, the progress lines and the table.
class Calibration {
 public:
  Calibration(const Options& o, int steps) : opt_(o), date_(utc_date()), steps_(steps) {}

  const std::string& date() const { return date_; }
  // The common prefix of every source.
  std::string origin() const { return "twinflow calibrate " + date_ + " (`" + opt_.command + "`)"; }
  // "ORIGIN: WHAT, median of R, spread S%".
  std::string source(const std::string& what, const cal::Stat& st) const {
    return origin() + ": " + what + ", median of " + std::to_string(st.samples.size()) + ", spread " +
           fmt(st.spread * 100, 1) + "%";
  }
  // One measurement done: a progress line on stderr and a table row.
  void done(const std::string& what, double value, const std::string& unit, const cal::Stat& st,
            const std::string& key = "-") {
    std::cerr << "[" << ++step_ << "/" << steps_ << "] " << what << ": " << fmt(value, value < 10 ? 3 : 1) << " "
              << unit << " (median of " << st.samples.size() << ", spread " << fmt(st.spread * 100, 1) << "%)\n"
              << std::flush;
    table_.add(
        {what, fmt(value, value < 10 ? 3 : 1), unit, std::to_string(st.samples.size()), fmt(st.spread * 100, 1), key});
  }
  void note(const std::string& what) { std::cerr << "       " << what << "\n" << std::flush; }
  const Table& table() const { return table_; }
  int steps_done() const { return step_; }

 private:
  const Options& opt_;
  std::string date_;
  int steps_;
  int step_ = 0;
  Table table_{{"measurement", "value", "unit", "reps", "spread %", "profile key"}};
};

struct GemmCase {
  core::GemmPass pass;  // the cuBLAS layout it is timed in
  int64_t m, n, k;
  int64_t out_stride = 0;  // the workload's row stride of Y and dY (core::LayerGemm::out_stride); 0: packed
  bool operator==(const GemmCase&) const = default;
};

// The shapes of the workloads: square MLP layers (hidden 4096, 8192) at batches of 1024..8192 tokens
// (forward and weight gradient with k = the batch), a decoder block's projections (3h, 4h, and back
// from 4h) at 4096 tokens, and thin batches; then every GEMM of each --scenario's model at its
// micro-batch in the layout of its pass (a strided batch as the one GEMM of the same tiles).
std::vector<GemmCase> gemm_cases(bool quick, const std::vector<core::Scenario>& scenarios) {
  using enum core::GemmPass;
  std::vector<GemmCase> c;
  if (quick) {
    c = {{kForward, 1024, 4096, 4096},
         {kForward, 4096, 4096, 4096},
         {kWeightGrad, 4096, 4096, 1024},
         {kForward, 64, 4096, 4096}};
  } else {
    for (int64_t h : {4096, 8192}) {
      for (int64_t b : {1024, 2048, 4096, 8192}) c.push_back({kForward, b, h, h});
      for (int64_t b : {1024, 2048, 4096, 8192}) c.push_back({kWeightGrad, h, h, b});
      c.push_back({kForward, 4096, 3 * h, h});
      c.push_back({kForward, 4096, 4 * h, h});
      c.push_back({kForward, 4096, h, 4 * h});
    }
    for (int64_t b : {16, 64, 256}) c.push_back({kForward, b, 4096, 4096});
    c.push_back({kWeightGrad, 4096, 4096, 256});
  }
  for (const core::Scenario& sc : scenarios) {
    const core::ModelDesc model = core::describe_model(sc.model);
    for (const core::LayerDesc& l : model.layers) {
      std::vector<core::LayerGemm> all = core::forward_gemms(model, l, sc.training.micro_batch);
      const std::vector<core::LayerGemm> bwd = core::backward_gemms(all);
      all.insert(all.end(), bwd.begin(), bwd.end());
      for (const core::LayerGemm& g : all) {
        const GemmCase gc{g.pass == kAny ? kForward : g.pass, g.m * g.batch, g.n, g.k, g.out_stride};
        if (gc.m >= (int64_t(1) << 31) || gc.n >= (int64_t(1) << 31) || gc.k >= (int64_t(1) << 31)) continue;
        if (std::find(c.begin(), c.end(), gc) == c.end()) c.push_back(gc);
      }
    }
  }
  return c;
}

std::vector<int> thread_counts(int cores) {
  std::vector<int> t;
  for (int x = 1; x < cores; x *= 2) t.push_back(x);
  t.push_back(cores);
  return t;
}

// The rank counts whose CPU halves run at once in measure_cpu_ranks: 1, 2, 4 and the GPUs of this
// host, at most one per core.
std::vector<int> rank_counts(int cores, int gpus) {
  std::vector<int> k;
  for (int x : {1, 2, 4, gpus})
    if (x >= 1 && x <= cores && std::find(k.begin(), k.end(), x) == k.end()) k.push_back(x);
  std::sort(k.begin(), k.end());
  return k;
}

// `amount` (elements, bytes) per second of each measurement, in billions: the Stat of the rates.
cal::Stat giga_per_second(double amount, const std::vector<double>& seconds) {
  std::vector<double> r;
  for (double sec : seconds) r.push_back(amount / sec / 1e9);
  return cal::make_stat(std::move(r));
}

std::vector<int64_t> nccl_sizes(bool quick) {
  if (quick) return {int64_t(64) << 10, int64_t(1) << 20, int64_t(16) << 20, int64_t(256) << 20};
  std::vector<int64_t> s = {int64_t(64) << 10, int64_t(256) << 10};
  for (int64_t b = int64_t(1) << 20; b <= int64_t(512) << 20; b *= 2) s.push_back(b);
  return s;
}

// The bytes AdamW moves per element with a bf16 gradient and a bf16 copy (Twin-Flow's data path): 28.
const double kAdamWBf16Bytes =
    double(core::bytes_per_element(core::OptimizerKind::kAdamW, core::DType::kBF16, core::DType::kBF16).total());
const std::string kAdamWBf16Text = fmt(kAdamWBf16Bytes, 0) + " B/element";

// How long a collective runs back to back alone, for its rate beside the GEMM (collective_beside_compute)
constexpr std::chrono::milliseconds kCollectiveAloneWindow{200};
// Odd sizes whose cudaMalloc cost shows the allocation granularity: k MiB + 1 costs g when g > k MiB and
// k MiB + g below it (core::granularity_of); the large one checks that big buffers round alike.
constexpr int64_t kGranularityProbeBytes[] = {(int64_t(1) << 20) + 1, (int64_t(2) << 20) + 1, (int64_t(5) << 20) + 4097,
                                              (int64_t(64) << 20) + 1};

// The child of measure_gpu_memory: this fresh process's set-up stages on device 0, one "key bytes" per line.
int print_process_memory(int gpus) {
  const cal::ProcessMemory m = cal::process_memory_stages(gpus);
  std::cout << "after_context " << m.after_context << "\nafter_cublas " << m.after_cublas << "\nafter_streams "
            << m.after_streams << "\nafter_nccl " << m.after_nccl << "\n"
            << std::flush;
  return kExitOk;
}

// The CPU optimizer's options for `threads` threads, pinned or not (every CPU pass calibrate times).
backend::cpu::CpuOptions cpu_options(int threads, bool pin) {
  backend::cpu::CpuOptions co;
  co.threads = size_t(threads);
  co.pin_threads = pin;
  return co;
}

// The CPU optimizer pass (AdamW, bf16 gradient and copy) kept running back to back on `threads` pinned
// workers, from a host thread of its own, while something else is timed (the copies' slowdown under the
// CPU pass). start() returns once a first pass has ended (the pool is awake and the next pass runs);
// stop() ends after the pass in flight and returns the optimizer traffic of the passes since start,
// GB/s (28 B/element). Not copyable; stops in the destructor.
class BackgroundCpuPass {
 public:
  BackgroundCpuPass(int threads, bool pin, size_t elems)
      : be_(cpu_options(threads, pin)),
        pass_(be_, core::OptimizerKind::kAdamW, core::DType::kBF16, core::DType::kBF16, elems) {}
  ~BackgroundCpuPass() { halt(); }
  BackgroundCpuPass(const BackgroundCpuPass&) = delete;
  BackgroundCpuPass& operator=(const BackgroundCpuPass&) = delete;

  void start() {
    if (worker_.joinable()) throw std::logic_error("BackgroundCpuPass: started twice");
    stopping_ = false;
    passes_ = 0;
    error_ = nullptr;
    worker_ = std::thread([this] {
      try {
        while (!stopping_) {
          pass_.run();
          ++passes_;
        }
      } catch (...) {
        error_ = std::current_exception();
        failed_ = true;
      }
    });
    while (passes_ == 0 && !failed_) std::this_thread::sleep_for(std::chrono::microseconds(200));
    counted_ = passes_;
    t0_ = std::chrono::steady_clock::now();
  }
  double stop() {
    halt();
    if (error_) std::rethrow_exception(error_);
    const double s = seconds_since(t0_);
    return double(passes_ - counted_) * double(pass_.elems()) * kAdamWBf16Bytes / s / 1e9;
  }
  size_t elems() const { return pass_.elems(); }

 private:
  void halt() {
    stopping_ = true;
    if (worker_.joinable()) worker_.join();
  }
  backend::cpu::CpuBackend be_;
  CpuStepPass pass_;  // (elems) fp32 master, m, v; bf16 gradient and copy
  std::thread worker_;
  std::atomic<bool> stopping_{false}, failed_{false};
  std::atomic<uint64_t> passes_{0};
  uint64_t counted_ = 0;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point t0_;
};

// GPUs first .. gpus-1 each keep pinned copies of `bytes` in flight (`way`: cal::BackgroundDma, on threads
// that sleep on their events) from construction to stop() or destruction (which stops them, never throwing).
class GpusCopying {
 public:
  // Started at once unless `start_now` is false.
  GpusCopying(int first, int gpus, size_t bytes, cal::DmaCopies way, bool start_now = true) {
    for (int d = first; d < gpus; ++d) dma_.push_back(std::make_unique<cal::BackgroundDma>(d, bytes, way));
    if (start_now) start();
  }
  size_t count() const { return dma_.size(); }
  void start() {
    for (auto& x : dma_) x->start();
  }
  // Stops them (start() may run them again); the GB/s they moved together (rethrows a copy thread's
  // failure after stopping every one).
  double stop() {
    double gbps = 0;
    std::exception_ptr err;
    for (auto& x : dma_) {
      try {
        gbps += x->stop();
      } catch (...) {
        if (!err) err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);
    return gbps;
  }

 private:
  std::vector<std::unique_ptr<cal::BackgroundDma>> dma_;
};

// One calibration run: the machine, the sizes, the figures measured so far (the profile and their
// sources) and the table; one method per group of measurements, in the order they run.
class Calibrator {
 public:
  explicit Calibrator(const Options& o)
      : o_(o),
        visible_(cal::device_count()),
        gpus_(o.gpus > 0 ? o.gpus : visible_),
        dev_(check_gpus_then_info(o, visible_)),
        cores_(physical_cores(&allowed_cpus_)),
        cpu_name_(cpu_model_name()),
        R_(o.reps),
        hbm_bytes_(o.quick ? size_t(256) << 20 : size_t(1) << 30),
        pcie_bytes_(o.quick ? size_t(64) << 20 : size_t(256) << 20),
        // 2^28 elements (7.5 GB of state): one all-core pass lasts ~50 ms, long enough to average out
        // the host's scheduling noise that made 2^26-element passes spread by 20-50%; --quick 2^26 (1 GiB
        // of fp32 master weights: past any last-level cache, where 2^22 elements ran at twice the rate)
        cpu_n_(o.quick ? size_t(1) << 26 : size_t(1) << 28),
        gpu_opt_n_(o.quick ? size_t(1) << 24 : size_t(1) << 28),
        dma_chunk_(o.quick ? size_t(16) << 20 : size_t(64) << 20),
        scenarios_(load_scenarios(o)),
        engine_op_(engine_cpu_op(scenarios_)),
        gemms_(gemm_cases(o.quick, scenarios_)),
        builtin_cases_(gemm_cases(o.quick, {}).size()),  // the rest are the scenarios' shapes
        threads_(thread_counts(cores_)),
        cpu_ranks_(rank_counts(cores_, gpus_)),
        footprints_(o.footprints ? scenario_footprints(scenarios_, o.quick) : std::vector<HostFootprint>{}),
        sizes_(nccl_sizes(o.quick)),
        c_(o, planned_steps()),
        gpu_label_(dev_.name + " (device 0)") {
    p_.name = o.name;
  }

  int run() {
    announce();
    measure_gpu_memory();  // first: the probe's baseline is this process with nothing allocated
    cal::wait_by_sleeping(gpus_);
    open_telemetry();
    measure_gemms();
    measure_decoder_kernels();
    measure_gemm_dtypes();
    measure_device_memory();
    measure_gpu_optimizer();
    measure_pcie();
    measure_copy_costs();
    measure_launch_and_events();
    measure_cpu_optimizer();
    measure_cpu_memory();
    measure_cpu_ranks();  // and the out-of-place factor on its group at the host's ranks
    measure_cpu_footprints();
    measure_dma_slowdown();
    measure_copies_under_cpu_pass();
    measure_collectives();  // and, with >= 2 GPUs, the compute slowdown under collectives and copies
    if (gpus_ <= 1) measure_compute_slowdown(nullptr);
    write_profile();
    return kExitOk;
  }

 private:
  static cal::DeviceInfo check_gpus_then_info(const Options& o, int visible) {
    if (o.gpus > visible)
      throw core::InputError("--gpus " + std::to_string(o.gpus) + ": only " + std::to_string(visible) +
                             " CUDA device(s) visible (CUDA_VISIBLE_DEVICES)");
    return cal::device_info(0);
  }
  static std::vector<core::Scenario> load_scenarios(const Options& o) {
    std::vector<core::Scenario> out;
    for (const std::string& f : o.scenarios) out.push_back(core::load_scenario(f));
    return out;
  }
  // gemms (and the scenarios' shapes on random data too, for the table: the data effect), fp16 + fp32,
  // 2 hbm, 1 gpu optimizer, 8 pcie, 5 launch/event, the thread sweep, the rank counts, the out-of-place
  // factor, the footprints, mem, 3 dma factors (2 rows each), 4 copies under the CPU pass, a GEMM alone and
  // under copies; with several GPUs the concurrent H2D, the all-gather curve and the reduce-scatter's (3 rows
  // per size), the GEMM under both collectives and both collectives beside it and alone
  int planned_steps() const {
    const int random_rows = o_.gemm_relu ? int(gemms_.size() - builtin_cases_) : 0;
    const int memory = 3 + (gpus_ > 1 ? 1 : 0) + int(std::size(kGranularityProbeBytes)) + 2;
    int decoder_rows = 0;  // a class row each and the attention's two, per decoder scenario
    for (const core::Scenario& sc : scenarios_)
      if (decoder_kernel_shape(sc)) decoder_rows += core::kKernelClassCount - 3 + 2;
    return memory + int(gemms_.size()) + random_rows + decoder_rows + 2 + 3 + 8 + 5 + int(threads_.size()) +
           int(cpu_ranks_.size()) + 1 + int(footprints_.size()) + 1 + 3 * 2 + 4 + 2 +
           (gpus_ > 1 ? 1 + 4 * int(sizes_.size()) + 2 + 2 * 2 : 0);
  }

  void announce() const {
    std::cerr << "twinflow calibrate: " << gpus_ << " x " << dev_.name << " (sm_" << dev_.cc_major << dev_.cc_minor
              << ", " << dev_.sm_count << " SMs), " << cpu_name_ << " (" << cores_ << " cores, " << allowed_cpus_
              << " CPUs allowed); " << (o_.quick ? "--quick" : "full") << ", " << R_ << " repetitions per figure; "
              << (o_.quick ? "about 10 s" : "well under a minute") << "\n";
  }

  // ---- GPU memory beyond the process's own allocations (the allocation plan's unnamed entries) -----------
  // The set-up stages of fresh processes (`calibrate --process-memory-probe`), each over what the device held
  // before it started (this process's context, nothing allocated, and anything else on the GPU): the largest
  // of min(R, 3) probes. Then cudaMalloc's granularity and the pinned host's mapping, in this process.
  void measure_gpu_memory() {
    const int64_t baseline = cal::device_used_bytes(0);
    std::vector<cal::ProcessMemory> probes;
    for (int i = 0; i < std::min(R_, 3); ++i) probes.push_back(process_memory_probe());
    const auto most = [&](auto stage) {
      std::vector<double> v;
      for (const cal::ProcessMemory& m : probes) v.push_back(double(stage(m)));
      return cal::make_stat(std::move(v));
    };
    const cal::Stat ctx = most([&](const auto& m) { return m.after_context - baseline; });
    const cal::Stat cublas = most([](const auto& m) { return m.after_cublas - m.after_context; });
    const cal::Stat streams = most([](const auto& m) { return m.after_streams - m.after_cublas; });
    const cal::Stat total = most([&](const auto& m) { return m.after_streams - baseline; });
    c_.done("process memory: CUDA context", ctx.median / 1048576, "MiB", ctx);
    c_.done("process memory: + cuBLAS handle after one GEMM (workspace excluded)", cublas.median / 1048576, "MiB",
            cublas);
    c_.done("process memory: + 4 streams", streams.median / 1048576, "MiB", streams, "gpu.context_bytes");
    p_.gpu.context_bytes = int64_t(*std::max_element(total.samples.begin(), total.samples.end()));
    src()["gpu.context_bytes"] = c_.source(
        "device 0's used bytes (cudaMemGetInfo total - free) in a fresh process after the CUDA context, a cuBLAS "
        "handle that ran a bf16 GEMM (its workspace, a named buffer, freed) and 4 streams, over what the device held "
        "before it started; the largest of the probes (context " +
            with_units(ctx.median) + ", cuBLAS " + with_units(cublas.median) + ", streams " +
            with_units(streams.median) + "), " + gpu_label_,
        total);
    if (gpus_ > 1) {
      const cal::Stat nccl = most([](const auto& m) { return m.after_nccl - m.after_streams; });
      c_.done("process memory: + NCCL communicator over " + std::to_string(gpus_) +
                  " GPUs after the engine's "
                  "collectives",
              nccl.median / 1048576, "MiB", nccl, "gpu.nccl_comm_bytes");
      p_.gpu.nccl_comm_bytes = int64_t(*std::max_element(nccl.samples.begin(), nccl.samples.end()));
      src()["gpu.nccl_comm_bytes"] = c_.source(
          "what a NCCL communicator over devices 0.." + std::to_string(gpus_ - 1) +
              " (ncclCommInitAll in the probe process) added on device 0 after one all-gather, one send/recv "
              "reduce-scatter and one f64 all-reduce, its message buffers excluded; the largest of the probes, " +
              gpu_label_,
          nccl);
    }
    measure_alloc_granularity();
    measure_pinned_host_map();
  }

  // One fresh process's set-up stages (`twinflow calibrate --process-memory-probe`).
  cal::ProcessMemory process_memory_probe() const {
    const std::string out = run_self_capture(
        "calibrate", {"calibrate", "--process-memory-probe", "--gpus", std::to_string(gpus_)}, {"NCCL_NVLS_ENABLE=0"});
    std::map<std::string, int64_t> v;
    std::istringstream in(out);
    for (std::string key; in >> key;) in >> v[key];
    for (const char* key : {"after_context", "after_cublas", "after_streams", "after_nccl"})
      if (!v.count(key))
        throw core::RuntimeFailure("calibrate: the process memory probe did not report " + std::string(key) +
                                   "; it wrote: " + core::printable(out, 200));
    return {v["after_context"], v["after_cublas"], v["after_streams"], v["after_nccl"]};
  }

  // N buffers of each odd size, what the device's used bytes grew by: the largest power of two every size's
  // cost is a rounding to (core::granularity_of); and, for the table, small buffers' cost.
  void measure_alloc_granularity() {
    constexpr int kCount = 8;
    std::vector<std::pair<int64_t, int64_t>> size_cost;
    std::string seen;
    for (const int64_t bytes : kGranularityProbeBytes) {
      const cal::AllocCost c = cal::alloc_cost(0, bytes, kCount);
      const double per = double(c.total_bytes) / kCount;
      c_.done("cudaMalloc of " + std::to_string(bytes) + " B, cost per buffer (" + std::to_string(kCount) + " buffers)",
              per, "B", cal::make_stat({per}), "gpu.alloc_granularity_bytes");
      size_cost.emplace_back(bytes, c.total_bytes % kCount == 0 ? c.total_bytes / kCount : -1);
      seen += (seen.empty() ? "" : ", ") + std::to_string(bytes) + " B -> " + fmt(per, 0) + " B";
    }
    const int64_t g = core::granularity_of(size_cost);
    if (g == 0)
      throw core::RuntimeFailure("calibrate: cudaMalloc's costs (" + seen +
                                 ") are not one rounding of each size: was another process allocating on the GPU? "
                                 "Rerun on an idle GPU");
    p_.gpu.alloc_granularity_bytes = g;
    src()["gpu.alloc_granularity_bytes"] = c_.origin() + ": " + std::to_string(kCount) +
                                           " cudaMallocs of each size, device 0's used bytes (cudaMemGetInfo) " +
                                           "grew by the size rounded up to this per buffer (" + seen + "), " +
                                           gpu_label_;
    const cal::AllocCost small = cal::alloc_cost(0, 256, 64);
    const double per_small = double(small.total_bytes) / 64;
    c_.done("cudaMalloc of 256 B, cost per buffer (64 buffers; the plan rounds every buffer to the granularity)",
            per_small, "B", cal::make_stat({per_small}));
  }

  // The device's mapping of page-locked host memory, pinned as the engine pins its CPU segment.
  void measure_pinned_host_map() {
    // 16 GiB (an eighth of the host at most), --quick too: the mapping is ~0.2% of it, and cudaMemGetInfo
    // counts whole 2 MiB pages
    const size_t bytes = std::min<size_t>(size_t(16) << 30, size_t(host_memory_bytes()) / 8 / 4096 * 4096);
    const int64_t map = cal::pinned_host_map_bytes(0, bytes);
    const double per_gb = double(map) / (double(bytes) / 1e9);
    c_.done("device bytes per GB of pinned host memory (" + with_units(double(bytes)) + " registered)", per_gb, "B/GB",
            cal::make_stat({per_gb}), "gpu.pinned_host_map_bytes_per_gb");
    p_.gpu.pinned_host_map_bytes_per_gb = sig4(per_gb);
    src()["gpu.pinned_host_map_bytes_per_gb"] = c_.origin() + ": device 0's used bytes (cudaMemGetInfo) grew by " +
                                                with_units(double(map)) + " while " + with_units(double(bytes)) +
                                                " of host memory was page-locked as the engine pins its CPU segment " +
                                                "(cpu::HostRegion, cudaHostRegister portable), " + gpu_label_;
  }

  // ---- GEMM ---------------------------------------------------------------------------------------
  // Device 0's SM clock and power through NVML while the GEMM table is timed (gpu.gemm_sm_clock_mhz).
  void open_telemetry() {
    std::string why;
    telemetry_ = metrics::GpuTelemetry::open_nvml(backend::cuda::pci_bus_id(0), why);
    if (!telemetry_) std::cerr << "calibrate: GPU telemetry off (" << why << "): gpu.gemm_sm_clock_mhz not read\n";
  }

  // The clock the GEMM table ran at: the window's median SM clock, with its range, power and the share of the
  // samples whose clock the power cap held, in the source.
  void record_gemm_clock(const metrics::GpuWindow& w) {
    if (w.empty()) return;
    p_.gpu.gemm_sm_clock_mhz = sig4(w.sm_mhz_median);
    const auto n0 = [](double v) { return std::isfinite(v) ? fmt(v, 0) : std::string("-"); };
    src()["gpu.gemm_sm_clock_mhz"] =
        c_.origin() + ": NVML's SM clock every 10 ms while the bf16 GEMM table was timed on " + gpu_label_ +
        " (" + std::to_string(w.samples) + " samples over " + fmt(w.seconds, 1) + " s): median " +
        n0(w.sm_mhz_median) + " MHz, " + n0(w.sm_mhz_min) + "-" + n0(w.sm_mhz_max) + " MHz; mean power " +
        n0(w.power_w) + " W of the " + n0(w.power_limit_w) + " W limit; the power cap held the clock in " +
        n0(100 * w.power_capped_fraction) + "% of the samples. The simulator does not read it: validate sets a run's "
        "clock beside it";
    std::cerr << "calibrate: GEMM table timed at SM clock " << n0(w.sm_mhz_median) << " MHz (median; "
              << n0(w.sm_mhz_min) << "-" << n0(w.sm_mhz_max) << "), " << n0(w.power_w) << " W\n";
  }

  void measure_gemms() {
    if (telemetry_) telemetry_->take_now();  // the window starts here
    double best = 0;
    std::string best_what;
    cal::Stat best_stat;
    const cal::GemmData table_data = o_.gemm_relu ? cal::GemmData::kReluMlp : cal::GemmData::kRandom;
    for (size_t gi = 0; gi < gemms_.size(); ++gi) {
      const GemmCase& g = gemms_[gi];
      const cal::Stat st =
          cal::gemm_tflops(0, cal::GemmType::kBF16, g.pass, g.m, g.n, g.k, R_, table_data, nullptr, g.out_stride);
      const std::string what = "gemm bf16 " + std::string(core::gemm_pass_name(g.pass)) + " " + std::to_string(g.m) +
                               "x" + std::to_string(g.n) + "x" + std::to_string(g.k);
      c_.done(what, st.median, "TFLOP/s", st, "gpu.bf16_gemm_tflops_by_shape");
      if (o_.gemm_relu && gi >= builtin_cases_) {  // the same shape on full-entropy data, for comparison
        const cal::Stat rnd = cal::gemm_tflops(0, cal::GemmType::kBF16, g.pass, g.m, g.n, g.k, R_,
                                               cal::GemmData::kRandom, nullptr, g.out_stride);
        c_.done(what + " (random data)", rnd.median, "TFLOP/s", rnd);
      }
      p_.gpu.bf16_gemm_tflops_by_shape.push_back({g.m, g.n, g.k, sig4(st.median), g.pass});
      if (st.median > best) best = st.median, best_what = what, best_stat = st;
    }
    if (telemetry_) record_gemm_clock(telemetry_->take_now());
    p_.gpu.bf16_tflops = sig4(best);
    src()["gpu.bf16_tflops"] = c_.source("the best cuBLAS bf16 GEMM of the shape table (" + best_what + ")", best_stat);
    src()["gpu.bf16_gemm_tflops_by_shape"] =
        c_.origin() + ": cuBLAS cublasGemmEx, bf16 in and out, CUBLAS_COMPUTE_32F, the workload's handle settings, " +
        (o_.gemm_relu ? std::string("operands as a ReLU MLP's (activations and their gradients max(0, uniform [-1, "
                                    "1)), half exactly 0; weights uniform [-1, 1)), ")
                      : std::string("uniform [-1, 1) operands, ")) +
        gpu_label_ + "; [m, n, k, TFLOP/s, pass] of C (m, n) = A (m, k) B (k, n) in the layout of the pass (forward " +
        "TN, input_grad NN, weight_grad NT with k = the batch); each the median of " + std::to_string(R_) +
        " repetitions of >= 2 ms (spreads in the calibrate table)";
  }

  // ---- the decoder's own kernels ------------------------------------------------------------------
  // The kernel shapes of a --scenario's decoder, or none: an MLP, a model with OPT's projections (e != h:
  // their gather and position kernels are not timed), or a head dimension the attention kernel lacks.
  static std::optional<cal::DecoderKernelShape> decoder_kernel_shape(const core::Scenario& sc) {
    const core::ModelDesc m = core::describe_model(sc.model);
    if (m.spec.type != core::ModelType::kDecoder) return std::nullopt;
    const core::DecoderShape& d = m.spec.decoder;
    if (core::has_embed_projection(d) || d.heads <= 0 || d.hidden % d.heads != 0 ||
        !core::decoder_layout::attention_head_dim_supported(core::head_dim(d)))
      return std::nullopt;
    return cal::DecoderKernelShape{sc.training.micro_batch,
                                   d.seq,
                                   d.hidden,
                                   d.heads,
                                   d.ffn,
                                   d.vocab,
                                   core::position_rows(d),
                                   d.pos_offset,
                                   d.activation == core::Activation::kRelu,
                                   d.pre_ln,
                                   d.tied_embeddings,
                                   {},
                                   {}};
  }

  // The first micro-batch the scenario's run trains on (its data file or the built-in stream) into the shape's
  // tokens and targets: the embedding's gradient is timed on the run's token frequencies.
  static void read_first_micro_batch(const core::Scenario& sc, cal::DecoderKernelShape& shape) {
    const core::RunSettings rs = core::resolve_settings(sc);
    const core::TokenSource source = core::open_token_source(rs.data_train, shape.vocab, shape.seq);
    shape.tokens.resize(size_t(shape.batch * shape.seq)), shape.targets.resize(shape.tokens.size());
    source.micro_batch(rs.seed, 0, 0, shape.batch, shape.tokens, shape.targets);
  }

  // Per decoder --scenario: each class of the decoder's memory-bound kernels and the fused attention,
  // timed at the scenario's shapes as the workload launches them (cal::decoder_kernel_seconds). A class's
  // rate is its bytes as the simulator counts them (core::layer_elementwise over the embedding, one block
  // and the head) over their time, added over the scenarios; the attention's is core::fused_attention_flops
  // of a block's forward and backward over their time, one point per (head dim, seq, batch x heads).
  void measure_decoder_kernels() {
    std::array<double, core::kKernelClassCount> bytes{}, secs{};
    std::array<double, core::kKernelClassCount> worst_spread{};
    std::string shapes;
    for (const core::Scenario& sc : scenarios_) {
      std::optional<cal::DecoderKernelShape> shape = decoder_kernel_shape(sc);
      if (!shape) continue;
      read_first_micro_batch(sc, *shape);
      const core::ModelDesc m = core::describe_model(sc.model);
      const int64_t mb = sc.training.micro_batch;
      const std::string at = sc.name + " (B " + std::to_string(mb) + ", s " + std::to_string(shape->seq) + ", h " +
                             std::to_string(shape->hidden) + ", f " + std::to_string(shape->ffn) + ", V " +
                             std::to_string(shape->vocab) + ")";
      shapes += (shapes.empty() ? "" : "; ") + at;
      c_.note("decoder kernels of " + at);
      const cal::DecoderKernelTimes t = cal::decoder_kernel_seconds(0, *shape, R_);
      const size_t block = 1, head = m.layers.size() - 1;  // layer 0 is the embedding
      std::vector<core::ElementwiseCost> costs;
      for (size_t i : {size_t(0), block, head}) costs.push_back(core::layer_elementwise(m, i, mb, 2));
      for (const auto& [kind, st] : t.class_seconds) {
        double b = 0;
        for (const core::ElementwiseCost& c : costs) b += double(core::class_bytes(c, kind));
        const std::string name(core::kernel_class_name(kind));
        c_.done(
            "decoder " + name + " " + sc.name + ": " + fmt(b / 1e6, 1) + " MB in " + fmt(st.median * 1e6, 1) + " us",
            b / st.median / 1e9, "GB/s", st, "gpu.decoder_kernel_gbps");
        bytes[size_t(kind)] += b, secs[size_t(kind)] += st.median;
        worst_spread[size_t(kind)] = std::max(worst_spread[size_t(kind)], st.spread);
      }
      const std::vector<core::LayerGemm> fwd = core::forward_gemms(m, m.layers[block], mb);
      const double ff = core::fused_attention_flops(fwd), bf = core::fused_attention_flops(core::backward_gemms(fwd));
      const int64_t hd = core::head_dim(m.spec.decoder);
      for (const auto& [backward, flops, st] :
           {std::tuple{false, ff, t.attention_fwd_s}, std::tuple{true, bf, t.attention_bwd_s}}) {
        const double tflops = flops / st.median / 1e12;
        c_.done(std::string("decoder attention ") + (backward ? "backward" : "forward") + " " + sc.name + ", d " +
                    std::to_string(hd),
                tflops, "TFLOP/s", st, "gpu.attention_tflops_by_shape");
        const core::AttentionPoint pt{hd, shape->seq, sig4(tflops), backward,
                                      core::attention_pairs(m.spec.decoder, mb)};
        const bool known = std::any_of(p_.gpu.attention_tflops_by_shape.begin(), p_.gpu.attention_tflops_by_shape.end(),
                                       [&](const core::AttentionPoint& a) {
                                         return a.head_dim == pt.head_dim && a.seq == pt.seq && a.pairs == pt.pairs &&
                                                a.backward == backward;
                                       });
        if (!known) p_.gpu.attention_tflops_by_shape.push_back(pt);
      }
    }
    if (shapes.empty()) return;
    std::string spreads;
    for (int k = 1; k < core::kKernelClassCount; ++k)
      if (secs[size_t(k)] > 0) {
        p_.gpu.decoder_kernel_gbps.push_back({core::KernelClass(k), sig4(bytes[size_t(k)] / secs[size_t(k)] / 1e9)});
        spreads += std::string(spreads.empty() ? "" : ", ") +
                   std::string(core::kernel_class_name(core::KernelClass(k))) + " " +
                   fmt(worst_spread[size_t(k)] * 100, 1) + "%";
      }
    src()["gpu.decoder_kernel_gbps"] =
        c_.origin() + ": the decoder workload's own kernels (backends/cuda/decoder_kernels.cuh) launched as one " +
        "embedding, block and head launch them, at " + shapes + "; [class, GB/s] = the class's bytes as " +
        "core::layer_elementwise counts them over its measured time (summed over the scenarios), each time the " +
        "median of " + std::to_string(R_) + " repetitions of >= 2 ms, bf16 data uniform in [-1, 1), token ids " +
        "and targets the scenario's first micro-batch (its data.train file or the built-in stream), spreads " +
        spreads + ", " + gpu_label_;
    src()["gpu.attention_tflops_by_shape"] =
        c_.origin() + ": the fused causal attention (backends/cuda/attention.cu) at " + shapes +
        "; [head_dim, seq, pairs (batch x heads), TFLOP/s, pass] = core::fused_attention_flops of the pass "
        "(forward: QK^T and PV over the causal half; backward: the recomputed scores, dQ, dK, dP, dV) over the "
        "measured time of its kernels, "
        "each the median of " +
        std::to_string(R_) + " repetitions of >= 2 ms on uniform [-1, 1) q, k, v, " + gpu_label_;
  }

  void measure_gemm_dtypes() {
    const int64_t s = o_.quick ? 4096 : 8192;
    const std::string shape = std::to_string(s) + "x" + std::to_string(s) + "x" + std::to_string(s);
    const cal::Stat f16 = cal::gemm_tflops(0, cal::GemmType::kFP16, core::GemmPass::kForward, s, s, s, R_);
    c_.done("gemm fp16 forward " + shape, f16.median, "TFLOP/s", f16, "gpu.fp16_tflops");
    p_.gpu.fp16_tflops = sig4(f16.median);
    src()["gpu.fp16_tflops"] = c_.source("cuBLAS fp16 GEMM " + shape + ", fp32 accumulation, " + gpu_label_, f16);
    const cal::Stat f32 = cal::gemm_tflops(0, cal::GemmType::kFP32, core::GemmPass::kForward, s, s, s, R_);
    c_.done("gemm fp32 forward " + shape, f32.median, "TFLOP/s", f32, "gpu.fp32_tflops");
    p_.gpu.fp32_tflops = sig4(f32.median);
    src()["gpu.fp32_tflops"] =
        c_.source("cuBLAS fp32 GEMM " + shape + " (CUBLAS_COMPUTE_32F: no TF32), " + gpu_label_, f32);
  }

  // ---- device memory ------------------------------------------------------------------------------
  void measure_device_memory() {
    const std::string size = with_units(double(hbm_bytes_));
    const cal::Stat rw = cal::rw_kernel_gbps(0, hbm_bytes_, R_);
    c_.done("hbm read+write kernel " + size, rw.median, "GB/s", rw, "gpu.hbm_gbps");
    p_.gpu.hbm_gbps = sig4(rw.median);
    src()["gpu.hbm_gbps"] = c_.source(
        "a streaming kernel reading and writing " + size + " (16-byte vectors), bytes read + written, " + gpu_label_,
        rw);
    const cal::Stat cp = cal::d2d_copy_gbps(0, hbm_bytes_, R_);
    c_.done("hbm cudaMemcpy D2D " + size, cp.median, "GB/s", cp, "gpu.hbm_copy_gbps");
    p_.gpu.hbm_copy_gbps = sig4(cp.median);
    src()["gpu.hbm_copy_gbps"] =
        c_.source("cudaMemcpy device-to-device of " + size + ", bytes read + written, " + gpu_label_, cp);
    p_.gpu.hbm_bytes = dev_.hbm_bytes;
    src()["gpu.hbm_bytes"] = c_.origin() + ": cudaGetDeviceProperties totalGlobalMem of " + gpu_label_;
    p_.gpu.name = dev_.name;
  }

  void measure_gpu_optimizer() {
    std::vector<double> secs;
    const double sec = backend::cuda::time_step_seconds(core::OptimizerKind::kAdamW, core::DType::kBF16,
                                                        core::DType::kBF16, gpu_opt_n_, R_, 0, &secs);
    std::vector<double> rates;
    for (double x : secs) rates.push_back(kAdamWBf16Bytes * double(gpu_opt_n_) / x / 1e9);
    const cal::Stat st = cal::make_stat(std::move(rates));
    c_.done("gpu adamw bf16 fused kernel " + std::to_string(gpu_opt_n_) + " elements (" + kAdamWBf16Text + ")",
            st.median, "GB/s", st, "gpu.optimizer_gbps");
    p_.gpu.optimizer_gbps = sig4(st.median);
    src()["gpu.optimizer_gbps"] =
        c_.source("the engine's fused AdamW kernel (bf16 gradient and bf16 copy, " + kAdamWBf16Text +
                      " read + written) over " + std::to_string(gpu_opt_n_) +
                      " elements: " + fmt(double(gpu_opt_n_) / sec / 1e9, 1) + " Gparam/s, " + gpu_label_,
                  st);
  }

  // ---- PCIe ---------------------------------------------------------------------------------------
  void measure_pcie() {
    const std::string size = with_units(double(pcie_bytes_));
    h2d_ = cal::pinned_copy_gbps(0, cal::Direction::kH2D, pcie_bytes_, R_);
    c_.done("pcie pinned H2D " + size, h2d_.median, "GB/s", h2d_, "pcie.h2d_gbps");
    const cal::Stat d2h = cal::pinned_copy_gbps(0, cal::Direction::kD2H, pcie_bytes_, R_);
    c_.done("pcie pinned D2H " + size, d2h.median, "GB/s", d2h, "pcie.d2h_gbps");
    const cal::BidirStat bi = cal::pinned_bidir_gbps(0, pcie_bytes_, R_);
    c_.done("pcie pinned H2D+D2H at once, total", bi.total_gbps.median, "GB/s", bi.total_gbps, "pcie.bidir_total_gbps");
    c_.done("pcie pinned H2D while D2H runs", bi.h2d_gbps.median, "GB/s", bi.h2d_gbps);
    c_.done("pcie pinned D2H while H2D runs", bi.d2h_gbps.median, "GB/s", bi.d2h_gbps);
    p_.pcie.h2d_gbps = sig4(h2d_.median);
    p_.pcie.d2h_gbps = sig4(d2h.median);
    src()["pcie.h2d_gbps"] = c_.source("pinned cudaMemcpyAsync host-to-device of " + size + ", " + gpu_label_, h2d_);
    src()["pcie.d2h_gbps"] = c_.source("pinned cudaMemcpyAsync device-to-host of " + size + ", " + gpu_label_, d2h);
    const double total = sig4(bi.total_gbps.median), cap = p_.pcie.h2d_gbps + p_.pcie.d2h_gbps;
    p_.pcie.bidir_total_gbps = std::min(total, cap);
    src()["pcie.bidir_total_gbps"] =
        c_.source("an H2D and a D2H of " + size + " each on two streams, started together: 2 x " + size +
                      " over the time until both ended (" + fmt(bi.h2d_gbps.median, 1) + " + " +
                      fmt(bi.d2h_gbps.median, 1) + " GB/s each over its own time)" +
                      (total > cap ? "; capped at h2d + d2h measured alone (" + fmt(total, 1) + " measured)" : "") +
                      ", " + gpu_label_,
                  bi.total_gbps);
    const cal::Stat pg = cal::pageable_h2d_gbps(0, pcie_bytes_, std::max(3, R_ / 2));
    c_.done("pcie pageable H2D " + size, pg.median, "GB/s", pg, "pcie.pageable_h2d_gbps");
    p_.pcie.pageable_h2d_gbps = sig4(pg.median);
    src()["pcie.pageable_h2d_gbps"] =
        c_.source("cudaMemcpy host-to-device of " + size + " from malloc'd, touched memory, " + gpu_label_, pg);
  }

  // The fixed cost per copy, and whether the GPUs share an uplink.
  void measure_copy_costs() {
    const size_t small_copy = 4096;
    const cal::Stat up = cal::pinned_copy_ns(0, cal::Direction::kH2D, small_copy, R_);
    c_.done("pcie pinned H2D 4 KiB, per copy", up.median, "ns", up);
    const cal::Stat down = cal::pinned_copy_ns(0, cal::Direction::kD2H, small_copy, R_);
    c_.done("pcie pinned D2H 4 KiB, per copy", down.median, "ns", down);
    const double lat_h = std::max(0.0, up.median - double(small_copy) / p_.pcie.h2d_gbps);
    const double lat_d = std::max(0.0, down.median - double(small_copy) / p_.pcie.d2h_gbps);
    p_.pcie.copy_latency_ns = sig4(0.5 * (lat_h + lat_d));
    cal::Stat both = up;
    both.spread = std::max(up.spread, down.spread);
    src()["pcie.copy_latency_ns"] = c_.source(
        "fixed cost per pinned copy: 4 KiB copies back to back on one stream (100 per repetition, event-timed), "
        "minus 4 KiB at the measured rate; mean of H2D " +
            fmt(lat_h, 0) + " ns and D2H " + fmt(lat_d, 0) + " ns; spread the larger of the two, " + gpu_label_,
        both);
    if (gpus_ <= 1) {
      p_.pcie.gpus_per_link = 1;
      src()["pcie.gpus_per_link"] = c_.origin() + ": one GPU measured";
      return;
    }
    std::vector<int> devs;
    for (int d = 0; d < gpus_; ++d) devs.push_back(d);
    const cal::Stat conc = cal::concurrent_h2d_gbps(devs, pcie_bytes_, R_);
    c_.done("pcie pinned H2D on all " + std::to_string(gpus_) + " GPUs at once, slowest", conc.median, "GB/s", conc,
            "pcie.gpus_per_link");
    const double ratio = conc.median / h2d_.median;
    p_.pcie.gpus_per_link = ratio >= 0.75 ? 1 : std::clamp(int(std::lround(1.0 / ratio)), 2, gpus_);
    src()["pcie.gpus_per_link"] =
        c_.source("derived: with all " + std::to_string(gpus_) + " GPUs copying " + with_units(double(pcie_bytes_)) +
                      " H2D at once the slowest got " + fmt(conc.median, 1) + " GB/s, " + fmt(ratio * 100, 0) +
                      "% of one GPU alone (>= 75%: not shared; else 1 / that ratio GPUs per uplink, or host memory "
                      "bandwidth shared alike)",
                  conc);
  }

  // ---- launch and events ----------------------------------------------------------------------------
  void measure_launch_and_events() {
    const cal::LaunchStat ls = cal::kernel_launch(0, 1000, R_);
    c_.done("empty kernel, back-to-back launches, per kernel", ls.per_kernel_ns.median, "ns", ls.per_kernel_ns,
            "gpu.kernel_launch_ns");
    c_.done("empty kernel, host time per launch call", ls.host_call_ns.median, "ns", ls.host_call_ns);
    p_.gpu.kernel_launch_ns = sig4(ls.per_kernel_ns.median);
    src()["gpu.kernel_launch_ns"] =
        c_.source("1000 empty kernels launched back to back on one stream, event-timed, per kernel (the host spent " +
                      fmt(ls.host_call_ns.median, 0) + " ns per launch call), " + gpu_label_,
                  ls.per_kernel_ns);
    const cal::EventStat es = cal::event_overheads(0, R_);
    c_.done("cudaEventRecord, host time per call", es.record_ns.median, "ns", es.record_ns, "gpu.event_record_ns");
    c_.done("cudaEventElapsedTime of two back-to-back events", es.elapsed_floor_ns.median, "ns", es.elapsed_floor_ns);
    c_.done("event record + cudaEventSynchronize, idle stream", es.sync_ns.median, "ns", es.sync_ns,
            "gpu.event_sync_ns");
    p_.gpu.event_record_ns = sig4(es.record_ns.median);
    p_.gpu.event_sync_ns = sig4(es.sync_ns.median);
    src()["gpu.event_record_ns"] =
        c_.source("host time of one cudaEventRecord (1000 in a row on an idle stream; two back-to-back events time " +
                      fmt(es.elapsed_floor_ns.median, 0) + " ns apart: the floor of event timing), " + gpu_label_,
                  es.record_ns);
    src()["gpu.event_sync_ns"] = c_.source(
        "host round trip of cudaEventRecord on an idle stream then cudaEventSynchronize, " + gpu_label_, es.sync_ns);
  }

  // ---- CPU optimizer --------------------------------------------------------------------------------
  std::string cpu_what() const { return cpu_what_of(cpu_n_); }
  std::string cpu_what_of(size_t elems) const {
    return "tf::backend::cpu::CpuBackend AdamW, bf16 gradient and bf16 copy (" + kAdamWBf16Text + "), " +
           std::to_string(elems) + " elements, " + (o_.pin ? "pinned" : "unpinned") + " threads";
  }
  // Gparam/s of passes over cpu_n_ elements that took `seconds` each.
  cal::Stat cpu_gparam_s(const std::vector<double>& seconds) const { return giga_per_second(double(cpu_n_), seconds); }
  // Gparam/s of `t` threads, per step.
  cal::Stat cpu_rate(int t) {
    backend::cpu::CpuBackend be(cpu_options(t, o_.pin));
    std::vector<double> sec;
    time_cpu_step(be, core::OptimizerKind::kAdamW, core::DType::kBF16, core::DType::kBF16, cpu_n_, R_, &sec);
    return cpu_gparam_s(sec);
  }

  void measure_cpu_optimizer() {
    for (int t : threads_) {
      const cal::Stat st = cpu_rate(t);
      c_.done("cpu adamw bf16, " + std::to_string(t) + " thread" + (t > 1 ? "s" : ""), st.median, "Gparam/s", st,
              "cpu.optimizer_gparam_s_by_threads");
      rates_.emplace_back(t, st);
      p_.cpu.optimizer_gparam_s_by_threads.emplace_back(t, sig4(st.median));
    }
    p_.cpu.optimizer_gparam_s_per_core = p_.cpu.optimizer_gparam_s_by_threads.front().second;
    src()["cpu.optimizer_gparam_s_per_core"] = c_.source(cpu_what() + ", 1 thread", rates_.front().second);
    auto best_rate = rates_.front();
    for (const auto& r : rates_)
      if (r.second.median > best_rate.second.median) best_rate = r;
    p_.cpu.optimizer_gparam_s_all_cores = sig4(best_rate.second.median);
    src()["cpu.optimizer_gparam_s_all_cores"] =
        c_.source(cpu_what() + ", the best of the thread sweep (" + std::to_string(best_rate.first) + " threads)",
                  best_rate.second);
    const double worst = std::max_element(rates_.begin(), rates_.end(), [](const auto& a, const auto& b) {
                           return a.second.spread < b.second.spread;
                         })->second.spread;
    src()["cpu.optimizer_gparam_s_by_threads"] = c_.origin() + ": " + cpu_what() +
                                                 "; [threads, Gparam/s], each the median of " + std::to_string(R_) +
                                                 " steps, spreads up to " + fmt(worst * 100, 1) + "%";
  }

  void measure_cpu_memory() {
    backend::cpu::CpuBackend be(cpu_options(cores_, o_.pin));
    std::vector<double> gbps;
    measure_stream_gbps(be, core::DType::kBF16, core::DType::kBF16, cpu_n_, R_, &gbps);
    const cal::Stat st = cal::make_stat(std::move(gbps));
    c_.done("cpu read-modify-write bound: the optimizer's streams (" + kAdamWBf16Text + "), " + std::to_string(cores_) +
                " threads",
            st.median, "GB/s", st, "cpu.mem_gbps");
    p_.cpu.mem_gbps = sig4(st.median);
    src()["cpu.mem_gbps"] = c_.source(
        "host memory bound: the CPU optimizer's own streams without its arithmetic (tf::backend::cpu::CpuBackend::"
        "stream_pass: read the bf16 gradient, read-modify-write fp32 p, m, v, write the bf16 copy; " +
            kAdamWBf16Text + "), " + std::to_string(cpu_n_) + " elements, " + std::to_string(cores_) + " threads",
        st);
  }

  // The node rate with k ranks' CPU halves at once (apps/twinflow/cpu_ranks.h: k processes, each on its
  // k-th share of the cores, through the engine's CPU path), for the simulator's shared host. Every k's
  // group of processes is started and warmed up first, then the passes alternate between the groups
  // (one pass of k = 1, one of k = 2, ...; each group's processes sleep while another's run), so that a
  // drift of the host's memory bandwidth during the measurement (another tenant of the socket) moves
  // every k alike instead of bending the curve. Measured k after k, the 2026-11-24 H100 profile's curve
  // fell 6% from k = 1 to 4 while the bench, minutes later, rose 3%: 8-12% error at k = 2, 4. The ops
  // are the engine's (engine_op_: a layer's CPU piece at one rank, split k ways at k ranks as ZeRO-3
  // shards it), --quick too: on 131 k-element ops per-op overhead halved the rate (largest-h200).
  // The rank curve's segments: `ops` engine-sized ops of `op` elements over all k ranks.
  RankCurveOps rank_curve_ops() const { return app::rank_curve_ops(engine_op_.elems, cpu_ranks_.back(), o_.quick); }

  // The rank curve's passes: R_ rounds, every k's group a pass each round; a Stat per k.
  std::vector<cal::Stat> rank_curve_rates(std::vector<std::unique_ptr<CpuRankGroup>>& groups) const {
    std::vector<std::vector<double>> rates(groups.size());
    for (int rep = 0; rep < R_; ++rep)
      for (size_t i = 0; i < groups.size(); ++i) rates[i].push_back(groups[i]->pass_gparam_s());
    std::vector<cal::Stat> stats;
    for (std::vector<double>& r : rates) stats.push_back(cal::make_stat(std::move(r)));
    return stats;
  }

  // The rank curve's one process against the thread sweep's (app::host_rate_disagreement); empty without k = 1.
  std::string one_process_disagreement(const std::vector<cal::Stat>& stats) const {
    const auto one = std::find(cpu_ranks_.begin(), cpu_ranks_.end(), 1);
    if (one == cpu_ranks_.end()) return "";
    return host_rate_disagreement(p_.cpu.optimizer_gparam_s_all_cores, stats[size_t(one - cpu_ranks_.begin())].median);
  }

  void measure_cpu_ranks() {
    const int warm = 3;
    const auto [op, ops] = rank_curve_ops();
    std::vector<std::unique_ptr<CpuRankGroup>> groups;
    for (int k : cpu_ranks_) {
      groups.push_back(std::make_unique<CpuRankGroup>(flat_layouts(op * ops, k, ops), 0, o_.pin));
      groups.back()->setup(CpuRankSetup{});
      (void)groups.back()->passes(warm);
    }
    std::vector<cal::Stat> stats = rank_curve_rates(groups);
    std::string moved = one_process_disagreement(stats);
    if (!moved.empty()) {  // once more: a host that moved for a moment reads alike again
      std::cerr << "calibrate: " << moved << "; measuring the rank curve again\n";
      stats = rank_curve_rates(groups);
      if (moved = one_process_disagreement(stats); !moved.empty())
        std::cerr << "calibrate: warning: again, " << moved
                  << ": the profile's CPU figures describe a moving host (calibrate again, on a quiet host)\n";
    }
    std::string per_k;
    for (size_t i = 0; i < groups.size(); ++i) {
      const int k = cpu_ranks_[i];
      const cal::Stat& st = stats[i];
      c_.done("cpu adamw bf16, " + std::to_string(k) + " rank process" + (k > 1 ? "es" : "") + " at once, node",
              st.median, "Gparam/s", st, "cpu.optimizer_node_gparam_s_by_ranks");
      p_.cpu.optimizer_node_gparam_s_by_ranks.emplace_back(k, sig4(st.median));
      per_k += (per_k.empty() ? "" : ", ") + std::string("k ") + std::to_string(k) + ": " + fmt(st.median, 3) +
               " (spread " + fmt(st.spread * 100, 1) + "%)";
    }
    src()["cpu.optimizer_node_gparam_s_by_ranks"] =
        c_.origin() + ": k processes at once through the engine's CPU path (tf::backend::cpu::CpuSegment), each " +
        "confined to its k-th share of the cores (cpu::rank_cpu_share) with one pinned thread per core, AdamW, bf16 " +
        "gradient and bf16 copy (" + kAdamWBf16Text + "), " + std::to_string(ops) + " ops of " + std::to_string(op) +
        " elements over the k ranks (" + std::to_string(op) + " / k per rank: " + engine_op_.what +
        "); node Gparam/s = elements / (first start to last end) of each synchronised pass; " +
        "every k's processes started and warmed up (" + std::to_string(warm) +
        " passes), then the k alternating pass by pass; [ranks, Gparam/s], each the median of " + std::to_string(R_) +
        " passes (" + per_k + ")" + (moved.empty() ? "" : ". Measured twice, and still: " + moved);
    // the host's ranks: the largest k measured that is at most the GPU count (rank_counts: it, unless it
    // exceeds the cores)
    const auto host = std::upper_bound(cpu_ranks_.begin(), cpu_ranks_.end(), gpus_) - 1;
    measure_cpu_out_of_place(*groups[size_t(host - cpu_ranks_.begin())], op, ops);
  }

  // An out-of-place update's time over an in-place one's (cpu.optimizer_out_of_place_factor): every CPU layer
  // of a step whose speculation holds updates out of place (read from its state slot, written to the spare
  // one), while the rates above and the engine's probe of its pages time in place. The rank curve's
  // segments at the host's ranks (one per GPU: that k's group of measure_cpu_ranks, set up and warm), the
  // spare slot placed as the engine's (first touch by the updating threads), then in-place and out-of-place
  // passes alternating (app::alternate: a drift of the host moves both of a pair); the median of the pairs'
  // out-of-place / in-place seconds. On two H200s the
  // engine's passes ran 10-15% below the profile's rate with the host probe on it, and `bench --cpu-ranks
  // --out-of-place` on the scenarios' layers read 1.07-1.09 (bench/results/2026-11-29-h200x2-out-of-place).
  void measure_cpu_out_of_place(CpuRankGroup& g, int64_t op, int ops) {
    const int k = g.ranks();
    (void)g.passes(3, CpuUpdate::kOutOfPlace);  // the first places the spare slot
    const Pairs p = alternate(
        R_, [&] { return g.passes(1).node_s.front(); },
        [&] { return g.passes(1, CpuUpdate::kOutOfPlace).node_s.front(); });
    const cal::Stat st = cal::make_stat(p.ratios);
    const std::string ranks = std::to_string(k) + " rank process" + (k > 1 ? "es" : "");
    c_.done("cpu adamw bf16 out of place / in place, " + ranks + " at once (pairwise)", st.median, "x", st,
            "cpu.optimizer_out_of_place_factor");
    p_.cpu.optimizer_out_of_place_factor = sig4(st.median);
    const auto elems = double(g.elems());
    src()["cpu.optimizer_out_of_place_factor"] =
        c_.source(cpu_what() + ", " + ranks +
                      " at once through the engine's CPU path (as the rank curve: " + std::to_string(ops) + " ops of " +
                      std::to_string(op) + " elements over the ranks): " + std::to_string(R_) +
                      " pairs of a pass in place (median " + fmt(giga_per_second(elems, p.first).median, 3) +
                      " Gparam/s) and a pass out of place into the spare state slot (median " +
                      fmt(giga_per_second(elems, p.second).median, 3) +
                      " Gparam/s), back to back; the median of the pairs' out-of-place / in-place seconds",
                  st);
  }

  // The node rate at the scenarios' host footprints, relative to the rank curve's small segments: k rank
  // processes hold the CPU segments the engine runs at that ratio plus the rest of each rank's planned
  // pinned memory (CpuRankGroup::hold_resident), and their passes alternate with those of k processes on
  // small segments, so that a drift of the host moves both (measure_cpu_ranks). Asked for (--footprints):
  // on the 2 x H200 microVM the factor scattered 0.91-1.14 between four calls with no footprint effect that
  // repeated, and the tables predicted worse with it (bench/results/2026-11-28-h200x2-footprints); it is
  // meant for hosts where pinned memory past one socket's lands on the other's.
  void measure_cpu_footprints() {
    if (footprints_.empty()) return;
    const int reps = o_.quick ? 3 : 7;
    const auto [op, ops] = rank_curve_ops();
    std::vector<core::FootprintPoint> pts;
    std::string per;
    for (const HostFootprint& fp : footprints_) {
      std::string why;
      const auto m = measure_footprint(
          fp, flat_layouts(op * ops, int(fp.layouts.size()), ops), reps, o_.pin, false,
          [&](const std::string& s) { c_.note(s); }, &why);
      if (!m) {
        c_.note("skipped " + why);
        continue;
      }
      const cal::Stat st = cal::make_stat(m->factors);
      const int64_t held = m->held.node_bytes;
      c_.done("cpu adamw bf16 node rate at " + core::format_gb(held) + " pinned (" + fp.what + ") / on small segments",
              st.median, "x", st, "cpu.optimizer_rate_factor_by_node_bytes");
      if (pts.empty()) pts.push_back({m->small_node_bytes, 1.0});
      if (held > pts.back().node_bytes) pts.push_back({held, sig4(st.median)});
      per += (per.empty() ? "" : "; ") + fp.what + ": " + core::format_gb(held) + " held (planned " +
             core::format_gb(fp.node_bytes) + ") x" + fmt(st.median, 3) + " (spread " + fmt(st.spread * 100, 1) +
             "%; node " + fmt(cal::make_stat(m->gparam_s).median, 3) + " against " +
             fmt(cal::make_stat(m->small_gparam_s).median, 3) + " Gparam/s)";
    }
    if (pts.size() < 2) return;
    p_.cpu.optimizer_rate_factor_by_node_bytes = pts;
    src()["cpu.optimizer_rate_factor_by_node_bytes"] =
        c_.origin() + ": [node pinned bytes, factor]: k rank processes through the engine's CPU path (as the " +
        "rank curve), each holding its CPU segment at the scenario's ratio (tf::app::scenario_layouts) and the " +
        "rest of its planned pinned bytes written once (the simulator's plan: SimPoint::cpu_node_host_bytes), " +
        "their node rate over that of k processes on " + core::format_gb(pts.front().node_bytes) +
        " of segments (the first point), the two alternating pass by pass; each the median of " + std::to_string(reps) +
        " pairs (" + per + ")";
  }

  // The all-core pass alone and under a load, pass by pass (app::time_alone_and_under, one pass to warm
  // up first): the factor is the median of the pairs' under/alone seconds. Three medians minutes apart
  // (the sweep's rate, the rate under the load, the rate after) read the host's drift as a slowdown: on
  // two H200s the D2H factor came out 1.23-1.82 in four calibrations of one day, the host's rate moving
  // 10-50% within minutes (bench/results/2026-11-28-h200x2-sched-idle).
  struct PairedPasses {
    cal::Stat alone, under, factor;  // Gparam/s alone, Gparam/s under the load, under/alone seconds
    double load_gbps = 0;            // the mean of the load's stop()s: what it moved meanwhile
  };
  PairedPasses cpu_pass_alone_and_under(const cal::BackgroundLoad& load) {
    backend::cpu::CpuBackend be(cpu_options(cores_, o_.pin));
    CpuStepPass pass(be, core::OptimizerKind::kAdamW, core::DType::kBF16, core::DType::kBF16, cpu_n_);
    const auto timed = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      pass.run();
      return seconds_since(t0);
    };
    (void)timed();
    const PairedTimes t = time_alone_and_under(R_, timed, load.start, load.stop);
    return {cpu_gparam_s(t.seconds.first), cpu_gparam_s(t.seconds.second), cal::make_stat(t.seconds.ratios),
            t.load_sum / R_};
  }

  // One slowdown factor of the CPU pass under copies (`what`: the copies), pairwise
  // (cpu_pass_alone_and_under), into `field` and its source under `key`.
  void write_cpu_slowdown(const PairedPasses& m, const std::string& what, const std::string& key, double& field) {
    const std::string threads = std::to_string(cores_) + " threads";
    c_.done("cpu adamw bf16, " + threads + ", while " + what, m.under.median, "Gparam/s", m.under);
    const double factor = m.factor.median;
    c_.done("cpu slowdown while " + what + " (under / alone, pairwise)", factor, "x", m.factor, key);
    field = std::max(1.0, sig4(factor));
    src()[key] = c_.source(cpu_what() + ", " + threads + ": " + std::to_string(R_) + " pairs of a pass alone (median " +
                               fmt(m.alone.median, 3) + " Gparam/s) and a pass while " + what + " (median " +
                               fmt(m.under.median, 3) + " Gparam/s; pinned " + with_units(double(dma_chunk_)) +
                               " copies back to back, " + fmt(m.load_gbps, 1) +
                               " GB/s meanwhile), back to back; the median of the pairs' under/alone seconds" +
                               (factor < 1 ? "; measured " + fmt(factor, 3) + ", below 1: written as 1" : ""),
                           m.factor);
  }

  // The same all-core pass while an H2D and a D2H run on GPU 0 (cpu.dma_slowdown_factor), then while every
  // GPU copies one way at once (D2H, as the ranks' gradients land during backward; H2D, as their
  // parameters go back: cpu.dma_slowdown_factor_d2h / _h2d). On 2 x H200 the engine's passes ran 1.5-1.9x
  // slower beside the two ranks' D2Hs while the both-ways figure of one GPU said 1.33
  // (bench/results/2026-11-24-h200x2-validate/README.md).
  void measure_dma_slowdown() {
    {
      cal::BackgroundDma dma(0, dma_chunk_);
      const cal::BackgroundLoad load{[&] { dma.start(); }, [&] { return dma.stop(); }};
      write_cpu_slowdown(cpu_pass_alone_and_under(load), "H2D+D2H run", "cpu.dma_slowdown_factor",
                         p_.cpu.dma_slowdown_factor);
    }
    for (const cal::DmaCopies copies : {cal::DmaCopies::kD2H, cal::DmaCopies::kH2D}) {
      const bool d2h = copies == cal::DmaCopies::kD2H;
      GpusCopying dma(0, gpus_, dma_chunk_, copies, false);
      const cal::BackgroundLoad load{[&] { dma.start(); }, [&] { return dma.stop(); }};
      write_cpu_slowdown(cpu_pass_alone_and_under(load),
                         std::string(d2h ? "D2H" : "H2D") + " runs on " + std::to_string(gpus_) + " GPU(s)",
                         d2h ? "cpu.dma_slowdown_factor_d2h" : "cpu.dma_slowdown_factor_h2d",
                         d2h ? p_.cpu.dma_slowdown_factor_d2h : p_.cpu.dma_slowdown_factor_h2d);
    }
    p_.cpu.name = cpu_name_;
    p_.cpu.cores = cores_;
    src()["cpu.cores"] = c_.origin() + ": physical cores among the " + std::to_string(allowed_cpus_) +
                         " CPUs of the affinity mask (sysfs topology)";
    p_.host_memory_bytes = host_memory_bytes();
    src()["host.memory_bytes"] = c_.origin() + ": sysconf(_SC_PHYS_PAGES) x sysconf(_SC_PAGE_SIZE) (free -b total)";
  }

  // How much slower pinned copies of the engine's size (engine_op_: one CPU layer's parameter copy) run
  // while the CPU optimizer pass streams host memory on all cores, pinned as the engine runs it (the DMA
  // and the pass share the host's DRAM: the OPT-1.3B H2D copies took 1.5x their prediction at every
  // ratio, bench/results/2026-11-24-decval-h100). Per direction, while every other GPU copies the same way
  // at once throughout (as the node's other ranks' copies run beside it: on 2 x H200 a copy beside the pass
  // and the other rank's copy ran 1.5-1.9x its alone time): device 0's copy alone, then one with the pass
  // started before it and stopped after it, pair by pair (app::time_alone_and_under, as the CPU pass's DMA
  // factors: a drift of the host moves both of a pair; the medians before, under and after it read the
  // H2D factor 1.51-1.77 in four calibrations of one day on 2 x H200); the factor is the median of the
  // pairs' under/alone seconds, written as 1 where the copy ran faster (pcie.h2d_slowdown_under_cpu_pass,
  // pcie.d2h_slowdown_under_cpu_pass). A pass of 2^26 elements at most (1 GiB of master weights: past the
  // caches; its set-up is what costs here, well under 5 s). Every wait of this process sleeps
  // (cal::wait_by_sleeping), so the timing thread takes no core from the pass's workers.
  void measure_copies_under_cpu_pass() {
    const size_t bytes = size_t(engine_op_.copy_bytes);
    BackgroundCpuPass pass(cores_, o_.pin, std::min(cpu_n_, size_t(1) << 26));
    for (const auto& [dir, name, key] : {std::tuple{cal::Direction::kH2D, "H2D", "h2d_slowdown_under_cpu_pass"},
                                         std::tuple{cal::Direction::kD2H, "D2H", "d2h_slowdown_under_cpu_pass"}}) {
      // every other GPU copies the same way throughout, as the node's other ranks do
      GpusCopying others(1, gpus_, bytes, dir == cal::Direction::kH2D ? cal::DmaCopies::kH2D : cal::DmaCopies::kD2H);
      const std::string with_others = others.count() > 0 ? ", with the other " + std::to_string(others.count()) +
                                                               " GPU(s) copying " + name + " at once"
                                                         : std::string();
      cal::PinnedCopy copy(0, dir, bytes);
      const PairedTimes t = time_alone_and_under(
          R_, [&] { return copy.seconds(); }, [&] { pass.start(); }, [&] { return pass.stop(); });
      const double others_gbps = others.stop();
      const cal::Stat alone = giga_per_second(double(bytes), t.seconds.first);
      const cal::Stat under = giga_per_second(double(bytes), t.seconds.second);
      const std::string what = std::string("pcie pinned ") + name + " " + with_units(double(bytes));
      c_.done(what + " while the CPU optimizer pass runs (" + std::to_string(cores_) + " threads" + with_others + ")",
              under.median, "GB/s", under);
      const cal::Stat fs = cal::make_stat(t.seconds.ratios);
      const double factor = fs.median;
      const std::string pkey = std::string("pcie.") + key;
      c_.done(std::string(name) + " slowdown under the CPU pass (under / alone, pairwise)", factor, "x", fs, pkey);
      (dir == cal::Direction::kH2D ? p_.pcie.h2d_slowdown_under_cpu_pass : p_.pcie.d2h_slowdown_under_cpu_pass) =
          std::max(1.0, sig4(factor));
      src()[pkey] = c_.source(
          "pinned cudaMemcpyAsync " + std::string(name) + " of " + std::to_string(bytes) + " B (" + engine_op_.what +
              ", its parameter copy), " + gpu_label_ + with_others +
              (gpus_ > 1 ? " (" + fmt(others_gbps, 1) + " GB/s)" : std::string()) + ": " + std::to_string(R_) +
              " pairs of a copy alone (median " + fmt(alone.median, 2) + " GB/s) and a copy while " +
              cpu_what_of(pass.elems()) + " ran back to back on " + std::to_string(cores_) +
              " threads, started before it and stopped after it (median " + fmt(under.median, 2) + " GB/s; " +
              fmt(t.load_sum / R_, 1) + " GB/s of optimizer traffic meanwhile); the median of the pairs' under/alone " +
              "seconds" + (factor < 1 ? "; measured " + fmt(factor, 3) + ", below 1: written as 1" : ""),
          fs);
    }
  }

  // ---- NCCL ---------------------------------------------------------------------------------------
  void measure_collectives() {
    p_.gpus_per_node = gpus_;
    src()["gpus_per_node"] =
        c_.origin() + ": " + std::to_string(gpus_) + " CUDA device(s) used of " + std::to_string(visible_) + " visible";
    p_.inter_node.kind = "none";
    src()["inter_node.gbps"] = c_.origin() + ": calibrate measures one node; not measured";
    src()["inter_node.latency_ns"] = c_.origin() + ": calibrate measures one node; not measured";
    if (gpus_ <= 1) {
      p_.intra_node.kind = "none";
      src()["intra_node.bus_gbps"] = c_.origin() + ": one GPU: no GPU-to-GPU link";
      src()["intra_node.latency_ns"] = c_.origin() + ": one GPU: no GPU-to-GPU link";
      return;
    }
    cal::NcclGroup group(gpus_, size_t(sizes_.back()));
    c_.note("nccl: " + std::to_string(group.ranks()) + " ranks in one process (ncclCommInitAll)");
    measure_all_gather(group);
    measure_reduce_scatter(group);
    fit_link();
    measure_compute_slowdown(&group);
  }

  // ---- compute under collectives and copies ------------------------------------------------------
  // The GEMM the slowdowns are measured on: the largest of the --scenario shapes, else an 8B MLP
  // layer's forward (4096 tokens, hidden 8192).
  GemmCase slowdown_gemm() const {
    GemmCase g{core::GemmPass::kForward, 4096, 8192, 8192};
    const auto flops = [](const GemmCase& x) { return double(x.m) * double(x.n) * double(x.k); };
    if (gemms_.size() > builtin_cases_)
      g = *std::max_element(gemms_.begin() + std::ptrdiff_t(builtin_cases_), gemms_.end(),
                            [&](const GemmCase& a, const GemmCase& b) { return flops(a) < flops(b); });
    return g;
  }

  // How much slower a GEMM runs while pinned H2D and D2H copies, and (group) the engine's all-gather and
  // reduce-scatter, run on other streams of its GPU: the simulator's gpu.compute_slowdown_* (it slows
  // forward and backward while they overlap).
  void measure_compute_slowdown(cal::NcclGroup* group) {
    const GemmCase g = slowdown_gemm();
    const cal::GemmData data = o_.gemm_relu ? cal::GemmData::kReluMlp : cal::GemmData::kRandom;
    const std::string what = "gemm bf16 " + std::string(core::gemm_pass_name(g.pass)) + " " + std::to_string(g.m) +
                             "x" + std::to_string(g.n) + "x" + std::to_string(g.k);
    const auto rate = [&](const cal::BackgroundLoad* load, double* load_rate = nullptr) {
      return cal::gemm_tflops(0, cal::GemmType::kBF16, g.pass, g.m, g.n, g.k, R_, data, load, g.out_stride, load_rate);
    };
    const cal::Stat alone = rate(nullptr);
    c_.done(what + ", alone", alone.median, "TFLOP/s", alone);
    cal::BackgroundDma dma(0, dma_chunk_);
    const cal::BackgroundLoad copies{[&] { dma.start(); }, [&] { return dma.stop(); }};
    const cal::Stat under_dma = rate(&copies);
    const double f_dma = std::max(1.0, sig4(alone.median / under_dma.median));
    c_.done(what + ", while pinned H2D and D2H copies run", under_dma.median, "TFLOP/s", under_dma,
            "gpu.compute_slowdown_during_dma");
    p_.gpu.compute_slowdown_during_dma = f_dma;
    src()["gpu.compute_slowdown_during_dma"] =
        c_.source(what + " (the workload's operands and handle): " + fmt(alone.median, 1) + " TFLOP/s alone, " +
                      fmt(under_dma.median, 1) + " while " + with_units(double(dma_chunk_)) +
                      " H2D and D2H copies ran back to back on " + gpu_label_ + "; the ratio, at least 1",
                  under_dma);
    if (!group) return;
    const int64_t bytes = group->message_bytes_for(std::min<int64_t>(int64_t(128) << 20, sizes_.back()));
    std::string parts, beside;
    double sum = 0, worst = 0;
    for (const auto& [kind, name] : {std::pair{cal::Collective::kAllGather, "all-gather"},
                                     std::pair{cal::Collective::kReduceScatter, "engine reduce-scatter"}}) {
      const cal::BackgroundLoad load = group->background(kind, bytes);
      double bus_under = 0;
      const cal::Stat under = rate(&load, &bus_under);
      c_.done(what + ", while the " + name + " of " + with_units(double(bytes)) + " runs", under.median, "TFLOP/s",
              under, "gpu.compute_slowdown_during_collectives");
      sum += alone.median / under.median;
      worst = std::max(worst, under.spread);
      parts += (parts.empty() ? "" : ", ") + fmt(under.median, 1) + " under the " + name;
      beside += "; the " + std::string(name) + " itself " + collective_beside_compute(load, name, bus_under);
    }
    p_.gpu.compute_slowdown_during_collectives = std::max(1.0, sig4(sum / 2));
    src()["gpu.compute_slowdown_during_collectives"] =
        c_.origin() + ": " + what + ": " + fmt(alone.median, 1) + " TFLOP/s alone, " + parts + " (" +
        with_units(double(bytes)) + " messages back to back on all " + std::to_string(gpus_) +
        " GPUs, the engine's functions); the mean of the two ratios alone / under, at least 1; medians of " +
        std::to_string(R_) + ", spreads up to " + fmt(std::max(worst, alone.spread) * 100, 1) + "%" + beside;
  }

  // The other side of the pairs above: the collective's own bus rate while the GEMM ran (what `load` moved over
  // the GEMM's timed window) against the same load alone for kCollectiveAloneWindow, in the calibrate table and the
  // source text. No simulator term reads it yet: the simulator slows compute under collectives but not the
  // collectives under compute, and on two H200s the engine's reduce-scatter beside the backward ran 9.4% over
  // its simulated time (bench/results/2026-11-29-h200x2-tables).
  std::string collective_beside_compute(const cal::BackgroundLoad& load, const std::string& name, double bus_under) {
    load.start();
    std::this_thread::sleep_for(kCollectiveAloneWindow);
    const double bus_alone = load.stop();
    c_.done(name + ", whole calls back to back, alone (bus bandwidth)", bus_alone, "GB/s", cal::make_stat({bus_alone}));
    c_.done(name + ", whole calls back to back beside the GEMM (bus bandwidth)", bus_under, "GB/s",
            cal::make_stat({bus_under}));
    return fmt(bus_under, 1) + " bus GB/s beside the GEMM, " + fmt(bus_alone, 1) + " alone (whole calls over " +
           std::to_string(kCollectiveAloneWindow.count()) + " ms): " + fmt(bus_alone / bus_under, 3) + "x slower";
  }

  std::string nccl_how() const {
    return " bf16, " + std::to_string(gpus_) +
           " ranks in one process (ncclCommInitAll, one stream per GPU, NCCL_NVLS_ENABLE=0 unless set), host-timed "
           "over back-to-back calls of >= 3 ms; [message bytes (nccl-tests size), bus GB/s = size x (N-1)/N / time], "
           "each the median of " +
           std::to_string(R_);
  }

  void measure_all_gather(cal::NcclGroup& group) {
    double worst = 0;
    for (int64_t want : sizes_) {
      const int64_t bytes = group.message_bytes_for(want);
      const cal::Stat st = group.bus_gbps(cal::Collective::kAllGather, bytes, R_);
      c_.done("nccl all-gather " + with_units(double(bytes)) + ", " + std::to_string(gpus_) + " ranks, bus bandwidth",
              st.median, "GB/s", st, "intra_node.all_gather_bus_gbps_by_message_bytes");
      p_.intra_node.all_gather_bus_gbps_by_message_bytes.push_back({bytes, sig4(st.median)});
      worst = std::max(worst, st.spread);
    }
    src()["intra_node.all_gather_bus_gbps_by_message_bytes"] =
        c_.origin() + ": ncclAllGather, the engine's all-gather," + nccl_how() + ", spreads up to " +
        fmt(worst * 100, 1) + "%";
  }

  // The engine's reduce-scatter (backends/cuda/reduce_scatter.h) through its own function: whole, its
  // sum alone, and the exchange's bus bandwidth from the difference (the simulator's collective term;
  // it adds the sum from gpu.hbm_gbps).
  void measure_reduce_scatter(cal::NcclGroup& group) {
    double worst = 0;
    for (int64_t want : sizes_) {
      const int64_t bytes = group.message_bytes_for(want);
      const cal::NcclGroup::ReduceScatterStat st = group.engine_reduce_scatter(bytes, R_);
      const std::string what =
          "engine reduce-scatter " + with_units(double(bytes)) + ", " + std::to_string(gpus_) + " ranks";
      c_.done(what + ", whole call", st.whole_us.median, "us", st.whole_us);
      c_.done(what + ", the rank-ordered sum alone", st.sum_us.median, "us", st.sum_us);
      c_.done(what + ", exchange bus bandwidth", st.exchange_bus_gbps.median, "GB/s", st.exchange_bus_gbps,
              "intra_node.reduce_scatter_bus_gbps_by_message_bytes");
      p_.intra_node.reduce_scatter_bus_gbps_by_message_bytes.push_back({bytes, sig4(st.exchange_bus_gbps.median)});
      worst = std::max(worst, st.exchange_bus_gbps.spread);
    }
    src()["intra_node.reduce_scatter_bus_gbps_by_message_bytes"] =
        c_.origin() +
        ": the engine's reduce-scatter (an all-to-all of bf16 slices with ncclSend/ncclRecv, then the rank-ordered "
        "sum: backends/cuda/reduce_scatter.h), its exchange's bus bandwidth = size x (N-1)/N / (the whole call - "
        "the sum alone); the simulator adds the sum from gpu.hbm_gbps;" +
        nccl_how() + ", spreads up to " + fmt(worst * 100, 1) + "%";
  }

  // The link's kind and bandwidth, and NCCL's per-step latency, from the all-gather curve.
  void fit_link() {
    const auto& agc = p_.intra_node.all_gather_bus_gbps_by_message_bytes;
    p_.intra_node.gbps = agc.back().bus_gbps;
    p_.intra_node.kind = p_.intra_node.gbps > 64 ? "nvlink" : "pcie";
    src()["intra_node.bus_gbps"] = c_.origin() + ": the all-gather's bus bandwidth at " +
                                   with_units(double(agc.back().message_bytes)) + " (kind " + p_.intra_node.kind +
                                   ": above 64 GB/s, more than a PCIe Gen5 x16 direction, means NVLink)";
    // alpha of t = alpha + size (N-1)/N / busbw: the smallest message's time less its bytes at the
    // largest message's bandwidth, per ring step (N-1 steps).
    const double wire = double(agc.front().message_bytes) * (gpus_ - 1) / gpus_;
    const double alpha = std::max(0.0, wire / agc.front().bus_gbps - wire / agc.back().bus_gbps) / (gpus_ - 1);
    p_.intra_node.latency_ns = sig4(alpha);
    src()["intra_node.latency_ns"] =
        c_.origin() + ": fitted per ring step from the all-gather curve (the smallest message's time less its bytes " +
        "at the largest message's bandwidth, / (N-1)); the simulator uses it only without measured curves";
  }

  // ---- the profile --------------------------------------------------------------------------------
  void write_profile() {
    p_.description = std::to_string(gpus_) + " x " + dev_.name + ", " + cpu_name_ + " (" + std::to_string(cores_) +
                     " cores); measured by twinflow calibrate " + c_.date() + (o_.quick ? " --quick" : "");
    const std::string header = "Measured by `" + o_.command + "` on " + c_.date() +
                               " (UTC).\n"
                               "Every figure's source names its measurement, repetitions and spread ((max - min) / "
                               "median).\n"
                               "GB = 1e9 B, TFLOP = 1e12 FLOP. The GPU figures are device 0's.";
    const std::string text = core::format_hardware_profile(p_, header);
    core::write_output_file(o_.out, text, "--out");  // whole or not at all
    // Round trip: the file must read back to exactly what was measured.
    core::HardwareProfile back = core::load_hardware_profile(o_.out);
    back.file.clear();
    if (!(back == p_) || !back.warnings.empty())
      throw core::RuntimeFailure("the written profile " + o_.out.string() +
                                 " does not read back to the measured figures (a bug in format_hardware_profile)");
    std::cout << "\ntwinflow calibrate " << c_.date() << ": " << c_.steps_done() << " measurements\n";
    c_.table().print(std::cout);
    std::cout << "\nwrote " << o_.out.string() << " (profile '" << p_.name << "', read back and checked)\n";
    if (o_.out.parent_path().filename() == "hardware")
      std::cout << "to ship it with the built-in profiles, add '" << p_.name
                << "' to TF_BUILTIN_PROFILES in core/CMakeLists.txt (tests/unit/test_scenario.cpp checks that every "
                   "file there is compiled in)\n";
  }

  std::map<std::string, std::string>& src() { return p_.sources; }

  const Options& o_;
  const int visible_, gpus_;
  const cal::DeviceInfo dev_;
  int allowed_cpus_ = 0;
  const int cores_;
  const std::string cpu_name_;
  const int R_;
  const size_t hbm_bytes_, pcie_bytes_, cpu_n_, gpu_opt_n_, dma_chunk_;
  const std::vector<core::Scenario> scenarios_;  // --scenario
  const EngineCpuOp engine_op_;  // the engine's CPU op and its copy: the rank curve's and the copies' sizes
  const std::vector<GemmCase> gemms_;
  const size_t builtin_cases_;
  const std::vector<int> threads_;
  const std::vector<int> cpu_ranks_;             // k of measure_cpu_ranks
  const std::vector<HostFootprint> footprints_;  // where measure_cpu_footprints measures (--scenario)
  const std::vector<int64_t> sizes_;
  Calibration c_;
  const std::string gpu_label_;
  core::HardwareProfile p_;
  cal::Stat h2d_;                                 // pinned H2D alone (measure_pcie)
  std::vector<std::pair<int, cal::Stat>> rates_;  // CPU AdamW by threads (measure_cpu_optimizer)
  std::unique_ptr<metrics::GpuTelemetry> telemetry_;  // device 0's clocks (open_telemetry); null without NVML
};

int run_calibration(const Options& o) { return Calibrator(o).run(); }
#endif

// Every measured number of a profile, keyed by its path (lists by their entry: shape, size, threads).
std::vector<std::pair<std::string, double>> profile_figures(const core::HardwareProfile& p) {
  std::vector<std::pair<std::string, double>> f;
  const core::GpuProfile& g = p.gpu;
  f.insert(f.end(), {{"gpu.hbm_gbps", g.hbm_gbps},
                     {"gpu.hbm_copy_gbps", g.hbm_copy_gbps},
                     {"gpu.optimizer_gbps", g.optimizer_gbps},
                     {"gpu.gemm_sm_clock_mhz", g.gemm_sm_clock_mhz},
                     {"gpu.bf16_tflops", g.bf16_tflops},
                     {"gpu.fp16_tflops", g.fp16_tflops},
                     {"gpu.fp32_tflops", g.fp32_tflops},
                     {"gpu.kernel_launch_ns", g.kernel_launch_ns},
                     {"gpu.event_record_ns", g.event_record_ns},
                     {"gpu.event_sync_ns", g.event_sync_ns},
                     {"gpu.compute_slowdown_during_collectives", g.compute_slowdown_during_collectives},
                     {"gpu.compute_slowdown_during_dma", g.compute_slowdown_during_dma},
                     {"gpu.context_bytes", double(g.context_bytes)},
                     {"gpu.nccl_comm_bytes", double(g.nccl_comm_bytes)},
                     {"gpu.alloc_granularity_bytes", double(g.alloc_granularity_bytes)},
                     {"gpu.pinned_host_map_bytes_per_gb", g.pinned_host_map_bytes_per_gb}});
  for (const core::GemmPoint& e : g.bf16_gemm_tflops_by_shape)
    f.emplace_back("gpu.bf16_gemm " + std::string(core::gemm_pass_name(e.pass)) + " " + std::to_string(e.m) + "x" +
                       std::to_string(e.n) + "x" + std::to_string(e.k),
                   e.tflops);
  for (const core::AttentionPoint& a : g.attention_tflops_by_shape)
    f.emplace_back("gpu.attention " + std::string(a.backward ? "backward" : "forward") + " d" +
                       std::to_string(a.head_dim) + " s" + std::to_string(a.seq),
                   a.tflops);
  for (const core::KernelRate& r : g.decoder_kernel_gbps)
    f.emplace_back("gpu.decoder_kernel " + std::string(core::kernel_class_name(r.kind)), r.gbps);
  const core::PcieProfile& pc = p.pcie;
  f.insert(f.end(), {{"pcie.h2d_gbps", pc.h2d_gbps},
                     {"pcie.d2h_gbps", pc.d2h_gbps},
                     {"pcie.bidir_total_gbps", pc.bidir_total_gbps},
                     {"pcie.pageable_h2d_gbps", pc.pageable_h2d_gbps},
                     {"pcie.copy_latency_ns", pc.copy_latency_ns}});
  for (const core::BusPoint& b : p.intra_node.all_gather_bus_gbps_by_message_bytes)
    f.emplace_back("intra_node.all_gather " + std::to_string(b.message_bytes) + " B", b.bus_gbps);
  for (const core::BusPoint& b : p.intra_node.reduce_scatter_bus_gbps_by_message_bytes)
    f.emplace_back("intra_node.reduce_scatter " + std::to_string(b.message_bytes) + " B", b.bus_gbps);
  const core::CpuProfile& c = p.cpu;
  for (const auto& [t, r] : c.optimizer_gparam_s_by_threads)
    f.emplace_back("cpu.optimizer_gparam_s " + std::to_string(t) + " threads", r);
  for (const auto& [k, r] : c.optimizer_node_gparam_s_by_ranks)
    f.emplace_back("cpu.optimizer_node_gparam_s " + std::to_string(k) + " ranks", r);
  for (const core::FootprintPoint& fp : c.optimizer_rate_factor_by_node_bytes)
    f.emplace_back("cpu.optimizer_rate_factor " + core::format_gb(fp.node_bytes), fp.factor);
  f.insert(f.end(), {{"cpu.mem_gbps", c.mem_gbps},
                     {"cpu.dma_slowdown_factor", c.dma_slowdown_factor},
                     {"cpu.dma_slowdown_factor_d2h", c.dma_slowdown_factor_d2h},
                     {"cpu.dma_slowdown_factor_h2d", c.dma_slowdown_factor_h2d},
                     {"cpu.optimizer_out_of_place_factor", c.optimizer_out_of_place_factor}});
  return f;
}

// `--compare A B`: each figure of both, the difference, and the largest per group.
int compare_profiles(const std::string& a_file, const std::string& b_file, double tolerance_pct) {
  const core::HardwareProfile a = core::find_hardware_profile(a_file), b = core::find_hardware_profile(b_file);
  const auto fa = profile_figures(a), fb = profile_figures(b);
  Table t({"figure", a.name, b.name, "diff %"});
  std::map<std::string, double> worst;  // group -> largest |diff| %
  int over = 0;
  for (const auto& [key, va] : fa) {
    const auto it = std::find_if(fb.begin(), fb.end(), [&](const auto& e) { return e.first == key; });
    if (it == fb.end() || (va == 0 && it->second == 0)) continue;
    const double d = va != 0 ? (it->second - va) / va * 100.0 : 100.0;
    const std::string group = key.substr(0, key.find_first_of(". "));
    worst[group] = std::max(worst[group], std::abs(d));
    if (std::abs(d) > tolerance_pct) ++over;
    t.add({key, fmt(va, va < 10 ? 3 : 1), fmt(it->second, it->second < 10 ? 3 : 1), fmt(d, 1)});
  }
  t.print(std::cout);
  std::cout << "largest difference:";
  for (const auto& [g, w] : worst) std::cout << " " << g << " " << fmt(w, 1) << "%";
  std::cout << "\n" << over << " figure(s) differ by more than " << fmt(tolerance_pct, 1) << "%\n";
  return over == 0 ? kExitOk : kExitCheckFailed;
}

}  // namespace

int cmd_calibrate(const std::vector<std::string>& args) {
  po::options_description desc(
      "twinflow calibrate --out scenarios/hardware/NAME.yaml [--quick] [--gpus N]\n"
      "measures this GPU machine and writes a hardware profile; options");
  auto add = desc.add_options();
  add("help,h", "show this help");
  add("out", po::value<std::string>(), "the profile to write (YAML); its name defaults to the file's stem");
  add("name", po::value<std::string>(), "the profile's name (default: the stem of --out)");
  add("gpus", po::value<int>()->default_value(0), "GPUs to use, devices 0..N-1 (0: every visible GPU)");
  add("quick", po::bool_switch(), "CI-scale sizes and 5 repetitions (about 10 s): a smoke test, not a profile");
  add("reps", po::value<int>(), "repetitions per figure (default 20; 5 with --quick), at least 3");
  add("pin", po::value<bool>()->default_value(true),
      "pin the CPU optimizer's threads to CPUs, as twinflow run's engine does (true|false)");
  add("force", po::bool_switch(), "overwrite --out if it exists");
  add("compare", po::value<std::vector<std::string>>()->multitoken(),
      "A B: compare two profiles figure by figure (no GPU needed); exit 1 if one differs by more than --tolerance");
  add("tolerance", po::value<double>()->default_value(5.0), "with --compare: the allowed difference, %");
  add("gemm-data", po::value<std::string>()->default_value("relu"),
      "operands of the bf16 GEMM table: relu (as a ReLU MLP's: half the activations 0) or random");
  add("process-memory-probe", po::bool_switch(),
      "internal: report this fresh process's GPU memory after each set-up stage (calibrate runs it)");
  add("scenario", po::value<std::vector<std::string>>(),
      "also measure every GEMM of this scenario's model at its micro-batch, in the layout of each pass "
      "(repeatable)");
  add("footprints", po::bool_switch(),
      "with --scenario: also the node's CPU rate at the host memory each scenario pins at ratios 0.5 and 1 "
      "(--quick: 1), relative to small segments (cpu.optimizer_rate_factor_by_node_bytes; minutes and up to the "
      "host's free memory; on the 2 x H200 microVM it scattered 0.91-1.14 between calls: docs/ARCHITECTURE.md)");
  const std::optional<po::variables_map> parsed = parse_command(
      args, desc, nullptr,
      "\nMeasures: cuBLAS bf16 GEMMs of the workloads' shapes (and one fp16, one fp32), HBM (a kernel and\n"
      "cudaMemcpy), PCIe (pinned H2D, D2H, both at once, pageable H2D, the fixed cost per copy), kernel\n"
      "launch and event overheads, the CPU AdamW rate against threads, the node's rate with 1, 2, 4 (and\n"
      "GPUs) rank processes at once on their shares of the cores (on the engine's op size: --scenario's\n"
      "layers, else 2^24 elements an op), with --footprints that node rate at the host memory each\n"
      "--scenario pins at ratios 0.5 and 1 (--quick: 1) relative to small segments, the CPU pass's\n"
      "slowdown while DMA runs and the copies' while the CPU pass runs,\n"
      "and with >= 2 GPUs NCCL all-gather and the engine's reduce-scatter (its exchange's bus bandwidth)\n"
      "against message size.\n"
      "Progress goes to stderr, one line per measurement; the table to stdout. Every figure is the\n"
      "median of its repetitions; its source in the profile gives the spread, the command and the date.\n"
      "Exit codes: 0 written, 2 bad arguments, 3 no CUDA device or a measurement failed.\n");
  if (!parsed) return kExitOk;
  const po::variables_map& vm = *parsed;
  if (vm.count("compare")) {
    const auto files = vm["compare"].as<std::vector<std::string>>();
    if (files.size() != 2) throw core::InputError("--compare takes two profiles: --compare A.yaml B.yaml");
    const double tol = vm["tolerance"].as<double>();
    if (!(tol >= 0)) throw core::InputError("--tolerance must be >= 0");
    return compare_profiles(files[0], files[1], tol);
  }
#if defined(TWINFLOW_HAVE_CUDA)
  if (vm["process-memory-probe"].as<bool>()) return print_process_memory(std::max(1, vm["gpus"].as<int>()));
#endif
  Options o;
  if (!vm.count("out"))
    throw core::InputError("--out is required: the profile to write, e.g. --out scenarios/hardware/my-box.yaml");
  o.out = vm["out"].as<std::string>();
  if (o.out.empty() || o.out.filename().empty()) throw core::InputError("--out: a file name is required");
  o.name = vm.count("name") ? vm["name"].as<std::string>() : o.out.stem().string();
  if (o.name.empty()) throw core::InputError("--name: the profile needs a non-empty name");
  o.gpus = vm["gpus"].as<int>();
  if (o.gpus < 0) throw core::InputError("--gpus must be >= 0 (0: every visible GPU), got " + std::to_string(o.gpus));
  o.quick = vm["quick"].as<bool>();
  o.pin = vm["pin"].as<bool>();
  {
    const std::string gd = vm["gemm-data"].as<std::string>();
    if (gd != "relu" && gd != "random") throw core::InputError("--gemm-data '" + gd + "': allowed relu, random");
    o.gemm_relu = gd == "relu";
  }
  if (vm.count("scenario")) o.scenarios = vm["scenario"].as<std::vector<std::string>>();
  o.footprints = vm["footprints"].as<bool>();
  if (o.footprints && o.scenarios.empty())
    throw core::InputError("--footprints needs --scenario: the scenarios whose host memory to hold");
  for (const std::string& f : o.scenarios) (void)core::load_scenario(f);  // bad input fails before any measuring
  o.reps = vm.count("reps") ? vm["reps"].as<int>() : (o.quick ? 5 : 20);
  if (o.reps < 3 || o.reps > 1000)
    throw core::InputError("--reps must be in [3, 1000] (a spread needs a few), got " + std::to_string(o.reps));
  std::error_code ec;
  if (fs::exists(o.out, ec) && !vm["force"].as<bool>())
    throw core::InputError("--out " + o.out.string() + " exists; pass --force to overwrite it");
  const fs::path dir = o.out.parent_path().empty() ? fs::path(".") : o.out.parent_path();
  if (!fs::is_directory(dir, ec)) throw core::InputError("--out: directory " + dir.string() + " does not exist");
  o.command = "twinflow calibrate";
  for (const std::string& a : args) o.command += " " + a;

#if defined(TWINFLOW_HAVE_CUDA)
  std::string why;
  if (!backend::cuda::cuda_available(&why)) {
    std::cerr << "twinflow calibrate: no CUDA device: calibrate measures a GPU machine; " << why
              << ". Run it on the GPU machine (`twinflow simulate` needs no GPU).\n";
    return kExitRuntime;
  }
  return run_calibration(o);
#else
  std::cerr << "twinflow calibrate: no CUDA device: calibrate measures a GPU machine; this build has no CUDA backend "
               "(configure with -DTWINFLOW_CUDA=ON where the CUDA toolkit is installed).\n";
  return kExitRuntime;
#endif
}

}  // namespace tf::app
