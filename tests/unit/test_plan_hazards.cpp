// The step plan orders every buffer reuse: the hazard checker finds nothing on any configuration and
// finds what a deliberately removed dependency leaves unordered; the slots and reuse dependencies
// the engine executes are the plan's.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
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

// ... and with every CPU pass order where the order applies (core::CpuPassOrder: a carried tail at full-size
// staging with speculation), every m and k with 0 <= m <= k <= n.
TEST(PlanHazards, NoneOnAnyConfiguration) {
  size_t plans = 0, reordered = 0, ring_forward = 0;
  for (const Named& m : models())
    for (int stage : {1, 2, 3})
      for (int world : {1, 2, 4})
        for (int ga : {1, 3})
          for (int prefetch : {1, 2, 3})
            for (double ratio : {0.0, 0.3, 1.0})
              for (int waits : {0, 1, 2})  // nothing, clipping, fp16 loss scaling
                for (int slots : {kStagingSlots, 1, kUnboundedStaging})
                  for (int64_t speculation : {int64_t(0), kSpeculationMax})
                    for (bool carry : {false, true}) {
                      StepConfig c;
                      c.carry_tail = carry;
                      c.staging_slots = slots;
                      c.grad_accum = ga;
                      c.prefetch_layers = prefetch;
                      c.clip_gradients = waits == 1;
                      c.loss_scaling = waits == 2;
                      c.speculation_bytes = speculation;
                      if (waits == 2) c.grad_dtype = DType::kF16;
                      for (int rank : {0, world - 1}) {
                        const StepPlan p = plan_of(m.model, stage, world, ratio, c, rank);
                        const std::vector<std::string> h = check_plan_hazards(p);
                        ASSERT_TRUE(h.empty())
                            << m.name << " stage " << stage << " world " << world << " accum " << ga << " prefetch "
                            << prefetch << " ratio " << ratio << " waits " << waits << " staging slots " << slots
                            << " speculation " << speculation << " carry " << carry << ": " << h.front();
                        ++plans;
                        if (carry && waits > 0 && slots != kUnboundedStaging) {  // rings: forward after the norm
                          StepConfig r = c;
                          r.ring_forward_order = true;
                          const std::vector<std::string> hr =
                              check_plan_hazards(plan_of(m.model, stage, world, ratio, r, rank));
                          ASSERT_TRUE(hr.empty())
                              << m.name << " stage " << stage << " world " << world << " accum " << ga
                              << " prefetch " << prefetch << " ratio " << ratio << " waits " << waits
                              << " staging slots " << slots << " ring forward order: " << hr.front();
                          ++ring_forward;
                        }
                        const int n = ordered_cpu_passes(p);
                        for (int arrival = 0; arrival < n; ++arrival)
                          for (int k = arrival; k <= n; ++k) {
                            StepConfig o = c;
                            o.cpu_order = {arrival, k};
                            const std::vector<std::string> ho =
                                check_plan_hazards(plan_of(m.model, stage, world, ratio, o, rank));
                            ASSERT_TRUE(ho.empty())
                                << m.name << " stage " << stage << " world " << world << " accum " << ga << " prefetch "
                                << prefetch << " ratio " << ratio << " waits " << waits << " cpu order " << arrival
                                << "," << k << ": " << ho.front();
                            ++reordered;
                          }
                      }
                    }
  EXPECT_EQ(plans, 2u * 3 * 3 * 2 * 3 * 3 * 3 * 3 * 2 * 2 * 2);
  EXPECT_GT(reordered, plans / 4);  // 8208 reordered plans beside the 23328
  EXPECT_EQ(ring_forward, 2u * 3 * 3 * 2 * 3 * 3 * 2 * 2 * 2 * 2);  // carried, a norm wait, rings of 3 and 1
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

// The staging rings: the D2H into slot s waits for the CPU pass that last read it (a speculated
// layer's commit, which may redo the update from the slot), the pass writing copy slot s for the H2D
// that last read it; without either, the checker names the slot. With speculation (a norm wait) the
// first two CPU layers speculate and the D2Hs of layers 2 and 3 wait for their commits.
TEST(PlanHazards, ARemovedStagingRingDependencyIsFound) {
  const ModelDesc m = describe_model(make_mlp(std::vector<int64_t>(8, 1024)));  // 7 CPU layers at ratio 1
  for (int waits : {0, 1, 2})  // nothing, clipping, clipping with speculation
  {
    StepConfig c;
    c.staging_slots = 2;
    c.clip_gradients = waits > 0;
    c.speculation_bytes = waits == 2 ? kSpeculationMax : 0;
    const StepPlan base = plan_of(m, 3, 2, 1.0, c);
    ASSERT_TRUE(check_plan_hazards(base).empty());
    const auto is_pass = [](OpKind k) { return k == OpKind::kCpuOptimizer || k == OpKind::kCpuCommit; };
    const auto depends_on = [&](const Op& o, auto pred) {
      return std::any_of(o.deps.begin(), o.deps.end(), [&](uint32_t d) { return pred(base.ops[d].kind); });
    };
    const auto is_h2d = [](OpKind k) { return k == OpKind::kH2DParam; };
    size_t d2h_cases = 0, cpu_cases = 0, after_commit = 0, speculative = 0;
    for (const Op& o : base.ops) {
      speculative += o.kind == OpKind::kCpuOptimizer && o.state_slot == 1;
      const bool d2h_reuse = o.kind == OpKind::kD2HGrad && depends_on(o, is_pass);
      const bool cpu_reuse = is_pass(o.kind) && depends_on(o, is_h2d);
      if (!d2h_reuse && !cpu_reuse) continue;
      StepPlan p = base;
      after_commit += d2h_reuse && depends_on(o, [](OpKind k) { return k == OpKind::kCpuCommit; });
      std::erase_if(p.ops[o.id].deps,
                    [&](uint32_t d) { return d2h_reuse ? is_pass(p.ops[d].kind) : is_h2d(p.ops[d].kind); });
      const std::string ring = d2h_reuse ? "host_grad[" : "host_copy[";
      EXPECT_TRUE(any_mentions(check_plan_hazards(p), ring + std::to_string(o.staging_slot) + "]"))
          << o.label() << " waits " << waits;
      ++(d2h_reuse ? d2h_cases : cpu_cases);
    }
    EXPECT_EQ(d2h_cases, 5u) << waits;  // CPU layers 2..6 of 7 reuse a slot
    EXPECT_EQ(cpu_cases, 5u) << waits;
    // speculation: only the layers whose D2H lands before the norm (the first 2 CPU layers) speculate
    EXPECT_EQ(speculative, waits == 2 ? 2u : 0u);
    EXPECT_EQ(after_commit, waits == 2 ? 2u : 0u);
  }
}

// A speculated layer: its speculative update reads the gradient its D2H lands; the first commit reads
// the step decision; the H2D reads the copy the commit (its redo) writes. Removing any of those
// dependencies leaves a pair unordered.
TEST(PlanHazards, RemovedSpeculationDependenciesAreFound) {
  StepConfig c;
  c.grad_accum = 2;
  c.clip_gradients = true;
  c.speculation_bytes = kSpeculationMax;
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
    EXPECT_TRUE(any_mentions(h, "host_grad[" + std::to_string(spec->staging_slot) + "]"))
        << (h.empty() ? "" : h.front());
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
    EXPECT_TRUE(any_mentions(h, "host_copy[" + std::to_string(commit->staging_slot) + "]"))
        << (h.empty() ? "" : h.front());
  }
}

