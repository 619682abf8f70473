// `ratio: auto`: a grid over the feasible range, refined around the fastest predicted point.
#include "backends/sim/auto_ratio.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backends/sim/parallel.h"
#include "core/error.h"
#include "core/memory_fit.h"
#include "core/partition.h"
#include "core/settings.h"

namespace tf::backend::sim {

namespace {

std::string seconds_text(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g s/step", double(ns) * 1e-9);
  return b;
}

// The InputError for a scenario where nothing fits: the shortfall, then the changes that would fit.
[[noreturn]] void fail_nothing_fits(const core::Scenario& s, const core::SettingsOverrides& o,
                                    const core::FitReport& fit) {
  std::string msg =
      "zero.offload_optimizer.ratio: auto: no ratio fits on '" + s.cluster.hardware.name + "': " + fit.shortfall;
  const std::vector<std::string> changes = core::fit_suggestions(s, o);
  if (changes.empty()) {
    msg +=
        ". None of activation checkpointing, a smaller micro-batch, ZeRO stage 3 or more ranks fits alone: "
        "use a smaller model or a machine with more memory";
  } else {
    msg += ". Changes that fit:";
    for (const std::string& c : changes) msg += "\n  " + c;
  }
  throw core::InputError(msg);
}

// The width of one 2048-element unit of the largest shard, as a ratio: no split is finer.
double unit_ratio(const core::Scenario& s, const core::SettingsOverrides& o) {
  const core::RunSettings rs = core::resolve_settings(s, o);
  const core::Partition part = core::make_partition(rs.model, rs.partition);
  int64_t elems = 1;
  for (const core::RankShard& r : part.ranks) elems = std::max(elems, r.elems);
  return double(part.opt.align_elems) / double(elems);
}

}  // namespace

RatioPrediction predict_ratio(const core::Scenario& s, double r, const SimOptions& opt) {
  RatioPrediction out{simulate_step(s, r, opt)};
  SimPoint& p = out.point;
  out.held_ns = p.step_ns;
  if (opt.speculation != SpeculationCase::kHolds) return out;
  SimOptions after_clip = opt;
  after_clip.speculation = SpeculationCase::kNotSpeculating;
  after_clip.overrides.cpu_order = core::CpuOrderSetting{false, p.cpu_order};  // the plan's, chosen once
  after_clip.overrides.speculation_layers = p.speculation_layers;              // likewise
  out.after_clip_ns = simulate_step(s, r, after_clip).step_ns;
  p.step_ns = std::max(p.step_ns, out.after_clip_ns);
  return out;
}

SimPoint predicted_step(const core::Scenario& s, double r, const SimOptions& opt) {
  return predict_ratio(s, r, opt).point;
}

namespace {

class Search {
 public:
  Search(const core::Scenario& s, const AutoRatioOptions& opt)
      : s_(s), opt_(opt), threads_(simulation_threads(s, opt.sim, opt.threads)) {}

  // Evaluates the ratios of `rs` not evaluated yet (the table keeps every point), `threads_` simulations at a
  // time, and records them in `rs`'s order, so the table and the choice do not depend on the threads.
  void eval(const std::vector<double>& rs) {
    std::vector<double> todo;
    for (double r : rs)
      if (!evaluated(r) && std::find(todo.begin(), todo.end(), r) == todo.end()) todo.push_back(r);
    std::vector<RatioPrediction> out(todo.size());
    for_each_index(todo.size(), threads_, [&](size_t i) { out[i] = predict_ratio(s_, todo[i], opt_.sim); });
    for (size_t i = 0; i < todo.size(); ++i) {
      const SimPoint& p = out[i].point;
      pts_.push_back(
          {todo[i], p.ratio, p.step_ns, out[i].held_ns, out[i].after_clip_ns, p.memory.gpu_total, p.memory.host_total});
      oom_.push_back(p.oom);
    }
  }
  // The fastest point that fits; equal predictions: the smaller ratio.
  size_t best() const {
    size_t b = pts_.size();
    for (size_t i = 0; i < pts_.size(); ++i) {
      if (oom_[i]) continue;
      if (b == pts_.size() || pts_[i].step_ns < pts_[b].step_ns ||
          (pts_[i].step_ns == pts_[b].step_ns && pts_[i].ratio < pts_[b].ratio))
        b = i;
    }
    return b;
  }
  const std::vector<RatioPoint>& points() const { return pts_; }

 private:
  bool evaluated(double r) const {
    return std::any_of(pts_.begin(), pts_.end(), [r](const RatioPoint& p) { return p.requested == r; });
  }

