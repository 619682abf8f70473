// The step schedule: dependency order, op counts, PCIe bytes, and where the CPU optimizer may start.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "core/error.h"
#include "core/step.h"

using namespace tf::core;

namespace {
struct PlanSetup {
  ModelDesc model = describe_model(make_mlp({512, 1024, 1024, 1024, 256}));
  Partition part;
  TwinFlowSplit split;
  PlanSetup(int stage, int world, double ratio) {
    part = make_partition(model, {stage, world, 2048});
    split = split_shard(part.ranks[0], ratio, 2048);
  }
};

size_t count(const StepPlan& p, OpKind k) {
  return size_t(std::count_if(p.ops.begin(), p.ops.end(), [k](const Op& o) { return o.kind == k; }));
}
size_t first_index(const StepPlan& p, OpKind k) {
  for (size_t i = 0; i < p.ops.size(); ++i)
    if (p.ops[i].kind == k) return i;
  return p.ops.size();
}
size_t last_index(const StepPlan& p, OpKind k) {
  size_t r = p.ops.size();
  for (size_t i = 0; i < p.ops.size(); ++i)
    if (p.ops[i].kind == k) r = i;
  return r;
}
}  // namespace

TEST(Step, DepsPointBackwardsAndCountsMatch) {
  for (int stage : {1, 2, 3})
    for (int ga : {1, 3}) {
      PlanSetup s(stage, 2, 0.4);
      StepConfig c;
      c.grad_accum = ga;
      const StepPlan p = plan_step(s.model, s.part, s.split, c);
      for (const Op& o : p.ops)
        for (uint32_t d : o.deps) ASSERT_LT(d, o.id) << o.label();
      const size_t L = s.model.layers.size();
      EXPECT_EQ(count(p, OpKind::kForward), L * size_t(ga));
      EXPECT_EQ(count(p, OpKind::kBackward), L * size_t(ga));
      EXPECT_EQ(count(p, OpKind::kAllGather), stage == 3 ? 2 * L * size_t(ga) : L);  // stages 1/2: after the update
      EXPECT_EQ(count(p, stage == 1 ? OpKind::kAllReduce : OpKind::kReduceScatter), L * size_t(ga));
      EXPECT_EQ(count(p, OpKind::kGpuOptimizer), 1u);
      EXPECT_EQ(count(p, OpKind::kCpuOptimizer), count(p, OpKind::kD2HGrad));
      EXPECT_EQ(count(p, OpKind::kCpuOptimizer), count(p, OpKind::kH2DParam));
    }
}

TEST(Step, PcieCarriesTwoBytesPerCpuParamEachWayAndNothingElse) {
  for (double r : {0.0, 0.25, 0.5, 1.0}) {
    PlanSetup s(3, 2, r);
    StepConfig c;
    c.grad_accum = 4;
    const StepPlan p = plan_step(s.model, s.part, s.split, c);
    EXPECT_EQ(p.pcie_d2h_bytes, s.split.cpu_elems * 2) << r;
    EXPECT_EQ(p.pcie_h2d_bytes, s.split.cpu_elems * 2) << r;
    int64_t d2h = 0, h2d = 0;
    for (const Op& o : p.ops) {
      if (o.queue == Queue::kD2H) d2h += o.bytes;
      if (o.queue == Queue::kH2D) h2d += o.bytes;
    }
    EXPECT_EQ(d2h, p.pcie_d2h_bytes);
    EXPECT_EQ(h2d, p.pcie_h2d_bytes);
    if (r == 0.0) {
      EXPECT_EQ(count(p, OpKind::kCpuOptimizer), 0u);
    }
    if (r == 1.0) {
      EXPECT_EQ(count(p, OpKind::kGpuOptimizer), 0u);
    }
  }
}

