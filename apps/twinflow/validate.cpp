// A measured ratio sweep against the simulator (see validate.h).
#include "apps/twinflow/validate.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "apps/twinflow/steady_steps.h"
#include "backends/sim/sim_backend.h"
#include "core/config_node.h"
#include "core/error.h"
#include "core/strings.h"

namespace tf::app {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& file, const std::string& key, const std::string& what) {
  throw core::InputError(core::printable(file) + ": " + key + ": " + what +
                         " (expected the JSON that `twinflow run --json FILE` writes)");
}

std::string key_path(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }

const json& field(const json& obj, const std::string& file, const std::string& path, const char* key) {
  if (!obj.is_object()) bad(file, path.empty() ? "(document)" : path, "is not an object");
  const auto it = obj.find(key);
  if (it == obj.end()) bad(file, key_path(path, key), "is missing");
  return *it;
}

// The value as written, for messages (cut, control bytes escaped).
std::string shown(const json& v) { return core::printable(v.dump(), 80); }

// An integer in [lo, hi]; JSON numbers beyond int64 (or uint64) are refused with their value, never wrapped.
int64_t int_field(const json& obj, const std::string& file, const std::string& path, const char* key, int64_t lo,
                  int64_t hi) {
  const json& v = field(obj, file, path, key);
  const std::string at = key_path(path, key);
  const std::string allowed = "; allowed [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v.is_number_unsigned()) {  // nlohmann stores every non-negative integer as unsigned (0 too)
    const auto u = v.get<uint64_t>();
    if (u > uint64_t(hi) || (lo > 0 && u < uint64_t(lo))) bad(file, at, shown(v) + " is out of range" + allowed);
    return int64_t(u);
  }
  if (!v.is_number_integer())
    bad(file, at,
        "must be an integer, got " + shown(v) + (v.is_number_float() ? " (beyond 64 bits or a fraction)" : "") +
            allowed);
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) bad(file, at, shown(v) + " is out of range" + allowed);
  return x;
}

double num_field(const json& obj, const std::string& file, const std::string& path, const char* key, double lo,
                 double hi) {
  const json& v = field(obj, file, path, key);
  const std::string at = key_path(path, key);
  if (!v.is_number()) bad(file, at, "must be a number, got " + shown(v));
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi))
    bad(file, at,
        shown(v) + " is out of range; allowed [" + core::number_text(lo) + ", " + core::number_text(hi) + "]");
  return d;
}

// An optional boolean: false when absent (a run from before the field).
bool bool_field(const json& obj, const std::string& file, const std::string& path, const char* key) {
  if (!obj.is_object() || !obj.contains(key)) return false;
  const json& v = obj[key];
  if (!v.is_boolean()) bad(file, key_path(path, key), "must be true or false, got " + shown(v));
  return v.get<bool>();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double ms(int64_t ns) { return double(ns) / 1e6; }

using SpecCase = backend::sim::SpeculationCase;

// The case one measured step ran in, as the simulator names them.
SpecCase step_case(const MeasuredPoint::Step& s) {
  if (!s.speculated) return SpecCase::kNotSpeculating;
  return s.speculation_held ? SpecCase::kHolds : SpecCase::kFails;
}

// The steady steps (steady_steps.h: the run's own rule) of the case `c`, like with like: where the run
// carried its tail, a step's period also holds the previous step's tail, so a step whose previous step
// ran in another case (the first held step after one that could not speculate) is a mix of two cases the
// simulator never runs, and is left out. Where that leaves nothing, the steady steps of case `c`; where
// none is of case `c`, every steady step.
std::vector<bool> compared_steps(const MeasuredPoint& p, SpecCase c) {
  const std::vector<bool> steady = steady_steps(p.steps.size(), p.carry_tail);
  const auto pick = [&](bool need_previous) {
    std::vector<bool> sel(p.steps.size(), false);
    bool any = false;
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const bool prev_ok = !need_previous || !p.carry_tail || i == 0 || step_case(p.steps[i - 1]) == c;
      sel[i] = steady[i] && step_case(p.steps[i]) == c && prev_ok;
      any = any || sel[i];
    }
    return std::pair{sel, any};
  };
  if (auto [sel, any] = pick(true); any) return sel;
  if (auto [sel, any] = pick(false); any) return sel;
  return steady;
}

