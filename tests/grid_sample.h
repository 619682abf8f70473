// Grids of test combinations in the sanitizer pass: one in kSanitizedShare runs (tf::test::GridSample).
#pragma once

#include <cstdint>

namespace tf::test {

// The sanitizer pass (scripts/test's second, ASan + UBSan, 3-6x slower) runs about one combination in
// kSanitizedShare of the functional grids: every combination exercises the same CPU paths, whose memory
// safety is what that pass checks; the bits of every combination are the release pass's check, which runs them
// all. Which combinations run is a hash of their index, so every value of every dimension still appears.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizedShare = 3;
#else
inline constexpr int kSanitizedShare = 1;
#endif

// Counts a grid's combinations in loop order; take() says whether this one runs (always, outside the sanitizer
// pass).
class GridSample {
 public:
  // `salt` picks another set of combinations (tests that share one grid helper pass their own).
  explicit GridSample(uint64_t salt = 0) : index_(salt << 32) {}

  bool take() {
    const uint64_t i = index_++;
    if (kSanitizedShare == 1) return true;
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;  // splitmix64's finaliser: neighbours land apart
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (x ^ (x >> 31)) % kSanitizedShare == 0 || (i & 0xFFFFFFFFull) == 0;
  }

 private:
  uint64_t index_;
};

}  // namespace tf::test
