// The step plan orders every buffer reuse: the hazard checker finds nothing on any configuration and
// finds what a deliberately removed dependency leaves unordered; the slots and reuse dependencies
// the engine executes are the plan's.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/plan_hazards.h"
#include "core/step.h"

using namespace tf::core;

namespace {

struct Named {
  const char* name;
  ModelDesc model;
};
std::vector<Named> models() {
  return {{"mlp", describe_model(make_mlp({512, 1024, 1024, 1024, 256}))},
          {"gpt-tiny", describe_model(model_preset("gpt-tiny"))}};
}

StepPlan plan_of(const ModelDesc& m, int stage, int world, double ratio, StepConfig c, int rank = 0) {
  const Partition part = make_partition(m, {stage, world, 2048});
  return plan_step(m, part, split_shard(part.ranks[size_t(rank)], ratio, 2048), c);
}

bool any_mentions(const std::vector<std::string>& hazards, const std::string& what) {
  return std::any_of(hazards.begin(), hazards.end(), [&](const std::string& h) { return h.find(what) != h.npos; });
}

// A clipped ZeRO-3 step on two ranks with accumulation: every kind of reuse happens in it.
StepPlan busy_plan(int prefetch = 2) {
  StepConfig c;
  c.grad_accum = 3;
  c.prefetch_layers = prefetch;
  c.clip_gradients = true;
  return plan_of(describe_model(make_mlp({512, 1024, 1024, 1024, 256})), 3, 2, 0.3, c);
}

}  // namespace

TEST(PlanHazards, NoneOnAnyConfiguration) {
  size_t plans = 0;
  for (const Named& m : models())
    for (int stage : {1, 2, 3})
      for (int world : {1, 2, 4})
        for (int ga : {1, 3})
          for (int prefetch : {1, 2, 3})
            for (double ratio : {0.0, 0.3, 1.0})
              for (int waits : {0, 1, 2})  // nothing, clipping, fp16 loss scaling
                for (int64_t speculation : {int64_t(0), kSpeculationAuto}) {
                  StepConfig c;
                  c.grad_accum = ga;
                  c.prefetch_layers = prefetch;
                  c.clip_gradients = waits == 1;
                  c.loss_scaling = waits == 2;
                  c.speculation_bytes = speculation;
                  if (waits == 2) c.grad_dtype = DType::kF16;
                  for (int rank : {0, world - 1}) {
                    const StepPlan p = plan_of(m.model, stage, world, ratio, c, rank);
                    const std::vector<std::string> h = check_plan_hazards(p);
                    ASSERT_TRUE(h.empty()) << m.name << " stage " << stage << " world " << world << " accum " << ga
                                           << " prefetch " << prefetch << " ratio " << ratio << " waits " << waits
                                           << " speculation " << speculation << ": " << h.front();
                    ++plans;
                  }
                }
  EXPECT_EQ(plans, 2u * 3 * 3 * 2 * 3 * 3 * 3 * 2 * 2);
}

TEST(PlanHazards, ARemovedReuseDependencyIsFound) {
  // backward k waits for reduction k-2, which read the layer-gradient buffer it overwrites
  StepPlan p = busy_plan();
  auto b = std::find_if(p.ops.begin(), p.ops.end(), [&](const Op& o) {
    return o.kind == OpKind::kBackward && std::any_of(o.deps.begin(), o.deps.end(), [&](uint32_t d) {
             return p.ops[d].kind == OpKind::kReduceScatter;
           });
  });
  ASSERT_NE(b, p.ops.end());
  std::erase_if(b->deps, [&](uint32_t d) { return p.ops[d].kind == OpKind::kReduceScatter; });
  const std::vector<std::string> h = check_plan_hazards(p);
  ASSERT_FALSE(h.empty());
  EXPECT_TRUE(any_mentions(h, "layer_grad[" + std::to_string(b->grad_slot) + "]")) << h.front();
  EXPECT_TRUE(any_mentions(h, b->label())) << h.front();
}

TEST(PlanHazards, ARemovedGatherDependencyIsFound) {
  // The backward gather of the last layer refills the prefetch buffer its own forward read (the same
  // data: still a write under a read, so it waits).
  StepPlan p = busy_plan();
  const int last = p.layers - 1;
  auto refill = std::find_if(p.ops.begin(), p.ops.end(), [&](const Op& o) {
    return o.kind == OpKind::kAllGather && o.layer == last && o.deps.size() == 1 &&
           p.ops[o.deps[0]].kind == OpKind::kForward && p.ops[o.deps[0]].layer == last;
  });
  ASSERT_NE(refill, p.ops.end());
  refill->deps.clear();
  const std::vector<std::string> h = check_plan_hazards(p);
  ASSERT_FALSE(h.empty());
  EXPECT_TRUE(any_mentions(h, "gather[" + std::to_string(refill->gather_slot) + "]")) << h.front();
}

