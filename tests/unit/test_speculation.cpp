// Speculative CPU updates in the core: which layers speculate (backward order, budget, never layer 0),
// where their spare slots sit, the ops the plan emits for them, and the per-step rule (speculate after a
// clean step, adopt when the scalars are the same bits, redo otherwise, skip on an overflow).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/alloc_plan.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rank_plan.h"
#include "core/speculation.h"
#include "core/step.h"

using namespace tf::core;

namespace {

// 4 linear layers 512->1024->1024->1024->256 (with biases): layer l's elements (weights + bias).
const ModelDesc& mlp() {
  static const ModelDesc m = describe_model(make_mlp({512, 1024, 1024, 1024, 256}));
  return m;
}

StepConfig clipped(int64_t speculation_bytes) {
  StepConfig c;
  c.clip_gradients = true;
  c.speculation_bytes = speculation_bytes;
  return c;
}

size_t count(const StepPlan& p, OpKind k, int8_t slot) {
  return size_t(
      std::count_if(p.ops.begin(), p.ops.end(), [&](const Op& o) { return o.kind == k && o.state_slot == slot; }));
}

}  // namespace

TEST(Speculation, SpareSlotBytesPerElement) {
  EXPECT_EQ(spare_slot_bytes_per_element(OptimizerKind::kAdamW), 12);  // master + m + v, fp32
  EXPECT_EQ(spare_slot_bytes_per_element(OptimizerKind::kAdam), 12);
  EXPECT_EQ(spare_slot_bytes_per_element(OptimizerKind::kAdagrad), 8);  // master + sum
  EXPECT_EQ(spare_slot_bytes_per_element(OptimizerKind::kLion), 8);     // master + m
}

// World 1, ratio 1: every layer is on the CPU. Layer sizes (weights + bias) padded to 2048:
// 512 x 1024 + 1024 = 525312 -> 526336, 1049600 -> 1050624, 1050624, 1024 x 256 + 256 = 262400 -> 264192.
TEST(Speculation, LayersInBackwardOrderWithinTheBudgetNeverLayerZero) {
  const Partition part = make_partition(mlp(), {3, 1, 2048});
  const TwinFlowSplit split = split_shard(part.ranks[0], 1.0, 2048);
  ASSERT_EQ(part.layer_slice, (std::vector<int64_t>{526336, 1050624, 1050624, 264192}));
  EXPECT_EQ(speculated_layers(split, clipped(kSpeculationMax)), (std::vector<int32_t>{3, 2, 1}));
  EXPECT_TRUE(speculated_layers(split, clipped(0)).empty());
  // layer 3 alone: 264192 x 12 = 3170304 bytes; layers 3 and 2: + 1050624 x 12 = 15777792
  EXPECT_EQ(speculated_layers(split, clipped(3170304)), (std::vector<int32_t>{3}));
  EXPECT_EQ(speculated_layers(split, clipped(15777791)), (std::vector<int32_t>{3}));
  EXPECT_EQ(speculated_layers(split, clipped(15777792)), (std::vector<int32_t>{3, 2}));
  EXPECT_TRUE(speculated_layers(split, clipped(3170303)).empty());
  // at most speculation_layers of them (the cost model's count for `speculation: auto`), within the bytes
  for (int most : {0, 1, 2, 3, 4}) {
    StepConfig capped = clipped(kSpeculationMax);
    capped.speculation_layers = most;
    const std::vector<int32_t> all{3, 2, 1};
    EXPECT_EQ(speculated_layers(split, capped), std::vector<int32_t>(all.begin(), all.begin() + std::min(most, 3)));
    capped.speculation_bytes = 15777792;  // layers 3 and 2
    EXPECT_EQ(speculated_layers(split, capped).size(), size_t(std::min(most, 2)));
  }
  StepConfig below = clipped(kSpeculationMax);
  below.speculation_layers = -2;
  EXPECT_THROW(speculated_layers(split, below), std::invalid_argument);
  // without clipping or loss scaling the CPU updates do not wait for the norm: nothing to speculate
  StepConfig plain;
  plain.speculation_bytes = kSpeculationMax;
  EXPECT_TRUE(speculated_layers(split, plain).empty());
  StepConfig fp16 = plain;
  fp16.loss_scaling = true;
  EXPECT_EQ(speculated_layers(split, fp16).size(), 3u);
  // Lion has one state: 8 B per element, so the same budget reaches one layer further
  StepConfig lion = clipped(264192 * 8 + 1050624 * 8);
  lion.optimizer = OptimizerKind::kLion;
  EXPECT_EQ(speculated_layers(split, lion), (std::vector<int32_t>{3, 2}));
  // the staging rings (core::staging_ring): with K slots only the first K CPU layers in backward order
  // land before the norm (the next D2H waits for a commit), so only they speculate
  for (int slots : {1, 2}) {
    StepConfig ring = clipped(kSpeculationMax);
    ring.staging_slots = slots;
    const std::vector<int32_t> all{3, 2, 1};
    EXPECT_EQ(speculated_layers(split, ring), std::vector<int32_t>(all.begin(), all.begin() + slots)) << slots;
    const StepPlan p = plan_step(mlp(), part, split, ring);
    EXPECT_EQ(count(p, OpKind::kCpuOptimizer, 1), size_t(slots));
    EXPECT_EQ(count(p, OpKind::kCpuCommit, 1), size_t(slots));
  }
  StepConfig unbounded = clipped(kSpeculationMax);
  unbounded.staging_slots = kUnboundedStaging;
  EXPECT_EQ(speculated_layers(split, unbounded), (std::vector<int32_t>{3, 2, 1}));
}