TEST(Step, CpuOptimizerStartsDuringBackwardUnlessItMustWaitForTheNorm) {
  PlanSetup s(3, 1, 0.5);
  StepConfig c;
  StepPlan p = plan_step(s.model, s.part, s.split, c);
  // the first CPU update is issued before the last backward op, and depends only on its D2H
  EXPECT_LT(first_index(p, OpKind::kCpuOptimizer), last_index(p, OpKind::kBackward));
  for (const Op& o : p.ops)
    if (o.kind == OpKind::kCpuOptimizer) {
      ASSERT_EQ(o.deps.size(), 1u);
      EXPECT_EQ(p.ops[o.deps[0]].kind, OpKind::kD2HGrad);
    }
  c.clip_gradients = true;
  p = plan_step(s.model, s.part, s.split, c);
  const size_t norm = first_index(p, OpKind::kNormAllReduce);
  ASSERT_LT(norm, p.ops.size());
  for (const Op& o : p.ops) {
    if (o.kind == OpKind::kCpuOptimizer || o.kind == OpKind::kGpuOptimizer) {
      EXPECT_NE(std::find(o.deps.begin(), o.deps.end(), uint32_t(norm)), o.deps.end()) << o.label();
    }
  }
  // the norm waits for one statistics pass over the whole shard, on the GPU (the CPU segment's
  // gradients are still there), not for the D2H copies
  EXPECT_EQ(count(p, OpKind::kGradStats), 1);
  for (const Op& o : p.ops)
    if (o.kind == OpKind::kGradStats) {
      EXPECT_EQ(o.queue, Queue::kCompute);
      EXPECT_EQ(o.elems, s.split.gpu_elems + s.split.cpu_elems);
    }
}

TEST(Step, CpuSegmentIsUpdatedInBackwardOrder) {
  PlanSetup s(3, 1, 1.0);
  const StepPlan p = plan_step(s.model, s.part, s.split, StepConfig{});
  int prev = int(s.model.layers.size());
  for (const Op& o : p.ops)
    if (o.kind == OpKind::kCpuOptimizer) {
      EXPECT_LT(o.layer, prev);
      prev = o.layer;
    }
}

TEST(Step, ComputeFlopsAddUpToTheModel) {
  PlanSetup s(3, 1, 0.0);
  StepConfig c;
  c.micro_batch = 8;
  c.grad_accum = 2;
  const StepPlan p = plan_step(s.model, s.part, s.split, c);
  double flops = 0;
  for (const Op& o : p.ops) flops += o.flops;
  const double tokens = 8.0 * 2.0 * double(s.model.tokens_per_sample());
  EXPECT_NEAR(flops, s.model.train_flops_per_token(false) * tokens, 1e-6 * flops);
}

// The comm queue is a FIFO: the gather a backward needs must not sit behind a reduce-scatter that
// waits for the backward before it (that serialized backward with every reduction).
TEST(Step, BackwardGathersAreQueuedAheadOfTheReductionsBeforeThem) {
  for (int prefetch : {1, 2, 3}) {
    PlanSetup s(3, 2, 0.3);
    StepConfig cfg;
    cfg.prefetch_layers = prefetch;
    cfg.clip_gradients = true;
    const StepPlan p = plan_step(s.model, s.part, s.split, cfg);
    const int L = int(s.model.layers.size());
    std::vector<size_t> comm_pos(p.ops.size(), 0);
    size_t pos = 0;
    for (const Op& o : p.ops)
      if (o.queue == Queue::kComm) comm_pos[o.id] = pos++;
    for (const Op& b : p.ops) {
      if (b.kind != OpKind::kBackward || b.layer >= L - 1) continue;
      // its dependencies: its gather, and the reduction that last read the gradient buffer it writes
      std::vector<uint32_t> gathers;
      for (uint32_t d : b.deps)
        if (p.ops[d].kind == OpKind::kAllGather)
          gathers.push_back(d);
        else
          ASSERT_EQ(p.ops[d].kind, OpKind::kReduceScatter) << b.label();
      ASSERT_EQ(gathers.size(), 1u) << b.label();
      const Op& gather = p.ops[gathers[0]];
      ASSERT_EQ(gather.kind, OpKind::kAllGather);
      EXPECT_EQ(gather.layer, b.layer);
      // the reduce-scatter of the layer after it (backward order: the one just before it) is queued later
      const auto rs = std::find_if(p.ops.begin(), p.ops.end(), [&](const Op& o) {
        return o.kind == OpKind::kReduceScatter && o.layer == b.layer + 1;
      });
      ASSERT_NE(rs, p.ops.end());
      EXPECT_LT(comm_pos[gather.id], comm_pos[rs->id]) << "prefetch " << prefetch << " layer " << b.layer;
    }
  }
}

