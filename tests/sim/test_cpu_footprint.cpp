// The host footprints `twinflow calibrate --scenario` measures the CPU pass at (apps/twinflow/cpu_footprint.h):
// the simulator's planned pinned bytes of the node, the engine's CPU segments, the rest held resident.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "apps/twinflow/cpu_footprint.h"
#include "backends/sim/sim_backend.h"
#include "core/scenario.h"

namespace tf::app {
namespace {

core::Scenario real(const std::string& name) {
  return core::load_scenario(std::string(TWINFLOW_SOURCE_DIR) + "/scenarios/real/" + name + ".yaml");
}

// Both MLPs on two H200s at ratios 0.5 and 1: four footprints, ascending, each the simulator's node bytes,
// each of the node's two ranks holding its CPU segment plus the rest of the plan's host bytes (the segment
// alone where the plan pins less than the workers' 18 B an element: few speculated layers at ratio 1).
TEST(CpuFootprint, TheSimulatorsPlannedBytesWithTheEnginesSegments) {
  const std::vector<core::Scenario> sc = {real("mlp-8b-h200x2"), real("mlp-2b-h200x2")};
  const std::vector<HostFootprint> fps = scenario_footprints(sc, false);
  ASSERT_EQ(fps.size(), 4u);
  for (size_t i = 1; i < fps.size(); ++i) EXPECT_LT(fps[i - 1].node_bytes, fps[i].node_bytes);
  EXPECT_EQ(fps.back().what, "mlp-8b-h200x2 at ratio 1");
  for (const HostFootprint& fp : fps) {
    SCOPED_TRACE(fp.what);
    const core::Scenario& s = fp.what.rfind("mlp-8b", 0) == 0 ? sc[0] : sc[1];
    const double ratio = fp.what.find("ratio 1") != std::string::npos ? 1.0 : 0.5;
    const backend::sim::SimPoint p = backend::sim::simulate_step(s, ratio, {});
    EXPECT_EQ(fp.node_bytes, p.cpu_node_host_bytes);
    ASSERT_EQ(fp.layouts.size(), 2u);
    ASSERT_EQ(fp.resident.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_GT(fp.layouts[r].elems(), 0);
      const int64_t segment = fp.layouts[r].elems() * kCpuRankBytesPerElem;
      EXPECT_EQ(segment + fp.resident[r], std::max(segment, p.memory.host_total)) << r;
    }
  }
  // --quick: ratio 1 only; a scenario given twice is measured once
  const std::vector<HostFootprint> quick = scenario_footprints({sc[0], sc[0]}, true);
  ASSERT_EQ(quick.size(), 1u);
  EXPECT_EQ(quick[0].node_bytes, fps.back().node_bytes);
}

// Less free memory than planned: the resident bytes shrink first and node_bytes says what is held; less than
// the segments: refused.
TEST(CpuFootprint, FittingTheHostsFreeMemory) {
  HostFootprint fp;
  fp.layouts = flat_layouts(int64_t(1) << 24, 2, 4);
  fp.resident = {int64_t(1) << 30, int64_t(1) << 30};
  const int64_t segments = (int64_t(1) << 24) * kCpuRankBytesPerElem;
  fp.node_bytes = segments + (int64_t(2) << 30);
  HostFootprint all = fp;
  ASSERT_TRUE(fit_footprint(all, int64_t(1) << 40));
  EXPECT_EQ(all.node_bytes, fp.node_bytes);
  EXPECT_EQ(all.resident, fp.resident);
  HostFootprint cut = fp;
  ASSERT_TRUE(fit_footprint(cut, segments + (int64_t(1) << 30)));
  EXPECT_LE(cut.node_bytes, segments + (int64_t(1) << 30));
  EXPECT_GT(cut.node_bytes, segments + (int64_t(1) << 30) - 8192);
  EXPECT_EQ(cut.resident[0], cut.resident[1]);
  EXPECT_EQ(cut.resident[0] % 4096, 0);
  HostFootprint none = fp;
  EXPECT_FALSE(fit_footprint(none, segments - 1));
}

}  // namespace
}  // namespace tf::app

// calibrate's two readings of one process on all the cores (the thread sweep's, the rank curve's k = 1): the figures
// of one calibrate on two H200s' host, which disagreed, and of the one before it, which did not.
TEST(CpuRanks, TheTwoOneProcessReadingsAgreeOrAreNamed) {
  EXPECT_EQ(tf::app::host_rate_disagreement(6.169, 6.085), "");
  EXPECT_EQ(tf::app::host_rate_disagreement(5.0, 4.3), "") << "within 15% of the larger";
  const std::string moved = tf::app::host_rate_disagreement(5.771, 2.168);
  EXPECT_NE(moved.find("5.771 Gparam/s in the thread sweep and 2.168 in the rank curve (-62.4%)"), std::string::npos)
      << moved;
  EXPECT_NE(moved.find("moved by more than 15%"), std::string::npos) << moved;
  EXPECT_NE(tf::app::host_rate_disagreement(2.0, 3.0), "") << "either way";
  EXPECT_EQ(tf::app::host_rate_disagreement(0, 3.0), "") << "a reading that was not taken";
}
