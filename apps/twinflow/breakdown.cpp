// `twinflow validate --breakdown`: measured per-layer forward/backward times against the simulator's costs.
#include "apps/twinflow/breakdown.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "apps/twinflow/table.h"
#include "core/error.h"
#include "core/settings.h"
#include "core/step.h"
#include "core/strings.h"

namespace tf::app {
namespace {

using backend::sim::GemmCost;
using backend::sim::LayerCost;
using backend::sim::PassCost;

nlohmann::json read_json_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw core::InputError(core::printable(file) + ": cannot open the trace");
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw core::InputError(core::printable(file) +
                           ": not a Chrome trace of `twinflow run --trace` (a JSON object with traceEvents)");
  return doc;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string_view layer_kind_text(core::LayerKind k) {
  switch (k) {
    case core::LayerKind::kEmbedding: return "embedding";
    case core::LayerKind::kBlock: return "block";
    case core::LayerKind::kHead: return "head";
    case core::LayerKind::kLinear: return "linear";
  }
  return "?";
}

// `c` x n: the cost of n ops of one layer (its micro-batches), added to `sum`.
void add_scaled(const PassCost& c, int n, PassCost& sum) {
  for (int i = 0; i < n; ++i) {
    sum.gemms.insert(sum.gemms.end(), c.gemms.begin(), c.gemms.end());
    sum.attention_ns += c.attention_ns;
    for (size_t k = 0; k < c.class_ns.size(); ++k) sum.class_ns[k] += c.class_ns[k];
    sum.kernels += c.kernels;
    sum.issue_ns += c.issue_ns;
  }
}

// The trace's measured and predicted rows, one per (kind, pass) present in the model.
std::vector<BreakdownRow> trace_rows(const core::ModelDesc& model, const std::vector<LayerCost>& costs,
                                     const TraceLayerTimes& t) {
  std::vector<BreakdownRow> rows;
  for (size_t i = 0; i < model.layers.size(); ++i)
    for (bool bwd : {false, true}) {
      const core::LayerKind kind = model.layers[i].kind;
      auto row = std::find_if(rows.begin(), rows.end(),
                              [&](const BreakdownRow& r) { return r.kind == kind && r.backward == bwd; });
      if (row == rows.end()) {
        BreakdownRow fresh;
        fresh.kind = kind, fresh.backward = bwd;
        row = rows.insert(rows.end(), fresh);
      }
      const PassCost& c = bwd ? costs[i].bwd : costs[i].fwd;
      const int ops = bwd ? t.bwd_ops[i] : t.fwd_ops[i];
      ++row->layers;
      row->measured_ms += (bwd ? t.bwd_ns[i] : t.fwd_ns[i]) / 1e6;
      row->predicted_ms += c.ns() * ops / 1e6;
      row->exposed_issue_ms += c.exposed_issue_ns() * ops / 1e6;
      add_scaled(c, ops, row->predicted);
    }
  std::stable_sort(rows.begin(), rows.end(), [](const BreakdownRow& a, const BreakdownRow& b) {
    return a.kind != b.kind ? a.kind < b.kind : a.backward < b.backward;
  });
  return rows;
}

// The trace's op kinds, a step's worth, against the simulator's step of the scenario at the trace's ratio.
std::vector<OpKindRow> op_kind_rows(const core::Scenario& s, backend::sim::SimOptions opt, const TraceLayerTimes& t) {
  opt.record_ops = opt.keep_plans = true;
  const backend::sim::SimPoint p = backend::sim::simulate_step(s, t.ratio, opt);
  std::array<double, core::kOpKindCount> sim_ns{};
  for (const backend::sim::OpTiming& o : p.ranks.at(0).ops)
    sim_ns[size_t(p.plans.at(0).ops.at(o.op).kind)] += double(o.end_ns - o.start_ns);
  std::vector<OpKindRow> rows;
  for (int k = 0; k < core::kOpKindCount; ++k)
    if (t.kind_ops[size_t(k)] > 0)
      rows.push_back({core::OpKind(k), double(t.kind_ops[size_t(k)]) / t.steps, t.kind_ns[size_t(k)] / t.steps / 1e6,
                      sim_ns[size_t(k)] / 1e6});
  return rows;
}

}  // namespace

TraceLayerTimes read_trace_layer_times(const std::string& file, size_t layers) {
  const nlohmann::json doc = read_json_file(file);
  TraceLayerTimes t;
  t.file = file;
  const nlohmann::json other = doc.value("otherData", nlohmann::json::object());
  t.ratio = other.value("requested_ratio", other.value("ratio", 0.0));
  t.world = other.value("world", 1);
  t.fwd_ns.assign(layers, 0), t.bwd_ns.assign(layers, 0);
  t.fwd_ops.assign(layers, 0), t.bwd_ops.assign(layers, 0);
  std::set<int> steps;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || e.value("pid", -1) != 0) continue;
    const nlohmann::json args = e.value("args", nlohmann::json::object());
    // args.label: the op without the step prefix that a trace of several steps puts in its name ("s5 forward L0
    // mb0", `--trace-steps`); the name where a writer left the label out
    const std::string label = args.value("label", e.value("name", ""));
    const std::optional<core::OpLabel> op = core::parse_op_label(label);
    if (!op) continue;
    // start_ns/end_ns: the exact interval; dur (us) where a writer left them out
    const double ns = args.contains("end_ns") ? args["end_ns"].get<double>() - args["start_ns"].get<double>()
                                              : e.value("dur", 0.0) * 1e3;
    t.kind_ns[size_t(op->kind)] += ns;
    ++t.kind_ops[size_t(op->kind)];
    if (args.contains("step")) steps.insert(args["step"].get<int>());
    if (op->kind != core::OpKind::kForward && op->kind != core::OpKind::kBackward) continue;
    if (op->layer < 0 || size_t(op->layer) >= layers)
      throw core::InputError(core::printable(file) + ": op \"" + core::printable(label) +
                             "\" names no layer of the scenario's model (" + std::to_string(layers) + " layers)");
    const bool bwd = op->kind == core::OpKind::kBackward;
    (bwd ? t.bwd_ns : t.fwd_ns)[size_t(op->layer)] += ns;
    ++(bwd ? t.bwd_ops : t.fwd_ops)[size_t(op->layer)];
  }
  for (size_t i = 0; i < layers; ++i)
    if (t.fwd_ops[i] == 0 || t.bwd_ops[i] == 0)
      throw core::InputError(core::printable(file) + ": layer " + std::to_string(i) +
                             " has no forward or no backward op on rank 0; is it a trace of this scenario's model?");
  t.steps = std::max<int>(1, int(steps.size()));
  return t;
}

