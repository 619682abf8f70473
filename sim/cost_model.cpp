// Cost models: GEMM roofline, memory-bound kernels, PCIe, NCCL-style collectives, the CPU optimizer.
#include "sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace tf::sim {

namespace {

void require_positive(double v, const char* where, const char* field) {
  if (!(v > 0) || !std::isfinite(v))
    throw std::invalid_argument(std::string(where) + ": " + field + " = " + std::to_string(v) +
                                "; allowed: a finite value > 0");
}

void require_non_negative(double v, const char* where, const char* field) {
  if (!(v >= 0) || !std::isfinite(v))
    throw std::invalid_argument(std::string(where) + ": " + field + " = " + std::to_string(v) +
                                "; allowed: a finite value >= 0");
}

void require_non_negative(int64_t v, const char* where, const char* field) {
  if (v < 0)
    throw std::invalid_argument(std::string(where) + ": " + field + " = " + std::to_string(v) + "; allowed: >= 0");
}

void require_positive(int64_t v, const char* where, const char* field) {
  if (v <= 0)
    throw std::invalid_argument(std::string(where) + ": " + field + " = " + std::to_string(v) + "; allowed: > 0");
}

// The useful fraction of d when it is padded up to whole tiles of t.
double tile_quantization(int64_t d, int64_t t) {
  const int64_t padded = (d + t - 1) / t * t;
  return static_cast<double>(d) / static_cast<double>(padded);
}

void check_shape(GemmShape s, const char* where) {
  require_non_negative(s.m, where, "m");
  require_non_negative(s.n, where, "n");
  require_non_negative(s.k, where, "k");
}

}  // namespace

// ---- GEMM ---------------------------------------------------------------------------------------

double gemm_flops(GemmShape s) {
  check_shape(s, "gemm_flops");
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
}

double gemm_min_bytes(GemmShape s, int64_t bytes_per_element) {
  check_shape(s, "gemm_min_bytes");
  require_positive(bytes_per_element, "gemm_min_bytes", "bytes_per_element");
  const double m = static_cast<double>(s.m), n = static_cast<double>(s.n), k = static_cast<double>(s.k);
  return static_cast<double>(bytes_per_element) * (m * k + k * n + m * n);
}

double gemm_efficiency(const GemmParams& p, GemmShape s) {
  constexpr const char* kWhere = "gemm_efficiency";
  check_shape(s, kWhere);
  require_positive(p.peak_tflops, kWhere, "peak_tflops");
  require_positive(p.hbm_gbps, kWhere, "hbm_gbps");
  require_positive(p.max_efficiency, kWhere, "max_efficiency");
  if (p.max_efficiency > 1)
    throw std::invalid_argument(std::string(kWhere) + ": max_efficiency = " + std::to_string(p.max_efficiency) +
                                "; allowed: (0, 1]");
  require_positive(p.bytes_per_element, kWhere, "bytes_per_element");
  require_positive(p.tile_m, kWhere, "tile_m");
  require_positive(p.tile_n, kWhere, "tile_n");
  require_positive(p.tile_k, kWhere, "tile_k");
  require_non_negative(p.sm_count, kWhere, "sm_count");
  if (s.m == 0 || s.n == 0 || s.k == 0) return p.max_efficiency;

  double tile_factor =
      tile_quantization(s.m, p.tile_m) * tile_quantization(s.n, p.tile_n) * tile_quantization(s.k, p.tile_k);
  if (p.sm_count > 0) {
    const int64_t tiles = ((s.m + p.tile_m - 1) / p.tile_m) * ((s.n + p.tile_n - 1) / p.tile_n);
    const int64_t waves = (tiles + p.sm_count - 1) / p.sm_count;
    tile_factor *= static_cast<double>(tiles) / (static_cast<double>(waves) * static_cast<double>(p.sm_count));
  }
  const double intensity = gemm_flops(s) / gemm_min_bytes(s, p.bytes_per_element);  // FLOP/byte
  const double ridge = p.peak_tflops * 1e12 / (p.hbm_gbps * 1e9);                   // FLOP/byte
  return p.max_efficiency * std::min(tile_factor, intensity / ridge);
}

TimeNs gemm_ns(const GemmParams& p, GemmShape s) {
  const double efficiency = gemm_efficiency(p, s);
  require_non_negative(p.launch_ns, "gemm_ns", "launch_ns");
  // 1 TFLOP/s = 1e12 FLOP / 1e9 ns = 1e3 FLOP/ns.
  return ceil_ns(p.launch_ns + gemm_flops(s) / (p.peak_tflops * 1e3 * efficiency));
}

