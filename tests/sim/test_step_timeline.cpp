// The step timeline SVG (run --timeline-svg, simulate --timeline-svg): one bar per op on its queue's lane.
#include <gtest/gtest.h>

#include <string>

#include "apps/twinflow/step_timeline_svg.h"
#include "backends/sim/sim_backend.h"
#include "core/scenario.h"

namespace {

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(StepTimeline, OneBarPerOpOnItsQueuesLaneAtItsTimes) {
  const tf::core::Scenario s = tf::core::parse_scenario(
      "model: {type: decoder, layers: 2, hidden: 64, heads: 4, vocab: 512, seq: 64}\n"
      "cluster: {profile: h100-80gb-16core, cpu_cores_per_gpu: 4}\n"
      "training: {micro_batch: 1, gradient_clipping: 1.0}\n"
      "optimizer: {type: adamw}\n"
      "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}\n",
      {}, "tiny.yaml");
  const tf::backend::sim::SimPoint p =
      tf::backend::sim::simulate_step(s, 0.5, {.record_ops = true, .keep_plans = true});
  const tf::app::TimelineSpec t = tf::app::step_timeline(p, "simulated", "tiny");
  ASSERT_EQ(t.lanes.size(), size_t(tf::core::kQueueCount));
  EXPECT_EQ(t.lanes[size_t(tf::core::Queue::kCpu)], tf::core::queue_name(tf::core::Queue::kCpu));
  ASSERT_EQ(t.kinds.size(), size_t(tf::core::kOpKindCount));
  ASSERT_EQ(t.bars.size(), p.plans[0].ops.size());
  for (size_t i = 0; i < t.bars.size(); ++i) {
    const tf::core::Op& op = p.plans[0].ops[p.ranks[0].ops[i].op];
    EXPECT_EQ(t.bars[i].lane, int(op.queue)) << i;
    EXPECT_EQ(t.bars[i].kind, int(op.kind)) << i;
    EXPECT_EQ(t.bars[i].start_ms, double(p.ranks[0].ops[i].start_ns) / 1e6) << i;
    EXPECT_EQ(t.bars[i].end_ms, double(p.ranks[0].ops[i].end_ns) / 1e6) << i;
  }
  // the SVG: a background, one rect per lane, per bar and per legend entry
  const std::string svg = tf::app::render_timeline_svg(t);
  EXPECT_EQ(count(svg, "<rect"), 1 + t.lanes.size() + t.bars.size() + t.kinds.size());
  EXPECT_NE(svg.find("simulated step: tiny, ratio "), std::string::npos);  // the actual (element-granular) ratio
  // without op timings it refuses
  EXPECT_THROW((void)tf::app::step_timeline(tf::backend::sim::simulate_step(s, 0.5), "simulated", "tiny"),
               std::invalid_argument);
}