Breakdown breakdown_traces(const core::Scenario& sc, const std::vector<TraceLayerTimes>& traces) {
  if (traces.empty()) throw core::InputError("--breakdown: no trace given");
  Breakdown b;
  std::vector<std::vector<BreakdownRow>> per_trace;
  for (const TraceLayerTimes& t : traces) {
    core::Scenario s = sc;
    backend::sim::SimOptions opt;
    if (t.world != s.cluster.world_size()) {
      s.cluster.nodes = 1, s.cluster.gpus_per_node = t.world;
      opt.overrides.world = t.world;
      opt.overrides.world_from = core::printable(t.file) + ": otherData.world";
    }
    const core::ModelDesc model = core::resolve_settings(s, opt.overrides).model;
    if (t.fwd_ns.size() != model.layers.size())
      throw core::InputError(core::printable(t.file) + ": " + std::to_string(t.fwd_ns.size()) +
                             " layers read, the model has " + std::to_string(model.layers.size()));
    b.costs = backend::sim::layer_costs(s, opt);
    if (per_trace.empty()) b.kinds = op_kind_rows(s, opt, t);
    per_trace.push_back(trace_rows(model, b.costs, t));
    double m = 0, p = 0;
    for (const BreakdownRow& r : per_trace.back()) m += r.measured_ms, p += r.predicted_ms;
    b.trace_measured_ms.push_back(m), b.trace_predicted_ms.push_back(p);
  }
  b.rows = per_trace.front();  // the prediction is the same at every ratio (one world)
  for (size_t r = 0; r < b.rows.size(); ++r) {
    std::vector<double> m;
    for (const std::vector<BreakdownRow>& t : per_trace) m.push_back(t.at(r).measured_ms);
    b.rows[r].measured_ms = median(m);
  }
  return b;
}

std::string_view cost_group_name(CostGroup g) {
  switch (g) {
    case CostGroup::kGemm: return "gemm";
    case CostGroup::kAttention: return "attention";
    case CostGroup::kLayerNorm: return "layer_norm";
    case CostGroup::kBiasAct: return "bias_act";
    case CostGroup::kEmbedding: return "embedding";
    case CostGroup::kCrossEntropy: return "cross_ent";
    case CostGroup::kOther: return "other";
  }
  return "?";
}

double cost_group_ns(const PassCost& c, CostGroup g) {
  using K = core::KernelClass;
  const auto cls = [&](K k) { return c.class_ns[size_t(k)]; };
  switch (g) {
    case CostGroup::kGemm: return c.gemm_ns();
    case CostGroup::kAttention: return c.attention_ns + cls(K::kAttentionForward) + cls(K::kAttentionBackward);
    case CostGroup::kLayerNorm: return cls(K::kLayerNormForward) + cls(K::kLayerNormBackward);
    case CostGroup::kBiasAct:
      return cls(K::kBiasActForward) + cls(K::kBiasResidualForward) + cls(K::kBiasActBackward) + cls(K::kBiasGrad);
    case CostGroup::kEmbedding: return cls(K::kEmbeddingForward) + cls(K::kEmbeddingBackward);
    case CostGroup::kCrossEntropy: return cls(K::kCrossEntropy);
    case CostGroup::kOther: return cls(K::kOther);
  }
  return 0;
}

