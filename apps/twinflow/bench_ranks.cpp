// `twinflow bench --cpu-ranks`: node throughput of k ranks' CPU optimizers at once, against the
// read-modify-write bound measured by the same processes in the same run.
#include "apps/twinflow/bench_ranks.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>

#include "apps/twinflow/cpu_footprint.h"
#include "apps/twinflow/cpu_ranks.h"
#include "apps/twinflow/table.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/sim/sim_backend.h"
#include "core/error.h"
#include "core/hardware.h"
#include "core/settings.h"
#if defined(TWINFLOW_HAVE_CUDA)
#include "backends/cuda/calibrate.h"
#include "backends/cuda/cuda_backend.h"
#endif

namespace tf::app {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// H2D and D2H copies kept in flight on GPU 0 while a row is timed (calibrate's background load: its
// thread sleeps on events, so it takes no core). Without CUDA or a GPU, `--dma on` is an error.
class DmaLoad {
 public:
  explicit DmaLoad(bool wanted) {
    if (!wanted) return;
#if defined(TWINFLOW_HAVE_CUDA)
    std::string why;
    if (!backend::cuda::cuda_available(&why)) throw core::RuntimeFailure("--dma: no usable CUDA device (" + why + ")");
    dma_ = std::make_unique<backend::cuda::calibrate::BackgroundDma>(0, size_t(64) << 20);
#else
    throw core::RuntimeFailure("--dma: this build has no CUDA backend");
#endif
  }
  void start() {
#if defined(TWINFLOW_HAVE_CUDA)
    if (dma_) dma_->start();
#endif
  }
  double stop() {  // GB/s both directions moved together (0 without a load)
#if defined(TWINFLOW_HAVE_CUDA)
    if (dma_) return dma_->stop();
#endif
    return 0;
  }

 private:
#if defined(TWINFLOW_HAVE_CUDA)
  std::unique_ptr<backend::cuda::calibrate::BackgroundDma> dma_;
#endif
};

std::vector<RankLayout> layouts_for(const RanksBenchOptions& o, int k) {
  if (!o.scenario) return flat_layouts(o.n, k, o.layers);
  const core::Scenario sc = core::load_scenario(*o.scenario);
  core::SettingsOverrides ov;
  ov.world = k;
  return scenario_layouts(core::resolve_settings(sc, ov), o.ratio < 0 ? sc.cpu_ratio() : o.ratio);
}

// One measured row's identity: what ran, so that k = 1's row is the reference for the same at k > 1.
struct RowKey {
  CpuRankSetup s;
  bool dma = false;
  bool huge = true;
  CpuUpdate update = CpuUpdate::kInPlace;
  std::string key() const {
    return std::string(core::optimizer_name(s.kind)) + "/" + std::string(core::dtype_name(s.grad)) + "/" + s.tuning +
           "/" + (dma ? "dma" : "-") + "/" + (huge ? "huge" : "4k") +
           (update == CpuUpdate::kOutOfPlace ? "/out-of-place" : "");
  }
};

// One pass's times (PassTimes of passes(1)) added to `to`'s repetitions.
void append_pass(PassTimes& to, const PassTimes& one) {
  to.node_s.push_back(one.node_s.front());
  to.rank_s.resize(one.rank_s.size());
  for (size_t r = 0; r < one.rank_s.size(); ++r) to.rank_s[r].push_back(one.rank_s[r].front());
}

// `base` with `variant`'s knobs over it, as one spec ("default" stands for no knobs).
std::string over(const std::string& base, const std::string& variant) {
  if (variant == "default") return base;
  if (base == "default") return variant;
  return base + "," + variant;
}

class RanksBench {
 public:
  explicit RanksBench(const RanksBenchOptions& o)
      : o_(o),
        t_({"ranks", "kernel", "grad", "copy", "update", "threads/rank", "tuning", "huge pages %", "dma", "node ms",
            "Gparam/s", "GB/s", "% bound", "vs 1 process", "rank spread %", "bound GB/s", "bound nt GB/s", "sim ms",
            "sim error %"}) {
    if (o.profile) cpu_profile_ = core::find_hardware_profile(*o.profile).cpu;
    backend::cpu::CpuOptions check;
    backend::cpu::apply_tuning_spec(check, o.tuning, "--tuning");  // bad specs fail before any measuring
    for (const std::string& v : o.variants) {
      backend::cpu::CpuOptions each;
      backend::cpu::apply_tuning_spec(each, over(o.tuning, v), "--variants");
    }
  }

