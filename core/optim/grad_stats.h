// The canonical, order-fixed sum of squares of a gradient chunk, so that every implementation and
// every thread count returns the same bits for the global-norm partials.
//
// Definition, for a chunk of n fp32 gradient values g[0..n) (before any scaling):
//  1. Tiles of kStatsTile = 2048 consecutive elements, starting at element 0 of the chunk; the last
//     tile is padded with zeros.
//  2. In a tile, 128 double accumulators: acc[i % 128] += double(g[i])^2, for i ascending. (A square
//     of a float is exact in double; the adds round.)
//  3. r[t] = (acc[4t] + acc[4t+1]) + (acc[4t+2] + acc[4t+3]) for t in [0, 32); then for
//     off = 16, 8, 4, 2, 1: r[t] = r[t] + r[t + off] for t < off. The tile's sum is r[0].
//     (A GPU warp computes exactly this: thread t holds 4 consecutive elements per 128, then a
//     shuffle-xor butterfly.)
//  4. Tile sums s[0..T), padded with zeros to the next power of two P; for h = P/2 .. 1:
//     s[j] = s[j] + s[j + h] for j < h. The chunk's sum is s[0].
// Several chunks combine in chunk order: total = ((c0 + c1) + c2) + ...
// Zeros added by padding are exact no-ops on sums of squares (all terms >= 0).
// A NaN result is returned as the one canonical quiet NaN (0x7FF8000000000000): x86 propagates the
// payload of the incoming NaN and GPUs do not, so the payload carries no information.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tf::core {

constexpr size_t kStatsTile = 2048;
constexpr size_t kStatsLanes = 128;

constexpr size_t stats_tiles(size_t n) { return (n + kStatsTile - 1) / kStatsTile; }

struct GradStats {
  double sumsq = 0;        // canonical sum of squares of the raw gradient
  uint64_t nonfinite = 0;  // elements whose (scaled) gradient is NaN or +-Inf
};

// NaN -> the canonical quiet NaN; anything else unchanged.
static inline double canonical_nan(double x) { return x != x ? __builtin_nan("") : x; }

// Step 3: 128 lane accumulators -> tile sum.
double fold_tile_lanes(const double* acc /* (128) */);

// Step 4: in place over s[0..T); returns the chunk sum (0 for T == 0). Uses s as scratch.
double fold_tile_sums(double* s, size_t tiles);

// Plain scalar reference of steps 1-4 for fp32 input (used by tests).
double canonical_sumsq(const float* g, size_t n);

}  // namespace tf::core