GemmRateTable::GemmRateTable(std::vector<GemmRatePoint> points) : points_(std::move(points)) {
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const std::string at = "GemmRateTable: point " + std::to_string(i);
    const GemmShape s = points_[i].shape;
    require_positive(s.m, at.c_str(), "m");
    require_positive(s.n, at.c_str(), "n");
    require_positive(s.k, at.c_str(), "k");
    require_positive(points_[i].tflops, at.c_str(), "tflops");
    for (std::size_t j = 0; j < i; ++j) {
      const GemmShape o = points_[j].shape;
      if (o.m == s.m && o.n == s.n && o.k == s.k && points_[j].pass == points_[i].pass)
        throw std::invalid_argument(at + ": shape (" + std::to_string(s.m) + ", " + std::to_string(s.n) + ", " +
                                    std::to_string(s.k) + ") of the same pass is also point " + std::to_string(j));
    }
  }
}

const GemmRatePoint& GemmRateTable::nearest(GemmShape s, GemmPass pass) const {
  constexpr const char* kWhere = "GemmRateTable::nearest";
  if (points_.empty()) throw std::logic_error(std::string(kWhere) + ": the table has no points");
  require_positive(s.m, kWhere, "m");
  require_positive(s.n, kWhere, "n");
  require_positive(s.k, kWhere, "k");
  const auto log_ratio = [](int64_t a, int64_t b) {
    return std::abs(std::log(static_cast<double>(a) / static_cast<double>(b)));
  };
  const auto candidate = [pass](const GemmRatePoint& pt) {
    return pass == GemmPass::kAny || pt.pass == pass || pt.pass == GemmPass::kAny;
  };
  const bool any_candidate = std::any_of(points_.begin(), points_.end(), candidate);
  const GemmRatePoint* best = nullptr;
  double best_d = 0;
  bool best_own = false;  // of the query's own pass
  for (const GemmRatePoint& pt : points_) {
    if (any_candidate && !candidate(pt)) continue;
    const double d = log_ratio(s.m, pt.shape.m) + log_ratio(s.n, pt.shape.n) + log_ratio(s.k, pt.shape.k);
    const bool own = pass != GemmPass::kAny && pt.pass == pass;
    if (best == nullptr || d < best_d || (d == best_d && own && !best_own)) best = &pt, best_d = d, best_own = own;
  }
  return *best;
}

double GemmRateTable::tflops_at(const GemmParams& shape_model, GemmShape s, GemmPass pass) const {
  const GemmRatePoint& best = nearest(s, pass);
  if (best.shape.m == s.m && best.shape.n == s.n && best.shape.k == s.k) return best.tflops;
  return best.tflops * gemm_efficiency(shape_model, s) / gemm_efficiency(shape_model, best.shape);
}

TimeNs gemm_ns(const GemmParams& p, const GemmRateTable& table, GemmShape s) {
  check_shape(s, "gemm_ns");
  require_non_negative(p.launch_ns, "gemm_ns", "launch_ns");
  if (s.m == 0 || s.n == 0 || s.k == 0) return ceil_ns(p.launch_ns);
  return ceil_ns(p.launch_ns + gemm_flops(s) / (table.tflops_at(p, s) * 1e3));
}

// ---- memory-bound kernels -------------------------------------------------------------------------

TimeNs memory_kernel_ns(const MemoryKernelParams& p, int64_t bytes) {
  constexpr const char* kWhere = "memory_kernel_ns";
  require_positive(p.hbm_gbps, kWhere, "hbm_gbps");
  require_non_negative(p.launch_ns, kWhere, "launch_ns");
  require_non_negative(bytes, kWhere, "bytes");
  return ceil_ns(p.launch_ns + static_cast<double>(bytes) / p.hbm_gbps);  // 1 GB/s = 1 byte/ns
}

// ---- PCIe -----------------------------------------------------------------------------------------

namespace {
void check_pcie(const PcieParams& p, const char* where) {
  require_positive(p.h2d_gbps, where, "h2d_gbps");
  require_positive(p.d2h_gbps, where, "d2h_gbps");
  require_positive(p.bidir_total_gbps, where, "bidir_total_gbps");
  require_non_negative(p.latency_ns, where, "latency_ns");
}
}  // namespace

TimeNs pcie_copy_ns(const PcieParams& p, Direction dir, int64_t bytes) {
  constexpr const char* kWhere = "pcie_copy_ns";
  check_pcie(p, kWhere);
  require_non_negative(bytes, kWhere, "bytes");
  const double gbps = dir == Direction::kH2D ? p.h2d_gbps : p.d2h_gbps;
  return ceil_ns(p.latency_ns + static_cast<double>(bytes) / gbps);
}