  int run() {
    for (int k : o_.ranks) measure_k(k);
    std::cout << "\n";
    t_.print(std::cout);
    std::cout << "\nnode = all ranks from the first start to the last end of each synchronised pass (median of "
              << o_.iters << "); bound: the optimizer's streams without its arithmetic (4 read, 3 read-modify-write, "
              << "the copy write-only; 28 B/element with bf16) by the same processes op by op, with plain and with "
              << "streaming copy stores (bound nt); % bound: GB/s over the larger of the two at the same k; vs 1 "
              << "process: Gparam/s over the same row at 1 rank\n";
    if (o_.out.csv) t_.write_csv(*o_.out.csv);
    if (o_.out.json) t_.write_json(*o_.out.json);
    return 0;
  }

 private:
  void measure_k(int k) {
    layouts_ = layouts_for(o_, k);
    for (size_t h = 0; h < o_.huge_pages.size(); ++h) {
      const bool huge = o_.huge_pages[h];
      std::cerr << "cpu ranks " << k << ": starting " << k << " worker(s), huge pages " << (huge ? "on" : "off") << "\n"
                << std::flush;
      CpuRankGroup g(layouts_, o_.threads, o_.pin, o_.identical_pinning, huge);
      for (int r = 0; r < k; ++r)
        std::cerr << "  rank " << r << ": " << g.rank_threads()[size_t(r)] << " threads on CPUs "
                  << g.rank_cpus()[size_t(r)] << "\n";
      measure_bounds(g);
      if (h == 0) {
        rows_every_optimizer(g, huge);
        if (o_.alternate)
          alternating_variants(g, huge);
        else
          variants(g);
        if (o_.per_layer) per_layer(g);
      } else {
        CpuRankSetup s;
        s.tuning = o_.tuning;
        setup(g, s);
        row(g, {s, false, huge});
      }
    }
  }

  // The group's segments for `s`, page-locked with --register.
  void setup(CpuRankGroup& g, const CpuRankSetup& s) const {
    g.setup(s);
    if (o_.register_memory) g.register_memory();
  }

  // The bound of this k by the same processes, with plain and with streamed copy stores.
  void measure_bounds(CpuRankGroup& g) {
    const auto bound = [&](const std::string& nt) {
      CpuRankSetup s;
      s.tuning = over(o_.tuning, nt);
      setup(g, s);
      const PassTimes b = g.bound_passes(o_.iters);
      const double bytes = double(core::bytes_per_element(s.kind, s.grad, s.copy).total());
      return bytes * double(g.elems()) / median(b.node_s) / 1e9;
    };
    bound_ = bound("nt=0");
    bound_nt_ = bound("nt=1");
    std::cerr << "  bound: " << fmt(bound_, 1) << " GB/s plain copy stores, " << fmt(bound_nt_, 1) << " streamed\n";
  }

  void rows_every_optimizer(CpuRankGroup& g, bool huge) {
    for (core::OptimizerKind kind : o_.kinds)
      for (core::DType grad : o_.grads) {
        CpuRankSetup s;
        s.kind = kind;
        s.grad = grad;
        s.copy = grad == core::DType::kF32 ? core::DType::kNone : grad;
        s.tuning = o_.tuning;
        setup(g, s);
        if (o_.dma != "on") row(g, {s, false, huge});
        if (o_.dma != "off") row(g, {s, true, huge});
      }
  }

  // AdamW with bf16 gradients under each variant (DMA off).
  void variants(CpuRankGroup& g) {
    for (const std::string& v : o_.variants) {
      CpuRankSetup s;
      s.tuning = over(o_.tuning, v);
      if (s.tuning == o_.tuning) continue;  // the main row
      setup(g, s);
      row(g, {s, false, o_.huge_pages.front()});
    }
  }

  // --alternate: AdamW bf16 under the main tuning (this group) and each variant (a group of processes of its
  // own, started and set up first), then one pass of each group in turn, --iters rounds, so that a drift of
  // the host moves every variant alike (variants measured one after another read the host's drift: on one
  // H200's host unroll=2 ran 4-6% faster than the default that way, bench/results/2026-11-29-h200x2-out-of-
  // place). Out of place with --out-of-place. Each variant's row says the median of the rounds' speed over
  // the main tuning's.
  void alternating_variants(CpuRankGroup& main, bool huge) {
    std::vector<CpuRankGroup*> groups = {&main};
    std::vector<std::unique_ptr<CpuRankGroup>> own;
    std::vector<CpuRankSetup> setups(1);
    setups[0].tuning = o_.tuning;
    setup(main, setups[0]);
    for (const std::string& v : o_.variants) {
      CpuRankSetup s;
      s.tuning = over(o_.tuning, v);
      if (s.tuning == o_.tuning) continue;
      own.push_back(std::make_unique<CpuRankGroup>(layouts_, o_.threads, o_.pin, o_.identical_pinning, huge));
      setup(*own.back(), s);
      groups.push_back(own.back().get());
      setups.push_back(s);
    }
    const CpuUpdate u = o_.out_of_place ? CpuUpdate::kOutOfPlace : CpuUpdate::kInPlace;
    for (CpuRankGroup* g : groups) (void)g->passes(2, u);  // warm-up (out of place: places the spare slots)
    std::vector<PassTimes> t(groups.size());
    std::vector<std::vector<double>> speed(groups.size());  // per round: the main's time over this group's
    for (int i = 0; i < o_.iters; ++i) {
      std::vector<double> round;
      for (size_t j = 0; j < groups.size(); ++j) {
        const PassTimes one = groups[j]->passes(1, u);
        round.push_back(one.node_s.front());
        append_pass(t[j], one);
      }
      for (size_t j = 0; j < groups.size(); ++j) speed[j].push_back(round[0] / round[j]);
    }
    const std::string update = u == CpuUpdate::kOutOfPlace ? "out of place" : "in place";
    for (size_t j = 0; j < groups.size(); ++j) {
      RowKey key{setups[j], false, huge, u};
      key.s.tuning += " (alternating)";
      add_row(*groups[j], key, t[j], 0,
              update + (j == 0 ? ", the main" : ", x" + fmt(median(speed[j]), 3) + " the main's speed"));
    }
  }

