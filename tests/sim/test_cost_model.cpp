// Golden values of the cost models, each computed by hand in the comment beside it (GB = 1e9 B, ns rounded up).
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/cost_model.h"

using tf::sim::BusBandwidthCurve;
using tf::sim::BusBandwidthPoint;
using tf::sim::CollectiveAlgorithm;
using tf::sim::CollectiveKind;
using tf::sim::CollectiveParams;
using tf::sim::CpuOptimizerParams;
using tf::sim::Direction;
using tf::sim::GemmParams;
using tf::sim::GemmRateTable;
using tf::sim::GemmShape;
using tf::sim::MemoryKernelParams;
using tf::sim::PcieParams;
using tf::sim::TimeNs;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Our H100 (scenarios/hardware/MEASUREMENTS.md): ~790 TFLOP/s bf16 GEMM, 3.0 TB/s HBM;
// ridge = 790e12 / 3000e9 = 263.33 FLOP/B.
GemmParams h100_gemm() {
  GemmParams p;
  p.peak_tflops = 790;
  p.hbm_gbps = 3000;
  return p;
}

// The measured 2x H200 NCCL all-gather / reduce-scatter bus bandwidths (scenarios/hardware/MEASUREMENTS.md).
BusBandwidthCurve h200_curve() {
  return BusBandwidthCurve({{2 * kMiB, 28.0}, {32 * kMiB, 180.0}, {512 * kMiB, 250.0}});
}

}  // namespace

// ---- GEMM ---------------------------------------------------------------------------------------

TEST(GemmCost, LargeSquareGemmRunsAtPeak) {
  GemmParams p = h100_gemm();
  p.launch_ns = 4000;
  const GemmShape s{8192, 8192, 8192};
  // FLOPs = 2 * 8192^3 = 1099511627776. Intensity = 2*8192^3 / (2 B * 3 * 8192^2) = 2730.7 FLOP/B >
  // ridge 263.3, all dims multiples of the tiles: efficiency 1.
  EXPECT_DOUBLE_EQ(tf::sim::gemm_flops(s), 1099511627776.0);
  EXPECT_DOUBLE_EQ(tf::sim::gemm_efficiency(p, s), 1.0);
  // 1099511627776 / (790 TFLOP/s = 790e3 FLOP/ns) = 1391786.871 ns, + 4000 launch = 1395786.871 -> 1395787.
  EXPECT_EQ(tf::sim::gemm_ns(p, s), 1395787);
}

TEST(GemmCost, SkinnyGemmIsMemoryBound) {
  const GemmParams p = h100_gemm();
  const GemmShape s{16, 4096, 4096};
  // FLOPs = 2*16*4096*4096 = 536870912. Bytes = 2 * (16*4096 + 4096*4096 + 16*4096) = 33816576.
  // Intensity = 15.876 FLOP/B; / ridge 263.33 = 0.060288. The m-tile factor 16/128 = 0.125 only caps
  // the compute roof, so efficiency = min(0.125, 0.060288) = 0.060288 ...
  EXPECT_DOUBLE_EQ(tf::sim::gemm_min_bytes(s, 2), 33816576.0);
  EXPECT_NEAR(tf::sim::gemm_efficiency(p, s), 0.0602884898, 1e-9);
  // ... and the time is the memory time: 33816576 B / 3000 B/ns = 11272.192 ns -> 11273.
  EXPECT_EQ(tf::sim::gemm_ns(p, s), 11273);
}

TEST(GemmCost, TileQuantizationCapsTheComputeRoof) {
  const GemmParams p = h100_gemm();
  const GemmShape s{320, 8192, 8192};
  // Intensity = 2*320*8192^2 / (2 * (320*8192 + 8192^2 + 320*8192)) = 296.81 FLOP/B > ridge (1.127).
  // m = 320 pads to 3 tiles of 128 = 384: tile factor 320/384 = 5/6 = efficiency.
  EXPECT_NEAR(tf::sim::gemm_efficiency(p, s), 5.0 / 6.0, 1e-12);
  // 2*320*8192^2 = 42949672960 FLOP / (790e3 * 5/6) = 65240.0096 ns -> 65241.
  EXPECT_EQ(tf::sim::gemm_ns(p, s), 65241);
}