TEST(Speculation, SpareRangeIsTheTailOfTheCpuSegment) {
  const Partition part = make_partition(mlp(), {3, 1, 2048});
  const TwinFlowSplit split = split_shard(part.ranks[0], 1.0, 2048);
  EXPECT_EQ(spare_range(split, {3, 2}), (SpareRange{526336 + 1050624, 1050624 + 264192}));
  EXPECT_EQ(spare_range(split, {}), (SpareRange{split.cpu_elems, 0}));
  EXPECT_THROW(spare_range(split, {2}), std::logic_error);  // not the tail
  // a partial first CPU piece: ratio 0.3 of 2891776 elements = 867532.8 -> 424 units of 2048 = 868352
  const TwinFlowSplit part_split = split_shard(part.ranks[0], 0.3, 2048);
  ASSERT_EQ(part_split.cpu_elems, 868352);
  const std::vector<int32_t> layers = speculated_layers(part_split, clipped(kSpeculationMax));
  EXPECT_EQ(layers, (std::vector<int32_t>{3, 2}));  // layer 2's last 604160 elements and layer 3
  EXPECT_EQ(spare_range(part_split, layers), (SpareRange{0, 868352}));
}

TEST(Speculation, ThePlanSpeculatesRightAfterTheCopyAndCommitsAfterTheNorm) {
  const Partition part = make_partition(mlp(), {3, 2, 2048});
  const TwinFlowSplit split = split_shard(part.ranks[0], 1.0, 2048);
  const StepPlan p = plan_step(mlp(), part, split, clipped(kSpeculationMax));
  EXPECT_EQ(count(p, OpKind::kCpuOptimizer, 1), 3u);  // layers 3, 2, 1
  EXPECT_EQ(count(p, OpKind::kCpuCommit, 1), 3u);
  EXPECT_EQ(count(p, OpKind::kCpuOptimizer, -1), 1u);  // layer 0, after the norm
  const auto norm =
      std::find_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kNormAllReduce; });
  ASSERT_NE(norm, p.ops.end());
  size_t last_backward = 0;
  for (const Op& o : p.ops)
    if (o.kind == OpKind::kBackward) last_backward = o.id;
  std::vector<int32_t> spec_order, commit_order;
  for (const Op& o : p.ops) {
    if (o.kind == OpKind::kCpuOptimizer && o.state_slot == 1) {
      ASSERT_EQ(o.deps.size(), 1u) << o.label();
      EXPECT_EQ(p.ops[o.deps[0]].kind, OpKind::kD2HGrad);
      EXPECT_EQ(p.ops[o.deps[0]].layer, o.layer);
      EXPECT_LT(o.id, norm->id) << o.label();
      spec_order.push_back(o.layer);
    }
    if (o.kind == OpKind::kCpuCommit) {
      EXPECT_NE(std::find(o.deps.begin(), o.deps.end(), norm->id), o.deps.end()) << o.label();
      commit_order.push_back(o.layer);
    }
    if (o.kind == OpKind::kH2DParam && o.layer > 0) {  // a speculated layer's copy waits for its commit
      ASSERT_EQ(o.deps.size(), 1u);
      EXPECT_EQ(p.ops[o.deps[0]].kind, OpKind::kCpuCommit);
      EXPECT_EQ(p.ops[o.deps[0]].layer, o.layer);
    }
  }
  EXPECT_EQ(spec_order, (std::vector<int32_t>{3, 2, 1}));
  EXPECT_EQ(commit_order, (std::vector<int32_t>{3, 2, 1}));
  // the first speculative update is issued while backward still runs
  const auto first_spec = std::find_if(
      p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kCpuOptimizer && o.state_slot == 1; });
  EXPECT_LT(first_spec->id, last_backward);
  // the commit's op carries the redo's cost: the layer's elements
  for (const Op& o : p.ops)
    if (o.kind == OpKind::kCpuCommit) {
      const int64_t elems = part.layer_slice[size_t(o.layer)];
      EXPECT_EQ(o.elems, elems) << o.label();
      EXPECT_EQ(o.bytes, elems * int64_t(bytes_per_element(OptimizerKind::kAdamW, DType::kBF16, DType::kBF16).total()));
    }
  // speculation off: the plan of before
  StepConfig off = clipped(0);
  const StepPlan q = plan_step(mlp(), part, split, off);
  EXPECT_EQ(count(q, OpKind::kCpuCommit, 1), 0u);
  EXPECT_EQ(count(q, OpKind::kCpuOptimizer, 1), 0u);
  EXPECT_EQ(count(q, OpKind::kCpuOptimizer, -1), 4u);
}