TEST(PlanHazards, WhatSpeculationOpsTouch) {
  StepConfig c;
  c.clip_gradients = true;
  c.speculation_bytes = kSpeculationMax;
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
      EXPECT_NE(std::find(u.begin(), u.end(), BufferUse{PlanBuffer::kHostCopy, o.staging_slot, Segment::kWhole, true}),
                u.end())
          << o.label();
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

// ---- carrying the tail into the next step (docs/ARCHITECTURE.md, "Carrying the optimizer tail into the
// next step") ----

namespace {

// The configurations a carried tail changes most: every stage, a norm wait or not, rings or full-size
// staging, speculation on and off, two ranks (ZeRO-3 gathers, stage 1/2 refreshes), CPU layers at 0.6.
std::vector<StepConfig> carrying_configs() {
  std::vector<StepConfig> out;
  for (int waits : {0, 1, 2})
    for (int slots : {kStagingSlots, 1, kUnboundedStaging})
      for (int64_t speculation : {int64_t(0), kSpeculationMax}) {
        StepConfig c;
        c.carry_tail = true;
        c.grad_accum = 2;
        c.staging_slots = slots;
        c.clip_gradients = waits == 1;
        c.loss_scaling = waits == 2;
        if (waits == 2) c.grad_dtype = DType::kF16;
        c.speculation_bytes = speculation;
        out.push_back(c);
      }
  // then the ring configurations with a norm wait again, the passes after the norm in ring forward order
  for (size_t i = 0, n = out.size(); i < n; ++i)
    if (out[i].staging_slots != kUnboundedStaging && (out[i].clip_gradients || out[i].loss_scaling)) {
      out.push_back(out[i]);
      out.back().ring_forward_order = true;
    }
  return out;
}

// Whether a carrying plan's passes after the norm leave backward order, the order of the plan without carry
// (core::ring_use_order says: at full-size staging, or on rings with ring_forward_order, with a norm wait).
bool reordered_after_norm(const StepPlan& p) {
  const auto cpu_layers =
      int(std::count_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kH2DParam; }));
  const std::vector<int> order = ring_use_order(cpu_layers, p.staging.slots, p.config);
  return !std::is_sorted(order.begin(), order.end());
}