// f(step) of the steps `sel` picks (compared_steps, computed once per point).
template <class F>
std::vector<double> values(const MeasuredPoint& p, const std::vector<bool>& sel, F f) {
  std::vector<double> v;
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (sel[i]) v.push_back(f(p.steps[i]));
  return v;
}

template <class F>
double median_of(const MeasuredPoint& p, const std::vector<bool>& sel, F f) {
  std::vector<double> v = values(p, sel, f);
  return v.empty() ? 0.0 : median(std::move(v));
}

int64_t kind(const std::array<int64_t, core::kOpKindCount>& k, core::OpKind o) { return k[size_t(o)]; }

}  // namespace

namespace {

constexpr int64_t kInt32Max = 2'147'483'647;

MeasuredPoint::Step read_step(const json& j, const std::string& file, const std::string& at) {
  MeasuredPoint::Step s;
  s.step = int(int_field(j, file, at, "step", 1, kInt32Max));
  s.step_ns = int_field(j, file, at, "step_ns", 1, INT64_MAX);
  s.optimizer_phase_ns = int_field(j, file, at, "optimizer_phase_ns", 0, INT64_MAX);
  const json& kinds = field(j, file, at, "kind_ns");
  if (!kinds.is_object()) bad(file, at + ".kind_ns", "must be an object, got " + shown(kinds));
  for (int k = 0; k < core::kOpKindCount; ++k) {
    const char* name = core::op_kind_name(core::OpKind(k));
    if (kinds.contains(name)) s.kind_ns[size_t(k)] = int_field(kinds, file, at + ".kind_ns", name, 0, INT64_MAX);
  }
  s.speculated = bool_field(j, file, at, "speculated");
  s.speculation_held = bool_field(j, file, at, "speculation_held");
  if (j.contains("gpu") && !j["gpu"].is_null()) {  // the run's GPU telemetry (run --json since 2026-11-29)
    const json& g = j["gpu"];
    if (!g.is_object()) bad(file, at + ".gpu", "must be an object or null, got " + shown(g));
    if (g.contains("sm_mhz_median") && !g["sm_mhz_median"].is_null())
      s.sm_mhz = num_field(g, file, at + ".gpu", "sm_mhz_median", 1, 1e5);
  }
  return s;
}

MeasuredPoint read_point(const json& j, const std::string& file, const std::string& at) {
  MeasuredPoint p;
  p.ratio = num_field(j, file, at, "ratio", 0, 1);
  p.actual_ratio = num_field(j, file, at, "actual_ratio", 0, 1);
  if (j.contains("speculation_bytes")) p.speculation_bytes = int_field(j, file, at, "speculation_bytes", 0, INT64_MAX);
  if (j.contains("speculation_layers"))
    p.speculation_layers = int(int_field(j, file, at, "speculation_layers", core::kEveryEligibleLayer, kInt32Max));
  if (j.contains("carry_tail")) p.carry_tail = bool_field(j, file, at, "carry_tail");
  if (j.contains("ring_order")) {
    const json& o = field(j, file, at, "ring_order");
    if (o != "forward" && o != "backward")
      bad(file, key_path(at, "ring_order"), "must be \"forward\" or \"backward\", got " + shown(o));
    p.ring_forward_order = o == "forward";
  }
  if (j.contains("staging_slots")) p.staging_slots = int(int_field(j, file, at, "staging_slots", 0, 1024));
  if (j.contains("cpu_order")) {
    const json& o = field(j, file, at, "cpu_order");
    p.cpu_order.arrival = int(int_field(o, file, at + ".cpu_order", "arrival", core::kAllPasses, kInt32Max));
    p.cpu_order.before_norm = int(int_field(o, file, at + ".cpu_order", "before_norm", core::kAllPasses, kInt32Max));
  }
  if (j.contains("memory_check"))
    p.gpu_measured_bytes =
        int_field(field(j, file, at, "memory_check"), file, at + ".memory_check", "gpu_measured", 0, INT64_MAX);
  if (j.contains("host_probe")) {
    const json& h = field(j, file, at, "host_probe");
    const std::string hp = at + ".host_probe";
    MeasuredPoint::HostProbe probe;
    probe.ranks = int(int_field(h, file, hp, "ranks", 1, core::kMaxWorld));
    probe.before_gparam_s = num_field(h, file, hp, "before_gparam_s", 1e-6, 1e6);
    probe.after_gparam_s = num_field(h, file, hp, "after_gparam_s", 1e-6, 1e6);
    p.host_probe = probe;
  }
  if (j.contains("pages_probe")) {
    const json& h = field(j, file, at, "pages_probe");
    const std::string pp = at + ".pages_probe";
    MeasuredPoint::PagesProbe probe;
    probe.ranks = int(int_field(h, file, pp, "ranks", 1, core::kMaxWorld));
    probe.node_gparam_s = num_field(h, file, pp, "node_gparam_s", 0, 1e6);
    if (probe.node_gparam_s > 0) p.pages_probe = probe;  // 0: no CPU part (ratio 0)
  }
  const json& steps = field(j, file, at, "steps");
  if (!steps.is_array() || steps.empty()) bad(file, at + ".steps", "must be a non-empty list");
  for (size_t i = 0; i < steps.size(); ++i)
    p.steps.push_back(read_step(steps[i], file, at + ".steps[" + std::to_string(i) + "]"));
  // validate compares steady steps (steady_steps.h): never step 1 (which pays for set-up), unless the only one
  if (p.steps.size() > 1 &&
      std::none_of(p.steps.begin(), p.steps.end(), [](const MeasuredPoint::Step& s) { return s.step > 1; }))
    bad(file, at + ".steps",
        "no steady steps: all " + std::to_string(p.steps.size()) +
            " are step 1, which validate leaves out (it pays for set-up); measure at least 2 steps");
  return p;
}

}  // namespace