// The norm all-reduce carries the tile table: one sum of squares per 2048 elements of every layer + 1.
TEST(Step, NormAllReduceCarriesTheTileTable) {
  PlanSetup s(3, 2, 0.3);
  StepConfig cfg;
  cfg.clip_gradients = true;
  const StepPlan p = plan_step(s.model, s.part, s.split, cfg);
  int64_t tiles = 0;
  for (int64_t n : s.part.layer_params) tiles += (n + 2047) / 2048;
  const auto norm =
      std::find_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kNormAllReduce; });
  ASSERT_NE(norm, p.ops.end());
  EXPECT_EQ(norm->elems, tiles);
  EXPECT_EQ(norm->bytes, 8 * (tiles + 1));
}

// The tied head reads the token embedding, which layer 0 owns: its compute ops name that layer, and
// each ZeRO-3 gather of the head gathers the embedding too (its bytes counted); no other op does.
TEST(Step, TheTiedHeadGathersTheEmbeddingItReads) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));
  const int head = int(m.layers.size()) - 1;
  ASSERT_EQ(m.shared_owner(size_t(head)), 0);
  for (int stage : {1, 3}) {
    const Partition part = make_partition(m, {stage, 2, 2048});
    StepConfig c;
    c.grad_accum = 2;
    const StepPlan p = plan_step(m, part, split_shard(part.ranks[0], 0.3, 2048), c);
    size_t head_gathers = 0;
    for (const Op& o : p.ops) {
      const bool compute = o.kind == OpKind::kForward || o.kind == OpKind::kBackward;
      const bool head_gather = o.kind == OpKind::kAllGather && o.layer == head && o.micro_batch >= 0;
      EXPECT_EQ(o.shared_layer, (compute || head_gather) && o.layer == head ? 0 : -1) << o.label();
      if (o.kind == OpKind::kAllGather && o.micro_batch >= 0) {
        EXPECT_EQ(o.bytes, (part.layer_slice[size_t(o.layer)] + (o.layer == head ? part.layer_slice[0] : 0)) * 2 * 2)
            << o.label();
      }
      head_gathers += head_gather;
    }
    EXPECT_EQ(head_gathers, stage == 3 ? 4u : 0u);  // forward and backward, per micro-batch
  }
}

// The staging rings' layout by hand: 9 equal MLP layers of 1024 x 1024 + 1024 = 1049600 parameters,
// padded to 1050624 (513 x 2048); at ratio 1 on one rank every layer is a CPU piece.
TEST(Step, StagingRingSlotsHoldTheLargestPieceOfTheirLayers) {
  const ModelDesc m = describe_model(make_mlp(std::vector<int64_t>(10, 1024)));
  const Partition part = make_partition(m, {3, 1, 2048});
  StepConfig c;
  const TwinFlowSplit all = split_shard(part.ranks[0], 1.0, 2048);
  StagingRing r = staging_ring(all, c);
  EXPECT_EQ(r.slots, kStagingSlots);
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 1050624, 2 * 1050624, 3 * 1050624}));
  c.staging_slots = kUnboundedStaging;  // one slot per layer: exactly the segment
  r = staging_ring(all, c);
  EXPECT_EQ(r.slots, 9);
  EXPECT_EQ(r.elems(), all.cpu_elems);
  // ratio 0.2: 1891123 of the 9455616 elements, i.e. 923 units: the last layer (513 units) and 410
  // units of the one before; backward order: slot 0 the whole layer, slot 1 the partial piece
  c.staging_slots = 2;
  const TwinFlowSplit part2 = split_shard(part.ranks[0], 0.2, 2048);
  ASSERT_EQ(part2.cpu_elems, 923 * 2048);
  r = staging_ring(part2, c);
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 1050624, 1050624 + 410 * 2048}));
  // no CPU segment, no slots; a count out of range is refused
  EXPECT_EQ(staging_ring(split_shard(part.ranks[0], 0.0, 2048), c).slots, 0);
  c.staging_slots = -1;
  EXPECT_THROW(staging_ring(all, c), InputError);
}

