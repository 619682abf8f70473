// The step timeline SVG (run --timeline-svg, simulate --timeline-svg): one bar per op on its queue's lane; and
// the training curve SVG (run --loss-svg).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/twinflow/loss_curve_svg.h"
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
  // a sampled track (run's SM clock) gets a lane under the queues: its name, a step line, its range
  tf::app::TimelineSpec with = t;
  with.tracks.push_back({"SM clock", "MHz", {{0.0, 1980.0}, {0.5, 1740.0}, {1.0, 1890.0}}});
  with.tracks.push_back({"nothing read", "W", {}});  // left out
  const std::string svg2 = tf::app::render_timeline_svg(with);
  EXPECT_EQ(count(svg2, "<rect"), 2 + t.lanes.size() + t.bars.size() + t.kinds.size());
  EXPECT_EQ(count(svg2, "<polyline"), 1u);
  EXPECT_NE(svg2.find(">SM clock</text>"), std::string::npos);
  EXPECT_NE(svg2.find("1980 MHz (max), 1740 (min)"), std::string::npos);
  EXPECT_EQ(svg2.find("nothing read"), std::string::npos);
  // without op timings it refuses
  EXPECT_THROW((void)tf::app::step_timeline(tf::backend::sim::simulate_step(s, 0.5), "simulated", "tiny"),
               std::invalid_argument);
}

// run --loss-svg: the loss over the steps that have one, the lr over every step, and a note that names
// the first, last and lowest losses and the steps without one.
TEST(LossCurve, PlotsFiniteLossesAndEveryStepsLearningRate) {
  const std::vector<tf::app::LossPoint> pts = {
      {1, 11.5, 0.0}, {2, NAN, 1e-5}, {3, 9.25, 2e-5}, {4, 8.0, 3e-5}, {5, 8.5, 3e-5}};
  const tf::app::PlotSpec p = tf::app::loss_curve(pts, "opt-tiny", 0.35);
  ASSERT_EQ(p.series.size(), 2u);
  EXPECT_EQ(p.series[0].name, "loss");
  EXPECT_FALSE(p.series[0].right_axis);
  EXPECT_EQ(p.series[0].x, (std::vector<double>{1, 3, 4, 5}));
  EXPECT_EQ(p.series[0].y, (std::vector<double>{11.5, 9.25, 8.0, 8.5}));
  EXPECT_EQ(p.series[1].name, "learning rate");
  EXPECT_TRUE(p.series[1].right_axis);
  EXPECT_EQ(p.series[1].x, (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_EQ(p.series[1].y, (std::vector<double>{0.0, 1e-5, 2e-5, 3e-5, 3e-5}));
  EXPECT_EQ(p.title, "Training curve: opt-tiny, ratio 0.35");
  EXPECT_EQ(p.note, "steps 1..5: loss 11.5 at step 1, 8.5 at step 5, lowest 8 at step 4; 1 step(s) without a loss");
  const std::string svg = tf::app::render_svg(p);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("learning rate"), std::string::npos);
}

TEST(LossCurve, NoFiniteLossIsAnError) {
  try {
    (void)tf::app::loss_curve({{1, NAN, 0.1}, {2, NAN, 0.1}}, "synthetic", 0.5);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no step of the run has a finite loss"), std::string::npos) << e.what();
  }
}