MeasuredSweep parse_measured_sweep(const std::string& json_text, const std::string& file) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {  // syntax, and numbers out of double range (out_of_range.406)
    throw core::InputError(core::printable(file) + ": not JSON that can be read: " + e.what() +
                           " (expected the JSON that `twinflow run --json FILE` writes)");
  }
  MeasuredSweep m;
  m.file = file;
  if (!doc.is_object()) bad(file, "(document)", "is not an object");
  for (auto [key, dst] :
       {std::pair{"scenario", &m.scenario}, std::pair{"gpu", &m.gpu}, std::pair{"workload", &m.workload}})
    if (doc.contains(key) && doc[key].is_string()) *dst = doc[key].get<std::string>();
  m.world = int(int_field(doc, file, "", "world", 1, core::kMaxWorld));
  if (int_field(doc, file, "", "rank", 0, core::kMaxWorld) != 0)
    bad(file, "rank", "is not 0: validate reads rank 0's file (the one without a .rankN suffix)");
  m.threads = int(int_field(doc, file, "", "threads", 1, 1 << 16));
  if (doc.contains("grad_accum")) m.grad_accum = int(int_field(doc, file, "", "grad_accum", 1, core::kMaxBatch));
  m.params = int_field(doc, file, "", "params", 0, INT64_MAX);  // 0: not recorded (a sweep recovered from a log)
  if (doc.contains("tokens_per_step")) m.tokens_per_step = int_field(doc, file, "", "tokens_per_step", 0, INT64_MAX);
  const json& pts = field(doc, file, "", "points");
  if (!pts.is_array() || pts.empty()) bad(file, "points", "must be a non-empty list");
  for (size_t i = 0; i < pts.size(); ++i)
    m.points.push_back(read_point(pts[i], file, "points[" + std::to_string(i) + "]"));
  return m;
}

MeasuredSweep load_measured_sweep(const std::string& file) {
  // a regular file of bounded size (not a FIFO, a device or /dev/zero)
  return parse_measured_sweep(core::config::read_document(file, "measured sweep (--measured)", kMaxMeasuredBytes),
                              file);
}

backend::sim::SpeculationCase speculation_case(const MeasuredPoint& p) {
  const std::vector<bool> steady = steady_steps(p.steps.size(), p.carry_tail);
  int held = 0, failed = 0, off = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (!steady[i]) continue;
    const SpecCase c = step_case(p.steps[i]);
    ++(c == SpecCase::kHolds ? held : c == SpecCase::kFails ? failed : off);
  }
  if (held >= failed && held >= off) return SpecCase::kHolds;
  return failed >= off ? SpecCase::kFails : SpecCase::kNotSpeculating;
}

