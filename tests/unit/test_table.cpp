// apps/twinflow/table.h: the number formats of the CLI's tables.
#include <gtest/gtest.h>

#include "apps/twinflow/table.h"

namespace {

// A rate keeps one decimal, and 3 significant digits where one decimal would read a nonzero rate as 0.0
// (bench --cpu-ranks under a sanitizer measured 0.056 GB/s, and its JSON said 0.0).
TEST(Table, RatesNeverReadZeroWhenTheyAreNot) {
  using tf::app::fmt_rate;
  EXPECT_EQ(fmt_rate(173.94), "173.9");
  EXPECT_EQ(fmt_rate(1.0), "1.0");
  EXPECT_EQ(fmt_rate(0.0563), "0.0563");
  EXPECT_EQ(fmt_rate(0.5), "0.5");
  EXPECT_EQ(fmt_rate(0.0), "0.0");
  EXPECT_EQ(fmt_rate(-0.02), "-0.02");
}

}  // namespace
