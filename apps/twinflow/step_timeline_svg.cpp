// One step's timeline as an SVG (see step_timeline_svg.h).
#include "apps/twinflow/step_timeline_svg.h"

#include <array>
#include <cstdio>
#include <stdexcept>

#include "core/step.h"

namespace tf::app {
namespace {

// A color per core::OpKind, in its order.
constexpr std::array<const char*, core::kOpKindCount> kKindColors = {
    "#9467bd",  // all-gather
    "#1f77b4",  // forward
    "#ff7f0e",  // backward
    "#8c564b",  // reduce-scatter
    "#c49c94",  // all-reduce
    "#17becf",  // D2H
    "#7f7f7f",  // grad stats
    "#e377c2",  // norm all-reduce
    "#2ca02c",  // GPU optimizer
    "#d62728",  // CPU optimizer
    "#bcbd22",  // H2D
    "#ff9896",  // CPU commit
};

std::string ms_text(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", double(ns) / 1e6);
  return b;
}

}  // namespace

TimelineSpec step_timeline(const backend::sim::SimPoint& p, const std::string& what, const std::string& scenario) {
  if (p.plans.empty() || p.ranks.empty() || p.ranks[0].ops.size() != p.plans[0].ops.size())
    throw std::invalid_argument("step_timeline: the SimPoint has no plan or op timings of rank 0");
  const core::StepPlan& plan = p.plans[0];
  TimelineSpec spec;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3f", p.ratio);
  spec.title = what + " step: " + scenario + ", ratio " + ratio + ", rank 0 of " + std::to_string(p.world);
  for (int q = 0; q < core::kQueueCount; ++q) spec.lanes.emplace_back(core::queue_name(core::Queue(q)));
  for (int k = 0; k < core::kOpKindCount; ++k)
    spec.kinds.emplace_back(core::op_kind_name(core::OpKind(k)), kKindColors[size_t(k)]);
  std::array<int64_t, core::kQueueCount> busy{};
  for (const backend::sim::OpTiming& t : p.ranks[0].ops) {
    const core::Op& op = plan.ops.at(t.op);
    spec.bars.push_back({int(op.queue), double(t.start_ns) / 1e6, double(t.end_ns) / 1e6, int(op.kind)});
    busy[size_t(op.queue)] += t.end_ns - t.start_ns;
  }
  spec.note = "step " + ms_text(p.step_ns) + " ms; busy ms:";
  for (int q = 0; q < core::kQueueCount; ++q)
    spec.note += std::string(q ? "," : "") + " " + core::queue_name(core::Queue(q)) + " " + ms_text(busy[size_t(q)]);
  return spec;
}

}  // namespace tf::app
