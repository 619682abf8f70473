// Cost models: pure functions from an op's size and a hardware parameter struct to its duration in ns.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/gemm.h"
#include "sim/event_queue.h"

// Units are in the names: _ns nanoseconds, _bytes bytes, _gbps GB/s, _tflops TFLOP/s, _gparam_s
// 1e9 elements per second. GB = 1e9 B and TFLOP = 1e12 FLOP everywhere. Two identities keep the
// arithmetic short: 1 GB/s moves exactly 1 byte per ns, and 1 TFLOP/s does 1000 FLOP per ns.
// Every function validates its inputs (std::invalid_argument naming the field) and rounds the
// result up to whole nanoseconds with ceil_ns. These structs are the simulator's own: an adapter maps
// a hardware profile onto them, so sim/ depends on nothing in core/ but the GEMM pass (core/gemm.h).
namespace tf::sim {

// ---- GEMM ---------------------------------------------------------------------------------------

struct GemmShape {
  int64_t m = 0;  // C is (m, n); A is (m, k); B is (k, n)
  int64_t n = 0;
  int64_t k = 0;
};

struct GemmParams {
  double peak_tflops = 0;         // dense peak for the operand dtype
  double hbm_gbps = 0;            // device memory bandwidth, for the roofline's ridge point
  double launch_ns = 0;           // fixed overhead per kernel
  double max_efficiency = 1;      // the best fraction of peak any shape reaches (1 when peak was measured)
  int64_t bytes_per_element = 2;  // bf16/fp16 operands and result
  int64_t tile_m = 128;           // the kernel's tile; dims are padded up to whole tiles
  int64_t tile_n = 128;
  int64_t tile_k = 64;
  int64_t sm_count = 0;  // > 0: also count wave quantization of the (m, n) tiles over this many SMs
};

// 2*m*n*k.
double gemm_flops(GemmShape s);
// Bytes a GEMM must move at least once: bytes_per_element * (m*k + k*n + m*n).
double gemm_min_bytes(GemmShape s, int64_t bytes_per_element);
// The fraction of peak a GEMM of this shape reaches, in (0, max_efficiency]:
//   max_efficiency * min(tile_factor, intensity / ridge)
//   intensity   = gemm_flops / gemm_min_bytes                        FLOP per byte
//   ridge       = peak_tflops * 1e12 / (hbm_gbps * 1e9)              the roofline's knee
//   tile_factor = q(m, tile_m) * q(n, tile_n) * q(k, tile_k) * wave,  q(d, t) = d / (ceil(d/t) * t)
//   wave        = tiles / (ceil(tiles / sm_count) * sm_count), tiles = ceil(m/tile_m) * ceil(n/tile_n); 1 if no SMs
// This is the roofline time max(flops / (peak * tile_factor), bytes / bandwidth) written as a rate:
// padding wastes tensor-core work, not memory traffic, so the tile factor only scales the compute
// roof (multiplying the two factors instead would charge a skinny GEMM for padding it never
// transfers). A shape with a zero dimension has efficiency max_efficiency (it does no work).
double gemm_efficiency(const GemmParams& p, GemmShape s);
// launch_ns + gemm_flops / (peak_tflops * 1e3 FLOP/ns * gemm_efficiency).
TimeNs gemm_ns(const GemmParams& p, GemmShape s);

// The pass a GEMM belongs to; each runs in its own operand layout.
using core::GemmPass;

// A GEMM rate measured at one shape (twinflow calibrate: cuBLAS, median of repetitions), in the layout
// of `pass` (kAny: a rate that stands for every pass).
struct GemmRatePoint {
  GemmShape shape;
  double tflops = 0;
  GemmPass pass = GemmPass::kAny;
};

// Achieved GEMM rates from measurements. The candidates for a query of pass P are the points of pass P
// and of kAny (all points when P is kAny, or when no point is of P or kAny). A measured shape runs at
// its measurement (a point of P before one of kAny). Any other shape takes the measurement of the
// nearest candidate (L1 distance in log m, log n, log k; at equal distance a point of P before kAny,
// then the first listed) scaled by the shape model's ratio gemm_efficiency(p, shape) /
// gemm_efficiency(p, nearest): the measurements set the level, the roofline-and-tiles model only
// carries it to shapes nobody measured (max_efficiency cancels in that ratio).
class GemmRateTable {
 public:
  GemmRateTable() = default;
  // Throws std::invalid_argument unless every dimension is > 0, every rate finite and > 0, and no
  // (shape, pass) is listed twice.
  explicit GemmRateTable(std::vector<GemmRatePoint> points);
  bool empty() const noexcept { return points_.empty(); }
  std::span<const GemmRatePoint> points() const noexcept { return points_; }
  // TFLOP/s of shape s. Requires a non-empty table (std::logic_error) and s without a zero dimension.
  double tflops_at(const GemmParams& shape_model, GemmShape s, GemmPass pass = GemmPass::kAny) const;
  // The point tflops_at takes its level from (the rules above); its shape equals s when s was measured.
  const GemmRatePoint& nearest(GemmShape s, GemmPass pass = GemmPass::kAny) const;