// The i-th CPU layer (backward order) uses slot i % K: its D2H waits for the update of CPU layer i - K
// (which read the gradient slot), its update for the H2D of layer i - K (which read the copy slot).
// With a norm wait the D2Hs beyond the first K are issued after the update that frees their slot.
// Unbounded staging is the schedule without rings: a D2H right after its layer's last reduction, an
// update after its D2H (and the norm) only.
TEST(Step, StagingRingReuseDependencies) {
  const ModelDesc m = describe_model(make_mlp(std::vector<int64_t>(10, 1024)));
  const Partition part = make_partition(m, {3, 2, 2048});
  const TwinFlowSplit split = split_shard(part.ranks[0], 1.0, 2048);
  for (bool norm : {false, true})
    for (int K : {1, 2, 3, kUnboundedStaging}) {
      StepConfig c;
      c.grad_accum = 2;
      c.clip_gradients = norm;
      c.staging_slots = K;
      const StepPlan p = plan_step(m, part, split, c);
      const int slots = K == kUnboundedStaging ? 9 : K;
      EXPECT_EQ(p.staging.slots, slots);
      std::vector<uint32_t> d2h, cpu, h2d;  // by CPU layer, backward order
      for (const Op& o : p.ops) {
        const auto has = [&](uint32_t d) { return std::find(o.deps.begin(), o.deps.end(), d) != o.deps.end(); };
        if (o.kind == OpKind::kD2HGrad) {
          const size_t i = size_t(8 - o.layer);
          ASSERT_EQ(i, d2h.size());
          EXPECT_EQ(o.staging_slot, int(i) % slots);
          EXPECT_EQ(p.ops[o.deps[0]].kind, OpKind::kReduceScatter);
          EXPECT_EQ(o.deps.size(), i >= size_t(slots) ? 2u : 1u) << o.label();
          if (i >= size_t(slots)) {
            EXPECT_TRUE(has(cpu.at(i - size_t(slots)))) << o.label();
          }
          if (K == kUnboundedStaging) {
            EXPECT_EQ(o.deps[0] + 1, o.id) << o.label();
          }
          d2h.push_back(o.id);
        }
        if (o.kind == OpKind::kCpuOptimizer) {
          const size_t i = cpu.size();
          EXPECT_EQ(o.layer, 8 - int(i));
          EXPECT_EQ(o.staging_slot, int(i) % slots);
          EXPECT_TRUE(has(d2h.at(i)));
          EXPECT_EQ(o.deps.size(), size_t(1 + norm + (i >= size_t(slots))));
          if (i >= size_t(slots)) {
            EXPECT_TRUE(has(h2d.at(i - size_t(slots)))) << o.label();
          }
          cpu.push_back(o.id);
        }
        if (o.kind == OpKind::kH2DParam) {
          EXPECT_EQ(o.staging_slot, int(h2d.size()) % slots);
          EXPECT_EQ(o.deps, std::vector<uint32_t>{cpu.at(h2d.size())});
          h2d.push_back(o.id);
        }
      }
      EXPECT_EQ(d2h.size(), 9u);
      EXPECT_EQ(h2d.size(), 9u);
      EXPECT_EQ(p.pcie_d2h_bytes, split.cpu_elems * 2);
    }
}

