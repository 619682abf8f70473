// `twinflow run`'s overlap figures (apps/twinflow/run_overlap.h): the hidden share of the CPU pass and the
// bound of the schedule the step ran, with and without updates that wait for the gradient norm.
#include <gtest/gtest.h>

#include "apps/twinflow/run_overlap.h"

namespace {

using tf::app::norm_waited_elems;
using tf::app::overlap_figures;
using tf::core::OpKind;
using tf::core::Queue;

tf::core::StepConfig adamw_bf16(bool clip) {
  tf::core::StepConfig c;  // AdamW, bf16 gradients and parameters: 28 B per element (docs/ARCHITECTURE.md)
  c.clip_gradients = clip;
  return c;
}

// A step with 120 ms of GPU work, 80 of it backward, and a CPU queue busy 150 ms, 60 of them under compute.
tf::backend::StepTimeline timeline() {
  tf::backend::StepTimeline t;
  t.busy_ns[size_t(Queue::kCompute)] = 120'000'000;
  t.busy_ns[size_t(Queue::kCpu)] = 150'000'000;
  t.kind_ns[size_t(OpKind::kBackward)] = 80'000'000;
  t.kind_ns[size_t(OpKind::kForward)] = 40'000'000;
  t.cpu_overlapped_ns = 60'000'000;
  return t;
}

tf::core::CpuProfile host(double gbps) {
  tf::core::CpuProfile p;
  p.mem_gbps = gbps;
  return p;
}

}  // namespace

TEST(RunOverlap, WaitedElementsFollowTheStepsSpeculationOutcome) {
  const int64_t cpu = 1000, spec = 700;
  EXPECT_EQ(norm_waited_elems(adamw_bf16(false), cpu, spec, false, false, false), 0);  // nothing waits
  EXPECT_EQ(norm_waited_elems(adamw_bf16(false), cpu, 0, false, false, false), 0);
  EXPECT_EQ(norm_waited_elems(adamw_bf16(true), cpu, spec, false, false, false), cpu);  // did not speculate
  EXPECT_EQ(norm_waited_elems(adamw_bf16(true), cpu, spec, true, false, false), cpu);   // failed: redone
  EXPECT_EQ(norm_waited_elems(adamw_bf16(true), cpu, spec, true, true, false), 300);    // held: the rest
  EXPECT_EQ(norm_waited_elems(adamw_bf16(true), cpu, spec, true, false, true), 0);      // skipped: no update
  tf::core::StepConfig scaled;
  scaled.loss_scaling = true;  // fp16: the optimizers wait for the overflow flag
  EXPECT_EQ(norm_waited_elems(scaled, cpu, 0, false, false, false), cpu);
}

TEST(RunOverlap, FreeBoundIsTheLongerOfGpuWorkAndThePassAtBandwidth) {
  // 5e9 elements x 28 B at 1000 GB/s = 140 ms > 120 ms of GPU work; nothing waited for the norm
  const auto f = overlap_figures(timeline(), adamw_bf16(false), 5'000'000'000, 0, host(1000), 1);
  EXPECT_DOUBLE_EQ(f.overlap_fraction, 0.4);
  EXPECT_DOUBLE_EQ(f.gpu_work_ms, 120.0);
  EXPECT_DOUBLE_EQ(f.cpu_pass_bound_ms, 140.0);
  EXPECT_DOUBLE_EQ(f.free_bound_ms, 140.0);
  EXPECT_DOUBLE_EQ(f.waited_pass_bound_ms, 0.0);
  EXPECT_DOUBLE_EQ(f.bound_ms, 140.0);
  // two ranks share the host's bandwidth: the pass bound doubles
  const auto two = overlap_figures(timeline(), adamw_bf16(false), 5'000'000'000, 0, host(1000), 2);
  EXPECT_DOUBLE_EQ(two.cpu_pass_bound_ms, 280.0);
  EXPECT_DOUBLE_EQ(two.bound_ms, 280.0);
}

TEST(RunOverlap, UpdatesThatWaitForTheNormAddToTheBackward) {
  // all 5e9 elements waited: backward 80 + the pass 140 = 220 ms, over the free bound of 140
  const auto all = overlap_figures(timeline(), adamw_bf16(true), 5'000'000'000, 5'000'000'000, host(1000), 1);
  EXPECT_DOUBLE_EQ(all.free_bound_ms, 140.0);
  EXPECT_DOUBLE_EQ(all.waited_pass_bound_ms, 140.0);
  EXPECT_DOUBLE_EQ(all.bound_ms, 220.0);
  // a held speculation left 1e9 of them waiting: 80 + 28 = 108 ms, under the free bound, which stays
  const auto held = overlap_figures(timeline(), adamw_bf16(true), 5'000'000'000, 1'000'000'000, host(1000), 1);
  EXPECT_DOUBLE_EQ(held.waited_pass_bound_ms, 28.0);
  EXPECT_DOUBLE_EQ(held.bound_ms, 140.0);
  // no host bandwidth known: no CPU bound, the GPU work alone
  const auto unknown = overlap_figures(timeline(), adamw_bf16(true), 5'000'000'000, 5'000'000'000, host(0), 1);
  EXPECT_DOUBLE_EQ(unknown.bound_ms, 120.0);
}

// The clip note: one line where steady steps clipped and the point has a CPU segment, naming how many and their
// norms; nothing otherwise.
TEST(RunOverlap, ClipNoteNamesTheClippedStepsAndTheirNorms) {
  using tf::app::clip_note;
  using tf::app::ClipSample;
  const std::string all = clip_note(0.629, true, {{true, 83.4888}, {true, 83.7418}, {true, 84.5059}});
  EXPECT_EQ(all.rfind("ratio 0.629: 3 of 3 steady steps clipped (gradient norm 83.5-84.5 over the clip): ", 0), 0u)
      << all;
  EXPECT_NE(all.find("cannot hide behind backward"), std::string::npos) << all;
  EXPECT_NE(clip_note(1.0, true, {{false, 0.5}, {true, 2.0}}).find("1 of 2 steady steps clipped (gradient norm 2 "),
            std::string::npos);
  EXPECT_EQ(clip_note(0.5, true, {{false, 0.5}, {false, 0.7}}), "");  // none clipped
  EXPECT_EQ(clip_note(0.0, false, {{true, 9.0}}), "");                // no CPU segment: nothing waits
  EXPECT_EQ(clip_note(0.5, true, {}), "");
}