 private:
  std::vector<GemmRatePoint> points_;
};

// launch_ns + gemm_flops / (table.tflops_at(p, s) * 1e3 FLOP/ns); launch_ns alone for a shape with a zero
// dimension.
TimeNs gemm_ns(const GemmParams& p, const GemmRateTable& table, GemmShape s);

// ---- memory-bound kernels -------------------------------------------------------------------------

struct MemoryKernelParams {
  double hbm_gbps = 0;   // counted on bytes read + bytes written
  double launch_ns = 0;  // fixed overhead per kernel
};

// launch_ns + bytes / hbm_gbps; bytes counts reads and writes (a copy of N bytes moves 2N).
TimeNs memory_kernel_ns(const MemoryKernelParams& p, int64_t bytes);

// ---- PCIe -----------------------------------------------------------------------------------------

enum class Direction : uint8_t { kH2D, kD2H };

struct PcieParams {
  double h2d_gbps = 0;          // pinned host -> device, one direction alone
  double d2h_gbps = 0;          // pinned device -> host, one direction alone
  double bidir_total_gbps = 0;  // both directions at once, the two added (83 on our H100: 41.5 each)
  double latency_ns = 0;        // fixed per copy
};

// One copy alone on the link: latency_ns + bytes / (h2d_gbps or d2h_gbps).
TimeNs pcie_copy_ns(const PcieParams& p, Direction dir, int64_t bytes);
// The rate of each transfer in direction `dir` while active_h2d and active_d2h transfers are in
// flight (the caller's own included), in GB/s = bytes/ns. One direction alone: its cap, split equally
// among its transfers. Both directions: bidir_total_gbps split max-min fairly between the two
// directions (each gets half unless its own cap is lower, and the other then takes the rest up to its
// cap), then equally among each direction's transfers. A direction with no transfer gets 0.
double pcie_shared_gbps(const PcieParams& p, Direction dir, int active_h2d, int active_d2h);

// ---- collectives ----------------------------------------------------------------------------------

enum class CollectiveKind : uint8_t { kAllGather, kReduceScatter, kAllReduce };
enum class CollectiveAlgorithm : uint8_t { kRing, kTree };

// Bus bandwidth measured at one message size (nccl-tests "busbw"; the size is its "size" column).
struct BusBandwidthPoint {
  int64_t message_bytes = 0;
  double bus_gbps = 0;
};

// Bus bandwidth against message size, from measured points: linear in log(message_bytes) between
// neighbouring points, clamped to the first and last points outside them.
class BusBandwidthCurve {
 public:
  BusBandwidthCurve() = default;
  // Throws std::invalid_argument unless sizes are > 0 and strictly ascending and bandwidths > 0.
  explicit BusBandwidthCurve(std::vector<BusBandwidthPoint> points);
  bool empty() const noexcept { return points_.empty(); }
  std::span<const BusBandwidthPoint> points() const noexcept { return points_; }
  // Requires a non-empty curve (std::logic_error otherwise) and message_bytes > 0.
  double bus_gbps_at(int64_t message_bytes) const;

