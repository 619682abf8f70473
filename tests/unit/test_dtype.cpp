// Bit-exact conversions: exhaustive over 16-bit inputs, and RNE checked against double arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/optim/dtype.h"

using namespace tf::core;

namespace {
// Independent RNE check: h must be the nearest 16-bit value to f; on a tie, the even one.
template <class ToF>
void expect_nearest_even(float f, uint16_t h, ToF to_f) {
  const double x = f, got = to_f(h);
  const uint16_t up = uint16_t(h + 1), dn = uint16_t(h - 1);
  for (uint16_t nb : {up, dn}) {
    const double other = to_f(nb);
    if (std::isnan(other) || ((nb & 0x7FFF) == 0x0000 && (h & 0x7FFF) == 0x7FFF)) continue;
    const double dg = std::fabs(got - x), dob = std::fabs(other - x);
    if (std::isinf(got)) continue;  // overflow checked separately
    ASSERT_LE(dg, dob) << "f=" << f << " h=0x" << std::hex << h;
    if (dg == dob) {
      ASSERT_EQ(h & 1, 0) << "tie not to even: f=" << f;
    }
  }
}
}  // namespace

TEST(DType, Bf16RoundTripIsExactForAllPatterns) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_f32(uint16_t(b));
    const uint16_t back = f32_to_bf16(f);
    if (std::isnan(f))
      EXPECT_EQ(back, kBF16CanonicalNaN);
    else
      EXPECT_EQ(back, b) << std::hex << b;
  }
}

TEST(DType, F16RoundTripIsExactForAllPatterns) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = f16_to_f32(uint16_t(b));
    const uint16_t back = f32_to_f16(f);
    if (std::isnan(f))
      EXPECT_EQ(back, kF16CanonicalNaN);
    else
      EXPECT_EQ(back, b) << std::hex << b;
  }
}

TEST(DType, F16DecodesSubnormalsAndSpecials) {
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
}

TEST(DType, RoundToNearestEvenOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // keep the exponent in the 16-bit formats' range most of the time
    if (i % 2) u = (u & 0x807FFFFFu) | (uint32_t(100 + (u >> 23) % 45) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    expect_nearest_even(f, f32_to_bf16(f), [](uint16_t h) { return double(bf16_to_f32(h)); });
    if (std::fabs(f) < 65504.0f)
      expect_nearest_even(f, f32_to_f16(f), [](uint16_t h) { return double(f16_to_f32(h)); });
  }
}

TEST(DType, OverflowAndNaN) {
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // tie rounds to even = Inf
  EXPECT_EQ(f32_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to Inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()), kBF16CanonicalNaN);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::quiet_NaN()), kF16CanonicalNaN);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);    // tie to even zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);    // above the tie
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);    // smallest normal
  EXPECT_EQ(f32_to_bf16(std::ldexp(1.0f, -130)), 0x0008);  // subnormal bf16 kept: 8 x 2^-133
}

TEST(DType, ParseNamesAndErrors) {
  EXPECT_EQ(parse_dtype("bf16", "x"), DType::kBF16);
  EXPECT_EQ(parse_dtype("FP16", "x"), DType::kF16);
  EXPECT_EQ(parse_dtype("float32", "x"), DType::kF32);
  try {
    parse_dtype("int8", "--grad");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--grad: unknown dtype 'int8'"), std::string::npos);
  }
}