// core::ring_use_order: backward order without a norm wait or a carried tail; with both, forward order at
// full-size staging, and on rings with StepConfig::ring_forward_order the first `slots` positions and then
// the rest reversed.
TEST(Step, RingUseOrder) {
  StepConfig c;
  EXPECT_EQ(ring_use_order(6, 2, c), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ring_use_order(6, 6, c), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  c.ring_forward_order = c.carry_tail = c.clip_gradients = true;
  EXPECT_EQ(ring_use_order(6, 2, c), (std::vector<int>{0, 1, 5, 4, 3, 2}));
  EXPECT_EQ(ring_use_order(6, 6, c), (std::vector<int>{5, 4, 3, 2, 1, 0}));  // full-size: forward order
  EXPECT_EQ(ring_use_order(0, 0, c), std::vector<int>{});
  for (auto off : {&StepConfig::carry_tail, &StepConfig::clip_gradients, &StepConfig::ring_forward_order}) {
    StepConfig o = c;
    o.*off = false;
    EXPECT_EQ(ring_use_order(6, 2, o), (std::vector<int>{0, 1, 2, 3, 4, 5}));
    // full-size staging does not read ring_forward_order
    EXPECT_EQ(ring_use_order(6, 6, o), off == &StepConfig::ring_forward_order
                                           ? (std::vector<int>{5, 4, 3, 2, 1, 0})
                                           : (std::vector<int>{0, 1, 2, 3, 4, 5}));
  }
  c.clip_gradients = false;
  c.loss_scaling = true;  // fp16's overflow check is a norm wait too
  EXPECT_EQ(ring_use_order(6, 2, c), (std::vector<int>{0, 1, 5, 4, 3, 2}));
}

// With rings, clipping and a carried tail, ring_forward_order runs the passes after the norm as: the CPU
// layers whose D2Hs landed before the norm (the first K in backward order: the last layers), then the others
// in forward order, each deferred D2H behind the pass (in that order) that frees its slot; each H2D follows
// its pass, so the next forward's first CPU layer (layer 0 here) is the (K+1)-th H2D, not the last. The
// slots and reuse dependencies follow the same order; the PCIe bytes and op counts do not change.
TEST(Step, RingForwardOrderPassesTheLandedLayersThenForwardOrder) {
  const ModelDesc m = describe_model(make_mlp(std::vector<int64_t>(10, 1024)));  // 9 layers
  const Partition part = make_partition(m, {3, 2, 2048});
  const TwinFlowSplit split = split_shard(part.ranks[0], 1.0, 2048);
  for (int K : {1, 2, 3}) {
    StepConfig c;
    c.clip_gradients = c.carry_tail = true;
    c.staging_slots = K;
    const StepPlan back = plan_step(m, part, split, c);
    c.ring_forward_order = true;
    const StepPlan fwd = plan_step(m, part, split, c);
    std::vector<int> expected;  // layers in pass order
    for (int i = 0; i < K; ++i) expected.push_back(8 - i);
    for (int l = 0; l <= 8 - K; ++l) expected.push_back(l);
    std::vector<int> passes, h2ds, d2hs;
    std::map<int, uint32_t> pass_of;  // layer -> its pass
    for (const Op& o : fwd.ops) {
      if (o.kind == OpKind::kCpuOptimizer) {
        const size_t j = passes.size();
        EXPECT_EQ(o.staging_slot, int(j) % K) << o.label();
        if (j >= size_t(K)) {  // its copy slot after the H2D of the layer K passes before it
          const uint32_t prev_h2d = fwd.ops[pass_of.at(expected[j - size_t(K)]) + 1].id;
          EXPECT_NE(std::find(o.deps.begin(), o.deps.end(), prev_h2d), o.deps.end()) << o.label();
        }
        passes.push_back(o.layer);
        pass_of[o.layer] = o.id;
      }
      if (o.kind == OpKind::kH2DParam) h2ds.push_back(o.layer);
      if (o.kind == OpKind::kD2HGrad) {
        d2hs.push_back(o.layer);
        const auto pos = std::find(expected.begin(), expected.end(), int(o.layer)) - expected.begin();
        EXPECT_EQ(o.staging_slot, int(pos) % K) << o.label();
        if (pos >= K) {  // deferred behind the pass that frees its slot
          const uint32_t freeing = pass_of.at(expected[size_t(pos - K)]);
          EXPECT_NE(std::find(o.deps.begin(), o.deps.end(), freeing), o.deps.end()) << o.label();
        }
      }
    }
    EXPECT_EQ(passes, expected) << "K " << K;
    EXPECT_EQ(h2ds, expected) << "K " << K;
    EXPECT_EQ(d2hs, expected) << "K " << K;  // the first K before the norm, the rest as slots free
    EXPECT_EQ(fwd.ops.size(), back.ops.size());
    EXPECT_EQ(fwd.pcie_d2h_bytes, back.pcie_d2h_bytes);
    EXPECT_EQ(fwd.pcie_h2d_bytes, back.pcie_h2d_bytes);
    EXPECT_EQ(fwd.staging.offsets, back.staging.offsets);  // equal layers: the same slot sizes
  }
}