TEST(GemmCost, WaveQuantizationAndMaxEfficiency) {
  GemmParams p = h100_gemm();
  p.sm_count = 132;
  const GemmShape s{4096, 4096, 4096};
  // (4096/128)^2 = 1024 tiles over 132 SMs: ceil(1024/132) = 8 waves of 132 = 1056 slots;
  // efficiency 1024/1056 = 0.969697. 2*4096^3 / (790e3 * 0.969697) = 179410.026 ns -> 179411.
  EXPECT_NEAR(tf::sim::gemm_efficiency(p, s), 1024.0 / 1056.0, 1e-12);
  EXPECT_EQ(tf::sim::gemm_ns(p, s), 179411);

  GemmParams datasheet = h100_gemm();
  datasheet.peak_tflops = 989;  // the H100 SXM datasheet's dense bf16 peak
  datasheet.max_efficiency = 0.8;
  // 2*8192^3 / (989e3 * 0.8) = 1389675.970 ns -> 1389676.
  EXPECT_EQ(tf::sim::gemm_ns(datasheet, GemmShape{8192, 8192, 8192}), 1389676);
}

TEST(GemmCost, EmptyShapesAndBadParameters) {
  GemmParams p = h100_gemm();
  p.launch_ns = 4000;
  EXPECT_EQ(tf::sim::gemm_ns(p, GemmShape{0, 4096, 4096}), 4000);  // no work: the launch only
  EXPECT_THROW(tf::sim::gemm_ns(p, GemmShape{-1, 1, 1}), std::invalid_argument);
  GemmParams bad = p;
  bad.peak_tflops = 0;
  try {
    (void)tf::sim::gemm_ns(bad, GemmShape{1, 1, 1});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("peak_tflops"), std::string::npos) << e.what();
  }
  bad = p;
  bad.max_efficiency = 1.5;
  EXPECT_THROW(tf::sim::gemm_ns(bad, GemmShape{1, 1, 1}), std::invalid_argument);
}

// ---- memory-bound kernels -------------------------------------------------------------------------