  static std::string huge_text(const std::vector<double>& f) {
    double lo = 1;
    for (double x : f) lo = std::min(lo, x);
    return lo < 0 ? "-" : fmt(lo * 100, 1);
  }

  // One row, or with --out-of-place two: the same passes in place and out of place alternating pass by
  // pass (a drift of the host moves both), the second row saying the median of the pairs' time ratios.
  void row(CpuRankGroup& g, const RowKey& key) {
    DmaLoad dma(key.dma);
    dma.start();
    if (!o_.out_of_place) {
      const PassTimes t = g.passes(o_.iters);
      add_row(g, key, t, dma.stop(), "in place");
      return;
    }
    PassTimes in, out;
    std::vector<double> ratios;
    for (int i = 0; i < o_.iters; ++i) {
      const PassTimes a = g.passes(1), b = g.passes(1, CpuUpdate::kOutOfPlace);
      ratios.push_back(b.node_s.front() / a.node_s.front());
      append_pass(in, a);
      append_pass(out, b);
    }
    const double dma_gbps = dma.stop();
    add_row(g, key, in, dma_gbps, "in place");
    RowKey oop = key;
    oop.update = CpuUpdate::kOutOfPlace;
    add_row(g, oop, out, dma_gbps, "out of place, x" + fmt(median(ratios), 3) + " time");
  }

  void add_row(const CpuRankGroup& g, const RowKey& key, const PassTimes& t, double dma_gbps,
               const std::string& update) {
    const double sec = median(t.node_s);
    const double gparam = double(g.elems()) / sec / 1e9;
    const auto bytes = core::bytes_per_element(key.s.kind, key.s.grad, key.s.copy).total();
    const double gbps = double(bytes) * double(g.elems()) / sec / 1e9;
    double lo = 1e300, hi = 0;
    for (const auto& r : t.rank_s) lo = std::min(lo, median(r)), hi = std::max(hi, median(r));
    const std::string id = key.key();
    if (g.ranks() == 1) one_[id] = gparam;
    const auto ref = one_.find(id);
    const std::optional<double> sim = predicted_s(g, key);
    t_.add({std::to_string(g.ranks()), std::string(core::optimizer_name(key.s.kind)),
            std::string(core::dtype_name(key.s.grad)), std::string(core::dtype_name(key.s.copy)), update,
            std::to_string(g.rank_threads().front()), key.huge ? key.s.tuning : over(key.s.tuning, "huge=0"),
            huge_text(g.huge_page_fraction()), key.dma ? fmt(dma_gbps, 1) + " GB/s" : "off", fmt(sec * 1e3, 2),
            gparam >= 1e-3 ? fmt(gparam, 3) : fmt_rate(gparam) /* a loaded host: not 0.000 */, fmt_rate(gbps),
            fmt(gbps / std::max(bound_, bound_nt_) * 100, 1),
            ref == one_.end() ? "-" : fmt(gparam / ref->second * 100, 1) + "%", fmt((hi - lo) / hi * 100, 1),
            fmt_rate(bound_), fmt_rate(bound_nt_), sim ? fmt(*sim * 1e3, 2) : "-",
            sim ? fmt((*sim - sec) / sec * 100, 1) : "-"});
    std::cerr << "  " << id << ": " << fmt(gparam, 3) << " Gparam/s\n" << std::flush;
  }

