// Several ranks' CPU optimizer passes at once: the worker processes, their line protocol, the layouts.
//
// Protocol (one line each way per command, text): the parent sends
//   init RANK RANKS THREADS PIN HUGE  -> ready THREADS CPULIST
//   ranges N (LAYER BEGIN END) x N    (no answer)
//   order N LAYER x N                 (no answer)
//   setup KIND GRAD COPY TUNING       -> ok HUGE_FRACTION   (TUNING: cpu::apply_tuning_spec's spec)
//   resident BYTES                    -> ok   (after setup: BYTES more host memory, written once, never read)
//   register                          -> ok   (page-lock every region not yet locked: HostPinning)
//   pass [oop] | bound                -> t T0_NS T1_NS [OP_NS ...]   (steady clock, comparable across processes;
//                                        oop: out of place into the other state slot, CpuUpdate)
//   digest                            -> digest HEX (cpu_ranks.h)
//   quit
// and a worker answers `error WHAT` to a command it cannot run.
#include "apps/twinflow/cpu_ranks.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "backends/cpu/host_region.h"
#include "backends/cpu/host_topology.h"
#include "core/error.h"
#include "core/optim/dtype.h"
#include "core/rank_plan.h"

extern char** environ;

namespace tf::app {

namespace cpu = backend::cpu;

// ---- layouts --------------------------------------------------------------------------------------

std::vector<RankLayout> flat_layouts(int64_t total_elems, int ranks, int layers) {
  if (ranks < 1 || layers < 1) throw core::InputError("flat layouts: ranks and layers must be >= 1");
  const auto tile = int64_t(core::kStatsTile);
  const int64_t tiles = total_elems / tile / ranks;
  if (tiles < layers)
    throw core::InputError(std::to_string(total_elems) + " elements over " + std::to_string(ranks) + " ranks of " +
                           std::to_string(layers) + " layers: fewer than one 2048-element tile per layer");
  std::vector<RankLayout> out(static_cast<size_t>(ranks));
  for (RankLayout& r : out) {
    for (int l = 0; l < layers; ++l)
      r.ranges.push_back({size_t(l), tiles * l / layers * tile, tiles * (l + 1) / layers * tile});
    for (int l = layers - 1; l >= 0; --l) r.order.push_back(size_t(l));
  }
  return out;
}

std::vector<RankLayout> scenario_layouts(const core::RunSettings& rs, double ratio) {
  const core::Partition part = core::make_partition(rs.model, rs.partition);
  std::vector<RankLayout> out;
  for (int r = 0; r < rs.world; ++r) {
    const core::RankPlan rp = core::plan_rank(rs.model, part, r, ratio, rs.memory_options());
    RankLayout l;
    l.ranges = cpu::segment_ranges(rp.split);
    const core::QueueOrder order = core::plan_queue_order(rp.step);
    for (uint32_t id : order[size_t(core::Queue::kCpu)])
      if (rp.step.ops[id].kind == core::OpKind::kCpuOptimizer) l.order.push_back(size_t(rp.step.ops[id].layer));
    out.push_back(std::move(l));
  }
  return out;
}

EngineCpuOp engine_cpu_op(const std::vector<core::Scenario>& scenarios) {
  if (scenarios.empty())
    return {kDefaultCpuOpElems, kDefaultCpuOpElems * int64_t(core::dtype_bytes(core::DType::kBF16)),
            "the default op of 2^24 elements (no --scenario)"};
  std::vector<int64_t> pieces;
  int64_t param_bytes = 0;
  std::string names;
  for (const core::Scenario& sc : scenarios) {
    core::SettingsOverrides one;
    one.world = 1;
    one.world_from = "calibrate's engine op (world 1)";
    const core::RunSettings rs = core::resolve_settings(sc, one);
    for (const RankLayout& l : scenario_layouts(rs, 1.0))
      for (const cpu::SegmentRange& r : l.ranges) pieces.push_back(r.end - r.begin);
    param_bytes = std::max(param_bytes, int64_t(core::dtype_bytes(rs.step.param_dtype)));
    names += (names.empty() ? "" : ", ") + sc.name;
  }
  std::sort(pieces.begin(), pieces.end());
  const int64_t elems = pieces[pieces.size() / 2];
  return {
      elems, elems * param_bytes,
      "the median CPU layer piece of " + names + " at world 1, ratio 1 (" + std::to_string(pieces.size()) + " pieces)"};
}

std::string host_rate_disagreement(double sweep_gparam_s, double rank_curve_one_gparam_s, double tolerance) {
  const double hi = std::max(sweep_gparam_s, rank_curve_one_gparam_s);
  if (!(sweep_gparam_s > 0) || !(rank_curve_one_gparam_s > 0) ||
      std::abs(sweep_gparam_s - rank_curve_one_gparam_s) <= tolerance * hi)
    return "";
  char b[256];
  std::snprintf(b, sizeof b,
                "one process on all the cores read %.3f Gparam/s in the thread sweep and %.3f in the rank curve "
                "(%+.1f%%): the host's CPU rate moved by more than %.0f%% within seconds",
                sweep_gparam_s, rank_curve_one_gparam_s,
                (rank_curve_one_gparam_s - sweep_gparam_s) / sweep_gparam_s * 100, tolerance * 100);
  return b;
}

RankCurveOps rank_curve_ops(int64_t engine_op_elems, int max_ranks, bool quick) {
  const int64_t budget = int64_t(1) << (quick ? 27 : 28);  // elements over all ranks, at most
  const int64_t op = std::clamp(engine_op_elems, int64_t(core::kStatsTile) * max_ranks, budget);
  return {op, int(std::clamp<int64_t>(budget / op, 1, 32))};
}

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// ---- the worker -----------------------------------------------------------------------------------

uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

class Worker {
 public:
  explicit Worker(const HostPinning& pinning) : pinning_(pinning) {}
  ~Worker() { unregister_all(); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // One command line; false after quit.
  bool handle(const std::string& line, std::ostream& out) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "quit") return false;
    try {
      if (cmd == "init") return init(in, out), true;
      if (cmd == "ranges") return read_ranges(in), true;
      if (cmd == "order") return read_order(in), true;
      if (cmd == "setup") return setup(in, out), true;
      if (cmd == "resident") return resident(in, out), true;
      if (cmd == "register") return register_regions(out), true;
      if (cmd == "pass") return pass(in, out), true;
      if (cmd == "bound") return bound(out), true;
      if (cmd == "digest") return digest(out), true;
      throw core::InputError("unknown command '" + cmd + "'");
    } catch (const std::exception& e) {
      out << "error " << e.what() << std::endl;
    }
    return true;
  }