// The allocation plan lists the second slots by name; the memory model counts them; `auto` fills what
// the host has beyond the plan and so never changes which ratios fit, an explicit budget counts in full.
TEST(Speculation, SpareSlotsInTheAllocationPlanAndTheMemoryModel) {
  const Partition part = make_partition(mlp(), {3, 1, 2048});
  const RankShard& shard = part.ranks[0];
  const TwinFlowSplit split = split_shard(shard, 1.0, 2048);
  MemoryOptions mo;
  mo.step = clipped(kSpeculationMax);
  mo.workload = WorkloadType::kSynthetic;
  const AllocPlan with = plan_allocations(mlp(), part, shard, split, mo);
  const int64_t spare = 1050624 + 1050624 + 264192;  // layers 1, 2, 3
  EXPECT_EQ(with.at(buf::kHostMasterSpare).bytes, spare * 4);
  EXPECT_EQ(with.at(buf::kHostState1Spare).bytes, spare * 4);
  EXPECT_EQ(with.at(buf::kHostState2Spare).bytes, spare * 4);
  EXPECT_EQ(with.at(buf::kHostMasterSpare).kind, MemKind::kOptimizer);
  EXPECT_EQ(with.at(buf::kHostMasterSpare).place, MemPlace::kHost);
  MemoryOptions off = mo;
  off.step.speculation_bytes = 0;
  const AllocPlan without = plan_allocations(mlp(), part, shard, split, off);
  EXPECT_FALSE(without.has(buf::kHostMasterSpare));
  EXPECT_EQ(with.bytes(MemPlace::kHost) - without.bytes(MemPlace::kHost), spare * 12);
  EXPECT_EQ(rank_memory(mlp(), part, shard, split, mo).host_optimizer -
                rank_memory(mlp(), part, shard, split, off).host_optimizer,
            spare * 12);
  EXPECT_EQ(with.bytes(MemPlace::kGpu), without.bytes(MemPlace::kGpu));
  // auto with a host limit: what is left beyond the plan without speculation
  const int64_t base = without.bytes(MemPlace::kHost);
  MemoryOptions limited = mo;
  // what the rank may pin: a host of this plan, layer 3's spare slot, 5 bytes and the default reserve
  // (max(8 GiB, 10%): 8 GiB for a host below 80 GiB), alone on its host
  const int64_t host = base + 264192 * 12 + 5 + (int64_t(8) << 30);
  ASSERT_LT(host, int64_t(80) << 30);
  limited.host_bytes_per_rank = pinnable_host_bytes_per_rank(host, 1, kDefaultHostReserve);
  EXPECT_EQ(limited.host_bytes_per_rank, base + 264192 * 12 + 5);  // room for layer 3 only
  EXPECT_EQ(resolve_speculation_bytes(mlp(), part, shard, split, limited), 264192 * 12 + 5);
  EXPECT_EQ(plan_allocations(mlp(), part, shard, split, limited).at(buf::kHostMasterSpare).bytes, 264192 * 4);
  limited.host_bytes_per_rank = base - 1;  // nothing left
  EXPECT_EQ(resolve_speculation_bytes(mlp(), part, shard, split, limited), 0);
  EXPECT_EQ(resolve_speculation_bytes(mlp(), part, shard, split, mo), kSpeculationMax);  // limit unknown
  // plan_rank plans the step and the allocations with the same resolved budget
  limited.host_bytes_per_rank = base + 264192 * 12;
  const RankPlan rp = plan_rank(mlp(), part, 0, 1.0, limited);
  EXPECT_EQ(rp.step.config.speculation_bytes, 264192 * 12);
  EXPECT_EQ(count(rp.step, OpKind::kCpuCommit, 1), 1u);
  EXPECT_EQ(rp.alloc.at(buf::kHostMasterSpare).bytes, 264192 * 4);
  // feasibility: auto fills the headroom and never makes a ratio not fit; an explicit budget counts
  const int64_t big_gpu = int64_t(1) << 40;
  const RatioRange r_off = feasible_ratios(mlp(), part, off, big_gpu, base);
  const RatioRange r_auto = feasible_ratios(mlp(), part, mo, big_gpu, base);
  ASSERT_TRUE(r_off.feasible);
  EXPECT_EQ(r_auto.max_ratio, r_off.max_ratio);
  EXPECT_EQ(r_off.max_ratio, 1.0);
  MemoryOptions explicit_budget = mo;
  explicit_budget.step.speculation_bytes = spare * 12;
  EXPECT_LT(feasible_ratios(mlp(), part, explicit_budget, big_gpu, base).max_ratio, 1.0);
  EXPECT_NO_THROW(check_ratio_fits(mlp(), part, mo, 1.0, big_gpu, base));
  EXPECT_THROW(check_ratio_fits(mlp(), part, explicit_budget, 1.0, big_gpu, base), InputError);
}

