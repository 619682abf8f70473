// Hardware profiles: parsing with sources for every figure, built-in lookup, derived rates.
#include "core/hardware.h"

#include <algorithm>
#include <cmath>

#include "core/config_node.h"
#include "core/error.h"
#include "core/scenario_builtin.h"

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

double CpuProfile::optimizer_gparam_s(int threads) const {
  const double t = double(std::max(threads, 0));
  const auto& m = optimizer_gparam_s_by_threads;
  double r = t * optimizer_gparam_s_per_core;
  if (!m.empty()) {
    if (t <= m.front().first) {
      r = m.front().second * t / m.front().first;
    } else {
      r = m.back().second;
      for (size_t i = 1; i < m.size(); ++i)
        if (t <= m[i].first) {
          const double f = (t - m[i - 1].first) / double(m[i].first - m[i - 1].first);
          r = m[i - 1].second + f * (m[i].second - m[i - 1].second);
          break;
        }
    }
  }
  return std::min(r, optimizer_gparam_s_all_cores);
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
    if (c.has("optimizer_gparam_s_by_threads")) {
      const Node& v = figure(c, "optimizer_gparam_s_by_threads", p);
      if (!v.is_seq() || v.children.empty())
        config::fail(v, "expected a list of [threads, gparam_s] pairs, got " + v.describe());
      for (const Node& e : v.children) {
        if (!e.is_seq() || e.children.size() != 2)
          config::fail(e, "expected a pair [threads, gparam_s], got " + e.describe());
        const int threads = int(config::read_int(e.children[0], 1, p.cpu.cores));
        const double rate = config::read_number(e.children[1], 0, 1e4, true);
        auto& m = p.cpu.optimizer_gparam_s_by_threads;
        if (!m.empty() && threads <= m.back().first)
          config::fail(e.children[0], "thread counts must ascend; " + std::to_string(threads) + " follows " +
                                          std::to_string(m.back().first));
        m.emplace_back(threads, rate);
      }
    }
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