 private:
  void init(std::istream& in, std::ostream& out) {
    int pin = 1, huge = 1;
    in >> rank_ >> ranks_ >> threads_ >> pin >> huge;
    if (!in || ranks_ < 1 || rank_ < 0 || rank_ >= ranks_) throw core::InputError("init: bad rank or ranks");
    pin_ = pin != 0;
    huge_ = huge != 0;
    share_ = cpu::rank_cpu_share(cpu::host_topology(), rank_, ranks_);
    cpu::confine_calling_thread(share_.cpus);  // this process stays off the other ranks' cores
    if (threads_ == 0) threads_ = size_t(share_.cores);
    out << "ready " << threads_ << " " << cpu::cpu_list_text(share_.cpus) << std::endl;
  }

  void read_ranges(std::istream& in) {
    size_t n = 0;
    in >> n;
    ranges_.assign(n, {});
    for (cpu::SegmentRange& r : ranges_) in >> r.layer >> r.begin >> r.end;
    if (!in) throw core::InputError("ranges: malformed");
    const int64_t elems = ranges_.empty() ? 0 : ranges_.back().end;
    unregister_all();
    master_ = cpu::HostRegion(size_t(elems) * 4, huge_);  // (elems) fp32 each, untouched until placed
    s1_ = cpu::HostRegion(size_t(elems) * 4, huge_);
    s2_ = cpu::HostRegion(size_t(elems) * 4, huge_);
    grad_ = cpu::HostRegion(size_t(elems) * 4, huge_);  // (elems) up to fp32
    copy_ = cpu::HostRegion(size_t(elems) * 2, huge_);  // (elems) bf16 / fp16
    for (cpu::HostRegion* r : {&master_spare_, &s1_spare_, &s2_spare_}) *r = cpu::HostRegion();
    placed_ = false;
    slot_ = 0;
  }