double pcie_shared_gbps(const PcieParams& p, Direction dir, int active_h2d, int active_d2h) {
  constexpr const char* kWhere = "pcie_shared_gbps";
  check_pcie(p, kWhere);
  if (active_h2d < 0 || active_d2h < 0)
    throw std::invalid_argument(std::string(kWhere) + ": active transfer counts " + std::to_string(active_h2d) + ", " +
                                std::to_string(active_d2h) + "; allowed: >= 0");
  const int mine = dir == Direction::kH2D ? active_h2d : active_d2h;
  if (mine == 0) return 0;
  const double cap_mine = dir == Direction::kH2D ? p.h2d_gbps : p.d2h_gbps;
  const double cap_other = dir == Direction::kH2D ? p.d2h_gbps : p.h2d_gbps;
  const int other = dir == Direction::kH2D ? active_d2h : active_h2d;
  double direction_gbps = cap_mine;
  if (other > 0) {
    // Max-min fair split of the bidirectional total: half each, and a direction capped below half
    // leaves the rest to the other (up to that one's own cap).
    const double half = p.bidir_total_gbps / 2;
    const double other_gets = std::min(cap_other, half);
    direction_gbps = std::min(cap_mine, p.bidir_total_gbps - other_gets);
  }
  return direction_gbps / mine;
}

// ---- collectives ----------------------------------------------------------------------------------

BusBandwidthCurve::BusBandwidthCurve(std::vector<BusBandwidthPoint> points) : points_(std::move(points)) {
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const std::string at = "BusBandwidthCurve: point " + std::to_string(i);
    if (points_[i].message_bytes <= 0)
      throw std::invalid_argument(at + ": message_bytes = " + std::to_string(points_[i].message_bytes) +
                                  "; allowed: > 0");
    if (!(points_[i].bus_gbps > 0) || !std::isfinite(points_[i].bus_gbps))
      throw std::invalid_argument(at + ": bus_gbps = " + std::to_string(points_[i].bus_gbps) +
                                  "; allowed: a finite value > 0");
    if (i > 0 && points_[i].message_bytes <= points_[i - 1].message_bytes)
      throw std::invalid_argument(at + ": message_bytes = " + std::to_string(points_[i].message_bytes) +
                                  " does not ascend (previous " + std::to_string(points_[i - 1].message_bytes) + ")");
  }
}

double BusBandwidthCurve::bus_gbps_at(int64_t message_bytes) const {
  if (points_.empty()) throw std::logic_error("BusBandwidthCurve::bus_gbps_at: the curve has no points");
  require_positive(message_bytes, "BusBandwidthCurve::bus_gbps_at", "message_bytes");
  if (message_bytes <= points_.front().message_bytes) return points_.front().bus_gbps;
  if (message_bytes >= points_.back().message_bytes) return points_.back().bus_gbps;
  const auto hi = std::upper_bound(points_.begin(), points_.end(), message_bytes,
                                   [](int64_t b, const BusBandwidthPoint& pt) { return b < pt.message_bytes; });
  const auto lo = hi - 1;
  const double t = std::log(static_cast<double>(message_bytes) / static_cast<double>(lo->message_bytes)) /
                   std::log(static_cast<double>(hi->message_bytes) / static_cast<double>(lo->message_bytes));
  return lo->bus_gbps + t * (hi->bus_gbps - lo->bus_gbps);
}

namespace {
void check_collective(CollectiveKind kind, CollectiveAlgorithm algo, int ranks, const char* where) {
  if (ranks < 1)
    throw std::invalid_argument(std::string(where) + ": ranks = " + std::to_string(ranks) + "; allowed: >= 1");
  if (algo == CollectiveAlgorithm::kTree && kind != CollectiveKind::kAllReduce)
    throw std::invalid_argument(std::string(where) +
                                ": the tree algorithm is defined for all-reduce only (NCCL has no tree all-gather "
                                "or reduce-scatter); use the ring");
}
}  // namespace

int collective_steps(CollectiveKind kind, CollectiveAlgorithm algo, int ranks) {
  check_collective(kind, algo, ranks, "collective_steps");
  if (algo == CollectiveAlgorithm::kTree) {
    int depth = 0;  // ceil(log2 ranks)
    while ((int64_t{1} << depth) < ranks) ++depth;
    return 2 * depth;
  }
  return kind == CollectiveKind::kAllReduce ? 2 * (ranks - 1) : ranks - 1;
}

