// `ratio: auto` in the commands: resolution, table, JSON and SVG (see auto_ratio_report.h).
#include "apps/twinflow/auto_ratio_report.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/twinflow/svg_plot.h"
#include "core/error.h"

namespace tf::app {

namespace {
double ms(int64_t ns) { return double(ns) / 1e6; }
double gb(int64_t bytes) { return double(bytes) / 1e9; }
}  // namespace

backend::sim::AutoRatio resolve_auto_ratio(const core::Scenario& sc, const backend::sim::AutoRatioOptions& opt,
                                           Calibration calibration, std::ostream& out) {
  const core::HardwareProfile& hw = sc.cluster.hardware;
  if (!backend::sim::missing_calibration(hw).empty()) {
    const std::string hint = "ratio auto: " + backend::sim::calibration_hint(hw);
    if (calibration == Calibration::kRequired) throw core::InputError(hint);
    std::cerr << "warning: " << hint << "; the choice below uses its estimates\n";
  }
  const backend::sim::AutoRatio a = backend::sim::choose_ratio(sc, opt);
  out << "ratio auto: predicted step and memory per rank over the ratios that fit\n";
  auto_ratio_table(a).print(out);
  if (!a.table.empty() && a.table.front().after_clip_ns > 0)
    out << "step ms: the slower of held ms (every speculation holding) and after clip ms (the step after a clipped "
           "one, which does not speculate)\n";
  out << a.why << "\n\n";
  return a;
}

Table auto_ratio_table(const backend::sim::AutoRatio& a) {
  Table t({"ratio", "requested", "step ms", "held ms", "after clip ms", "GPU GB", "host GB", "chosen"});
  // The refinement around the best point simulates ratios that print alike at four decimals (OPT-30B on two
  // H200s: 20 rows of 0.6294-0.6295 of 53). The table is in ratio order, so those are runs of rows: one row
  // per run, the chosen point where it is in the run, else the run's first. auto_ratio_json keeps every point.
  for (size_t b = 0, e = 0; b < a.table.size(); b = e) {
    const std::string shown = fmt(a.table[b].ratio, 4);
    size_t pick = b;
    for (e = b; e < a.table.size() && fmt(a.table[e].ratio, 4) == shown; ++e)
      if (a.table[e].requested == a.ratio) pick = e;
    const backend::sim::RatioPoint& p = a.table[pick];
    t.add({shown, fmt(p.requested, 4), fmt(ms(p.step_ns), 2), fmt(ms(p.held_ns), 2),
           p.after_clip_ns > 0 ? fmt(ms(p.after_clip_ns), 2) : "-", fmt(gb(p.gpu_bytes), 2), fmt(gb(p.host_bytes), 2),
           p.requested == a.ratio ? "<-" : ""});
  }
  return t;
}

nlohmann::json auto_ratio_json(const backend::sim::AutoRatio& a) {
  nlohmann::json j;
  j["chosen"] = {{"ratio", a.ratio}, {"actual_ratio", a.actual_ratio}, {"step_ms", ms(a.step_ns)}};
  j["why"] = a.why;
  j["profile"] = a.profile;
  j["fits"] = {a.range.min_ratio, a.range.max_ratio};
  j["gpu_headroom_bytes"] = a.gpu_headroom_bytes;
  for (const backend::sim::RatioPoint& p : a.table)
    j["table"].push_back({{"ratio", p.ratio},
                          {"requested", p.requested},
                          {"step_ms", ms(p.step_ns)},
                          {"held_ms", ms(p.held_ns)},
                          {"after_clip_ms", p.after_clip_ns > 0 ? nlohmann::json(ms(p.after_clip_ns)) : nlohmann::json()},
                          {"gpu_bytes", p.gpu_bytes},
                          {"host_bytes", p.host_bytes}});
  return j;
}

void write_auto_ratio_svg(const core::Scenario& sc, const backend::sim::AutoRatio& a, const std::string& path) {
  PlotSpec spec;
  spec.title = sc.name + ": ratio auto on " + a.profile + " (predicted)";
  spec.x_label = "ratio (CPU share of the optimizer)";
  spec.left_label = "predicted step time (ms)";
  spec.right_label = "GPU memory per rank (GB)";
  Series step{"step time (ms)", {}, {}, false, "#1f77b4", {}}, mem{"GPU memory (GB)", {}, {}, true, "#ff7f0e", {}};
  Series chosen{"chosen ratio " + fmt(a.actual_ratio, 3), {a.actual_ratio}, {ms(a.step_ns)}, false, "#2ca02c", {}};
  for (const backend::sim::RatioPoint& p : a.table) {
    step.x.push_back(p.ratio);
    step.y.push_back(ms(p.step_ns));
    mem.x.push_back(p.ratio);
    mem.y.push_back(gb(p.gpu_bytes));
  }
  spec.series = {step, mem, chosen};
  spec.note = a.why;
  write_svg(spec, path);
}

}  // namespace tf::app