// The lr schedules the speculation tests run under: constant, and each DeepSpeed kind with a warm-up
// that is still running at some of the tested steps.
std::vector<LrSchedule> schedules_under_test() {
  LrSchedule warm;
  warm.kind = LrScheduleKind::kWarmupLr;
  warm.warmup_min_lr = 1e-5;
  warm.warmup_max_lr = 2e-3;
  warm.warmup_num_steps = 10;
  LrSchedule decay = warm;
  decay.kind = LrScheduleKind::kWarmupDecayLr;
  decay.warmup_type = WarmupType::kLinear;
  decay.total_num_steps = 500;
  LrSchedule cosine;
  cosine.kind = LrScheduleKind::kWarmupCosineLr;
  cosine.warmup_min_ratio = 0.1;
  cosine.warmup_num_steps = 10;
  cosine.total_num_steps = 500;
  return {LrSchedule{}, warm, decay, cosine};
}

// The speculated scalars are decide_step's at a zero norm: bit for bit those of any step that neither
// clips nor overflows, at every loss scale, step, optimizer and lr schedule (a step's lr depends only
// on its optimizer step, known when the step begins).
TEST(Speculation, SpeculatedScalarsAreThoseOfAnUnclippedStep) {
  for (const LrSchedule& schedule : schedules_under_test())
    for (OptimizerKind k :
         {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kAdagrad, OptimizerKind::kLion}) {
      HyperParams hp = default_hyper_params(k);
      hp.weight_decay = 0.1;
      const StepPolicy policy = make_step_policy(k, hp, 1.0, DType::kF16, schedule);
      for (double scale : {1.0, 3.0, 1024.0, 65536.0})
        for (int64_t opt_step : {1, 2, 7, 1000}) {
          const StepScalars spec = decide_step(policy, 1, 0.0, 0, scale, opt_step).scalars;
          for (double norm : {1e-30, 0.3, 0.999999, 1.0}) {  // at or below the clip: coefficient 1
            const StepDecision d = decide_step(policy, 1, norm * scale * norm * scale, 0, scale, opt_step);
            EXPECT_FALSE(d.clipped);
            EXPECT_TRUE(same_bits(d.scalars, spec))
                << lr_schedule_name(schedule.kind) << " " << int(k) << " scale " << scale << " norm " << norm;
          }
          const StepDecision clipped = decide_step(policy, 1, 4.0 * scale * scale, 0, scale, opt_step);  // norm 2
          EXPECT_TRUE(clipped.clipped);
          EXPECT_FALSE(same_bits(clipped.scalars, spec));
        }
    }
}

