// Canonical sum-of-squares folding (see grad_stats.h for the definition).
#include "core/optim/grad_stats.h"

#include <vector>

namespace tf::core {

double fold_tile_lanes(const double* acc) {
  double r[32];
  for (int t = 0; t < 32; ++t) r[t] = (acc[4 * t] + acc[4 * t + 1]) + (acc[4 * t + 2] + acc[4 * t + 3]);
  for (int off = 16; off >= 1; off /= 2)
    for (int t = 0; t < off; ++t) r[t] = r[t] + r[t + off];
  return r[0];
}

double fold_tile_sums(double* s, size_t tiles) {
  if (tiles == 0) return 0.0;
  size_t p = 1;
  while (p < tiles) p *= 2;
  for (size_t h = p / 2; h >= 1; h /= 2) {
    // s[j + h] is a padding zero when j + h >= tiles
    for (size_t j = 0; j < h && j + h < tiles; ++j) s[j] = s[j] + s[j + h];
    if (h < tiles) tiles = h;  // live prefix shrinks to h after this level
  }
  return s[0];
}

double canonical_sumsq(const float* g, size_t n) {
  std::vector<double> tiles(stats_tiles(n));
  for (size_t t = 0; t < tiles.size(); ++t) {
    double acc[kStatsLanes] = {};
    const size_t b = t * kStatsTile;
    for (size_t i = b; i < b + kStatsTile && i < n; ++i) {
      const double d = double(g[i]);
      acc[(i - b) % kStatsLanes] += d * d;
    }
    tiles[t] = fold_tile_lanes(acc);
  }
  return canonical_nan(fold_tile_sums(tiles.data(), tiles.size()));
}

}  // namespace tf::core
