// The speculated CPU passes' order (core::CpuPassOrder; docs/ARCHITECTURE.md, "Order after the norm"): the
// default is today's plan exactly, it changes nothing where it does not apply (rings, no carried tail, no
// norm wait, no speculation), and where it applies the cpu queue runs the passes and commits in the order
// its m and k say, which a reference written from that rule (not from the planner) gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/speculation.h"
#include "core/step.h"

using namespace tf::core;

namespace {

// 8 layers: up to 7 speculated CPU layers at ratio 1 (layer 0 never speculates).
const ModelDesc& model() {
  static const ModelDesc m = describe_model(make_mlp({256, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 256}));
  return m;
}

struct Planned {
  TwinFlowSplit split;
  StepPlan plan;
};

Planned plan_of(int stage, int world, double ratio, const StepConfig& c) {
  const Partition part = make_partition(model(), {stage, world, 2048});
  Planned p;
  p.split = split_shard(part.ranks[0], ratio, 2048);
  p.plan = plan_step(model(), part, p.split, c);
  return p;
}

StepConfig config(int waits, int slots, int64_t speculation, bool carry) {
  StepConfig c;
  c.grad_accum = 2;
  c.carry_tail = carry;
  c.staging_slots = slots;
  c.clip_gradients = waits == 1;
  c.loss_scaling = waits == 2;
  if (waits == 2) c.grad_dtype = DType::kF16;
  c.speculation_bytes = speculation;
  return c;
}

// Where the order applies: a carried tail at full-size staging, a norm wait, speculation.
StepConfig applying(int waits = 1) { return config(waits, kUnboundedStaging, kSpeculationMax, true); }

// "cpu_optimizer L3 spare": a speculative pass (into the spare slot); "cpu_commit L3", "h2d L3", ...
std::string entry(const Op& o) {
  const bool speculative = o.kind == OpKind::kCpuOptimizer && o.state_slot == 1;
  return std::string(op_kind_name(o.kind)) + " L" + std::to_string(o.layer) + (speculative ? " spare" : "");
}

std::vector<std::string> queue(const StepPlan& p, Queue q) {
  std::vector<std::string> out;
  for (const Op& o : p.ops)
    if (o.queue == q) out.push_back(entry(o));
  return out;
}

// The cpu queue the rule gives (core::CpuPassOrder's comment), from the speculated layers (arrival order)
// and the CPU layers.
std::vector<std::string> expected_cpu_queue(const TwinFlowSplit& split, const StepConfig& c, CpuPassOrder o) {
  const std::vector<int32_t> spec = speculated_layers(split, c);  // backward (arrival) order
  std::set<int> cpu_layers;
  for (const ShardPiece& p : split.cpu)
    if (p.count > 0) cpu_layers.insert(int(p.layer));
  const auto n = int(spec.size());
  const int k = o.before_norm == kAllPasses ? n : std::min(o.before_norm, n);
  const int m = std::min(o.arrival == kAllPasses ? n : o.arrival, k);
  std::vector<int> queued;
  for (int i = 0; i < m; ++i) queued.push_back(spec[size_t(i)]);
  std::vector<int> rest(spec.begin() + m, spec.end());
  std::sort(rest.begin(), rest.end());
  for (int i = 0; i < k - m; ++i) queued.push_back(rest[size_t(i)]);
  std::vector<std::string> out;
  for (int l : queued) out.push_back("cpu_optimizer L" + std::to_string(l) + " spare");
  for (int l : cpu_layers) {  // after the norm, forward order
    const bool speculated = std::find(spec.begin(), spec.end(), l) != spec.end();
    if (speculated && std::find(queued.begin(), queued.end(), l) == queued.end())
      out.push_back("cpu_optimizer L" + std::to_string(l) + " spare");
    out.push_back(speculated ? "cpu_commit L" + std::to_string(l) : "cpu_optimizer L" + std::to_string(l));
  }
  return out;
}

}  // namespace

// The default is today's order, and so are m = k = n and anything larger: the same ops, dependencies and
// slots (only the recorded configuration differs).
TEST(CpuPassOrder, DefaultAndAllAreTodaysPlan) {
  for (int stage : {1, 2, 3})
    for (int waits : {0, 1, 2})
      for (int slots : {kStagingSlots, 1, kUnboundedStaging})
        for (int64_t speculation : {int64_t(0), kSpeculationMax})
          for (bool carry : {false, true})
            for (double ratio : {0.5, 1.0}) {
              StepConfig c = config(waits, slots, speculation, carry);
              const Planned today = plan_of(stage, 2, ratio, c);
              const int n = int(speculated_layers(today.split, c).size());
              for (CpuPassOrder o : {CpuPassOrder{n, n}, CpuPassOrder{n + 5, 1000}, CpuPassOrder{kAllPasses, n}}) {
                c.cpu_order = o;
                const StepPlan p = plan_of(stage, 2, ratio, c).plan;
                EXPECT_EQ(p.ops, today.plan.ops) << "stage " << stage << " waits " << waits << " slots " << slots;
                EXPECT_EQ(p.staging, today.plan.staging);
              }
            }
}

