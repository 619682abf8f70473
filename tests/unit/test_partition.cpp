// ZeRO partition, Twin-Flow split and per-rank memory: coverage, alignment, placement, hand-computed
// byte counts and the infeasible-ratio error.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/model.h"
#include "core/partition.h"
#include "core/twinflow.h"

using namespace tf::core;

namespace {
ModelDesc toy() { return describe_model(make_mlp({1000, 3000, 2000, 10})); }
}  // namespace

TEST(Partition, EveryRealElementOwnedExactlyOnceAndAligned) {
  const ModelDesc m = toy();
  for (int stage : {1, 2, 3})
    for (int world : {1, 2, 3, 8}) {
      const Partition p = make_partition(m, {stage, world, 64});
      ASSERT_EQ(p.ranks.size(), size_t(world));
      for (size_t l = 0; l < m.layers.size(); ++l) {
        std::vector<int> owners(size_t(m.layers[l].params), 0);
        for (const RankShard& s : p.ranks)
          for (const ShardPiece& piece : s.pieces) {
            if (piece.layer != l) continue;
            EXPECT_EQ(piece.shard_offset % 64, 0);
            EXPECT_EQ(piece.count % 64, 0);
            for (int64_t i = 0; i < piece.real_count; ++i) owners[size_t(piece.layer_offset + i)]++;
          }
        for (int o : owners) ASSERT_EQ(o, 1) << "layer " << l << " world " << world;
      }
      int64_t real = 0;
      for (const RankShard& s : p.ranks) {
        real += s.real_elems;
        EXPECT_EQ(s.elems, p.ranks[0].elems);  // equal shard sizes
      }
      EXPECT_EQ(real, m.total_params);
    }
}

TEST(Partition, RejectsBadOptions) {
  EXPECT_THROW(make_partition(toy(), {4, 1, 64}), InputError);
  EXPECT_THROW(make_partition(toy(), {3, 0, 64}), InputError);
  EXPECT_THROW(make_partition(toy(), {3, 1, 0}), InputError);
}

TEST(TwinFlow, RatioWithinHalfAnAlignmentUnitAndCpuTakesTheLastLayers) {
  const ModelDesc m = toy();
  const Partition p = make_partition(m, {3, 2, 64});
  const RankShard& s = p.ranks[1];
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 200; ++i) {
    const double r = i == 0 ? 0.0 : i == 1 ? 1.0 : u(rng);
    const TwinFlowSplit t = split_shard(s, r, 64);
    EXPECT_LE(std::abs(double(t.cpu_elems) - r * double(s.elems)), 32.0 + 1e-9) << r;
    EXPECT_EQ(t.cpu_elems % 64 == 0 || t.cpu_elems == s.elems, true);
    EXPECT_EQ(t.cpu_elems + t.gpu_elems, s.elems);
    int64_t g = 0, c = 0;
    for (const ShardPiece& x : t.gpu) {
      g += x.count;
      EXPECT_LT(x.shard_offset, t.boundary);
    }
    for (const ShardPiece& x : t.cpu) {
      c += x.count;
      EXPECT_GE(x.shard_offset, t.boundary);
    }
    EXPECT_EQ(g, t.gpu_elems);
    EXPECT_EQ(c, t.cpu_elems);
    // the CPU segment holds the last layers in forward order (first reduced in backward)
    if (!t.cpu.empty() && !t.gpu.empty()) {
      EXPECT_GE(t.cpu.front().layer, t.gpu.back().layer);
    }
  }
  EXPECT_THROW(split_shard(s, -0.1, 64), InputError);
  EXPECT_THROW(split_shard(s, 1.5, 64), InputError);
  try {
    split_shard(s, 2.0, 64);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("zero.offload_optimizer.ratio = 2 is out of range"), std::string::npos);
  }
}