  // The simulator's node time for what the profile's curves measured (AdamW, bf16 gradient and copy,
  // the tuning of every row, no DMA): each rank's ops back to back on the shared host (sim::HostCpuPool).
  std::optional<double> predicted_s(const CpuRankGroup& g, const RowKey& key) const {
    const CpuRankSetup d;
    if (!cpu_profile_ || key.dma || key.update != CpuUpdate::kInPlace || key.s.kind != d.kind || key.s.grad != d.grad ||
        key.s.copy != d.copy || key.s.tuning != o_.tuning || key.huge != o_.huge_pages.front())
      return std::nullopt;
    std::vector<std::vector<int64_t>> ops;
    for (const RankLayout& l : layouts_) {
      ops.emplace_back();
      for (size_t layer : l.order)
        for (const auto& r : l.ranges)
          if (r.layer == layer) ops.back().push_back(r.end - r.begin);
    }
    return backend::sim::predict_host_cpu_seconds(*cpu_profile_, g.rank_threads().front(), ops);
  }

  // Each op of rank 0 (AdamW, bf16): its elements and rate, to see what small ops cost.
  void per_layer(CpuRankGroup& g) {
    CpuRankSetup s;
    s.tuning = o_.tuning;
    setup(g, s);
    const PassTimes t = g.passes(o_.iters);
    const RankLayout& l = layouts_.front();
    Table pl({"op", "layer", "elements", "ms", "Gparam/s"});
    for (size_t i = 0; i < l.order.size() && i < t.op_s[0].size(); ++i) {
      const auto it =
          std::find_if(l.ranges.begin(), l.ranges.end(), [&](const auto& r) { return r.layer == l.order[i]; });
      const int64_t n = it == l.ranges.end() ? 0 : it->end - it->begin;
      pl.add({std::to_string(i), std::to_string(l.order[i]), std::to_string(n), fmt(t.op_s[0][i] * 1e3, 3),
              fmt(double(n) / t.op_s[0][i] / 1e9, 3)});
    }
    std::cout << "\nrank 0's CPU ops at " << g.ranks() << " rank(s), AdamW bf16 (median of " << o_.iters << "):\n";
    pl.print(std::cout);
  }

  const RanksBenchOptions& o_;
  Table t_;
  double bound_ = 0, bound_nt_ = 0;    // this k's, GB/s
  std::map<std::string, double> one_;  // k = 1's Gparam/s by row key
  std::vector<RankLayout> layouts_;    // the k being measured
  std::optional<core::CpuProfile> cpu_profile_;
};

// `bench --footprints --scenario S`: the scenario's footprints (scenario_footprints) measured as calibrate
// measures them, against small segments of --n elements over the same ranks; with --profile its curve's
// factor at each footprint beside the measured one.
int bench_footprints(const RanksBenchOptions& o) {
  const core::Scenario sc = core::load_scenario(*o.scenario);
  std::optional<core::CpuProfile> cpu;
  if (o.profile) cpu = core::find_hardware_profile(*o.profile).cpu;
  Table t({"footprint", "ranks", "planned GB", "held GB", "small GB", "small Gparam/s", "Gparam/s", "factor",
           "spread %", "profile factor", "error %"});
  for (const HostFootprint& fp : scenario_footprints({sc}, false)) {
    const int k = int(fp.layouts.size());
    std::string why;
    const auto m = measure_footprint(
        fp, flat_layouts(o.n, k, o.layers), o.iters, o.pin, o.register_memory,
        [](const std::string& s) { std::cerr << s << "\n"
                                             << std::flush; }, &why);
    if (!m) {
      std::cerr << "skipped " << why << "\n";
      continue;
    }
    const double f = median(m->factors);
    const auto [lo, hi] = std::minmax_element(m->factors.begin(), m->factors.end());
    std::string profile_factor = "-", error = "-";
    if (cpu) {
      const double pf = cpu->optimizer_footprint_factor(m->held.node_bytes);
      profile_factor = fmt(pf, 3);
      error = fmt((pf - f) / f * 100, 1);
    }
    t.add({fp.what, std::to_string(k), fmt(double(fp.node_bytes) / 1e9, 2), fmt(double(m->held.node_bytes) / 1e9, 2),
           fmt_rate(double(m->small_node_bytes) / 1e9), fmt(median(m->small_gparam_s), 3), fmt(median(m->gparam_s), 3),
           fmt(f, 3), fmt((*hi - *lo) / f * 100, 1), profile_factor, error});
  }
  std::cout << "\n";
  t.print(std::cout);
  std::cout << "\nfactor: the node rate holding the footprint over the rate on the small segments, the two groups' "
            << "passes alternating (median of " << o.iters << " pairs); held: what fit the free memory\n";
  if (o.out.csv) t.write_csv(*o.out.csv);
  if (o.out.json) t.write_json(*o.out.json);
  return 0;
}

}  // namespace

int bench_cpu_ranks(const RanksBenchOptions& o) { return o.footprints ? bench_footprints(o) : RanksBench(o).run(); }

}  // namespace tf::app
