// AVX-512 CPU optimizer kernels (16 fp32 lanes). Built with -mavx512f -mavx512bw -mavx512vl -mf16c -mfma;
// only called after a runtime cpuid check.
#include "backends/cpu/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__F16C__)
#include <immintrin.h>

#include "backends/cpu/kernel_body.h"

namespace tf::backend::cpu {
namespace {

struct Avx512 {
  static constexpr unsigned W = 16;
  using V = __m512;
  using M = __mmask16;
  using Exact = exact::Avx512Exact;  // the rules in double, for vectors holding subnormal-prone values
  // Whether some lane has 0 < |x| < the float whose bits are `limit` (integer compares: no assist).
  static bool any_tiny(V x, uint32_t limit) {
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF));
    return _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(1)), _mm512_set1_epi32(int(limit - 1))) != 0;
  }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V sqrt(V a) { return _mm512_sqrt_ps(a); }
  static V sign(V a) {
    const V zero = _mm512_setzero_ps();
    const M pos = _mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ);
    const M neg = _mm512_cmp_ps_mask(a, zero, _CMP_LT_OQ);
    return _mm512_mask_blend_ps(neg, _mm512_mask_blend_ps(pos, zero, _mm512_set1_ps(1.f)), _mm512_set1_ps(-1.f));
  }
  static V loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void storef_nt(float* p, V v) {  // 64 bytes: streamed when 64-byte aligned
    if ((reinterpret_cast<uintptr_t>(p) & 63u) == 0)
      _mm512_stream_ps(p, v);
    else
      _mm512_storeu_ps(p, v);
  }
  static V load_bf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static V load_f16(const uint16_t* p) {
    const V f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    // hardware quiets NaNs the same way as core::f16_to_f32
    return f;
  }
  // 16 halves = 32 bytes: streamed when asked and 32-byte aligned
  static void store16(uint16_t* p, __m256i h, bool nt) {
    if (nt && (reinterpret_cast<uintptr_t>(p) & 31u) == 0)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), h);
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  }
  static void store_fence() { _mm_sfence(); }
  static void store_bf16(uint16_t* p, V v, bool nt) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    const M nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7F800000));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    r = _mm512_srli_epi32(r, 16);
    r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(core::kBF16CanonicalNaN));
    store16(p, _mm512_cvtepi32_epi16(r), nt);
  }
  static void store_f16(uint16_t* p, V v, bool nt) {
    const M nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    h = _mm256_mask_blend_epi16(nan, h, _mm256_set1_epi16(short(core::kF16CanonicalNaN)));
    store16(p, h, nt);
  }
  static M finite(V v) {
    const V a = _mm512_abs_ps(v);
    return _mm512_cmp_ps_mask(a, _mm512_set1_ps(__builtin_inff()), _CMP_LT_OQ);
  }
  static V select(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }
  static uint32_t mask_bits(M m) { return uint32_t(m); }
  static void acc_sq(double* acc, V g) {
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
    _mm512_store_pd(acc, _mm512_add_pd(_mm512_load_pd(acc), _mm512_mul_pd(lo, lo)));
    _mm512_store_pd(acc + 8, _mm512_add_pd(_mm512_load_pd(acc + 8), _mm512_mul_pd(hi, hi)));
  }
};

uint64_t step(OptimizerKind k, const OptimChunk& c, const StepScalars& s, const KernelTuning& tune, size_t t0,
              size_t t1, double* sums) {
  return body::step_dispatch<Avx512>(k, c, s, tune, t0, t1, sums);
}
uint64_t stats(const BufferView& g, size_t t0, size_t t1, double* sums) {
  return body::stats_dispatch<Avx512>(g, t0, t1, sums);
}
void streams(const OptimChunk& c, const KernelTuning& tune, size_t t0, size_t t1) {
  body::stream_dispatch<Avx512>(c, tune, t0, t1);
}
uint64_t check_exact(uint64_t n, uint64_t seed, std::string* first) {
  return body::check_exact<Avx512>(n, seed, first);
}

}  // namespace

KernelTable kernels_avx512() { return {&step, &stats, &streams, &check_exact}; }

}  // namespace tf::backend::cpu

#else
namespace tf::backend::cpu {
KernelTable kernels_avx512() { return {}; }
}  // namespace tf::backend::cpu
#endif