TEST(MemoryKernelCost, BytesOverHbmBandwidthPlusLaunch) {
  const MemoryKernelParams p{3000.0, 4000.0};
  // A 1 GiB device copy moves 2 GiB: 2147483648 / 3000 B/ns = 715827.883 ns, + 4000 = 719827.883 -> 719828.
  EXPECT_EQ(tf::sim::memory_kernel_ns(p, 2 * (int64_t{1} << 30)), 719828);
  // The fused GPU AdamW on 1e9 params at 28 B/param: 28e9 / 3000 = 9333333.33 ns, + 4000 -> 9337334.
  EXPECT_EQ(tf::sim::memory_kernel_ns(p, 28'000'000'000), 9337334);
  EXPECT_EQ(tf::sim::memory_kernel_ns(p, 0), 4000);
  EXPECT_THROW(tf::sim::memory_kernel_ns(p, -1), std::invalid_argument);
  EXPECT_THROW(tf::sim::memory_kernel_ns(MemoryKernelParams{0.0, 0.0}, 1), std::invalid_argument);
}

// ---- PCIe -----------------------------------------------------------------------------------------

TEST(PcieCost, CopyAloneOnTheLink) {
  const PcieParams p{55.0, 50.0, 83.0, 0.0};
  // 2 GiB H2D at 55 GB/s = 2147483648 / 55 ns = 39045157.236 ns -> 39045158 (39.045 ms).
  EXPECT_EQ(tf::sim::pcie_copy_ns(p, Direction::kH2D, int64_t{1} << 31), 39045158);
  // 2 GiB D2H at 50 GB/s = 42949672.96 ns -> 42949673.
  EXPECT_EQ(tf::sim::pcie_copy_ns(p, Direction::kD2H, int64_t{1} << 31), 42949673);
  // With 10 us latency: 55e6 B / 55 = 1e6 ns + 10000 = 1010000.
  EXPECT_EQ(tf::sim::pcie_copy_ns(PcieParams{55.0, 55.0, 83.0, 10000.0}, Direction::kH2D, 55'000'000), 1'010'000);
}

TEST(PcieCost, SharedRatesPerDirection) {
  const PcieParams h100{55.0, 55.0, 83.0, 0.0};
  // Alone: the direction's cap. Two in one direction: 55 / 2 = 27.5 each.
  EXPECT_DOUBLE_EQ(tf::sim::pcie_shared_gbps(h100, Direction::kH2D, 1, 0), 55.0);
  EXPECT_DOUBLE_EQ(tf::sim::pcie_shared_gbps(h100, Direction::kD2H, 0, 2), 27.5);
  // Both directions: 83 / 2 = 41.5 each; with two D2H those split theirs: 20.75.
  EXPECT_DOUBLE_EQ(tf::sim::pcie_shared_gbps(h100, Direction::kH2D, 1, 1), 41.5);
  EXPECT_DOUBLE_EQ(tf::sim::pcie_shared_gbps(h100, Direction::kD2H, 1, 2), 20.75);
  EXPECT_DOUBLE_EQ(tf::sim::pcie_shared_gbps(h100, Direction::kH2D, 0, 1), 0.0);
  // Max-min fair: H2D capped at 30 takes 30 of the 83; D2H takes the other 53 (under its 55 cap).
  const PcieParams lopsided{30.0, 55.0, 83.0, 0.0};
  EXPECT_DOUBLE_EQ(tf::sim::pcie_shared_gbps(lopsided, Direction::kH2D, 1, 1), 30.0);
  EXPECT_DOUBLE_EQ(tf::sim::pcie_shared_gbps(lopsided, Direction::kD2H, 1, 1), 53.0);
  // A total above the sum of the caps: no contention.
  const PcieParams roomy{55.0, 55.0, 120.0, 0.0};
  EXPECT_DOUBLE_EQ(tf::sim::pcie_shared_gbps(roomy, Direction::kD2H, 1, 1), 55.0);
  EXPECT_THROW(tf::sim::pcie_shared_gbps(h100, Direction::kH2D, -1, 0), std::invalid_argument);
}

// ---- collectives ----------------------------------------------------------------------------------

TEST(CollectiveCost, StepsAndWireFactors) {
  using enum CollectiveKind;
  using enum CollectiveAlgorithm;
  EXPECT_EQ(tf::sim::collective_steps(kAllGather, kRing, 8), 7);
  EXPECT_EQ(tf::sim::collective_steps(kReduceScatter, kRing, 8), 7);
  EXPECT_EQ(tf::sim::collective_steps(kAllReduce, kRing, 8), 14);
  EXPECT_EQ(tf::sim::collective_steps(kAllReduce, kTree, 8), 6);                   // 2 * log2(8)
  EXPECT_EQ(tf::sim::collective_steps(kAllReduce, kTree, 5), 6);                   // 2 * ceil(log2(5)) = 2 * 3
  EXPECT_DOUBLE_EQ(tf::sim::collective_wire_factor(kAllGather, kRing, 8), 0.875);  // 7/8
  EXPECT_DOUBLE_EQ(tf::sim::collective_wire_factor(kAllReduce, kRing, 8), 1.75);   // 2*7/8
  EXPECT_DOUBLE_EQ(tf::sim::collective_wire_factor(kAllReduce, kTree, 8), 2.0);
  EXPECT_DOUBLE_EQ(tf::sim::collective_wire_factor(kAllGather, kRing, 1), 0.0);
  EXPECT_THROW(tf::sim::collective_steps(kAllGather, kTree, 8), std::invalid_argument);
  EXPECT_THROW(tf::sim::collective_steps(kAllGather, kRing, 0), std::invalid_argument);
}

TEST(CollectiveCost, RingAndTreeWithAFlatBusBandwidth) {
  using enum CollectiveKind;
  using enum CollectiveAlgorithm;
  CollectiveParams p;
  p.latency_ns = 5000;
  p.bus_gbps = 200;
  const int64_t gb = 1'000'000'000;
  // Ring all-gather, 8 ranks, 1 GB gathered: 7 * 5000 + 1e9 * 7/8 / 200 = 35000 + 4375000 = 4410000 ns.
  EXPECT_EQ(tf::sim::collective_ns(p, kAllGather, kRing, 8, gb), 4'410'000);
  EXPECT_EQ(tf::sim::collective_ns(p, kReduceScatter, kRing, 8, gb), 4'410'000);
  // Ring all-reduce: 14 * 5000 + 1e9 * 1.75 / 200 = 70000 + 8750000 = 8820000 ns.
  EXPECT_EQ(tf::sim::collective_ns(p, kAllReduce, kRing, 8, gb), 8'820'000);
  // Tree all-reduce: 6 * 5000 + 2 * 1e9 / 200 = 30000 + 10000000 = 10030000 ns (NCCL: algbw = busbw/2).
  EXPECT_EQ(tf::sim::collective_ns(p, kAllReduce, kTree, 8, gb), 10'030'000);
  // Three ranks: 4 * 1000 + 3e6 * (4/3) / 100 = 4000 + 40000 = 44000 ns (4/3 is inexact in binary).
  CollectiveParams q;
  q.latency_ns = 1000;
  q.bus_gbps = 100;
  EXPECT_EQ(tf::sim::collective_ns(q, kAllReduce, kRing, 3, 3'000'000), 44'000);
  // One rank, or nothing to move: free.
  EXPECT_EQ(tf::sim::collective_ns(p, kAllReduce, kRing, 1, gb), 0);
  EXPECT_EQ(tf::sim::collective_ns(p, kAllGather, kRing, 8, 0), 0);
  CollectiveParams none;
  EXPECT_THROW(tf::sim::collective_ns(none, kAllGather, kRing, 8, gb), std::invalid_argument);
}

TEST(CollectiveCost, MeasuredH200CurveInterpolatesLogLinearly) {
  const BusBandwidthCurve c = h200_curve();
  // At the measured points: the measurements.
  EXPECT_DOUBLE_EQ(c.bus_gbps_at(2 * kMiB), 28.0);
  EXPECT_DOUBLE_EQ(c.bus_gbps_at(32 * kMiB), 180.0);
  EXPECT_DOUBLE_EQ(c.bus_gbps_at(512 * kMiB), 250.0);
  // 8 MiB is halfway from 2 to 32 MiB in log size (log 4 / log 16 = 0.5): 28 + 0.5 * 152 = 104.
  EXPECT_NEAR(c.bus_gbps_at(8 * kMiB), 104.0, 1e-9);
  // 4 MiB: a quarter of the way (log 2 / log 16): 28 + 0.25 * 152 = 66.
  EXPECT_NEAR(c.bus_gbps_at(4 * kMiB), 66.0, 1e-9);
  // 128 MiB: halfway from 32 to 512 MiB: 180 + 0.5 * 70 = 215.
  EXPECT_NEAR(c.bus_gbps_at(128 * kMiB), 215.0, 1e-9);
  // Clamped outside the measured range.
  EXPECT_DOUBLE_EQ(c.bus_gbps_at(4096), 28.0);
  EXPECT_DOUBLE_EQ(c.bus_gbps_at(4 * (int64_t{1} << 30)), 250.0);
}

TEST(CollectiveCost, TimesFromTheMeasuredCurve) {
  using enum CollectiveKind;
  using enum CollectiveAlgorithm;
  CollectiveParams p;
  p.curve = h200_curve();  // latency_ns = 0: the measured busbw already contains it
  // 2 ranks, all-gather of 32 MiB: 33554432 * 1/2 / 180 = 93206.756 ns -> 93207.
  EXPECT_EQ(tf::sim::collective_ns(p, kAllGather, kRing, 2, 32 * kMiB), 93207);
  // 2 MiB: 2097152 * 1/2 / 28 = 37449.143 ns -> 37450 (small messages are latency-bound: 28 GB/s).
  EXPECT_EQ(tf::sim::collective_ns(p, kAllGather, kRing, 2, 2 * kMiB), 37450);
  // 4 ranks, reduce-scatter of 256 MiB: busbw 180 + 70 * log(8)/log(16) = 232.5;
  // 268435456 * 3/4 / 232.5 = 865920.826 ns -> 865921.
  EXPECT_EQ(tf::sim::collective_ns(p, kReduceScatter, kRing, 4, 256 * kMiB), 865921);
  // Below the smallest measured message (2 MiB) the time is 2 MiB's: 16 B and 1 MiB take 37450 ns.
  EXPECT_EQ(tf::sim::collective_ns(p, kAllGather, kRing, 2, 16), 37450);
  EXPECT_EQ(tf::sim::collective_ns(p, kAllGather, kRing, 2, kMiB), 37450);
}

TEST(CollectiveCost, CurveValidation) {
  EXPECT_THROW(BusBandwidthCurve({{2 * kMiB, 28.0}, {2 * kMiB, 30.0}}), std::invalid_argument);
  EXPECT_THROW(BusBandwidthCurve({{32 * kMiB, 180.0}, {2 * kMiB, 28.0}}), std::invalid_argument);
  EXPECT_THROW(BusBandwidthCurve({{0, 28.0}}), std::invalid_argument);
  EXPECT_THROW(BusBandwidthCurve({{kMiB, 0.0}}), std::invalid_argument);
  EXPECT_THROW((void)BusBandwidthCurve().bus_gbps_at(kMiB), std::logic_error);
  EXPECT_THROW((void)h200_curve().bus_gbps_at(0), std::invalid_argument);
  const BusBandwidthCurve one({{kMiB, 42.0}});
  EXPECT_DOUBLE_EQ(one.bus_gbps_at(1), 42.0);
  EXPECT_DOUBLE_EQ(one.bus_gbps_at(kMiB * 1024), 42.0);
}

TEST(CollectiveCost, PerKindCurvesAndAllReduceAsTheirSum) {
  using enum CollectiveKind;
  using enum CollectiveAlgorithm;
  CollectiveParams p;
  p.all_gather_curve = BusBandwidthCurve({{kMiB, 20.0}, {512 * kMiB, 250.0}});
  p.reduce_scatter_curve = BusBandwidthCurve({{kMiB, 18.0}, {512 * kMiB, 240.0}});
  p.curve = BusBandwidthCurve({{kMiB, 1.0}});  // overridden for both kinds: never used below
  // 2 ranks, 512 MiB: all-gather 536870912 * 1/2 / 250 = 1073741.824 -> 1073742;
  // reduce-scatter 536870912 * 1/2 / 240 = 1118481.067 -> 1118482.
  EXPECT_EQ(tf::sim::collective_ns(p, kAllGather, kRing, 2, 512 * kMiB), 1073742);
  EXPECT_EQ(tf::sim::collective_ns(p, kReduceScatter, kRing, 2, 512 * kMiB), 1118482);
  // Ring all-reduce = reduce-scatter + all-gather of the same buffer, rounded once: 2192222.891 -> 2192223.
  EXPECT_EQ(tf::sim::collective_ns(p, kAllReduce, kRing, 2, 512 * kMiB), 2192223);
  // With 1 us per step, each phase adds 1 step: 2192222.891 + 2000 -> 2194223.
  p.latency_ns = 1000;
  EXPECT_EQ(tf::sim::collective_ns(p, kAllReduce, kRing, 2, 512 * kMiB), 2194223);
  // A kind without its own curve falls back to the shared curve, then to the flat figure:
  // reduce-scatter on 1 GB/s: 1048576 * 1/2 / 1 + 1000 = 525288.
  p.reduce_scatter_curve = BusBandwidthCurve();
  EXPECT_EQ(tf::sim::collective_ns(p, kReduceScatter, kRing, 2, kMiB), 525288);
  p.curve = BusBandwidthCurve();
  p.bus_gbps = 100;
  // 536870912 * 1/2 / 100 + 1000 = 2685354.56 -> 2685355.
  EXPECT_EQ(tf::sim::collective_ns(p, kReduceScatter, kRing, 2, 512 * kMiB), 2685355);
}

// ---- measured GEMM rates ----------------------------------------------------------------------------

TEST(GemmRateTableCost, MeasuredShapesHoldAndOthersFollowTheShapeModel) {
  const GemmParams model = h100_gemm();  // the shape model: ridge 263.33 FLOP/B, tiles 128 x 128 x 64
  const GemmRateTable t({{{8192, 8192, 8192}, 780.0}, {{1024, 4096, 4096}, 600.0}, {{16, 4096, 4096}, 50.0}});
  // Measured shapes: their measurements.
  EXPECT_DOUBLE_EQ(t.tflops_at(model, {8192, 8192, 8192}), 780.0);
  EXPECT_DOUBLE_EQ(t.tflops_at(model, {16, 4096, 4096}), 50.0);
  // (2048, 4096, 4096): nearest is (1024, 4096, 4096) (log distance ln 2; (8192)^3 is ln 4 + 2 ln 2
  // away). Both are whole tiles and compute-bound (intensity 1024 and 682.7 FLOP/B > 263.3): the
  // model's ratio is 1, so 600.
  EXPECT_DOUBLE_EQ(t.tflops_at(model, {2048, 4096, 4096}), 600.0);
  // (32, 4096, 4096): nearest (16, 4096, 4096). Both memory-bound: intensity 32*4096/4160 = 31.508
  // and 16*4096/4128 = 15.876 FLOP/B, below their tile factors 0.25 and 0.125 x ridge. Ratio
  // (31.508 / 15.876) = 2 * 4128 / 4160 = 1.984615, so 50 * 1.984615 = 99.2308 TFLOP/s.
  EXPECT_NEAR(t.tflops_at(model, {32, 4096, 4096}), 50.0 * 2 * 4128 / 4160, 1e-9);
  // Its time: 2*32*4096*4096 = 1073741824 FLOP / 99230.77 FLOP/ns = 10820.65 -> 10821 ns (no launch).
  EXPECT_EQ(tf::sim::gemm_ns(model, t, {32, 4096, 4096}), 10821);
  GemmParams with_launch = model;
  with_launch.launch_ns = 2000;
  // 2*8192^3 / 780e3 = 1409630.292 + 2000 -> 1411631; a zero dimension costs the launch only.
  EXPECT_EQ(tf::sim::gemm_ns(with_launch, t, {8192, 8192, 8192}), 1411631);
  EXPECT_EQ(tf::sim::gemm_ns(with_launch, t, {0, 8192, 8192}), 2000);
  // max_efficiency cancels in the ratio: the table alone sets the level.
  GemmParams derated = model;
  derated.max_efficiency = 0.5;
  EXPECT_NEAR(t.tflops_at(derated, {32, 4096, 4096}), 50.0 * 2 * 4128 / 4160, 1e-9);
}

TEST(GemmRateTableCost, Validation) {
  EXPECT_THROW(GemmRateTable({{{0, 1, 1}, 1.0}}), std::invalid_argument);
  EXPECT_THROW(GemmRateTable({{{1, 1, 1}, 0.0}}), std::invalid_argument);
  EXPECT_THROW(GemmRateTable({{{1, 2, 3}, 1.0}, {{1, 2, 3}, 2.0}}), std::invalid_argument);
  EXPECT_THROW((void)GemmRateTable().tflops_at(h100_gemm(), {1, 1, 1}), std::logic_error);
  EXPECT_THROW((void)GemmRateTable({{{1, 1, 1}, 1.0}}).tflops_at(h100_gemm(), {0, 1, 1}), std::invalid_argument);
}

// ---- CPU optimizer --------------------------------------------------------------------------------

TEST(CpuOptimizerCost, MemoryBoundOnOurH100Host) {
  // 16 threads x 0.5 Gparam/s = 8 Gparam/s of compute, but 146 GB/s / 28 B/param = 5.214 Gparam/s of
  // memory: the memory bound wins. 1e9 params / 5.2142857 params/ns = 191780821.918 ns -> 191780822.
  const CpuOptimizerParams p{0.5, 16, 28.0, 146.0};
  EXPECT_NEAR(tf::sim::cpu_optimizer_gparam_s(p), 146.0 / 28.0, 1e-12);
  EXPECT_EQ(tf::sim::cpu_optimizer_ns(p, 1'000'000'000), 191780822);
}

TEST(CpuOptimizerCost, ComputeBoundWithFewThreads) {
  // 4 threads x 0.325 Gparam/s = 1.3 Gparam/s < 5.214: compute-bound.
  // 1e9 / 1.3 = 769230769.23 ns -> 769230770.
  const CpuOptimizerParams p{0.325, 4, 28.0, 146.0};
  EXPECT_DOUBLE_EQ(tf::sim::cpu_optimizer_gparam_s(p), 1.3);
  EXPECT_EQ(tf::sim::cpu_optimizer_ns(p, 1'000'000'000), 769230770);
  EXPECT_EQ(tf::sim::cpu_optimizer_ns(p, 0), 0);
}

TEST(CpuOptimizerCost, BadParameters) {
  EXPECT_THROW(tf::sim::cpu_optimizer_ns(CpuOptimizerParams{0.5, 0, 28.0, 146.0}, 1), std::invalid_argument);
  EXPECT_THROW(tf::sim::cpu_optimizer_ns(CpuOptimizerParams{0.5, 16, 0.0, 146.0}, 1), std::invalid_argument);
  EXPECT_THROW(tf::sim::cpu_optimizer_ns(CpuOptimizerParams{0.5, 16, 28.0, 146.0}, -1), std::invalid_argument);
}

TEST(GemmRateTableCost, APassPrefersItsOwnMeasurements) {
  using tf::sim::GemmPass;
  const tf::sim::GemmParams p{.peak_tflops = 1000, .hbm_gbps = 3000};
  const GemmRateTable t({{{4096, 8192, 8192}, 700.0, GemmPass::kForward},
                         {{4096, 8192, 8192}, 800.0, GemmPass::kInputGrad},
                         {{8192, 8192, 4096}, 650.0, GemmPass::kWeightGrad}});
  EXPECT_EQ(t.tflops_at(p, {4096, 8192, 8192}, GemmPass::kForward), 700.0);
  EXPECT_EQ(t.tflops_at(p, {4096, 8192, 8192}, GemmPass::kInputGrad), 800.0);
  // no weight-gradient point of this shape: the nearest of its own pass, carried by the shape model
  const double w = t.tflops_at(p, {4096, 8192, 8192}, GemmPass::kWeightGrad);
  EXPECT_NEAR(w,
              650.0 * tf::sim::gemm_efficiency(p, {4096, 8192, 8192}) / tf::sim::gemm_efficiency(p, {8192, 8192, 4096}),
              1e-9);
  // kAny sees every point: the first listed at the exact shape
  EXPECT_EQ(t.tflops_at(p, {4096, 8192, 8192}), 700.0);
  // the same shape twice in one pass is refused; in two passes it is not
  EXPECT_THROW(GemmRateTable({{{1, 1, 1}, 1.0, GemmPass::kForward}, {{1, 1, 1}, 2.0, GemmPass::kForward}}),
               std::invalid_argument);
}

// The host shared by its ranks: min(alone, node(a) x single(a x threads) / single(all cores) / a).
TEST(CostModel, SharedCpuRateIsTheRanksPartOfTheMeasuredNodeRate) {
  // 2 ranks of 8 threads on 16 cores, both active: 4.2 x 4.5 / 4.5 / 2 = 2.1 (below alone, 4.0)
  EXPECT_DOUBLE_EQ(tf::sim::shared_cpu_gparam_s({4.0, 4.2, 4.5, 4.5}, 2), 2.1);
  // one active: its share of one process on all cores scaled to its 8 threads: 4.4 x 4.0 / 4.5
  EXPECT_DOUBLE_EQ(tf::sim::shared_cpu_gparam_s({4.0, 4.4, 4.0, 4.5}, 1), 4.4 * 4.0 / 4.5);
  // never faster than alone
  EXPECT_DOUBLE_EQ(tf::sim::shared_cpu_gparam_s({1.0, 6.0, 6.0, 5.0}, 1), 1.0);
  EXPECT_THROW(tf::sim::shared_cpu_gparam_s({4.0, 4.2, 4.5, 4.5}, 0), std::invalid_argument);
  EXPECT_THROW(tf::sim::shared_cpu_gparam_s({4.0, 0.0, 4.5, 4.5}, 1), std::invalid_argument);
}
