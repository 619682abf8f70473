// Hardware profiles: parsing with sources for every figure, built-in lookup, derived rates.
#include "core/hardware.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <tuple>

#include "core/config_node.h"
#include "core/error.h"
#include "core/scenario_builtin.h"
#include "core/strings.h"

namespace tf::core {

using config::MapReader;
using config::Node;

namespace {

constexpr std::string_view kFigureHint = "a figure {value: V, source: \"datasheet name or measurement\"}";

// A figure is {value: V, source: "..."} (optionally note: "..."); returns the value node.
const Node& figure(MapReader& m, std::string_view key, HardwareProfile& p) {
  const Node& f = m.require(key, std::string(kFigureHint));
  MapReader fr(f, p.warnings, kFigureHint);
  const Node& v = fr.require("value", "the figure's value, in the unit its key names");
  const Node& src = fr.require("source", "a source: a datasheet by name or a measurement");
  p.sources[f.path] = config::read_string(src);
  if (const Node* note = fr.find("note")) config::read_string(*note);
  fr.warn_unknown();
  return v;
}

double fig_num(MapReader& m, std::string_view key, HardwareProfile& p, double lo, double hi, bool lo_open = false) {
  return config::read_number(figure(m, key, p), lo, hi, lo_open);
}
int64_t fig_int(MapReader& m, std::string_view key, HardwareProfile& p, int64_t lo, int64_t hi) {
  return config::read_int(figure(m, key, p), lo, hi);
}

// An optional CPU curve [[count, gparam_s], ...] with counts ascending in [1, cores]; `count` names them
// ("threads", "ranks") and `one` one of them ("thread", "rank").
std::vector<std::pair<int, double>> count_rate_pairs(MapReader& c, std::string_view key, const std::string& count,
                                                     const std::string& one, HardwareProfile& p) {
  std::vector<std::pair<int, double>> m;
  if (!c.has(key)) return m;
  const Node& v = figure(c, key, p);
  if (!v.is_seq() || v.children.empty())
    config::fail(v, "expected a list of [" + count + ", gparam_s] pairs, got " + v.describe());
  for (const Node& e : v.children) {
    if (!e.is_seq() || e.children.size() != 2)
      config::fail(e, "expected a pair [" + count + ", gparam_s], got " + e.describe());
    const int n = int(config::read_int(e.children[0], 1, p.cpu.cores));
    const double rate = config::read_number(e.children[1], 0, 1e4, true);
    if (!m.empty() && n <= m.back().first)
      config::fail(e.children[0],
                   one + " counts must ascend; " + std::to_string(n) + " follows " + std::to_string(m.back().first));
    m.emplace_back(n, rate);
  }
  return m;
}

// An optional footprint curve [[node_bytes, factor], ...], bytes ascending.
std::vector<FootprintPoint> footprint_points(MapReader& c, std::string_view key, HardwareProfile& p) {
  std::vector<FootprintPoint> m;
  if (!c.has(key)) return m;
  const Node& v = figure(c, key, p);
  if (!v.is_seq() || v.children.empty())
    config::fail(v, "expected a list of [node_bytes, factor] pairs, got " + v.describe());
  for (const Node& e : v.children) {
    if (!e.is_seq() || e.children.size() != 2)
      config::fail(e, "expected a pair [node_bytes, factor], got " + e.describe());
    const FootprintPoint pt{config::read_int(e.children[0], 1, int64_t(1) << 60),
                            config::read_number(e.children[1], 0, 10, true)};
    if (!m.empty() && pt.node_bytes <= m.back().node_bytes)
      config::fail(e.children[0], "node_bytes must ascend; " + std::to_string(pt.node_bytes) + " follows " +
                                      std::to_string(m.back().node_bytes));
    m.push_back(pt);
  }
  return m;
}

std::vector<GemmPoint> read_gemm_points(const Node& v) {
  if (!v.is_seq() || v.children.empty())
    config::fail(v, "expected a list of [m, n, k, tflops] or [m, n, k, tflops, pass] entries, got " + v.describe());
  std::vector<GemmPoint> pts;
  for (const Node& e : v.children) {
    if (!e.is_seq() || (e.children.size() != 4 && e.children.size() != 5))
      config::fail(e, "expected an entry [m, n, k, tflops] or [m, n, k, tflops, pass], got " + e.describe());
    GemmPoint g;
    g.m = config::read_int(e.children[0], 1, int64_t(1) << 31);
    g.n = config::read_int(e.children[1], 1, int64_t(1) << 31);
    g.k = config::read_int(e.children[2], 1, int64_t(1) << 31);
    g.tflops = config::read_number(e.children[3], 0, 1e5, true);
    if (e.children.size() == 5) {
      const Node& pn = e.children[4];
      const std::optional<GemmPass> pass = pn.is_scalar() ? parse_gemm_pass(pn.scalar) : std::nullopt;
      if (!pass)
        config::fail(pn, "unknown GEMM pass " + pn.describe() + "; allowed: forward, input_grad, weight_grad, any");
      g.pass = *pass;
    }
    for (const GemmPoint& o : pts)
      if (o.m == g.m && o.n == g.n && o.k == g.k && o.pass == g.pass)
        config::fail(
            e, "shape [" + std::to_string(g.m) + ", " + std::to_string(g.n) + ", " + std::to_string(g.k) +
                   "] is listed twice" +
                   (g.pass == GemmPass::kAny ? std::string() : " for pass " + std::string(gemm_pass_name(g.pass))));
    pts.push_back(g);
  }
  return pts;
}

// [head_dim, seq, pairs, tflops, pass], or [head_dim, seq, tflops, pass] as profiles before pairs wrote them
std::vector<AttentionPoint> read_attention_points(const Node& v) {
  constexpr const char* kForms = "[head_dim, seq, pairs, tflops, forward|backward] (or without pairs)";
  if (!v.is_seq() || v.children.empty())
    config::fail(v, std::string("expected a list of ") + kForms + " entries, got " + v.describe());
  std::vector<AttentionPoint> pts;
  for (const Node& e : v.children) {
    if (!e.is_seq() || (e.children.size() != 4 && e.children.size() != 5))
      config::fail(e, std::string("expected an entry ") + kForms + ", got " + e.describe());
    const bool with_pairs = e.children.size() == 5;
    AttentionPoint a;
    a.head_dim = config::read_int(e.children[0], 1, 1 << 16);
    a.seq = config::read_int(e.children[1], 1, int64_t(1) << 31);
    if (with_pairs) a.pairs = config::read_int(e.children[2], 1, int64_t(1) << 31);
    a.tflops = config::read_number(e.children[with_pairs ? 3 : 2], 0, 1e5, true);
    const Node& pn = e.children.back();
    if (!pn.is_scalar() || (pn.scalar != "forward" && pn.scalar != "backward"))
      config::fail(pn, "unknown attention pass " + pn.describe() + "; allowed: forward, backward");
    a.backward = pn.scalar == "backward";
    for (const AttentionPoint& o : pts)
      if (o.head_dim == a.head_dim && o.seq == a.seq && o.pairs == a.pairs && o.backward == a.backward)
        config::fail(e, "head_dim " + std::to_string(a.head_dim) + ", seq " + std::to_string(a.seq) +
                            (a.pairs ? ", pairs " + std::to_string(a.pairs) : std::string()) + " (" + pn.scalar +
                            ") is listed twice");
    pts.push_back(a);
  }
  return pts;
}

std::vector<KernelRate> read_kernel_rates(const Node& v) {
  std::string allowed;
  for (int c = 1; c < kKernelClassCount; ++c)
    allowed += (c > 1 ? ", " : "") + std::string(kernel_class_name(KernelClass(c)));
  if (!v.is_seq() || v.children.empty())
    config::fail(v, "expected a list of [kernel_class, gbps] pairs, got " + v.describe());
  std::vector<KernelRate> rates;
  for (const Node& e : v.children) {
    if (!e.is_seq() || e.children.size() != 2)
      config::fail(e, "expected a pair [kernel_class, gbps], got " + e.describe());
    const Node& cn = e.children[0];
    const std::optional<KernelClass> c = cn.is_scalar() ? parse_kernel_class(cn.scalar) : std::nullopt;
    if (!c || *c == KernelClass::kOther)
      config::fail(cn, "unknown kernel class " + cn.describe() + "; allowed: " + allowed);
    for (const KernelRate& o : rates)
      if (o.kind == *c) config::fail(cn, "kernel class " + cn.scalar + " is listed twice");
    rates.push_back({*c, config::read_number(e.children[1], 0, 1e6, true)});
  }
  return rates;
}

std::vector<BusPoint> read_bus_points(const Node& v) {
  if (!v.is_seq() || v.children.empty())
    config::fail(v, "expected a list of [message_bytes, bus_gbps] pairs, got " + v.describe());
  std::vector<BusPoint> pts;
  for (const Node& e : v.children) {
    if (!e.is_seq() || e.children.size() != 2)
      config::fail(e, "expected a pair [message_bytes, bus_gbps], got " + e.describe());
    BusPoint b;
    b.message_bytes = config::read_int(e.children[0], 1, int64_t(1) << 50);
    b.bus_gbps = config::read_number(e.children[1], 0, 1e5, true);
    if (!pts.empty() && b.message_bytes <= pts.back().message_bytes)
      config::fail(e.children[0], "message sizes must ascend; " + std::to_string(b.message_bytes) + " follows " +
                                      std::to_string(pts.back().message_bytes));
    pts.push_back(b);
  }
  return pts;
}

}  // namespace

double LinkProfile::bus_gbps_at(int64_t message_bytes) const {
  const auto& p = bus_gbps_by_message_bytes;
  if (p.empty()) return gbps;
  if (message_bytes <= p.front().message_bytes) return p.front().bus_gbps;
  if (message_bytes >= p.back().message_bytes) return p.back().bus_gbps;
  for (size_t i = 1; i < p.size(); ++i)
    if (message_bytes <= p[i].message_bytes) {
      const double x0 = std::log(double(p[i - 1].message_bytes)), x1 = std::log(double(p[i].message_bytes));
      const double t = (std::log(double(message_bytes)) - x0) / (x1 - x0);
      return p[i - 1].bus_gbps + t * (p[i].bus_gbps - p[i - 1].bus_gbps);
    }
  return p.back().bus_gbps;
}

const AttentionPoint* GpuProfile::attention_point_at(int64_t head_dim, int64_t seq, int64_t pairs,
                                                     bool backward) const {
  const auto dist = [](int64_t a, int64_t b) {
    return a <= 0 || b <= 0 ? 0.0 : std::abs(std::log(double(a) / double(b)));
  };
  // (head_dim, seq, pairs) distances, compared in that order
  const auto key = [&](const AttentionPoint& a) {
    return std::tuple{dist(a.head_dim, head_dim), dist(a.seq, seq), dist(a.pairs, pairs)};
  };
  const AttentionPoint* best = nullptr;
  for (const AttentionPoint& a : attention_tflops_by_shape)
    if (a.backward == backward && (!best || key(a) < key(*best))) best = &a;
  return best;
}

double GpuProfile::attention_tflops_at(int64_t head_dim, int64_t seq, int64_t pairs, bool backward) const {
  const AttentionPoint* p = attention_point_at(head_dim, seq, pairs, backward);
  return p ? p->tflops : 0.0;
}

double GpuProfile::gemm_peak_tflops(DType compute) const {
  switch (compute) {
    case DType::kBF16: return bf16_tflops;
    case DType::kF16: return fp16_tflops;
    case DType::kF32: return fp32_tflops;
    case DType::kNone: break;
  }
  return 0;
}

double GpuProfile::kernel_gbps(KernelClass c) const {
  for (const KernelRate& r : decoder_kernel_gbps)
    if (r.kind == c && r.gbps > 0) return r.gbps;
  return hbm_gbps;
}

namespace {

// Linear in x between the ascending points of m (x_of, y_of) around x, the last point's y beyond them; x is
// above the first point's.
template <class Points, class XOf, class YOf>
double linear_above_first(const Points& m, double x, XOf x_of, YOf y_of) {
  for (size_t i = 1; i < m.size(); ++i)
    if (x <= double(x_of(m[i]))) {
      const double x0 = double(x_of(m[i - 1])), f = (x - x0) / (double(x_of(m[i])) - x0);
      return y_of(m[i - 1]) + f * (y_of(m[i]) - y_of(m[i - 1]));
    }
  return y_of(m.back());
}

const auto kCount = [](const std::pair<int, double>& p) { return p.first; };
const auto kRate = [](const std::pair<int, double>& p) { return p.second; };

}  // namespace

double CpuProfile::optimizer_gparam_s(int threads) const {
  const double t = double(std::max(threads, 0));
  const auto& m = optimizer_gparam_s_by_threads;
  double r = t * optimizer_gparam_s_per_core;
  if (!m.empty())
    r = t <= m.front().first ? m.front().second * t / m.front().first : linear_above_first(m, t, kCount, kRate);
  return std::min(r, optimizer_gparam_s_all_cores);
}

double CpuProfile::optimizer_node_gparam_s(int ranks) const {
  const auto& m = optimizer_node_gparam_s_by_ranks;
  if (m.empty()) return 0;
  return ranks <= m.front().first ? m.front().second : linear_above_first(m, ranks, kCount, kRate);
}

double CpuProfile::optimizer_footprint_factor(int64_t node_bytes) const {
  const auto& m = optimizer_rate_factor_by_node_bytes;
  if (m.empty()) return 1;
  if (node_bytes <= m.front().node_bytes) return m.front().factor;
  return linear_above_first(
      m, double(node_bytes), [](const FootprintPoint& p) { return p.node_bytes; },
      [](const FootprintPoint& p) { return p.factor; });
}

CpuProfile CpuProfile::with_rates_scaled(double factor) const {
  if (!(factor > 0) || !std::isfinite(factor))
    throw InputError("a CPU rate factor must be a positive number, got " + std::to_string(factor));
  CpuProfile c = *this;
  c.optimizer_gparam_s_per_core *= factor;
  c.optimizer_gparam_s_all_cores *= factor;
  for (auto& [threads, rate] : c.optimizer_gparam_s_by_threads) rate *= factor;
  for (auto& [ranks, rate] : c.optimizer_node_gparam_s_by_ranks) rate *= factor;
  return c;
}

HardwareProfile parse_hardware_profile(std::string_view yaml_text, const std::string& display_name) {
  const Node root = config::parse_yaml(yaml_text, display_name);
  HardwareProfile p;
  MapReader top(root, p.warnings, "a hardware profile");
  p.name = config::read_string(top.require("name", "the profile's name"));
  if (const Node* d = top.find("description")) p.description = config::read_string(*d);
  p.gpus_per_node = int(fig_int(top, "gpus_per_node", p, 1, 1024));

  {
    MapReader g(top.require("gpu", "the GPU's figures"), p.warnings, "the GPU's figures");
    p.gpu.name = config::read_string(g.require("name", "the GPU's name"));
    p.gpu.hbm_bytes = fig_int(g, "hbm_bytes", p, 1, int64_t(1) << 50);
    p.gpu.hbm_gbps = fig_num(g, "hbm_gbps", p, 0, 1e6, true);
    p.gpu.bf16_tflops = fig_num(g, "bf16_tflops", p, 0, 1e5);
    p.gpu.fp16_tflops = fig_num(g, "fp16_tflops", p, 0, 1e5, true);
    p.gpu.fp32_tflops = fig_num(g, "fp32_tflops", p, 0, 1e5, true);
    p.gpu.kernel_launch_ns = fig_num(g, "kernel_launch_ns", p, 0, 1e9);
    if (g.has("hbm_copy_gbps")) p.gpu.hbm_copy_gbps = fig_num(g, "hbm_copy_gbps", p, 0, 1e6, true);
    if (g.has("event_record_ns")) p.gpu.event_record_ns = fig_num(g, "event_record_ns", p, 0, 1e9);
    if (g.has("event_sync_ns")) p.gpu.event_sync_ns = fig_num(g, "event_sync_ns", p, 0, 1e9);
    if (g.has("optimizer_gbps")) p.gpu.optimizer_gbps = fig_num(g, "optimizer_gbps", p, 0, 1e6, true);
    if (g.has("gemm_sm_clock_mhz")) p.gpu.gemm_sm_clock_mhz = fig_num(g, "gemm_sm_clock_mhz", p, 0, 1e5, true);
    for (const auto& [key, field] :
         {std::pair{"compute_slowdown_during_collectives", &GpuProfile::compute_slowdown_during_collectives},
          std::pair{"compute_slowdown_during_dma", &GpuProfile::compute_slowdown_during_dma}})
      if (g.has(key)) p.gpu.*field = fig_num(g, key, p, 1, 100);
    for (const auto& [key, field] : {std::pair{"context_bytes", &GpuProfile::context_bytes},
                                     std::pair{"nccl_comm_bytes", &GpuProfile::nccl_comm_bytes}})
      if (g.has(key)) p.gpu.*field = fig_int(g, key, p, 0, int64_t(1) << 40);
    if (g.has("alloc_granularity_bytes"))
      p.gpu.alloc_granularity_bytes = fig_int(g, "alloc_granularity_bytes", p, 1, int64_t(1) << 30);
    if (g.has("pinned_host_map_bytes_per_gb"))
      p.gpu.pinned_host_map_bytes_per_gb = fig_num(g, "pinned_host_map_bytes_per_gb", p, 0, 1e9);
    if (g.has("bf16_gemm_tflops_by_shape"))
      p.gpu.bf16_gemm_tflops_by_shape = read_gemm_points(figure(g, "bf16_gemm_tflops_by_shape", p));
    if (g.has("attention_tflops_by_shape"))
      p.gpu.attention_tflops_by_shape = read_attention_points(figure(g, "attention_tflops_by_shape", p));
    if (g.has("decoder_kernel_gbps"))
      p.gpu.decoder_kernel_gbps = read_kernel_rates(figure(g, "decoder_kernel_gbps", p));
    g.warn_unknown();
  }
  {
    const Node& pn = top.require("pcie", "the host link's figures");
    MapReader pc(pn, p.warnings, "the host link's figures");
    p.pcie.h2d_gbps = fig_num(pc, "h2d_gbps", p, 0, 1e4, true);
    p.pcie.d2h_gbps = fig_num(pc, "d2h_gbps", p, 0, 1e4, true);
    p.pcie.bidir_total_gbps = fig_num(pc, "bidir_total_gbps", p, 0, 1e4, true);
    if (p.pcie.bidir_total_gbps > p.pcie.h2d_gbps + p.pcie.d2h_gbps + 1e-9)
      config::fail(*pc.find("bidir_total_gbps"),
                   config::format_number(p.pcie.bidir_total_gbps) + " exceeds h2d_gbps + d2h_gbps = " +
                       config::format_number(p.pcie.h2d_gbps + p.pcie.d2h_gbps) + "; allowed (0, h2d_gbps + d2h_gbps]");
    p.pcie.gpus_per_link = int(fig_int(pc, "gpus_per_link", p, 1, p.gpus_per_node));
    if (pc.has("pageable_h2d_gbps")) p.pcie.pageable_h2d_gbps = fig_num(pc, "pageable_h2d_gbps", p, 0, 1e4, true);
    if (pc.has("copy_latency_ns")) p.pcie.copy_latency_ns = fig_num(pc, "copy_latency_ns", p, 0, 1e9);
    if (pc.has("h2d_slowdown_under_cpu_pass"))
      p.pcie.h2d_slowdown_under_cpu_pass = fig_num(pc, "h2d_slowdown_under_cpu_pass", p, 1, 100);
    if (pc.has("d2h_slowdown_under_cpu_pass"))
      p.pcie.d2h_slowdown_under_cpu_pass = fig_num(pc, "d2h_slowdown_under_cpu_pass", p, 1, 100);
    pc.warn_unknown();
  }
  {
    MapReader in(top.require("intra_node", "the GPU-to-GPU link inside a node"), p.warnings,
                 "the GPU-to-GPU link inside a node");
    p.intra_node.kind = config::read_choice(in.require("kind", "nvlink, pcie or none"), {"nvlink", "pcie", "none"});
    p.intra_node.gbps = fig_num(in, "bus_gbps", p, 0, 1e5);
    p.intra_node.latency_ns = fig_num(in, "latency_ns", p, 0, 1e9);
    if (in.has("bus_gbps_by_message_bytes"))
      p.intra_node.bus_gbps_by_message_bytes = read_bus_points(figure(in, "bus_gbps_by_message_bytes", p));
    if (in.has("all_gather_bus_gbps_by_message_bytes"))
      p.intra_node.all_gather_bus_gbps_by_message_bytes =
          read_bus_points(figure(in, "all_gather_bus_gbps_by_message_bytes", p));
    if (in.has("reduce_scatter_bus_gbps_by_message_bytes"))
      p.intra_node.reduce_scatter_bus_gbps_by_message_bytes =
          read_bus_points(figure(in, "reduce_scatter_bus_gbps_by_message_bytes", p));
    if (p.gpus_per_node > 1 && p.intra_node.gbps <= 0)
      config::fail(*in.find("bus_gbps"),
                   "is 0 but the node has " + std::to_string(p.gpus_per_node) + " GPUs; allowed (0, 1e+05]");
    in.warn_unknown();
  }
  {
    MapReader net(top.require("inter_node", "the network between nodes (kind: none, gbps: 0 for one node)"), p.warnings,
                  "the network between nodes");
    p.inter_node.kind =
        config::read_choice(net.require("kind", "infiniband, ethernet or none"), {"infiniband", "ethernet", "none"});
    p.inter_node.gbps = fig_num(net, "gbps", p, 0, 1e5);
    p.inter_node.latency_ns = fig_num(net, "latency_ns", p, 0, 1e9);
    net.warn_unknown();
  }
  {
    MapReader c(top.require("cpu", "the host CPU's figures"), p.warnings, "the host CPU's figures");
    p.cpu.name = config::read_string(c.require("name", "the CPU's name"));
    p.cpu.cores = int(fig_int(c, "cores", p, 1, 1 << 16));
    p.cpu.mem_gbps = fig_num(c, "mem_gbps", p, 0, 1e5, true);
    p.cpu.optimizer_gparam_s_per_core = fig_num(c, "optimizer_gparam_s_per_core", p, 0, 1e3, true);
    p.cpu.optimizer_gparam_s_all_cores = fig_num(c, "optimizer_gparam_s_all_cores", p, 0, 1e4, true);
    if (p.cpu.optimizer_gparam_s_all_cores < p.cpu.optimizer_gparam_s_per_core)
      config::fail(*c.find("optimizer_gparam_s_all_cores"),
                   config::format_number(p.cpu.optimizer_gparam_s_all_cores) +
                       " is below optimizer_gparam_s_per_core " +
                       config::format_number(p.cpu.optimizer_gparam_s_per_core) + "; allowed [per-core rate, 1e+04]");
    p.cpu.dma_slowdown_factor = fig_num(c, "dma_slowdown_factor", p, 1, 100);
    for (auto [key, v] : {std::pair{"dma_slowdown_factor_d2h", &p.cpu.dma_slowdown_factor_d2h},
                          std::pair{"dma_slowdown_factor_h2d", &p.cpu.dma_slowdown_factor_h2d}})
      if (c.has(key)) *v = fig_num(c, key, p, 1, 100);
    if (c.has("optimizer_out_of_place_factor"))
      p.cpu.optimizer_out_of_place_factor = fig_num(c, "optimizer_out_of_place_factor", p, 0.25, 10);
    p.cpu.optimizer_gparam_s_by_threads = count_rate_pairs(c, "optimizer_gparam_s_by_threads", "threads", "thread", p);
    p.cpu.optimizer_node_gparam_s_by_ranks =
        count_rate_pairs(c, "optimizer_node_gparam_s_by_ranks", "ranks", "rank", p);
    p.cpu.optimizer_rate_factor_by_node_bytes = footprint_points(c, "optimizer_rate_factor_by_node_bytes", p);
    c.warn_unknown();
  }
  {
    MapReader h(top.require("host", "the host memory"), p.warnings, "the host memory");
    p.host_memory_bytes = fig_int(h, "memory_bytes", p, 1, int64_t(1) << 60);
    h.warn_unknown();
  }
  top.warn_unknown();
  return p;
}

HardwareProfile load_hardware_profile(const std::filesystem::path& file) {
  const std::string text = config::read_document(file, "hardware profile");
  HardwareProfile p = parse_hardware_profile(text, file.string());
  p.file = file;
  return p;
}

ProfileRef classify_profile_ref(std::string_view s) {
  if (s.ends_with(".yaml") || s.ends_with(".yml")) return ProfileRef::kPath;
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  return plain && s.find("..") == std::string_view::npos ? ProfileRef::kName : ProfileRef::kInvalid;
}

HardwareProfile find_hardware_profile(const std::string& name_or_path) {
  std::string names;
  for (std::string_view n : builtin_hardware_profile_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  switch (classify_profile_ref(name_or_path)) {
    case ProfileRef::kPath: return load_hardware_profile(name_or_path);
    case ProfileRef::kInvalid:
      throw InputError("hardware profile '" + printable(name_or_path) +
                       "' is neither a name nor a .yaml path: a name has only letters, digits, '-', '_' and '.' (no "
                       "'/' or '..'), a path ends in .yaml (built-in: " +
                       names + ")");
    case ProfileRef::kName: break;
  }
  if (auto text = builtin_hardware_profile_text(name_or_path))
    return parse_hardware_profile(*text, "<built-in>/scenarios/hardware/" + name_or_path + ".yaml");
  throw InputError("hardware profile '" + name_or_path + "' is not built in (built-in: " + names +
                   "); give a path to a .yaml profile, e.g. one `twinflow calibrate --out` wrote");
}

namespace {

// A YAML double-quoted scalar: quotes, backslashes and control bytes escaped.
std::string yaml_quoted(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

class ProfileWriter {
 public:
  explicit ProfileWriter(const HardwareProfile& p) : p_(p) {}
  std::string& out() { return out_; }

  void text(int indent, std::string_view key, const std::string& value) {
    if (value.empty()) throw std::invalid_argument("format_hardware_profile: " + std::string(key) + " is empty");
    line(indent, std::string(key) + ": " + yaml_quoted(value));
  }
  void open(std::string_view section) {
    section_ = std::string(section);
    line(0, section_ + ":");
  }
  // key: {value: V, source: "..."} in the current section (or at the top when indent is 0).
  void figure(int indent, std::string_view key, const std::string& value) {
    line(indent, std::string(key) + ": {value: " + value + ", source: " + yaml_quoted(source(indent, key)) + "}");
  }
  // key:\n  value:\n    - [a, b, ...]\n  source: "..."
  void list_figure(int indent, std::string_view key, const std::vector<std::string>& rows) {
    line(indent, std::string(key) + ":");
    line(indent + 2, "value:");
    for (const std::string& r : rows) line(indent + 4, "- [" + r + "]");
    line(indent + 2, "source: " + yaml_quoted(source(indent, key)));
  }

 private:
  const std::string& source(int indent, std::string_view key) const {
    const std::string path = indent == 0 ? std::string(key) : section_ + "." + std::string(key);
    const auto it = p_.sources.find(path);
    if (it == p_.sources.end() || it->second.empty())
      throw std::invalid_argument("format_hardware_profile: figure " + path + " has no source");
    return it->second;
  }
  void line(int indent, const std::string& s) { out_ += std::string(size_t(indent), ' ') + s + "\n"; }

  const HardwareProfile& p_;
  std::string section_;
  std::string out_;
};

std::vector<std::string> bus_rows(const std::vector<BusPoint>& pts) {
  std::vector<std::string> rows;
  for (const BusPoint& b : pts) rows.push_back(std::to_string(b.message_bytes) + ", " + number_text(b.bus_gbps));
  return rows;
}

}  // namespace

std::string format_hardware_profile(const HardwareProfile& p, std::string_view header) {
  ProfileWriter w(p);
  std::string& out = w.out();
  while (!header.empty()) {
    const size_t nl = header.find('\n');
    const std::string_view l = header.substr(0, nl);
    out += l.empty() ? "#\n" : "# " + std::string(l) + "\n";
    header = nl == std::string_view::npos ? std::string_view{} : header.substr(nl + 1);
  }
  const auto num = number_text;
  const auto integer = [](int64_t v) { return std::to_string(v); };
  w.text(0, "name", p.name);
  if (!p.description.empty()) w.text(0, "description", p.description);
  w.figure(0, "gpus_per_node", integer(p.gpus_per_node));

  const GpuProfile& g = p.gpu;
  w.open("gpu");
  w.text(2, "name", g.name);
  w.figure(2, "hbm_bytes", integer(g.hbm_bytes));
  w.figure(2, "hbm_gbps", num(g.hbm_gbps));
  w.figure(2, "bf16_tflops", num(g.bf16_tflops));
  w.figure(2, "fp16_tflops", num(g.fp16_tflops));
  w.figure(2, "fp32_tflops", num(g.fp32_tflops));
  w.figure(2, "kernel_launch_ns", num(g.kernel_launch_ns));
  // An optional figure is written when it was measured: non-zero, or zero with a source.
  const auto measured = [&](double v, const char* key) { return v != 0 || p.sources.count(key) > 0; };
  if (measured(g.hbm_copy_gbps, "gpu.hbm_copy_gbps")) w.figure(2, "hbm_copy_gbps", num(g.hbm_copy_gbps));
  if (measured(g.event_record_ns, "gpu.event_record_ns")) w.figure(2, "event_record_ns", num(g.event_record_ns));
  if (measured(g.event_sync_ns, "gpu.event_sync_ns")) w.figure(2, "event_sync_ns", num(g.event_sync_ns));
  if (measured(g.optimizer_gbps, "gpu.optimizer_gbps")) w.figure(2, "optimizer_gbps", num(g.optimizer_gbps));
  if (g.gemm_sm_clock_mhz != 0) w.figure(2, "gemm_sm_clock_mhz", num(g.gemm_sm_clock_mhz));
  if (g.compute_slowdown_during_collectives != 0)
    w.figure(2, "compute_slowdown_during_collectives", num(g.compute_slowdown_during_collectives));
  if (g.compute_slowdown_during_dma != 0)
    w.figure(2, "compute_slowdown_during_dma", num(g.compute_slowdown_during_dma));
  if (measured(double(g.context_bytes), "gpu.context_bytes")) w.figure(2, "context_bytes", integer(g.context_bytes));
  if (measured(double(g.nccl_comm_bytes), "gpu.nccl_comm_bytes"))
    w.figure(2, "nccl_comm_bytes", integer(g.nccl_comm_bytes));
  if (g.alloc_granularity_bytes != 0) w.figure(2, "alloc_granularity_bytes", integer(g.alloc_granularity_bytes));
  if (measured(g.pinned_host_map_bytes_per_gb, "gpu.pinned_host_map_bytes_per_gb"))
    w.figure(2, "pinned_host_map_bytes_per_gb", num(g.pinned_host_map_bytes_per_gb));
  if (!g.bf16_gemm_tflops_by_shape.empty()) {
    std::vector<std::string> rows;
    for (const GemmPoint& e : g.bf16_gemm_tflops_by_shape)
      rows.push_back(integer(e.m) + ", " + integer(e.n) + ", " + integer(e.k) + ", " + num(e.tflops) +
                     (e.pass == GemmPass::kAny ? std::string() : ", " + std::string(gemm_pass_name(e.pass))));
    w.list_figure(2, "bf16_gemm_tflops_by_shape", rows);
  }
  if (!g.attention_tflops_by_shape.empty()) {
    std::vector<std::string> rows;
    for (const AttentionPoint& a : g.attention_tflops_by_shape)
      rows.push_back(integer(a.head_dim) + ", " + integer(a.seq) + ", " + (a.pairs ? integer(a.pairs) + ", " : "") +
                     num(a.tflops) + ", " + (a.backward ? "backward" : "forward"));
    w.list_figure(2, "attention_tflops_by_shape", rows);
  }
  if (!g.decoder_kernel_gbps.empty()) {
    std::vector<std::string> rows;
    for (const KernelRate& r : g.decoder_kernel_gbps)
      rows.push_back(std::string(kernel_class_name(r.kind)) + ", " + num(r.gbps));
    w.list_figure(2, "decoder_kernel_gbps", rows);
  }

  const PcieProfile& pc = p.pcie;
  w.open("pcie");
  w.figure(2, "h2d_gbps", num(pc.h2d_gbps));
  w.figure(2, "d2h_gbps", num(pc.d2h_gbps));
  w.figure(2, "bidir_total_gbps", num(pc.bidir_total_gbps));
  w.figure(2, "gpus_per_link", integer(pc.gpus_per_link));
  if (measured(pc.pageable_h2d_gbps, "pcie.pageable_h2d_gbps"))
    w.figure(2, "pageable_h2d_gbps", num(pc.pageable_h2d_gbps));
  if (measured(pc.copy_latency_ns, "pcie.copy_latency_ns")) w.figure(2, "copy_latency_ns", num(pc.copy_latency_ns));
  // 1 is the default (not slowed): written when measured (it has a source) or not 1
  for (const auto& [key, v] : {std::pair{"h2d_slowdown_under_cpu_pass", pc.h2d_slowdown_under_cpu_pass},
                               std::pair{"d2h_slowdown_under_cpu_pass", pc.d2h_slowdown_under_cpu_pass}})
    if (v != 1 || p.sources.count(std::string("pcie.") + key) > 0) w.figure(2, key, num(v));

  const LinkProfile& in = p.intra_node;
  w.open("intra_node");
  w.text(2, "kind", in.kind);
  w.figure(2, "bus_gbps", num(in.gbps));
  w.figure(2, "latency_ns", num(in.latency_ns));
  if (!in.bus_gbps_by_message_bytes.empty())
    w.list_figure(2, "bus_gbps_by_message_bytes", bus_rows(in.bus_gbps_by_message_bytes));
  if (!in.all_gather_bus_gbps_by_message_bytes.empty())
    w.list_figure(2, "all_gather_bus_gbps_by_message_bytes", bus_rows(in.all_gather_bus_gbps_by_message_bytes));
  if (!in.reduce_scatter_bus_gbps_by_message_bytes.empty())
    w.list_figure(2, "reduce_scatter_bus_gbps_by_message_bytes", bus_rows(in.reduce_scatter_bus_gbps_by_message_bytes));

  const LinkProfile& net = p.inter_node;
  w.open("inter_node");
  w.text(2, "kind", net.kind);
  w.figure(2, "gbps", num(net.gbps));
  w.figure(2, "latency_ns", num(net.latency_ns));

  const CpuProfile& c = p.cpu;
  w.open("cpu");
  w.text(2, "name", c.name);
  w.figure(2, "cores", integer(c.cores));
  w.figure(2, "mem_gbps", num(c.mem_gbps));
  w.figure(2, "optimizer_gparam_s_per_core", num(c.optimizer_gparam_s_per_core));
  w.figure(2, "optimizer_gparam_s_all_cores", num(c.optimizer_gparam_s_all_cores));
  if (!c.optimizer_gparam_s_by_threads.empty()) {
    std::vector<std::string> rows;
    for (const auto& [threads, rate] : c.optimizer_gparam_s_by_threads)
      rows.push_back(std::to_string(threads) + ", " + num(rate));
    w.list_figure(2, "optimizer_gparam_s_by_threads", rows);
  }
  if (!c.optimizer_node_gparam_s_by_ranks.empty()) {
    std::vector<std::string> rows;
    for (const auto& [ranks, rate] : c.optimizer_node_gparam_s_by_ranks)
      rows.push_back(std::to_string(ranks) + ", " + num(rate));
    w.list_figure(2, "optimizer_node_gparam_s_by_ranks", rows);
  }
  if (!c.optimizer_rate_factor_by_node_bytes.empty()) {
    std::vector<std::string> rows;
    for (const FootprintPoint& f : c.optimizer_rate_factor_by_node_bytes)
      rows.push_back(std::to_string(f.node_bytes) + ", " + num(f.factor));
    w.list_figure(2, "optimizer_rate_factor_by_node_bytes", rows);
  }
  w.figure(2, "dma_slowdown_factor", num(c.dma_slowdown_factor));
  if (measured(c.dma_slowdown_factor_d2h, "cpu.dma_slowdown_factor_d2h"))
    w.figure(2, "dma_slowdown_factor_d2h", num(c.dma_slowdown_factor_d2h));
  if (measured(c.dma_slowdown_factor_h2d, "cpu.dma_slowdown_factor_h2d"))
    w.figure(2, "dma_slowdown_factor_h2d", num(c.dma_slowdown_factor_h2d));
  if (measured(c.optimizer_out_of_place_factor, "cpu.optimizer_out_of_place_factor"))
    w.figure(2, "optimizer_out_of_place_factor", num(c.optimizer_out_of_place_factor));

  w.open("host");
  w.figure(2, "memory_bytes", integer(p.host_memory_bytes));
  return out;
}

std::vector<std::string_view> builtin_hardware_profile_names() {
  std::vector<std::string_view> out;
  for (const auto& f : builtin::hardware_profiles()) out.push_back(f.name);
  return out;
}

std::optional<std::string_view> builtin_hardware_profile_text(std::string_view name) {
  for (const auto& f : builtin::hardware_profiles())
    if (f.name == name) return f.text;
  return std::nullopt;
}

}  // namespace tf::core