namespace {

SteadyStat step_stat(const MeasuredPoint& p, const std::vector<bool>& sel) {
  const std::vector<double> v = values(p, sel, [](const MeasuredPoint::Step& s) { return ms(s.step_ns); });
  SteadyStat st;
  if (v.empty()) return st;
  st.steps = int(v.size());
  st.median_ms = median(v);
  st.spread = (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / st.median_ms;
  return st;
}

// Mean and worst |error| of (ratio, error %) pairs; points 0 when there are none.
ErrorSummary summarize(const std::vector<std::pair<double, double>>& ratio_error) {
  ErrorSummary e;
  double sum = 0;
  for (const auto& [ratio, error] : ratio_error) {
    const double a = std::abs(error);
    sum += a;
    if (e.points == 0 || a > e.worst_pct) e.worst_pct = a, e.worst_ratio = ratio;
    ++e.points;
  }
  if (e.points > 0) e.mape_pct = sum / e.points;
  return e;
}

// The point simulated on the profile with every CPU rate scaled by f (CpuProfile::with_rates_scaled), ms.
double simulated_with_cpu_scaled(core::Scenario sc, const MeasuredPoint& p, const backend::sim::SimOptions& opt,
                                 double f) {
  sc.cluster.hardware.cpu = sc.cluster.hardware.cpu.with_rates_scaled(f);
  return ms(backend::sim::simulate_step(sc, p.ratio, opt).step_ns);
}

// The tracked figures of a point: its host probes' mean (ValidationRow::has_host) and its own pages' rate
// (has_pages) against the profile's rank curve, and the point simulated with the CPU rates scaled to each.
void track_cpu_rate(const core::Scenario& sc, const MeasuredPoint& p, const backend::sim::SimOptions& opt,
                    ValidationRow& r) {
  const auto track = [&](double node_gparam_s, int ranks, bool& has, double& moved_pct, double& tracked_ms,
                         double& error_pct) {
    const double profile = sc.cluster.hardware.cpu.optimizer_node_gparam_s(ranks);
    if (!(profile > 0)) return;  // no rank curve to compare with
    const double f = node_gparam_s / profile;
    has = true;
    moved_pct = (f - 1) * 100;
    tracked_ms = simulated_with_cpu_scaled(sc, p, opt, f);
    error_pct = (tracked_ms - r.measured.median_ms) / r.measured.median_ms * 100;
  };
  if (p.host_probe)
    track(p.host_probe->mean_gparam_s(), p.host_probe->ranks, r.has_host, r.host_moved_pct, r.host_tracked_ms,
          r.host_tracked_error_pct);
  if (p.pages_probe)
    track(p.pages_probe->node_gparam_s, p.pages_probe->ranks, r.has_pages, r.pages_pct, r.pages_tracked_ms,
          r.pages_tracked_error_pct);
}

}  // namespace

SteadyStat steady_step_ms(const MeasuredPoint& p) { return step_stat(p, compared_steps(p, speculation_case(p))); }

Validation validate_sweep(core::Scenario sc, const MeasuredSweep& m) {
  if (m.points.empty()) throw core::InputError(m.file + ": the measured sweep has no points");
  // Simulate what ran: the run's ranks on one node, its CPU threads and micro-batches.
  backend::sim::SimOptions opt;
  if (m.world != sc.cluster.world_size()) {
    sc.cluster.nodes = 1;
    sc.cluster.gpus_per_node = m.world;
    opt.overrides.world = m.world;
    opt.overrides.world_from = core::printable(m.file) + ": world";
  }
  opt.overrides.cpu_threads = m.threads;
  if (m.grad_accum > 0) {
    opt.overrides.grad_accum = m.grad_accum;
    opt.overrides.grad_accum_from = core::printable(m.file) + ": grad_accum";
  }

  Validation v;
  std::vector<std::pair<double, double>> step_errors, memory_errors, tracked_errors, pages_errors;
  for (const MeasuredPoint& p : m.points) {
    opt.overrides.speculation_bytes = p.speculation_bytes;
    opt.overrides.speculation_layers = p.speculation_layers;  // as it ran, never the scenario's auto
    opt.overrides.staging_slots = p.staging_slots;
    opt.overrides.carry_tail = p.carry_tail;
    opt.overrides.ring_forward_order = p.ring_forward_order;
    opt.overrides.cpu_order = core::CpuOrderSetting{false, p.cpu_order};  // as it ran, never the scenario's auto
    opt.speculation = speculation_case(p);
    const std::vector<bool> sel = compared_steps(p, opt.speculation);
    const backend::sim::SimPoint sp = backend::sim::simulate_step(sc, p.ratio, opt);
    if (std::abs(sp.ratio - p.actual_ratio) > 1e-9)
      throw core::InputError(m.file + ": ratio " + std::to_string(p.ratio) + ": the engine split it to " +
                             std::to_string(p.actual_ratio) + " but the simulator to " + std::to_string(sp.ratio) +
                             ": the measurement is of another model, world or partition than the scenario's");
    ValidationRow r;
    r.ratio = p.ratio;
    r.actual_ratio = p.actual_ratio;
    r.measured = step_stat(p, sel);
    r.simulated_ms = ms(sp.step_ns);
    r.error_pct = (r.simulated_ms - r.measured.median_ms) / r.measured.median_ms * 100.0;
    using K = core::OpKind;
    r.meas_compute_ms = median_of(p, sel, [](const MeasuredPoint::Step& s) {
      return ms(kind(s.kind_ns, K::kForward) + kind(s.kind_ns, K::kBackward));
    });
    r.sim_compute_ms = ms(kind(sp.kind_ns, K::kForward) + kind(sp.kind_ns, K::kBackward));
    r.meas_opt_phase_ms = median_of(p, sel, [](const MeasuredPoint::Step& s) { return ms(s.optimizer_phase_ns); });
    r.sim_opt_phase_ms = ms(sp.optimizer_phase_ns);
    // the CPU queue's optimizer work: its passes and, for speculated layers, the commits (which redo the
    // update when the speculation did not hold)
    r.meas_cpu_opt_ms = median_of(p, sel, [](const MeasuredPoint::Step& s) {
      return ms(kind(s.kind_ns, K::kCpuOptimizer) + kind(s.kind_ns, K::kCpuCommit));
    });
    r.sim_cpu_opt_ms = ms(kind(sp.kind_ns, K::kCpuOptimizer) + kind(sp.kind_ns, K::kCpuCommit));
    r.meas_d2h_ms = median_of(p, sel, [](const MeasuredPoint::Step& s) { return ms(kind(s.kind_ns, K::kD2HGrad)); });
    r.sim_d2h_ms = ms(kind(sp.kind_ns, K::kD2HGrad));
    r.meas_h2d_ms = median_of(p, sel, [](const MeasuredPoint::Step& s) { return ms(kind(s.kind_ns, K::kH2DParam)); });
    r.sim_h2d_ms = ms(kind(sp.kind_ns, K::kH2DParam));
    std::vector<double> mhz = values(p, sel, [](const MeasuredPoint::Step& s) { return s.sm_mhz; });
    std::erase_if(mhz, [](double x) { return std::isnan(x); });  // steps whose run read no clock
    if (!mhz.empty()) r.meas_sm_mhz = median(std::move(mhz));
    if (p.gpu_measured_bytes && *p.gpu_measured_bytes > 0) {
      r.has_memory = true;
      r.meas_gpu_gb = double(*p.gpu_measured_bytes) / 1e9;
      r.sim_gpu_gb = double(sp.memory.gpu_total) / 1e9;
      r.gpu_error_pct = (r.sim_gpu_gb - r.meas_gpu_gb) / r.meas_gpu_gb * 100.0;
      memory_errors.emplace_back(r.ratio, r.gpu_error_pct);
    }
    track_cpu_rate(sc, p, opt, r);
    if (r.has_host) tracked_errors.emplace_back(r.ratio, r.host_tracked_error_pct);
    if (r.has_pages) pages_errors.emplace_back(r.ratio, r.pages_tracked_error_pct);
    step_errors.emplace_back(r.ratio, r.error_pct);
    v.rows.push_back(r);
  }
  const ErrorSummary steps = summarize(step_errors);
  v.mape_pct = steps.mape_pct;
  v.worst_pct = steps.worst_pct;
  v.worst_ratio = steps.worst_ratio;
  v.memory = summarize(memory_errors);
  v.host_tracked = summarize(tracked_errors);
  v.pages_tracked = summarize(pages_errors);
  return v;
}

}  // namespace tf::app
