// The canonical sum of squares: its folds, padding and accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/optim/grad_stats.h"

using namespace tf::core;

TEST(GradStats, TileSumFoldEqualsStridedPairwiseTree) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t tiles : {0u, 1u, 2u, 3u, 5u, 8u, 13u, 64u, 1000u}) {
    std::vector<double> s(tiles);
    for (double& x : s) x = u(rng);
    std::vector<double> work = s;
    const double got = fold_tile_sums(work.data(), tiles);
    // Strided fold s[j] += s[j+h] is the tree where leaf j pairs with j+P/2: check against a
    // direct evaluation of that tree.
    size_t p = 1;
    while (p < tiles) p *= 2;
    std::vector<double> lvl(p, 0.0);
    for (size_t i = 0; i < tiles; ++i) lvl[i] = s[i];
    for (size_t h = p / 2; h >= 1; h /= 2)
      for (size_t j = 0; j < h; ++j) lvl[j] = lvl[j] + lvl[j + h];
    EXPECT_EQ(got, tiles ? lvl[0] : 0.0) << tiles;
  }
}

TEST(GradStats, CanonicalSumIsAccurate) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  for (size_t n : {1u, 127u, 2048u, 2049u, 100000u}) {
    std::vector<float> g(n);
    long double exact = 0;
    for (float& x : g) {
      x = nd(rng);
      exact += (long double)x * x;
    }
    const double got = canonical_sumsq(g.data(), n);
    EXPECT_LE(std::fabs(got - double(exact)) / double(exact), 1e-14) << n;
  }
}

TEST(GradStats, LaneFoldOrder) {
  double acc[128];
  for (int i = 0; i < 128; ++i) acc[i] = double(i + 1);
  EXPECT_EQ(fold_tile_lanes(acc), 128.0 * 129.0 / 2.0);
  EXPECT_EQ(stats_tiles(0), 0u);
  EXPECT_EQ(stats_tiles(2048), 1u);
  EXPECT_EQ(stats_tiles(2049), 2u);
}

TEST(GradStats, NonFinitePropagates) {
  std::vector<float> g(5000, 1.0f);
  g[4000] = INFINITY;
  EXPECT_TRUE(std::isinf(canonical_sumsq(g.data(), g.size())));
}
