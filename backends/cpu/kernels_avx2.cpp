// AVX2 + FMA + F16C CPU optimizer kernels (8 fp32 lanes). Built with -mavx2 -mfma -mf16c; only called
// after a runtime cpuid check.
#include "backends/cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "backends/cpu/kernel_body.h"

namespace tf::backend::cpu {
namespace {

struct Avx2 {
  static constexpr unsigned W = 8;
  using V = __m256;
  using M = __m256;                // all-ones lanes where true
  using Exact = exact::Avx2Exact;  // the rules in double, for vectors holding subnormal-prone values
  // Whether some lane has 0 < |x| < the float whose bits are `limit` (integer compares: no assist).
  static bool any_tiny(V x, uint32_t limit) {
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i t = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(limit)), a),
                                       _mm256_cmpgt_epi32(a, _mm256_setzero_si256()));
    return !_mm256_testz_si256(t, t);
  }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V sqrt(V a) { return _mm256_sqrt_ps(a); }
  static V sign(V a) {
    const V zero = _mm256_setzero_ps();
    const V pos = _mm256_and_ps(_mm256_cmp_ps(a, zero, _CMP_GT_OQ), _mm256_set1_ps(1.f));
    const V neg = _mm256_and_ps(_mm256_cmp_ps(a, zero, _CMP_LT_OQ), _mm256_set1_ps(-1.f));
    return _mm256_or_ps(pos, neg);
  }
  static V loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void storef_nt(float* p, V v) {  // 32 bytes: streamed when 32-byte aligned
    if ((reinterpret_cast<uintptr_t>(p) & 31u) == 0)
      _mm256_stream_ps(p, v);
    else
      _mm256_storeu_ps(p, v);
  }
  static V load_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static V load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // 8 halves = 16 bytes: streamed when asked and 16-byte aligned
  static void store8(uint16_t* p, __m128i h, bool nt) {
    if (nt && (reinterpret_cast<uintptr_t>(p) & 15u) == 0)
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), h);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static void store_fence() { _mm_sfence(); }
  static void store_bf16(uint16_t* p, V v, bool nt) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));  // a < 2^31: signed ok
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
    r = _mm256_srli_epi32(r, 16);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(core::kBF16CanonicalNaN), nan);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    store8(p, packed, nt);
  }
  static void store_f16(uint16_t* p, V v, bool nt) {
    const __m128i nan32 =
        _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))),
                        _mm256_extracti128_si256(_mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)), 1));
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    h = _mm_blendv_epi8(h, _mm_set1_epi16(short(core::kF16CanonicalNaN)), nan32);
    store8(p, h, nt);
  }
  static M finite(V v) {
    const V a = _mm256_andnot_ps(_mm256_set1_ps(-0.f), v);
    return _mm256_cmp_ps(a, _mm256_set1_ps(__builtin_inff()), _CMP_LT_OQ);
  }
  static V select(M m, V a, V b) { return _mm256_blendv_ps(b, a, m); }
  static uint32_t mask_bits(M m) { return uint32_t(_mm256_movemask_ps(m)); }
  static void acc_sq(double* acc, V g) {
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
    _mm256_store_pd(acc, _mm256_add_pd(_mm256_load_pd(acc), _mm256_mul_pd(lo, lo)));
    _mm256_store_pd(acc + 4, _mm256_add_pd(_mm256_load_pd(acc + 4), _mm256_mul_pd(hi, hi)));
  }
};

uint64_t step(OptimizerKind k, const OptimChunk& c, const StepScalars& s, const KernelTuning& tune, size_t t0,
              size_t t1, double* sums) {
  return body::step_dispatch<Avx2>(k, c, s, tune, t0, t1, sums);
}
uint64_t stats(const BufferView& g, size_t t0, size_t t1, double* sums) {
  return body::stats_dispatch<Avx2>(g, t0, t1, sums);
}
void streams(const OptimChunk& c, const KernelTuning& tune, size_t t0, size_t t1) {
  body::stream_dispatch<Avx2>(c, tune, t0, t1);
}
uint64_t check_exact(uint64_t n, uint64_t seed, std::string* first) { return body::check_exact<Avx2>(n, seed, first); }

}  // namespace

KernelTable kernels_avx2() { return {&step, &stats, &streams, &check_exact}; }

}  // namespace tf::backend::cpu

#else
namespace tf::backend::cpu {
KernelTable kernels_avx2() { return {}; }
}  // namespace tf::backend::cpu
#endif