double collective_wire_factor(CollectiveKind kind, CollectiveAlgorithm algo, int ranks) {
  check_collective(kind, algo, ranks, "collective_wire_factor");
  if (ranks == 1) return 0;
  if (algo == CollectiveAlgorithm::kTree) return 2;
  const double n = ranks;
  return kind == CollectiveKind::kAllReduce ? 2 * (n - 1) / n : (n - 1) / n;
}

namespace {
// The curve for one kind: its own, else the shared one (possibly empty: the flat figure then).
const BusBandwidthCurve& collective_curve(const CollectiveParams& p, CollectiveKind kind) {
  if (kind == CollectiveKind::kAllGather && !p.all_gather_curve.empty()) return p.all_gather_curve;
  if (kind == CollectiveKind::kReduceScatter && !p.reduce_scatter_curve.empty()) return p.reduce_scatter_curve;
  return p.curve;
}

// Unrounded ns of one collective. Below a curve's smallest measured message the time is that
// message's: small collectives are latency-bound, their time stops shrinking with their size.
double collective_raw_ns(const CollectiveParams& p, CollectiveKind kind, CollectiveAlgorithm algo, int ranks,
                         int64_t message_bytes) {
  const BusBandwidthCurve& curve = collective_curve(p, kind);
  double bus_gbps = p.bus_gbps;
  if (curve.empty()) {
    require_positive(p.bus_gbps, "collective_ns", "bus_gbps");
  } else {
    message_bytes = std::max(message_bytes, curve.points().front().message_bytes);
    bus_gbps = curve.bus_gbps_at(message_bytes);
  }
  const double wire_bytes = static_cast<double>(message_bytes) * collective_wire_factor(kind, algo, ranks);
  return p.latency_ns * collective_steps(kind, algo, ranks) + wire_bytes / bus_gbps;
}
}  // namespace

TimeNs collective_ns(const CollectiveParams& p, CollectiveKind kind, CollectiveAlgorithm algo, int ranks,
                     int64_t message_bytes) {
  constexpr const char* kWhere = "collective_ns";
  check_collective(kind, algo, ranks, kWhere);
  require_non_negative(message_bytes, kWhere, "message_bytes");
  require_non_negative(p.latency_ns, kWhere, "latency_ns");
  if (ranks == 1 || message_bytes == 0) return 0;
  if (kind == CollectiveKind::kAllReduce && algo == CollectiveAlgorithm::kRing &&
      (!p.all_gather_curve.empty() || !p.reduce_scatter_curve.empty()))
    return ceil_ns(collective_raw_ns(p, CollectiveKind::kReduceScatter, algo, ranks, message_bytes) +
                   collective_raw_ns(p, CollectiveKind::kAllGather, algo, ranks, message_bytes));
  return ceil_ns(collective_raw_ns(p, kind, algo, ranks, message_bytes));
}

// ---- CPU optimizer --------------------------------------------------------------------------------

double cpu_optimizer_gparam_s(const CpuOptimizerParams& p) {
  constexpr const char* kWhere = "cpu_optimizer_gparam_s";
  require_positive(p.gparam_s_per_thread, kWhere, "gparam_s_per_thread");
  if (p.threads < 1)
    throw std::invalid_argument(std::string(kWhere) + ": threads = " + std::to_string(p.threads) + "; allowed: >= 1");
  require_positive(p.bytes_per_param, kWhere, "bytes_per_param");
  require_positive(p.mem_gbps, kWhere, "mem_gbps");
  return std::min(p.gparam_s_per_thread * p.threads, p.mem_gbps / p.bytes_per_param);
}

TimeNs cpu_optimizer_ns(const CpuOptimizerParams& p, int64_t params) {
  require_non_negative(params, "cpu_optimizer_ns", "params");
  return ceil_ns(static_cast<double>(params) / cpu_optimizer_gparam_s(p));  // 1 Gparam/s = 1 param/ns
}

double shared_cpu_gparam_s(const SharedCpuRates& r, int active) {
  constexpr const char* kWhere = "shared_cpu_gparam_s";
  require_positive(r.alone, kWhere, "alone");
  require_positive(r.node_at_active, kWhere, "node_at_active");
  require_positive(r.single_active_threads, kWhere, "single_active_threads");
  require_positive(r.single_all_cores, kWhere, "single_all_cores");
  if (active < 1)
    throw std::invalid_argument(std::string(kWhere) + ": active = " + std::to_string(active) + "; allowed: >= 1");
  return std::min(r.alone, r.node_at_active * r.single_active_threads / r.single_all_cores / active);
}

}  // namespace tf::sim