 private:
  std::vector<BusBandwidthPoint> points_;
};

struct CollectiveParams {
  double latency_ns = 0;    // per algorithm step (NCCL's per-hop latency)
  double bus_gbps = 0;      // bus bandwidth when `curve` is empty
  BusBandwidthCurve curve;  // measured bus bandwidth by message size; overrides bus_gbps
  // Measured per collective (optional); each overrides `curve` for its own kind. With either one, a
  // ring all-reduce is timed as a reduce-scatter plus an all-gather of the same buffer, which is
  // what NCCL's ring all-reduce does (steps 2(N-1), wire factor 2(N-1)/N, as the two phases added).
  BusBandwidthCurve all_gather_curve;
  BusBandwidthCurve reduce_scatter_curve;
};

// NCCL's cost model (src/graph/tuning.cc): time = latency * steps + message_bytes / algorithm bandwidth,
// where algorithm bandwidth = bus bandwidth / wire factor. message_bytes is the whole buffer, as in
// nccl-tests' "size": the gathered output of an all-gather, the input of a reduce-scatter, the buffer
// of an all-reduce (a rank's shard is message_bytes / ranks).
//   ring all-gather, reduce-scatter: steps N-1,          wire factor (N-1)/N
//   ring all-reduce:                 steps 2(N-1),       wire factor 2(N-1)/N
//   tree all-reduce:                 steps 2 ceil(log2 N), wire factor 2 (NCCL: algbw = busbw / 2; up
//                                    the tree then down, depth of a binary tree over N ranks)
// Tree is defined for all-reduce only (NCCL has no tree all-gather or reduce-scatter): other kinds
// throw std::invalid_argument. One rank costs 0. A measured curve (nccl-tests busbw) already contains
// the latency; set latency_ns = 0 with one unless it was fitted separately. A message smaller than a
// curve's smallest measured one takes that one's time (latency-bound: the time no longer shrinks).
int collective_steps(CollectiveKind kind, CollectiveAlgorithm algo, int ranks);
double collective_wire_factor(CollectiveKind kind, CollectiveAlgorithm algo, int ranks);
TimeNs collective_ns(const CollectiveParams& p, CollectiveKind kind, CollectiveAlgorithm algo, int ranks,
                     int64_t message_bytes);

// ---- CPU optimizer --------------------------------------------------------------------------------

struct CpuOptimizerParams {
  double gparam_s_per_thread = 0;  // one thread's rate, compute-bound
  int threads = 0;
  double bytes_per_param = 0;  // memory traffic per element (28 for AdamW with bf16 grads and copy)
  double mem_gbps = 0;         // host memory bandwidth for that traffic (read-modify-write stream)
};

// min(gparam_s_per_thread * threads, mem_gbps / bytes_per_param), in Gparam/s = params per ns.
double cpu_optimizer_gparam_s(const CpuOptimizerParams& p);
// params / cpu_optimizer_gparam_s, without DMA contention (CpuPool in resources.h applies that).
TimeNs cpu_optimizer_ns(const CpuOptimizerParams& p, int64_t params);

// One rank's CPU optimizer rate while `active` ranks of its host run their passes at once (processor
// sharing of the host, docs/ARCHITECTURE.md "The simulator: the host is shared"), from measured rates
// (Gparam/s): the rank can go no faster than alone, and the active ranks share what `active` processes
// achieved together, scaled from the measured split (each process on its `active`-th of the cores) to
// the threads the ranks have:
//   min(alone, node_at_active x single_active_threads / single_all_cores / active)
struct SharedCpuRates {
  double alone = 0;                  // one process with the rank's threads (the thread curve)
  double node_at_active = 0;         // `active` processes at once, each on its share (the rank curve)
  double single_active_threads = 0;  // one process with active x the rank's threads (the thread curve)
  double single_all_cores = 0;       // one process on every core (the thread curve's end)
};
double shared_cpu_gparam_s(const SharedCpuRates& r, int active);

}  // namespace tf::sim