  void read_order(std::istream& in) {
    size_t n = 0;
    in >> n;
    order_.assign(n, 0);
    for (size_t& l : order_) in >> l;
    if (!in) throw core::InputError("order: malformed");
  }

  cpu::CpuOptions options() const {
    cpu::CpuOptions co;
    co.threads = threads_;
    co.pin_threads = pin_;
    co.cpus = share_.worker_cpus;
    cpu::apply_tuning_spec(co, setup_.tuning, "setup tuning");
    co.huge_pages = huge_;
    return co;
  }

  cpu::SegmentBuffers buffers(core::OptimizerKind k, core::DType grad, core::DType copy) const {
    return {master_.as<float>(),
            s1_.as<float>(),
            core::state_count(k) == 2 ? s2_.as<float>() : nullptr,
            grad_.data(),
            copy == core::DType::kNone ? nullptr : copy_.data(),
            grad,
            copy,
            {},
            {}};
  }

  void setup(std::istream& in, std::ostream& out) {
    std::string kind, grad, copy;
    in >> kind >> grad >> copy >> setup_.tuning;
    if (!in) throw core::InputError("setup: malformed");
    setup_.kind = core::parse_optimizer(kind);
    setup_.grad = core::parse_dtype(grad, "grad");
    setup_.copy = core::parse_dtype(copy, "copy");
    seg_.reset();
    if (!placed_) {  // every buffer, whole, by the threads that update each layer (AdamW streams them all)
      cpu::CpuSegment all(options(), core::OptimizerKind::kAdamW,
                          buffers(core::OptimizerKind::kAdamW, core::DType::kF32, core::DType::kBF16), ranges_);
      all.first_touch();
      placed_ = true;
    }
    seg_ = std::make_unique<cpu::CpuSegment>(options(), setup_.kind, buffers(setup_.kind, setup_.grad, setup_.copy),
                                             ranges_);
    fill(setup_.grad);
    step_ = 0;
    run_optimizer();  // warm-up
    out << "ok " << huge_page_fraction() << std::endl;
  }

  // AnonHugePages / Anonymous of this process (the segment is nearly all of it); -1 when unknown.
  static double huge_page_fraction() {
    std::ifstream f("/proc/self/smaps_rollup");  // a header line, then "Key:   value kB" lines
    double anon_kb = 0, huge_kb = 0;
    for (std::string line; std::getline(f, line);) {
      std::istringstream in(line);
      std::string key;
      double kb = 0;
      if (!(in >> key >> kb)) continue;
      if (key == "Anonymous:") anon_kb = kb;
      if (key == "AnonHugePages:") huge_kb = kb;
    }
    return anon_kb > 0 ? huge_kb / anon_kb : -1.0;
  }

  // Finite values everywhere: master and gradient small, the states at the optimizer's start.
  void fill(core::DType grad) {
    seg_->fill_measurement_data();
    filled_ = grad;
    slot_ = 0;
  }

  // The layer's master and states in state slot `slot` (0: the segment's own buffers; 1: the spare slot).
  cpu::LayerState state_in_slot(size_t layer, int slot) const {
    const cpu::LayerState own = seg_->layer_state(layer);
    if (slot == 0 || !own.master) return own;
    const ptrdiff_t o = own.master - master_.as<float>();
    return {master_spare_.as<float>() + o, s1_spare_.as<float>() + o, own.state2 ? s2_spare_.as<float>() + o : nullptr};
  }