// Where the order does not apply every order plans today's ops, and ordered_cpu_passes says so; where it
// applies it counts the speculated layers.
TEST(CpuPassOrder, AppliesOnlyToACarriedTailAtFullSizeStagingWithSpeculation) {
  size_t applying_configs = 0;
  for (int stage : {1, 3})
    for (int waits : {0, 1, 2})
      for (int slots : {kStagingSlots, 1, kUnboundedStaging})
        for (int64_t speculation : {int64_t(0), kSpeculationMax})
          for (bool carry : {false, true}) {
            StepConfig c = config(waits, slots, speculation, carry);
            const Planned today = plan_of(stage, 2, 1.0, c);
            const bool applies = waits > 0 && slots == kUnboundedStaging && speculation != 0 && carry;
            const auto n = int(speculated_layers(today.split, c).size());
            EXPECT_EQ(ordered_cpu_passes(today.plan), applies ? n : 0) << waits << " " << slots << " " << carry;
            if (applies) {
              ++applying_configs;
              EXPECT_EQ(n, int(model().layers.size()) - 1);  // every layer but layer 0
              continue;
            }
            for (int m = 0; m <= 3; ++m)
              for (int k = m; k <= 3; ++k) {
                c.cpu_order = {m, k};
                EXPECT_EQ(plan_of(stage, 2, 1.0, c).plan.ops, today.plan.ops) << m << "," << k;
              }
          }
  EXPECT_EQ(applying_configs, 2u * 2);
}

// Every m and k: the cpu queue is the rule's, the D2Hs keep backward order, each speculative pass waits
// for its own D2H and each commit for the norm, the H2Ds follow the commits (forward order), and a
// non-trivial order really moves passes.
TEST(CpuPassOrder, TheCpuQueueRunsTheRulesOrder) {
  for (int waits : {1, 2})
    for (int stage : {1, 2, 3})
      for (double ratio : {0.5, 1.0}) {
        StepConfig c = applying(waits);
        const Planned today = plan_of(stage, 2, ratio, c);
        const int n = ordered_cpu_passes(today.plan);
        ASSERT_GT(n, 1);
        size_t moved = 0;
        for (int m = 0; m <= n; ++m)
          for (int k = m; k <= n; ++k) {
            c.cpu_order = {m, k};
            const Planned p = plan_of(stage, 2, ratio, c);
            const std::string at = "waits " + std::to_string(waits) + " stage " + std::to_string(stage) + " ratio " +
                                   std::to_string(ratio) + " order " + std::to_string(m) + "," + std::to_string(k);
            ASSERT_EQ(queue(p.plan, Queue::kCpu), expected_cpu_queue(p.split, c, c.cpu_order)) << at;
            EXPECT_EQ(queue(p.plan, Queue::kD2H), queue(today.plan, Queue::kD2H)) << at;
            EXPECT_EQ(queue(p.plan, Queue::kH2D), queue(today.plan, Queue::kH2D)) << at;
            moved += queue(p.plan, Queue::kCpu) != queue(today.plan, Queue::kCpu);
            uint32_t norm = 0;
            std::vector<uint32_t> d2h(model().layers.size(), 0);
            for (const Op& o : p.plan.ops) {
              if (o.kind == OpKind::kNormAllReduce) norm = o.id;
              if (o.kind == OpKind::kD2HGrad) d2h[size_t(o.layer)] = o.id;
              const auto waits_for = [&](uint32_t d) {
                return std::find(o.deps.begin(), o.deps.end(), d) != o.deps.end();
              };
              if (o.kind == OpKind::kCpuOptimizer && o.state_slot == 1) {
                EXPECT_TRUE(waits_for(d2h[size_t(o.layer)])) << at;
              }
              if (o.kind == OpKind::kCpuCommit) {
                EXPECT_TRUE(norm > 0 && waits_for(norm)) << at;
              }
            }
          }
        EXPECT_GT(moved, 0u);
      }
}

TEST(CpuPassOrder, NegativeCountsAreInputErrors) {
  StepConfig c = applying();
  c.cpu_order = {-2, 3};
  EXPECT_THROW(plan_of(3, 1, 1.0, c), InputError);
  EXPECT_THROW(check_cpu_pass_order({1, -5}, "--cpu-order"), InputError);
  EXPECT_NO_THROW(check_cpu_pass_order({kAllPasses, 0}, "--cpu-order"));
}