TEST(PlanHazards, RemovedOptimizerSideDependenciesAreFound) {
  {  // the CPU update reads the gradient its D2H lands
    StepPlan p = busy_plan();
    auto cpu = std::find_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kCpuOptimizer; });
    ASSERT_NE(cpu, p.ops.end());
    std::erase_if(cpu->deps, [&](uint32_t d) { return p.ops[d].kind == OpKind::kD2HGrad; });
    EXPECT_TRUE(any_mentions(check_plan_hazards(p), "host_grad"));
  }
  {  // the GPU optimizer reads the step decision the norm all-reduce writes
    StepPlan p = busy_plan();
    auto gpu = std::find_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kGpuOptimizer; });
    ASSERT_NE(gpu, p.ops.end());
    gpu->deps.clear();
    EXPECT_TRUE(any_mentions(check_plan_hazards(p), "norm_result"));
  }
  {  // the H2D reads the bf16 copy the CPU update writes
    StepPlan p = busy_plan();
    auto h2d = std::find_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kH2DParam; });
    ASSERT_NE(h2d, p.ops.end());
    h2d->deps.clear();
    EXPECT_TRUE(any_mentions(check_plan_hazards(p), "host_copy"));
  }
}

// A speculated layer: its speculative update reads the gradient its D2H lands; the first commit reads
// the step decision; the H2D reads the copy the commit (its redo) writes. Removing any of those
// dependencies leaves a pair unordered.
TEST(PlanHazards, RemovedSpeculationDependenciesAreFound) {
  StepConfig c;
  c.grad_accum = 2;
  c.clip_gradients = true;
  c.speculation_bytes = kSpeculationAuto;
  const StepPlan base = plan_of(describe_model(make_mlp({512, 1024, 1024, 1024, 256})), 3, 2, 0.6, c);
  ASSERT_TRUE(check_plan_hazards(base).empty());
  const auto find = [](StepPlan& p, OpKind k, int8_t slot) {
    return std::find_if(p.ops.begin(), p.ops.end(), [&](const Op& o) { return o.kind == k && o.state_slot == slot; });
  };
  {
    StepPlan p = base;
    auto spec = find(p, OpKind::kCpuOptimizer, 1);
    ASSERT_NE(spec, p.ops.end());
    spec->deps.clear();
    const std::vector<std::string> h = check_plan_hazards(p);
    EXPECT_TRUE(any_mentions(h, "host_grad[" + std::to_string(spec->layer) + "]")) << (h.empty() ? "" : h.front());
  }
  {
    StepPlan p = base;
    auto commit = find(p, OpKind::kCpuCommit, 1);
    ASSERT_NE(commit, p.ops.end());
    std::erase_if(commit->deps, [&](uint32_t d) { return p.ops[d].kind == OpKind::kNormAllReduce; });
    EXPECT_TRUE(any_mentions(check_plan_hazards(p), "norm_result"));
  }
  {
    StepPlan p = base;
    auto commit = find(p, OpKind::kCpuCommit, 1);
    auto h2d = std::find_if(p.ops.begin(), p.ops.end(),
                            [&](const Op& o) { return o.kind == OpKind::kH2DParam && o.layer == commit->layer; });
    ASSERT_NE(h2d, p.ops.end());
    h2d->deps.clear();
    const std::vector<std::string> h = check_plan_hazards(p);
    EXPECT_TRUE(any_mentions(h, "host_copy[" + std::to_string(commit->layer) + "]")) << (h.empty() ? "" : h.front());
  }
}

TEST(PlanHazards, WhatSpeculationOpsTouch) {
  StepConfig c;
  c.clip_gradients = true;
  c.speculation_bytes = kSpeculationAuto;
  const StepPlan p = plan_of(describe_model(make_mlp({512, 1024, 1024, 1024, 256})), 3, 1, 1.0, c);
  for (const Op& o : p.ops) {
    const std::vector<BufferUse> u = op_buffers(p, o);
    const auto has = [&](PlanBuffer b, bool write) {
      return std::find(u.begin(), u.end(), BufferUse{b, o.layer, Segment::kWhole, write}) != u.end();
    };
    if (o.kind == OpKind::kCpuOptimizer && o.state_slot == 1) {
      EXPECT_TRUE(has(PlanBuffer::kHostOptimizerState, false)) << o.label();
      EXPECT_TRUE(has(PlanBuffer::kHostOptimizerSpare, true)) << o.label();
      EXPECT_FALSE(has(PlanBuffer::kHostOptimizerState, true)) << o.label();  // the current slot is only read
      EXPECT_EQ(
          std::count_if(u.begin(), u.end(), [](const BufferUse& b) { return b.buffer == PlanBuffer::kNormResult; }), 0)
          << "a speculative update does not wait for the step decision";
    }
    if (o.kind == OpKind::kCpuCommit) {
      EXPECT_TRUE(has(PlanBuffer::kHostOptimizerState, true)) << o.label();
      EXPECT_TRUE(has(PlanBuffer::kHostOptimizerSpare, true)) << o.label();
      EXPECT_TRUE(has(PlanBuffer::kHostCopy, true)) << o.label();
      EXPECT_NE(std::find(u.begin(), u.end(), BufferUse{PlanBuffer::kNormResult, -1, Segment::kWhole, false}), u.end());
    }
  }
}

