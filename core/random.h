// Counter-based pseudo-random numbers (SplitMix64) for workloads and test data: the same bits on
// every platform, from (seed, counter) alone.
#pragma once

#include <cstdint>

#include "core/optim/dtype.h"  // TF_HD

namespace tf::core {

// SplitMix64 (Steele, Lea, Flood 2014): a bijective 64-bit mix of a counter.
TF_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace tf::core
