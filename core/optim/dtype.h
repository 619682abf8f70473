// Element types and the bit-exact conversions shared by every implementation (host and device).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

// Functions marked TF_HD compile for host and device. They have internal linkage (static) so that
// translation units built with different ISA flags (AVX2, AVX-512) never share one copy at link time.
#if defined(__CUDACC__)
#define TF_HD static __host__ __device__ __forceinline__
#define TF_HD_MEMBER __host__ __device__ __forceinline__
#else
#define TF_HD static inline
#define TF_HD_MEMBER inline
#endif

namespace tf::core {

enum class DType : uint8_t { kNone = 0, kF32, kBF16, kF16 };

constexpr size_t dtype_bytes(DType t) { return t == DType::kF32 ? 4 : (t == DType::kNone ? 0 : 2); }
std::string_view dtype_name(DType t);
// Parses "fp32|f32|float32", "bf16|bfloat16", "fp16|f16|float16", "none". Throws InputError.
DType parse_dtype(std::string_view s, std::string_view what);

// --- bit-level conversions. Round-to-nearest-even, denormals kept, NaN -> canonical quiet NaN.
// These are the definitions; SIMD and CUDA paths must produce the same bits (tested).

TF_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
TF_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

constexpr uint16_t kBF16CanonicalNaN = 0x7FC0;
constexpr uint16_t kF16CanonicalNaN = 0x7E00;

TF_HD float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

TF_HD uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kBF16CanonicalNaN;
  const uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);  // RNE; Inf stays Inf, overflow -> Inf
  return uint16_t(rounded >> 16);
}

TF_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F)
    return f32_from_bits(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u));  // Inf / quiet NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);
  // subnormal half: value = mant * 2^-24, exact in fp32
  int e = -1;
  do {
    mant <<= 1;
    ++e;
  } while ((mant & 0x400u) == 0);
  mant &= 0x3FFu;
  return f32_from_bits(sign | uint32_t(112 - e) << 23 | (mant << 13));
}

TF_HD uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kF16CanonicalNaN;
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520 -> Inf
  if (a >= 0x38800000u) {                                 // normal half (>= 2^-14)
    const uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);     // RNE at bit 13
    return uint16_t(sign | ((r - 0x38000000u) >> 13));
  }
  if (a < 0x33000000u) return uint16_t(sign);  // < 2^-25 -> rounds to zero (2^-25 ties to even 0)
  // subnormal half: shift the full significand so that the unit is 2^-24, RNE
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24 for e in [102, 112]
  const uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return uint16_t(sign | r);
}

}  // namespace tf::core