// What the engine indexes its buffers with: backward k writes layer-gradient buffer k % 2 and its
// reduction reads the same; forward and backward of layer l read prefetch buffer l % P, which its
// gather filled; every reuse waits for the buffer's last reader.
TEST(PlanHazards, SlotsAndReuseDependencies) {
  for (int prefetch : {1, 2, 3}) {
    const StepPlan p = busy_plan(prefetch);
    std::vector<uint32_t> backwards, reductions;
    for (const Op& o : p.ops) {
      if (o.kind == OpKind::kBackward) {
        EXPECT_EQ(o.grad_slot, int(backwards.size() % kGradSlots)) << o.label();
        if (backwards.size() >= 2) {
          const uint32_t reuse = reductions[backwards.size() - 2];
          EXPECT_NE(std::find(o.deps.begin(), o.deps.end(), reuse), o.deps.end()) << o.label();
        }
        backwards.push_back(o.id);
      }
      if (o.kind == OpKind::kReduceScatter) {
        ASSERT_EQ(o.deps.size(), 1u);
        EXPECT_EQ(o.deps[0], backwards.back()) << o.label();
        EXPECT_EQ(o.grad_slot, p.ops[backwards.back()].grad_slot) << o.label();
        reductions.push_back(o.id);
      }
      if (o.kind == OpKind::kForward || o.kind == OpKind::kBackward || o.kind == OpKind::kAllGather) {
        EXPECT_EQ(o.gather_slot, o.layer % prefetch) << o.label();
      }
      if (o.kind == OpKind::kForward || o.kind == OpKind::kBackward) {
        const Op& gather = p.ops[o.deps[0]];
        EXPECT_EQ(gather.kind, OpKind::kAllGather) << o.label();
        EXPECT_EQ(gather.layer, o.layer) << o.label();
      }
    }
    EXPECT_EQ(backwards.size(), reductions.size());
  }
}

TEST(PlanHazards, WhatOpsTouch) {
  const StepPlan p = busy_plan();
  auto uses = [&](OpKind k, int mb) {
    const auto it =
        std::find_if(p.ops.begin(), p.ops.end(), [&](const Op& o) { return o.kind == k && o.micro_batch == mb; });
    return op_buffers(p, *it);
  };
  auto has = [](const std::vector<BufferUse>& u, PlanBuffer b, bool write) {
    return std::any_of(u.begin(), u.end(), [&](const BufferUse& x) { return x.buffer == b && x.write == write; });
  };
  // the first of 3 micro-batches keeps its sum in the accumulation; the last rounds it into the grads
  const std::vector<BufferUse> first = uses(OpKind::kReduceScatter, 0), last = uses(OpKind::kReduceScatter, 2);
  EXPECT_TRUE(has(first, PlanBuffer::kGradAccum, true));
  EXPECT_FALSE(has(first, PlanBuffer::kGradAccum, false));
  EXPECT_FALSE(has(first, PlanBuffer::kGrads, true));
  EXPECT_TRUE(has(last, PlanBuffer::kGradAccum, false));
  EXPECT_FALSE(has(last, PlanBuffer::kGradAccum, true));
  EXPECT_TRUE(has(last, PlanBuffer::kGrads, true));
  EXPECT_TRUE(has(uses(OpKind::kBackward, 1), PlanBuffer::kLayerGrad, true));
  EXPECT_TRUE(has(uses(OpKind::kAllGather, 1), PlanBuffer::kGather, true));
  EXPECT_TRUE(has(uses(OpKind::kGpuOptimizer, -1), PlanBuffer::kParams, true));
  EXPECT_TRUE(has(uses(OpKind::kGpuOptimizer, -1), PlanBuffer::kNormResult, false));
}

// The tied head reads the embedding: its gathers fill the shared buffer too, and the refill of that
// buffer waits for its last reader like any other (a removed dependency is found).
TEST(PlanHazards, ARemovedSharedGatherDependencyIsFound) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));
  StepConfig c;
  c.grad_accum = 2;
  StepPlan p = plan_of(m, 3, 2, 0.3, c);
  const int head = p.layers - 1;
  auto refill = std::find_if(p.ops.begin(), p.ops.end(), [&](const Op& o) {
    return o.kind == OpKind::kAllGather && o.layer == head && !o.deps.empty() &&
           p.ops[o.deps[0]].kind == OpKind::kForward && p.ops[o.deps[0]].layer == head;
  });
  ASSERT_NE(refill, p.ops.end());
  EXPECT_EQ(refill->shared_layer, 0);
  refill->deps.clear();
  EXPECT_TRUE(any_mentions(check_plan_hazards(p), "gather_shared"));
}
