// Bit equality of float arrays for the tests: the first element whose bits differ.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace tf::test {

// The first element whose bits differ (-0 != +0, NaN payloads count), -1 when all are equal, -2 when
// the sizes differ.
inline int64_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -2;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return int64_t(i);
  return -1;
}

}  // namespace tf::test