  // The spare state slot of every layer (an out-of-place pass's destination, as the engine's speculated
  // layers have one), placed by first touch by the threads that update each layer (CpuSegment::first_touch),
  // and page-locked where the segment was.
  void place_spare() {
    if (master_spare_.data()) return;
    const size_t bytes = size_t(ranges_.empty() ? 0 : ranges_.back().end) * 4;
    for (cpu::HostRegion* r : {&master_spare_, &s1_spare_, &s2_spare_}) *r = cpu::HostRegion(bytes, huge_);
    for (const cpu::SegmentRange& r : ranges_) {
      const ptrdiff_t o = r.begin;
      seg_->first_touch(r.layer, {master_spare_.as<float>() + o, s1_spare_.as<float>() + o, s2_spare_.as<float>() + o});
    }
    if (!registered_.empty()) lock_regions();  // page-locked as the rest was (`register`), as the engine's
  }

  // One pass over the layers in order: in place on the current slot, or out of place from it into the other
  // (the engine's speculative update), which is current after it. Each op's nanoseconds.
  std::vector<int64_t> run_optimizer(bool out_of_place = false) {
    const core::StepScalars s =
        core::make_step_scalars(setup_.kind, core::default_hyper_params(setup_.kind), ++step_, 1.0);
    std::vector<int64_t> ops;
    for (size_t layer : order_) {
      const int64_t a = now_ns();
      const cpu::LayerState from = state_in_slot(layer, slot_);
      if (out_of_place)
        seg_->update_layer(layer, s, state_in_slot(layer, 1 - slot_), &from, -1);
      else
        seg_->update_layer(layer, s, from, nullptr, -1);
      ops.push_back(now_ns() - a);
    }
    if (out_of_place) slot_ = 1 - slot_;
    return ops;
  }

  void resident(std::istream& in, std::ostream& out) {
    int64_t bytes = -1;
    in >> bytes;
    if (!in || bytes < 0) throw core::InputError("resident: malformed");
    if (!seg_) throw core::InputError("resident before setup");
    unregister(resident_.data());
    resident_ = cpu::HostRegion();
    if (bytes > 0) {
      resident_ = cpu::HostRegion(size_t(bytes), huge_);
      cpu::ThreadPool& pool = seg_->backend().pool();
      pool.run(pool.size(), [&](size_t w) {  // placed by first touch, as the engine's pinned buffers are
        size_t b = 0, e = 0;
        cpu::ThreadPool::split(size_t(bytes), pool.size(), w, b, e);
        std::memset(static_cast<char*>(resident_.data()) + b, 1, e - b);
      });
    }
    out << "ok" << std::endl;
  }

  // Page-locks each region not yet locked, in place (the engine's pinned host buffers).
  void register_regions(std::ostream& out) {
    if (!seg_) throw core::InputError("register before setup");
    if (!pinning_.pin) throw core::InputError("register: this build has no CUDA to page-lock host memory with");
    lock_regions();
    out << "ok" << std::endl;
  }
  void lock_regions() {
    for (const cpu::HostRegion* r :
         {&master_, &s1_, &s2_, &grad_, &copy_, &resident_, &master_spare_, &s1_spare_, &s2_spare_}) {
      if (!r->data() || r->bytes() == 0 ||
          std::find(registered_.begin(), registered_.end(), r->data()) != registered_.end())
        continue;
      std::string why;
      if (!pinning_.pin(r->data(), r->bytes(), &why)) throw core::RuntimeFailure("register: " + why);
      registered_.push_back(r->data());
    }
  }
  void unregister(void* p) {
    const auto it = std::find(registered_.begin(), registered_.end(), p);
    if (it == registered_.end()) return;
    pinning_.unpin(p);
    registered_.erase(it);
  }
  void unregister_all() {
    while (!registered_.empty()) unregister(registered_.back());
  }

  void pass(std::istream& in, std::ostream& out) {
    std::string mode;
    in >> mode;
    if (!mode.empty() && mode != "oop") throw core::InputError("pass: unknown mode '" + mode + "' (none or oop)");
    if (!seg_) throw core::InputError("pass before setup");
    if (filled_ != setup_.grad) fill(setup_.grad);
    const bool out_of_place = mode == "oop";
    if (out_of_place) place_spare();
    const int64_t t0 = now_ns();
    const std::vector<int64_t> ops = run_optimizer(out_of_place);
    const int64_t t1 = now_ns();
    out << "t " << t0 << " " << t1;
    for (int64_t x : ops) out << " " << x;
    out << std::endl;
  }