const ModelDesc& carry_model() {
  static const ModelDesc m = describe_model(make_mlp(std::vector<int64_t>(7, 1024)));
  return m;
}

// The plan with the carried marks and cross-step dependencies taken out.
StepPlan without_carry(StepPlan p) {
  for (Op& o : p.ops) {
    o.carried = false;
    o.carried_deps.clear();
  }
  p.config.carry_tail = false;
  return p;
}

}  // namespace

// carry_tail changes no op, dependency or slot of a step: it marks the tail and adds the next step's
// waits on it, so `off` is today's schedule exactly. The tail is every CPU pass and H2D and what waits
// for them; it is a suffix of each queue and nothing else waits for it.
TEST(PlanHazards, CarryMarksTheTailAndChangesNothingElse) {
  for (int stage : {1, 2, 3})
    for (StepConfig c : carrying_configs()) {
      const StepPlan on = plan_of(carry_model(), stage, 2, 0.6, c);
      c.carry_tail = false;
      const StepPlan off = plan_of(carry_model(), stage, 2, 0.6, c);
      // at full-size staging the passes after the norm run in forward order (and so their H2Ds and
      // refreshes), with rings in ring order where ring_forward_order asks for it; else the order is today's
      if (!reordered_after_norm(on)) {
        EXPECT_EQ(without_carry(on), off) << "stage " << stage;
      }
      EXPECT_EQ(on.ops.size(), off.ops.size());
      EXPECT_FALSE(carries(off));
      ASSERT_TRUE(carries(on));
      for (const Op& o : on.ops) {
        const bool cpu_side = o.queue == Queue::kCpu || o.queue == Queue::kH2D;
        if (cpu_side) {
          EXPECT_TRUE(o.carried) << o.label();
        }
        if (o.kind == OpKind::kGpuOptimizer || o.kind == OpKind::kNormAllReduce || o.kind == OpKind::kBackward) {
          EXPECT_FALSE(o.carried) << o.label();
        }
        // a refresh is carried exactly when its layer has a CPU part (it waits for the layer's H2D)
        if (o.kind == OpKind::kAllGather && o.micro_batch < 0) {
          const bool has_h2d = std::any_of(o.deps.begin(), o.deps.end(),
                                           [&](uint32_t d) { return on.ops[d].kind == OpKind::kH2DParam; });
          EXPECT_EQ(o.carried, has_h2d) << o.label();
        }
      }
      // with a norm wait the deferred D2Hs (ring slots freed by a CPU pass) are carried, the rest not
      for (const Op& o : on.ops)
        if (o.kind == OpKind::kD2HGrad) {
          const bool after_pass =
              std::any_of(o.deps.begin(), o.deps.end(), [&](uint32_t d) { return on.ops[d].queue == Queue::kCpu; });
          EXPECT_EQ(o.carried, after_pass) << o.label();
        }
    }
}