TEST(Memory, HandComputedToyBytes) {
  // MLP 1000 -> 3000 -> 2000 -> 10 with bias: layer params 3003000, 6002000, 20010 = 9025010.
  const ModelDesc m = toy();
  ASSERT_EQ(m.total_params, 9025010);
  const Partition p = make_partition(m, {3, 1, 2048});
  const RankShard& s = p.ranks[0];
  // padded slices: ceil(3003000/2048)*2048 = 3004416, 6002688, 20480 -> 9027584
  ASSERT_EQ(s.elems, 3004416 + 6002688 + 20480);
  MemoryOptions o;
  o.step.param_dtype = o.step.grad_dtype = DType::kBF16;
  o.step.optimizer = OptimizerKind::kAdamW;  // master + 2 states
  o.unnamed.context_bytes = 1000;
  o.step.micro_batch = 4;
  const TwinFlowSplit t = split_shard(s, 0.5, 2048);
  const RankMemory r = rank_memory(m, p, s, t, o);
  EXPECT_EQ(r.gpu_params, s.elems * 2);
  EXPECT_EQ(r.gpu_grads, s.elems * 2);  // the CPU segment's grads land on the GPU before their D2H
  EXPECT_EQ(r.gpu_optimizer, t.gpu_elems * 12);
  // one rank computes on its shard: two gradient buffers of the largest layer (padded)
  EXPECT_EQ(r.gpu_comm, 2 * 6002688 * 2);
  o.step.grad_accum = 2;
  EXPECT_EQ(rank_memory(m, p, s, t, o).gpu_grads, s.elems * 6);  // + fp32 accumulation
  EXPECT_EQ(r.host_optimizer, t.cpu_elems * 12);
  EXPECT_EQ(r.host_staging, t.cpu_elems * 4);
  EXPECT_EQ(r.gpu_context, 1000);
  EXPECT_EQ(r.gpu_total,
            r.gpu_params + r.gpu_grads + r.gpu_optimizer + r.gpu_activations + r.gpu_comm + r.gpu_workspace + 1000);
  // stage 1 keeps the full bf16 model (beside the shard the optimizers write) and full grads on every
  // GPU: layers padded to 4 x 2048 = 3006464 + 6004736 + 24576 = 9035776, a shard of 2258944
  const Partition p1 = make_partition(m, {1, 4, 2048});
  const RankMemory r1 = rank_memory(m, p1, p1.ranks[0], split_shard(p1.ranks[0], 0.5, 2048), o);
  EXPECT_EQ(r1.gpu_params, (2258944 + 9035776) * 2);
  EXPECT_EQ(r1.gpu_grads, 9035776 * 2 + 2258944 * 4);  // + the shard's fp32 accumulation (grad_accum 2)
  // stage 2: the same parameters, the shard's grads
  const Partition p2 = make_partition(m, {2, 4, 2048});
  const RankMemory r2 = rank_memory(m, p2, p2.ranks[0], split_shard(p2.ranks[0], 0.5, 2048), o);
  EXPECT_EQ(r2.gpu_params, (2258944 + 9035776) * 2);
  EXPECT_EQ(r2.gpu_grads, 2258944 * 2 + 2258944 * 4);
}

TEST(Memory, FeasibleRangeAndInfeasibleRatioMessage) {
  const ModelDesc m = toy();
  const Partition p = make_partition(m, {3, 1, 2048});
  MemoryOptions o;
  o.unnamed.context_bytes = 0;
  const RankShard& s = p.ranks[0];
  const int64_t at_half = rank_memory(m, p, s, split_shard(s, 0.5, 2048), o).gpu_total;
  const RatioRange r = feasible_ratios(m, p, o, at_half, int64_t(1) << 40);
  ASSERT_TRUE(r.feasible) << r.why;
  EXPECT_NEAR(r.min_ratio, 0.5, 2048.0 / double(s.elems));
  EXPECT_EQ(r.max_ratio, 1.0);
  EXPECT_NO_THROW(check_ratio_fits(m, p, o, 0.6, at_half, int64_t(1) << 40));
  try {
    check_ratio_fits(m, p, o, 0.2, at_half, int64_t(1) << 40);
    FAIL() << "accepted an infeasible ratio";
  } catch (const InputError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("ratio 0.2 does not fit: it needs"), std::string::npos) << w;
    EXPECT_NE(w.find("the ratios that fit are [0.5"), std::string::npos) << w;
    EXPECT_NE(w.find("optimizer"), std::string::npos) << w;
  }
  // host too small for any ratio that fits the GPU
  const RatioRange none = feasible_ratios(m, p, o, at_half, 1000);
  EXPECT_FALSE(none.feasible);
  EXPECT_NE(none.why.find("pinned host memory"), std::string::npos);
  // GPU too small even at ratio 1
  EXPECT_FALSE(feasible_ratios(m, p, o, 1000, int64_t(1) << 40).feasible);
}