  // The optimizer's streams without its arithmetic, op by op in the pass's order.
  void bound(std::ostream& out) {
    if (!seg_) throw core::InputError("bound before setup");
    const auto run = [&] {
      for (size_t layer : order_) {
        const auto r = std::find_if(ranges_.begin(), ranges_.end(), [&](const auto& x) { return x.layer == layer; });
        if (r == ranges_.end() || r->end <= r->begin) continue;
        const backend::OptimChunk c = seg_->chunk(r->begin, r->end);
        seg_->backend().stream_pass(std::span<const backend::OptimChunk>(&c, 1));
      }
    };
    run();  // warm-up
    const int64_t t0 = now_ns();
    run();
    const int64_t t1 = now_ns();
    filled_ = core::DType::kNone;  // p += g ...: the next optimizer pass refills
    out << "t " << t0 << " " << t1 << std::endl;
  }

  void digest(std::ostream& out) const {
    if (!seg_) throw core::InputError("digest before setup");
    const auto n = size_t(ranges_.empty() ? 0 : ranges_.back().end);
    uint64_t h = 0xCBF29CE484222325ull;  // the current slot's master and states
    h = fnv1a(h, (slot_ ? master_spare_ : master_).data(), n * 4);
    h = fnv1a(h, (slot_ ? s1_spare_ : s1_).data(), n * 4);
    if (core::state_count(setup_.kind) == 2) h = fnv1a(h, (slot_ ? s2_spare_ : s2_).data(), n * 4);
    if (setup_.copy != core::DType::kNone) h = fnv1a(h, copy_.data(), n * core::dtype_bytes(setup_.copy));
    out << "digest " << std::hex << h << std::dec << std::endl;
  }

  int rank_ = 0, ranks_ = 1;
  size_t threads_ = 0;
  bool pin_ = true;
  bool huge_ = true;
  cpu::CpuShare share_;
  std::vector<cpu::SegmentRange> ranges_;
  std::vector<size_t> order_;
  cpu::HostRegion master_, s1_, s2_, grad_, copy_;
  cpu::HostRegion resident_;  // never read: the rest of the rank's host footprint (`resident`)
  cpu::HostRegion master_spare_, s1_spare_, s2_spare_;  // the spare state slot (`pass oop`), placed at its first use
  int slot_ = 0;                                        // the state slot that holds the current master and states
  const HostPinning& pinning_;
  std::vector<void*> registered_;  // regions page-locked by `register`
  bool placed_ = false;
  CpuRankSetup setup_;
  core::DType filled_ = core::DType::kNone;
  std::unique_ptr<cpu::CpuSegment> seg_;
  int64_t step_ = 0;
};

// ---- the parent's end of one worker ---------------------------------------------------------------

std::string self_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw core::RuntimeFailure("cannot find this executable (/proc/self/exe) to start CPU rank workers");
  return std::string(buf, size_t(n));
}

