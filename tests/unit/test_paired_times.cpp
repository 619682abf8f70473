// app::alternate and app::time_alone_and_under: calibrate's slowdown factors and footprint factors from pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/twinflow/measure.h"

using tf::app::alternate;
using tf::app::PairedTimes;
using tf::app::Pairs;
using tf::app::time_alone_and_under;

// Each pair: a pass alone, the load started, a pass under it, the load stopped; the ratios are each pair's own,
// and the load's stop() returns are summed.
TEST(PairedTimes, AlternatesAloneAndUnderAndRatiosArePerPair) {
  std::vector<std::string> order;
  const std::vector<double> seconds = {1.0, 2.0, 1.0, 3.0, 2.0, 2.0};
  size_t next = 0;
  const PairedTimes t = time_alone_and_under(
      3,
      [&] {
        order.push_back("pass");
        return seconds.at(next++);
      },
      [&] { order.push_back("start"); },
      [&] {
        order.push_back("stop");
        return 10.0;
      });
  const std::vector<std::string> want = {"pass", "start", "pass", "stop",  "pass", "start",
                                         "pass", "stop",  "pass", "start", "pass", "stop"};
  EXPECT_EQ(order, want);
  EXPECT_EQ(t.seconds.first, (std::vector<double>{1.0, 1.0, 2.0}));
  EXPECT_EQ(t.seconds.second, (std::vector<double>{2.0, 3.0, 2.0}));
  EXPECT_EQ(t.seconds.ratios, (std::vector<double>{2.0, 3.0, 1.0}));
  EXPECT_EQ(t.load_sum, 30.0);
}

// A host whose rate halves over the measurement, and a load that costs 1.5x: every pair reads 1.5x up to the
// drift between its two passes (2% here), where the median alone of the first half against the median under
// of the second (the measurements minutes apart) would read 2.1x.
TEST(PairedTimes, TheHostsDriftCancelsWithinEachPair) {
  const int pairs = 25;
  int k = 0;
  bool loaded = false;
  const auto host = [&] { return 1.0 + double(k++) / (2 * pairs); };  // seconds per pass grow to 2x
  const PairedTimes t = time_alone_and_under(
      pairs, [&] { return host() * (loaded ? 1.5 : 1.0); }, [&] { loaded = true; },
      [&] {
        loaded = false;
        return 0.0;
      });
  for (double r : t.seconds.ratios) {
    EXPECT_GT(r, 1.5);
    EXPECT_LT(r, 1.5 * 1.021);
  }
  std::vector<double> first(t.seconds.first.begin(), t.seconds.first.begin() + pairs / 2);
  std::vector<double> last(t.seconds.second.begin() + pairs / 2, t.seconds.second.end());
  std::sort(first.begin(), first.end());
  std::sort(last.begin(), last.end());
  EXPECT_GT(last[last.size() / 2] / first[first.size() / 2], 2.0);  // what the old order would have read
}

// A pass that fails under the load stops the load and rethrows; no pair is a bad request.
TEST(PairedTimes, StopsTheLoadWhenAPassFailsAndRefusesNoPairs) {
  int passes = 0, stops = 0;
  EXPECT_THROW(time_alone_and_under(
                   2,
                   [&]() -> double {
                     if (++passes == 2) throw std::runtime_error("pass failed");
                     return 1.0;
                   },
                   [] {},
                   [&] {
                     ++stops;
                     return 0.0;
                   }),
               std::runtime_error);
  EXPECT_EQ(stops, 1);
  EXPECT_THROW(time_alone_and_under(
                   0, [] { return 1.0; }, [] {}, [] { return 0.0; }),
               std::invalid_argument);
  EXPECT_THROW(alternate(
                   0, [] { return 1.0; }, [] { return 1.0; }),
               std::invalid_argument);
}

// alternate: first then second, pair by pair, and the ratios second / first (measure_footprint's factors).
TEST(PairedTimes, AlternateRunsFirstThenSecondEachPair) {
  std::string order;
  double a = 0, b = 10;
  const Pairs p = alternate(
      3,
      [&] {
        order += "a";
        return a += 1;
      },
      [&] {
        order += "b";
        return b += 10;
      });
  EXPECT_EQ(order, "ababab");
  EXPECT_EQ(p.first, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(p.second, (std::vector<double>{20, 30, 40}));
  EXPECT_EQ(p.ratios, (std::vector<double>{20, 15, 40.0 / 3}));
}