  const core::Scenario& s_;
  const AutoRatioOptions& opt_;
  size_t threads_;
  std::vector<RatioPoint> pts_;
  std::vector<bool> oom_;
};

// The grid over [lo, hi], then the refinement rounds around the best point.
void search_range(Search& search, double lo, double hi, const AutoRatioOptions& opt, double unit) {
  const int n = std::max(2, opt.grid_points);
  if (hi <= lo) {
    search.eval({lo});
    return;
  }
  double step = (hi - lo) / double(n - 1);
  std::vector<double> grid;
  for (int i = 0; i < n; ++i) grid.push_back(i + 1 == n ? hi : lo + step * double(i));
  search.eval(grid);
  for (int round = 0; round < opt.refine_rounds && step / 5 >= unit; ++round) {
    const double centre = search.points()[search.best()].requested;
    const double fine = step / 5;
    std::vector<double> around;
    for (int k = -4; k <= 4; ++k) {
      const double r = centre + fine * double(k);
      if (k != 0 && r > lo && r < hi) around.push_back(r);
    }
    search.eval(around);
    step = fine;
  }
}

std::string explain(const AutoRatio& a, const RatioPoint& chosen, const RatioPoint& at_one) {
  std::string why = "ratio " + core::format_ratio(a.actual_ratio) + ": smallest that fits is " +
                    core::format_ratio(a.range.min_ratio) + " (" + core::format_gb(a.gpu_headroom_bytes) +
                    " of the GPU kept free beyond the plan: training.gpu_headroom), fastest predicted is " +
                    core::format_ratio(a.actual_ratio) + ", " + seconds_text(a.step_ns);
  if (chosen.after_clip_ns > 0 && chosen.after_clip_ns != chosen.held_ns)  // the compared step: the slower case
    why += " (the slower of " + seconds_text(chosen.held_ns) + " with the speculation holding and " +
           seconds_text(chosen.after_clip_ns) + " after a clipped step: a ratio must pay off either way)";
  why += " (" + std::to_string(a.table.size()) + " ratios simulated over " + core::ratio_range_text(a.range) +
         " with profile '" + a.profile + "'";
  if (at_one.ratio == 1.0 && a.actual_ratio != 1.0) {
    why += "; ratio 1: " + seconds_text(at_one.step_ns);
    if (at_one.held_ns != at_one.step_ns) why += ", " + seconds_text(at_one.held_ns) + " with the speculation holding";
  }
  return why + ")";
}

}  // namespace

AutoRatio choose_ratio(const core::Scenario& s, const AutoRatioOptions& opt) {
  const core::SettingsOverrides& o = opt.sim.overrides;
  const core::FitReport fit = core::check_fit(s, o);
  if (!fit.range.feasible) fail_nothing_fits(s, o, fit);
  Search search(s, opt);
  search_range(search, fit.range.min_ratio, fit.range.max_ratio, opt, unit_ratio(s, o));
  const size_t b = search.best();
  if (b >= search.points().size())
    throw std::logic_error("choose_ratio: the memory model's feasible range holds no point the simulator fits");
  AutoRatio a;
  a.range = fit.range;
  a.gpu_headroom_bytes = fit.budget.gpu_headroom_bytes;
  a.profile = s.cluster.hardware.name;
  a.table = search.points();
  a.ratio = a.table[b].requested;
  a.actual_ratio = a.table[b].ratio;
  a.step_ns = a.table[b].step_ns;
  const RatioPoint chosen = a.table[b];
  std::sort(a.table.begin(), a.table.end(),
            [](const RatioPoint& x, const RatioPoint& y) { return x.requested < y.requested; });
  a.why = explain(a, chosen, a.table.back());
  return a;
}

core::Scenario with_ratio(const core::Scenario& s, double ratio) {
  core::Scenario out = s;
  out.zero.offload_optimizer.ratio = ratio;
  out.zero.offload_optimizer.ratio_auto = false;
  return out;
}

std::vector<std::string> missing_calibration(const core::HardwareProfile& p) {
  std::vector<std::string> out;
  if (p.gpu.bf16_gemm_tflops_by_shape.empty()) out.push_back("gpu.bf16_gemm_tflops_by_shape");
  if (!(p.gpu.optimizer_gbps > 0)) out.push_back("gpu.optimizer_gbps");
  if (p.cpu.optimizer_gparam_s_by_threads.empty()) out.push_back("cpu.optimizer_gparam_s_by_threads");
  return out;
}

std::string calibration_hint(const core::HardwareProfile& p) {
  std::string have;
  for (std::string_view name : core::builtin_hardware_profile_names()) {
    const auto text = core::builtin_hardware_profile_text(name);
    if (text && missing_calibration(core::parse_hardware_profile(*text, std::string(name))).empty())
      have += (have.empty() ? "" : ", ") + std::string(name);
  }
  std::string missing;
  for (const std::string& m : missing_calibration(p)) missing += (missing.empty() ? "" : ", ") + m;
  return "profile '" + p.name + "' lacks the measured figures the choice rests on (" + missing +
         "); pass this machine's calibrated profile with --profile (built in: " + (have.empty() ? "none" : have) +
         "), or measure one with `twinflow calibrate --out scenarios/hardware/NAME.yaml --scenario SCENARIO` on "
         "the machine";
}

}  // namespace tf::backend::sim