class WorkerProcess {
 public:
  WorkerProcess(const std::string& exe, int rank) : rank_(rank) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
      throw core::RuntimeFailure(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<std::string> args = {exe, "bench", "--cpu-rank-worker"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, exe.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
    if (rc != 0) {
      pid_ = -1;
      throw core::RuntimeFailure("cannot start CPU rank worker " + std::to_string(rank) + " (" + exe +
                                 "): " + std::strerror(rc));
    }
  }
  ~WorkerProcess() {
    if (to_) {
      (void)std::fputs("quit\n", to_);
      (void)std::fclose(to_);
    }
    if (from_) (void)std::fclose(from_);
    if (pid_ > 0) (void)waitpid(pid_, nullptr, 0);
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  void send(const std::string& line) {
    if (std::fputs((line + "\n").c_str(), to_) < 0 || std::fflush(to_) != 0) lost("write");
  }
  std::string receive() {
    char* buf = nullptr;
    size_t cap = 0;
    const ssize_t n = getline(&buf, &cap, from_);
    std::string line = n > 0 ? std::string(buf, size_t(n)) : std::string();
    std::free(buf);
    if (n <= 0) lost("read");
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (line.rfind("error ", 0) == 0)
      throw core::RuntimeFailure("CPU rank worker " + std::to_string(rank_) + ": " + line.substr(6));
    return line;
  }

 private:
  [[noreturn]] void lost(const char* what) {
    throw core::RuntimeFailure("CPU rank worker " + std::to_string(rank_) + " exited (" + what +
                               " failed; see its message above)");
  }
  int rank_;
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

}  // namespace

// ---- the group ------------------------------------------------------------------------------------

struct CpuRankGroup::Impl {
  std::vector<RankLayout> layouts;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  std::vector<std::string> cpus;
  std::vector<int> threads;
  std::vector<double> huge_fraction;

  // One command to every worker (in rank order, back to back), then every answer.
  std::vector<std::string> all(const std::string& cmd) {
    for (auto& w : workers) w->send(cmd);
    std::vector<std::string> answers;
    for (auto& w : workers) answers.push_back(w->receive());
    return answers;
  }

  PassTimes timed(const std::string& cmd, int reps) {
    PassTimes t;
    t.rank_s.assign(workers.size(), {});
    std::vector<std::vector<std::vector<double>>> ops(workers.size());  // [rank][rep][op]
    for (int rep = 0; rep < reps; ++rep) {
      int64_t first = INT64_MAX, last = INT64_MIN;
      const std::vector<std::string> answers = all(cmd);
      for (size_t r = 0; r < answers.size(); ++r) {
        std::istringstream in(answers[r]);
        std::string tag;
        int64_t t0 = 0, t1 = 0;
        in >> tag >> t0 >> t1;
        if (tag != "t" || !in)
          throw core::RuntimeFailure("CPU rank worker " + std::to_string(r) + ": bad answer '" + answers[r] + "'");
        first = std::min(first, t0);
        last = std::max(last, t1);
        t.rank_s[r].push_back(double(t1 - t0) * 1e-9);
        std::vector<double> o;
        for (int64_t x; in >> x;) o.push_back(double(x) * 1e-9);
        ops[r].push_back(std::move(o));
      }
      t.node_s.push_back(double(last - first) * 1e-9);
    }
    t.op_s.assign(workers.size(), {});
    for (size_t r = 0; r < ops.size(); ++r)
      for (size_t i = 0; !ops[r].empty() && i < ops[r][0].size(); ++i) {
        std::vector<double> v;
        for (const auto& rep : ops[r]) v.push_back(rep.at(i));
        t.op_s[r].push_back(median(v));
      }
    return t;
  }
};

CpuRankGroup::CpuRankGroup(std::vector<RankLayout> layouts, size_t threads, bool pin, bool identical_pinning,
                           bool huge_pages)
    : impl_(std::make_unique<Impl>()) {
  if (layouts.empty()) throw core::InputError("CPU ranks: at least one rank");
  (void)signal(SIGPIPE, SIG_IGN);  // a worker that dies is an error on the write, not a signal
  impl_->layouts = std::move(layouts);
  const std::string exe = self_executable();
  const int k = int(impl_->layouts.size());
  for (int r = 0; r < k; ++r) impl_->workers.push_back(std::make_unique<WorkerProcess>(exe, r));
  for (int r = 0; r < k; ++r) {
    WorkerProcess& w = *impl_->workers[size_t(r)];
    const RankLayout& l = impl_->layouts[size_t(r)];
    std::ostringstream init, ranges, order;
    if (identical_pinning)  // every rank "rank 0 of 1" with its part of the threads: the same first CPUs
      init << "init 0 1 " << (threads ? threads : size_t(std::max(1, cpu::host_topology().physical_cores() / k))) << " "
           << (pin ? 1 : 0);
    else
      init << "init " << r << " " << k << " " << threads << " " << (pin ? 1 : 0);
    init << " " << (huge_pages ? 1 : 0);
    w.send(init.str());
    ranges << "ranges " << l.ranges.size();
    for (const cpu::SegmentRange& x : l.ranges) ranges << " " << x.layer << " " << x.begin << " " << x.end;
    w.send(ranges.str());
    order << "order " << l.order.size();
    for (size_t x : l.order) order << " " << x;
    w.send(order.str());
  }
  for (auto& w : impl_->workers) {
    std::istringstream in(w->receive());
    std::string tag, cpus;
    int t = 0;
    in >> tag >> t >> cpus;
    impl_->threads.push_back(t);
    impl_->cpus.push_back(cpus);
  }
}

CpuRankGroup::~CpuRankGroup() = default;

int CpuRankGroup::ranks() const { return int(impl_->workers.size()); }
int64_t CpuRankGroup::elems() const {
  int64_t n = 0;
  for (const RankLayout& l : impl_->layouts) n += l.elems();
  return n;
}
const std::vector<std::string>& CpuRankGroup::rank_cpus() const { return impl_->cpus; }
const std::vector<int>& CpuRankGroup::rank_threads() const { return impl_->threads; }

void CpuRankGroup::setup(const CpuRankSetup& s) {
  const std::vector<std::string> answers =
      impl_->all("setup " + std::string(core::optimizer_name(s.kind)) + " " + std::string(core::dtype_name(s.grad)) +
                 " " + std::string(core::dtype_name(s.copy)) + " " + s.tuning);
  impl_->huge_fraction.clear();
  for (const std::string& a : answers) {
    std::istringstream in(a);
    std::string tag;
    double f = -1;
    in >> tag >> f;
    impl_->huge_fraction.push_back(in ? f : -1.0);
  }
}

const std::vector<double>& CpuRankGroup::huge_page_fraction() const { return impl_->huge_fraction; }

void CpuRankGroup::register_memory() { (void)impl_->all("register"); }

void CpuRankGroup::hold_resident(const std::vector<int64_t>& bytes_per_rank) {
  if (bytes_per_rank.size() != impl_->workers.size())
    throw core::InputError("CPU ranks: " + std::to_string(bytes_per_rank.size()) + " resident sizes for " +
                           std::to_string(impl_->workers.size()) + " ranks");
  for (size_t r = 0; r < bytes_per_rank.size(); ++r)
    impl_->workers[r]->send("resident " + std::to_string(bytes_per_rank[r]));
  for (auto& w : impl_->workers) (void)w->receive();
}

PassTimes CpuRankGroup::passes(int reps, CpuUpdate u) {
  return impl_->timed(u == CpuUpdate::kOutOfPlace ? "pass oop" : "pass", reps);
}
double CpuRankGroup::pass_gparam_s(CpuUpdate u) { return double(elems()) / passes(1, u).node_s.front() / 1e9; }
PassTimes CpuRankGroup::bound_passes(int reps) { return impl_->timed("bound", reps); }

NodeCpuRate measure_node_cpu_rate(int64_t engine_op_elems, int ranks, std::span<const int> spawn_cpus) {
  NodeCpuRate r;
  r.ranks = ranks;
  const RankCurveOps c = rank_curve_ops(engine_op_elems, ranks, false);
  cpu::run_confined(spawn_cpus, [&] {  // the workers inherit the starting thread's CPUs
    CpuRankGroup g(flat_layouts(c.op * c.ops, ranks, c.ops), 0, true);
    g.setup(CpuRankSetup{});
    (void)g.passes(3);
    std::vector<double> rates;
    for (int i = 0; i < 10; ++i) rates.push_back(g.pass_gparam_s());
    r.gparam_s = median(rates);
    r.rank_cpus = g.rank_cpus();
  });
  return r;
}

int run_cpu_rank_worker(std::istream& in, std::ostream& out, const HostPinning& pinning) {
  Worker w(pinning);
  for (std::string line; std::getline(in, line);)
    if (!w.handle(line, out)) return 0;
  return 0;
}

}  // namespace tf::app