namespace {

void print_op_kinds(const Breakdown& b) {
  if (b.kinds.empty()) return;
  Table t({"op", "ops/step", "measured_ms", "simulated_ms", "measured/simulated"});
  for (const OpKindRow& r : b.kinds)
    t.add({core::op_kind_name(r.kind), fmt(r.ops, 1), fmt(r.measured_ms, 2), fmt(r.simulated_ms, 2),
           r.simulated_ms > 0 ? fmt(r.measured_ms / r.simulated_ms, 3) : "-"});
  std::cout << "\nrank 0's ops by kind, a step's worth of the first trace, against the simulator's step at its ratio "
               "and world (with the slowdowns the rows above leave out):\n";
  t.print(std::cout);
}

void print_gemms(const Breakdown& b) {
  Table t({"layer", "pass", "gemm (m, n, k) x batch", "table pass", "TFLOP/s", "us", "rate from"});
  std::vector<core::LayerKind> seen;
  for (const LayerCost& l : b.costs) {
    if (std::find(seen.begin(), seen.end(), l.kind) != seen.end()) continue;
    seen.push_back(l.kind);
    for (bool bwd : {false, true})
      for (const GemmCost& g : (bwd ? l.bwd : l.fwd).gemms) {
        std::ostringstream shape;
        shape << "(" << g.gemm.m << ", " << g.gemm.n << ", " << g.gemm.k << ")";
        if (g.gemm.batch > 1) shape << " x " << g.gemm.batch;
        t.add({std::string(layer_kind_text(l.kind)), bwd ? "backward" : "forward", shape.str(),
               std::string(core::gemm_pass_name(g.gemm.pass)), fmt(g.tflops, 1), fmt(g.ns / 1e3, 1),
               !g.measured     ? "roofline model"
               : g.exact_shape ? "measured shape"
                               : "nearest measured, scaled"});
      }
  }
  std::cout << "\nGEMMs of one layer of each kind (one micro-batch; backward includes a checkpointed recompute):\n";
  t.print(std::cout);
}

}  // namespace

void print_breakdown(const Breakdown& b, const core::Scenario& sc) {
  std::cout << "breakdown: " << sc.name << " | profile " << sc.cluster.hardware.name << " | "
            << b.trace_measured_ms.size()
            << " trace(s): rank 0's forward/backward op time per layer kind (median over the traces) against the\n"
               "simulator's per-layer costs (before its slowdowns under copies and collectives). predicted = the GPU's "
               "work by class\n(gemm .. other) + exposed_issue (the host's issue time beyond the work); "
               "host_issue_ms: all of the host's issue time\n(kernels x gpu.kernel_launch_ns), which the model of the "
               "2026-11-24 decval call added to the work\n";
  std::vector<std::string> cols = {"layers",        "pass",         "n", "measured_ms", "predicted_ms", "error_%",
                                   "meas/layer_us", "pred/layer_us"};
  for (int g = 0; g < kCostGroupCount; ++g) cols.push_back(std::string(cost_group_name(CostGroup(g))) + "_ms");
  cols.insert(cols.end(), {"exposed_issue_ms", "host_issue_ms"});
  Table t(cols);
  BreakdownRow all;
  for (const BreakdownRow& r : b.rows) {
    std::vector<std::string> row = {std::string(layer_kind_text(r.kind)),
                                    r.backward ? "backward" : "forward",
                                    std::to_string(r.layers),
                                    fmt(r.measured_ms, 2),
                                    fmt(r.predicted_ms, 2),
                                    fmt((r.predicted_ms - r.measured_ms) / r.measured_ms * 100, 1),
                                    fmt(r.measured_ms * 1e3 / r.layers, 1),
                                    fmt(r.predicted_ms * 1e3 / r.layers, 1)};
    for (int g = 0; g < kCostGroupCount; ++g) row.push_back(fmt(cost_group_ns(r.predicted, CostGroup(g)) / 1e6, 2));
    row.insert(row.end(), {fmt(r.exposed_issue_ms, 2), fmt(r.predicted.issue_ns / 1e6, 2)});
    t.add(row);
    all.measured_ms += r.measured_ms, all.predicted_ms += r.predicted_ms, all.exposed_issue_ms += r.exposed_issue_ms;
    add_scaled(r.predicted, 1, all.predicted);
  }
  std::vector<std::string> total = {"all",
                                    "both",
                                    "",
                                    fmt(all.measured_ms, 2),
                                    fmt(all.predicted_ms, 2),
                                    fmt((all.predicted_ms - all.measured_ms) / all.measured_ms * 100, 1),
                                    "",
                                    ""};
  for (int g = 0; g < kCostGroupCount; ++g) total.push_back(fmt(cost_group_ns(all.predicted, CostGroup(g)) / 1e6, 2));
  total.insert(total.end(), {fmt(all.exposed_issue_ms, 2), fmt(all.predicted.issue_ns / 1e6, 2)});
  t.add(total);
  t.print(std::cout);
  std::cout << "per trace, forward + backward ms measured/predicted:";
  for (size_t i = 0; i < b.trace_measured_ms.size(); ++i)
    std::cout << (i ? ", " : " ") << fmt(b.trace_measured_ms[i], 1) << "/" << fmt(b.trace_predicted_ms[i], 1);
  std::cout << "\n";
  print_op_kinds(b);
  print_gemms(b);
}

}  // namespace tf::app