TEST(Speculation, SameBitsComparesEveryField) {
  StepScalars a = make_step_scalars(OptimizerKind::kAdamW, default_hyper_params(OptimizerKind::kAdamW), 3, 0.5);
  EXPECT_TRUE(same_bits(a, a));
  StepScalars b = a;
  b.has_l2 = 1;
  EXPECT_FALSE(same_bits(a, b));
  b = a;
  b.decay = std::nextafter(a.decay, 2.f);
  EXPECT_FALSE(same_bits(a, b));
  b = a;
  b.grad_scale = -0.f;
  a.grad_scale = 0.f;
  EXPECT_FALSE(same_bits(a, b));  // bits, not values
}

// The rule across steps: clean steps speculate and adopt; a clipped step redoes, and the step after it
// does not speculate (its commits update in place); an overflow skips, and the step after it does not
// speculate either.
TEST(Speculation, TheRuleAcrossSteps) {
  const Partition part = make_partition(mlp(), {3, 1, 2048});
  const TwinFlowSplit split = split_shard(part.ranks[0], 1.0, 2048);
  StepConfig cfg = clipped(kSpeculationMax);
  cfg.loss_scaling = true;
  const StepPlan plan = plan_step(mlp(), part, split, cfg);
  Speculation spec(plan);
  ASSERT_EQ(spec.layers(), (std::vector<int32_t>{3, 2, 1}));
  const StepPolicy policy =
      make_step_policy(OptimizerKind::kAdamW, default_hyper_params(OptimizerKind::kAdamW), 1.0, DType::kF16);
  const double scale = 1024;
  auto run = [&](int step, int64_t opt_step, double sumsq, uint64_t nonfinite, Speculation::Commit expect) {
    spec.begin_step(policy, step, scale, opt_step);
    const StepDecision d = decide_step(policy, step, sumsq, nonfinite, scale, opt_step + 1);
    for (int32_t l : spec.layers()) EXPECT_EQ(spec.commit(l, d), expect) << "step " << step << " layer " << l;
    return spec.end_step(d);
  };
  using C = Speculation::Commit;
  // step 1: clean (norm 0.5): speculated and held; every speculated layer flipped to slot 1
  Speculation::Outcome o = run(1, 0, 0.25 * scale * scale, 0, C::kAdopt);
  EXPECT_TRUE(o.speculated && o.held);
  for (int32_t l : spec.layers()) EXPECT_EQ(spec.slot(l), 1);
  EXPECT_EQ(spec.slot(0), 0);
  // step 2: clipped (norm 3): speculated, failed, redone in place (the slots stay)
  o = run(2, 1, 9.0 * scale * scale, 0, C::kUpdate);
  EXPECT_TRUE(o.speculated);
  EXPECT_FALSE(o.held);
  for (int32_t l : spec.layers()) EXPECT_EQ(spec.slot(l), 1);
  // step 3: after a clipped step: no speculation, the commits update in place, though it is clean
  o = run(3, 2, 0.25 * scale * scale, 0, C::kUpdate);
  EXPECT_FALSE(o.speculated);
  EXPECT_FALSE(spec.active());
  // step 4: clean again: speculates and flips back to slot 0
  o = run(4, 3, 0.25 * scale * scale, 0, C::kAdopt);
  EXPECT_TRUE(o.held);
  for (int32_t l : spec.layers()) EXPECT_EQ(spec.slot(l), 0);
  // step 5: overflow: skipped, nothing changes; step 6 does not speculate
  o = run(5, 4, 0.25 * scale * scale, 1, C::kSkip);
  EXPECT_TRUE(o.speculated);
  EXPECT_FALSE(o.held);
  o = run(6, 4, 0.25 * scale * scale, 0, C::kUpdate);
  EXPECT_FALSE(o.speculated);
  EXPECT_EQ(spec.speculated_steps(), 4);  // 1, 2, 4, 5
  EXPECT_EQ(spec.failed_steps(), 2);      // 2, 5
  // a plan without speculative ops never speculates
  Speculation none(plan_step(mlp(), part, split, clipped(0)));
  none.begin_step(policy, 1, scale, 0);
  EXPECT_FALSE(none.active());
  EXPECT_FALSE(none.planned());
}