// The next step's waits on the tail: a ZeRO-3 gather (stages 1/2: a forward) of a CPU layer waits for
// its H2D (refresh). Everything else across the steps follows from them (the next step's D2Hs, CPU
// passes, reductions and norm come after its forward). A wait is needed when its H2D comes later on the
// h2d queue than every H2D an earlier wait (in issue order: the gathers, forwards, run in forward order)
// orders: in forward order after the norm (full-size staging) every wait; in backward order (rings, or no
// norm wait) only the first CPU layer's, whose pass is the last; in ring forward order those of the
// layers that pass after the norm. Removing a needed one leaves a pair across the two steps unordered,
// which the checker reports with the next step's op.
TEST(PlanHazards, ARemovedCarriedDependencyIsFound) {
  size_t removed = 0;
  for (int stage : {1, 2, 3})
    for (const StepConfig& c : carrying_configs())
      for (double ratio : {0.6, 1.0}) {
        const StepPlan base = plan_of(carry_model(), stage, 2, ratio, c);
        ASSERT_TRUE(check_plan_hazards(base).empty());
        std::map<uint32_t, int> h2d_position;  // H2D op -> its place on the h2d queue
        for (const Op& o : base.ops)
          if (o.kind == OpKind::kH2DParam) h2d_position[o.id] = int(h2d_position.size());
        const auto h2d_of = [&](uint32_t d) {  // the H2D a carried dependency orders (a refresh's own H2D)
          if (base.ops[d].kind == OpKind::kH2DParam) return h2d_position.at(d);
          for (uint32_t e : base.ops[d].deps)
            if (base.ops[e].kind == OpKind::kH2DParam) return h2d_position.at(e);
          return -1;
        };
        int ordered = -1;  // the latest H2D an earlier wait orders
        for (const Op& o : base.ops)
          for (uint32_t d : o.carried_deps) {
            const Op& tail = base.ops[d];
            const int at = h2d_of(d);
            const bool needed = at > ordered;
            ordered = std::max(ordered, at);
            if (!needed) continue;
            StepPlan p = base;
            std::erase(p.ops[o.id].carried_deps, d);
            const std::vector<std::string> h = check_plan_hazards(p);
            EXPECT_TRUE(any_mentions(h, "params[" + std::to_string(tail.layer) + "] (cpu segment)"))
                << o.label() << " without " << tail.label() << " stage " << stage;
            EXPECT_TRUE(any_mentions(h, " (next step)")) << o.label() << " stage " << stage;
            ++removed;
          }
      }
  EXPECT_GT(removed, 50u);
}

// The shape of a carried tail: an op that is not carried after a carried one on its queue, or waiting
// for one, or a carried op nothing in the next step waits for (it would run past two steps), is reported.
TEST(PlanHazards, AMisshapenTailIsFound) {
  StepConfig c = carrying_configs()[3];  // clipping, rings, no speculation
  const StepPlan base = plan_of(carry_model(), 3, 2, 0.6, c);
  ASSERT_TRUE(check_plan_hazards(base).empty());
  {
    StepPlan p = base;
    auto gpu = std::find_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kGpuOptimizer; });
    auto h2d = std::find_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.kind == OpKind::kH2DParam; });
    ASSERT_TRUE(gpu != p.ops.end() && h2d != p.ops.end() && h2d->id < gpu->id);
    gpu->deps.push_back(h2d->id);
    EXPECT_TRUE(any_mentions(check_plan_hazards(p), "waits for the carried"));
  }
  {
    StepPlan p = base;
    for (Op& o : p.ops) o.carried_deps.clear();
    EXPECT_TRUE(any_mentions(check_plan_hazards(p), "is carried past the next step"));
  }
  {
    StepPlan p = without_carry(base);
    p.ops.back().carried = true;
    EXPECT_TRUE(any_mentions(check_plan_hazards(p), "does not carry its tail"));
  }
}
