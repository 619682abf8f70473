// The step kernels' IEEE division and square root against the instructions themselves, bit for bit
// (backends/cuda/ieee_check.cu): the square root on every one of the 2^32 floats, the division on every
// float as dividend over divisors of every class, and on 2^32 random pairs of every magnitude.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_tuning.h"
#include "tests/cuda/gpu_test.h"

namespace {

using tf::backend::cuda::OpsMismatch;

std::string describe(const OpsMismatch& h) {
  char s[160];
  std::snprintf(s, sizeof s, "%llu mismatches, e.g. a 0x%08x b 0x%08x: got 0x%08x, the instruction 0x%08x",
                static_cast<unsigned long long>(h.count), h.a, h.b, h.got, h.want);
  return s;
}

TEST(CudaIeeeOps, SqrtMatchesTheInstructionOnEveryFloat) {
  SKIP_WITHOUT_GPU();
  const OpsMismatch h = tf::backend::cuda::check_step_sqrt_every_float(0);
  EXPECT_EQ(h.count, 0u) << describe(h);
}

TEST(CudaIeeeOps, DivMatchesTheInstructionForEveryDividend) {
  SKIP_WITHOUT_GPU();
  // divisors of every class: AdamW's denominators (eps up), ones, large, the smallest normal, subnormal,
  // zeros, infinities, NaN, negative
  const uint32_t divisors[] = {0x3F800000u,
                               0x322BCC77u /* 1e-8 */,
                               0x40400000u,
                               0x3F333333u,
                               0x7149F2CAu /* 1e30 */,
                               0x00800000u,
                               0x00000001u,
                               0x00400000u,
                               0x00000000u,
                               0x80000000u,
                               0x7F800000u,
                               0xFF800000u,
                               0x7FC00000u,
                               0xBF800000u,
                               0xA0000000u,
                               0x5F800000u /* 2^64 */};
  for (uint32_t d : divisors) {
    float b;
    std::memcpy(&b, &d, 4);
    const OpsMismatch h = tf::backend::cuda::check_step_div_every_dividend(b, 0);
    EXPECT_EQ(h.count, 0u) << "divisor 0x" << std::hex << d << ": " << describe(h);
  }
}

TEST(CudaIeeeOps, DivMatchesTheInstructionOnRandomPairsOfEveryMagnitude) {
  SKIP_WITHOUT_GPU();
  const OpsMismatch h = tf::backend::cuda::check_step_div_random_pairs(uint64_t(1) << 32, 0);
  EXPECT_EQ(h.count, 0u) << describe(h);
}

}  // namespace