// A restore (a checkpoint written into every layer's primary slot): reset_slots puts every layer back
// in slot 0 and lets the next step speculate, even after a clipped step; the counters keep counting.
TEST(Speculation, ResetSlotsForARestore) {
  const Partition part = make_partition(mlp(), {3, 1, 2048});
  const TwinFlowSplit split = split_shard(part.ranks[0], 1.0, 2048);
  Speculation spec(plan_step(mlp(), part, split, clipped(kSpeculationMax)));
  const StepPolicy policy =
      make_step_policy(OptimizerKind::kAdamW, default_hyper_params(OptimizerKind::kAdamW), 1.0, DType::kBF16);
  spec.begin_step(policy, 1, 1.0, 0);  // clean: every speculated layer adopts its spare slot
  StepDecision d = decide_step(policy, 1, 0.25, 0, 1.0, 1);
  for (int32_t l : spec.layers()) ASSERT_EQ(spec.commit(l, d), Speculation::Commit::kAdopt);
  spec.end_step(d);
  spec.begin_step(policy, 2, 1.0, 1);  // clipped (norm 3): the next step would not speculate
  d = decide_step(policy, 2, 9.0, 0, 1.0, 2);
  for (int32_t l : spec.layers()) ASSERT_EQ(spec.commit(l, d), Speculation::Commit::kUpdate);
  spec.end_step(d);
  for (int32_t l : spec.layers()) ASSERT_EQ(spec.slot(l), 1);
  spec.reset_slots();
  for (int32_t l = 0; l < 4; ++l) EXPECT_EQ(spec.slot(l), 0) << "layer " << l;
  spec.begin_step(policy, 3, 1.0, 2);
  EXPECT_TRUE(spec.active());
  EXPECT_EQ(spec.speculated_steps(), 3);
  EXPECT_EQ(spec.failed_steps(), 1);
}

// ZeRO stages 1/2 carry the same speculative updates and commits as stage 3 (stage 1 after its
// all-reduce), and a speculated layer's replica refresh waits for its commit through its H2D.
TEST(Speculation, StagesOneAndTwoCarryTheSpeculativeOps) {
  for (int stage : {1, 2}) {
    const Partition part = make_partition(mlp(), {stage, 2, 2048});
    const TwinFlowSplit split = split_shard(part.ranks[0], 1.0, 2048);
    const StepPlan p = plan_step(mlp(), part, split, clipped(kSpeculationMax));
    EXPECT_EQ(count(p, OpKind::kCpuOptimizer, 1), 3u) << "stage " << stage;  // layers 3, 2, 1
    EXPECT_EQ(count(p, OpKind::kCpuCommit, 1), 3u) << "stage " << stage;
    EXPECT_EQ(count(p, OpKind::kCpuOptimizer, -1), 1u) << "stage " << stage;  // layer 0, after the norm
    const OpKind reduction = stage == 1 ? OpKind::kAllReduce : OpKind::kReduceScatter;
    for (const Op& o : p.ops) {
      if (o.kind == OpKind::kCpuOptimizer && o.state_slot == 1) {  // right after the layer's copy ...
        const Op& d2h = p.ops[o.deps.at(0)];
        ASSERT_EQ(d2h.kind, OpKind::kD2HGrad) << o.label();
        EXPECT_EQ(p.ops[d2h.deps.at(0)].kind, reduction) << o.label();  // ... of its reduced gradient
      }
      if (o.kind != OpKind::kAllGather || o.micro_batch >= 0 || o.layer == 0) continue;
      const auto h2d =
          std::find_if(o.deps.begin(), o.deps.end(), [&](uint32_t d) { return p.ops[d].kind == OpKind::kH2DParam; });
      ASSERT_NE(h2d, o.deps.end()) << "stage " << stage << " " << o.label();
      const Op& commit = p.ops[p.ops[*h2d].deps.at(0)];
      EXPECT_EQ(commit.kind, OpKind::kCpuCommit) << "stage " << stage << " " << o.label();
      EXPECT_EQ(commit.layer, o.layer);
    }
  }
}
