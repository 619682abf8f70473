// The update rules (core/optim/update_rules.h) in double precision, each operation rounded once to fp32:
// the same bits as the fp32 instructions, without their subnormal operands or results. Included by the
// kernel body (backends/cpu/kernel_body.h); the vector types exist where the translation unit's flags enable them.
//
// Why: on the Intel host of the H200 machines every fp32 multiply, FMA, divide or square root with a
// subnormal operand or result takes a microcode assist of ~62 ns per vector instruction (20-30x one
// instruction; bench/device/subnormal_ops.cpp), while float <-> double conversions and double arithmetic on
// such values run at full speed. States that decayed (a unit whose gradients stopped long ago) are
// subnormal, and the CPU optimizer ran 5-6x slower over them (bench/results/
// 2026-11-29-h200-gpu-optimizer-values). The kernel body sends a vector holding such values here.
//
// Why the bits are the same: every value is a float held in a double. A product of two floats is exact in
// double (48 significant bits); a sum, quotient or square root of floats rounded to double and then to
// float is rounded as if once (53 >= 2 x 24 + 2: the double rounding is innocuous, Figueroa 1995), also
// where the float result is subnormal (its grid, 2^-149, is coarser still). The fused multiply-add a b + c
// is rounded to double by a sum of the exact product and c, made round-to-odd with the sum's exact error
// (TwoSum), and round-to-odd to 53 bits then to nearest at 24 is the correct rounding (53 >= 24 + 2).
// float -> double and the final double -> float conversions are exact, resp. the one rounding.
#pragma once

#include <cstdint>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace exact {

// AVX-512: 16 fp32 lanes as two vectors of 8 doubles.
#if defined(__AVX512F__) && defined(__AVX512DQ__)
struct X16 {
  __m512d lo, hi;
};
struct Avx512Exact {
  using V = X16;
  static __m512d round(__m512d d) { return _mm512_cvtps_pd(_mm512_cvtpd_ps(d)); }
  static V set1(float x) { return {_mm512_set1_pd(double(x)), _mm512_set1_pd(double(x))}; }
  static V mul(V a, V b) { return {round(_mm512_mul_pd(a.lo, b.lo)), round(_mm512_mul_pd(a.hi, b.hi))}; }
  static V add(V a, V b) { return {round(_mm512_add_pd(a.lo, b.lo)), round(_mm512_add_pd(a.hi, b.hi))}; }
  // Division and square root run as fp32 instructions on operands scaled into the normal range (the
  // double ones cost 2-3x more): sqrt(a 2^64) 2^-32 for |a| < 2^-126, exact as both scalings are; a
  // non-zero dividend below 2^-60 scaled by 2^64 and the quotient back by 2^-64 where it is >= 2^-61 and
  // finite (the true quotient is then normal, so both are exact), else (a subnormal quotient, or one the
  // scaling overflowed) the double division rounded once.
  static V div(V a, V b) {
    const __m512d big = _mm512_set1_pd(0x1p64), tiny = _mm512_set1_pd(0x1p-60);
    const __m512d zero = _mm512_setzero_pd();
    const __mmask8 tlo =
        _mm512_cmp_pd_mask(_mm512_abs_pd(a.lo), tiny, _CMP_LT_OQ) & _mm512_cmp_pd_mask(a.lo, zero, _CMP_NEQ_OQ);
    const __mmask8 thi =
        _mm512_cmp_pd_mask(_mm512_abs_pd(a.hi), tiny, _CMP_LT_OQ) & _mm512_cmp_pd_mask(a.hi, zero, _CMP_NEQ_OQ);
    const V s{_mm512_mask_mul_pd(a.lo, tlo, a.lo, big), _mm512_mask_mul_pd(a.hi, thi, a.hi, big)};
    V q = widen(_mm512_div_ps(narrow(s), narrow(b)));
    const __m512d back = _mm512_set1_pd(0x1p-64), floor = _mm512_set1_pd(0x1p-61);
    const __m512d inf = _mm512_set1_pd(__builtin_inf());  // a quotient that overflowed once scaled: undo below
    const __mmask8 slo = tlo & (_mm512_cmp_pd_mask(_mm512_abs_pd(q.lo), floor, _CMP_LT_OQ) |
                                _mm512_cmp_pd_mask(_mm512_abs_pd(q.lo), inf, _CMP_EQ_OQ));
    const __mmask8 shi = thi & (_mm512_cmp_pd_mask(_mm512_abs_pd(q.hi), floor, _CMP_LT_OQ) |
                                _mm512_cmp_pd_mask(_mm512_abs_pd(q.hi), inf, _CMP_EQ_OQ));
    q.lo = _mm512_mask_mul_pd(q.lo, tlo, q.lo, back), q.hi = _mm512_mask_mul_pd(q.hi, thi, q.hi, back);
    if ((slo | shi) != 0) [[unlikely]] {
      q.lo = _mm512_mask_mov_pd(q.lo, slo, round(_mm512_div_pd(a.lo, b.lo)));
      q.hi = _mm512_mask_mov_pd(q.hi, shi, round(_mm512_div_pd(a.hi, b.hi)));
    }
    return q;
  }
  static V sqrt(V a) {
    const __m512d small = _mm512_set1_pd(0x1p-126), big = _mm512_set1_pd(0x1p64), back = _mm512_set1_pd(0x1p-32);
    const __mmask8 lo = _mm512_cmp_pd_mask(_mm512_abs_pd(a.lo), small, _CMP_LT_OQ);
    const __mmask8 hi = _mm512_cmp_pd_mask(_mm512_abs_pd(a.hi), small, _CMP_LT_OQ);
    V r = widen(
        _mm512_sqrt_ps(narrow({_mm512_mask_mul_pd(a.lo, lo, a.lo, big), _mm512_mask_mul_pd(a.hi, hi, a.hi, big)})));
    return {_mm512_mask_mul_pd(r.lo, lo, r.lo, back), _mm512_mask_mul_pd(r.hi, hi, r.hi, back)};
  }
  // a b + c: the exact product, its sum with c rounded to odd (TwoSum's error decides), then to float.
  static __m512d fma1(__m512d a, __m512d b, __m512d c) {
    const __m512d p = _mm512_mul_pd(a, b);
    const __m512d s = _mm512_add_pd(p, c);
    // c = +-0 in every lane (a state that decays with no gradient: b1 m + (1 - b1) 0): the sum is exact
    if (_mm512_cmp_pd_mask(c, _mm512_setzero_pd(), _CMP_EQ_OQ) == 0xFF) return round(s);
    const __m512d bb = _mm512_sub_pd(s, p);
    const __m512d e = _mm512_add_pd(_mm512_sub_pd(p, _mm512_sub_pd(s, bb)), _mm512_sub_pd(c, bb));
    const __m512i si = _mm512_castpd_si512(s);
    const __mmask8 inexact = _mm512_cmp_pd_mask(e, _mm512_setzero_pd(), _CMP_NEQ_OQ);
    const __mmask8 even = _mm512_testn_epi64_mask(si, _mm512_set1_epi64(1));
    const __mmask8 finite = _mm512_cmp_pd_mask(_mm512_abs_pd(s), _mm512_set1_pd(__builtin_inf()), _CMP_LT_OQ);
    // the odd neighbour: away from zero (bits + 1) where the error has the sum's sign, else toward it
    const __mmask8 away = ~(_mm512_movepi64_mask(_mm512_castpd_si512(_mm512_xor_pd(s, e))));
    const __mmask8 fix = inexact & even & finite;
    const __m512i step = _mm512_mask_blend_epi64(away, _mm512_set1_epi64(-1), _mm512_set1_epi64(1));
    return round(_mm512_castsi512_pd(_mm512_mask_add_epi64(si, fix, si, step)));
  }
  static V fma(V a, V b, V c) { return {fma1(a.lo, b.lo, c.lo), fma1(a.hi, b.hi, c.hi)}; }
  static __m512d sign1(__m512d a) {
    const __m512d zero = _mm512_setzero_pd();
    const __mmask8 pos = _mm512_cmp_pd_mask(a, zero, _CMP_GT_OQ), neg = _mm512_cmp_pd_mask(a, zero, _CMP_LT_OQ);
    return _mm512_mask_blend_pd(neg, _mm512_mask_blend_pd(pos, zero, _mm512_set1_pd(1.0)), _mm512_set1_pd(-1.0));
  }
  static V sign(V a) { return {sign1(a.lo), sign1(a.hi)}; }
  static V widen(__m512 f) {
    return {_mm512_cvtps_pd(_mm512_castps512_ps256(f)),
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)))};
  }
  static __m512 narrow(V d) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps(d.lo))),
                                               _mm256_castps_pd(_mm512_cvtpd_ps(d.hi)), 1));
  }
};
#endif

// AVX2: 8 fp32 lanes as two vectors of 4 doubles.
#if defined(__AVX2__) && defined(__FMA__)
struct X8 {
  __m256d lo, hi;
};
struct Avx2Exact {
  using V = X8;
  static __m256d round(__m256d d) { return _mm256_cvtps_pd(_mm256_cvtpd_ps(d)); }
  static V set1(float x) { return {_mm256_set1_pd(double(x)), _mm256_set1_pd(double(x))}; }
  static V mul(V a, V b) { return {round(_mm256_mul_pd(a.lo, b.lo)), round(_mm256_mul_pd(a.hi, b.hi))}; }
  static V add(V a, V b) { return {round(_mm256_add_pd(a.lo, b.lo)), round(_mm256_add_pd(a.hi, b.hi))}; }
  // As Avx512Exact's: fp32 instructions on operands scaled into the normal range.
  static __m256d abs(__m256d x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }
  static __m256d scale_where(__m256d x, __m256d mask, double by) {
    return _mm256_blendv_pd(x, _mm256_mul_pd(x, _mm256_set1_pd(by)), mask);
  }
  static V div(V a, V b) {
    const __m256d tiny = _mm256_set1_pd(0x1p-60), floor = _mm256_set1_pd(0x1p-61);
    const __m256d zero = _mm256_setzero_pd(), inf = _mm256_set1_pd(__builtin_inf());
    const __m256d tlo =
        _mm256_and_pd(_mm256_cmp_pd(abs(a.lo), tiny, _CMP_LT_OQ), _mm256_cmp_pd(a.lo, zero, _CMP_NEQ_OQ));
    const __m256d thi =
        _mm256_and_pd(_mm256_cmp_pd(abs(a.hi), tiny, _CMP_LT_OQ), _mm256_cmp_pd(a.hi, zero, _CMP_NEQ_OQ));
    V q = widen(_mm256_div_ps(narrow({scale_where(a.lo, tlo, 0x1p64), scale_where(a.hi, thi, 0x1p64)}), narrow(b)));
    const __m256d slo = _mm256_and_pd(
        tlo, _mm256_or_pd(_mm256_cmp_pd(abs(q.lo), floor, _CMP_LT_OQ), _mm256_cmp_pd(abs(q.lo), inf, _CMP_EQ_OQ)));
    const __m256d shi = _mm256_and_pd(
        thi, _mm256_or_pd(_mm256_cmp_pd(abs(q.hi), floor, _CMP_LT_OQ), _mm256_cmp_pd(abs(q.hi), inf, _CMP_EQ_OQ)));
    q = {scale_where(q.lo, tlo, 0x1p-64), scale_where(q.hi, thi, 0x1p-64)};
    if (_mm256_movemask_pd(_mm256_or_pd(slo, shi)) != 0) [[unlikely]] {
      q.lo = _mm256_blendv_pd(q.lo, round(_mm256_div_pd(a.lo, b.lo)), slo);
      q.hi = _mm256_blendv_pd(q.hi, round(_mm256_div_pd(a.hi, b.hi)), shi);
    }
    return q;
  }
  static V sqrt(V a) {
    const __m256d small = _mm256_set1_pd(0x1p-126);
    const __m256d lo = _mm256_cmp_pd(abs(a.lo), small, _CMP_LT_OQ), hi = _mm256_cmp_pd(abs(a.hi), small, _CMP_LT_OQ);
    const V r = widen(_mm256_sqrt_ps(narrow({scale_where(a.lo, lo, 0x1p64), scale_where(a.hi, hi, 0x1p64)})));
    return {scale_where(r.lo, lo, 0x1p-32), scale_where(r.hi, hi, 0x1p-32)};
  }
  static __m256d fma1(__m256d a, __m256d b, __m256d c) {
    const __m256d p = _mm256_mul_pd(a, b);
    const __m256d s = _mm256_add_pd(p, c);
    // c = +-0 in every lane (a state that decays with no gradient: b1 m + (1 - b1) 0): the sum is exact
    if (_mm256_movemask_pd(_mm256_cmp_pd(c, _mm256_setzero_pd(), _CMP_EQ_OQ)) == 0xF) return round(s);
    const __m256d bb = _mm256_sub_pd(s, p);
    const __m256d e = _mm256_add_pd(_mm256_sub_pd(p, _mm256_sub_pd(s, bb)), _mm256_sub_pd(c, bb));
    const __m256i si = _mm256_castpd_si256(s);
    const __m256i ones = _mm256_set1_epi64x(1);
    const __m256i inexact = _mm256_castpd_si256(_mm256_cmp_pd(e, _mm256_setzero_pd(), _CMP_NEQ_OQ));
    const __m256i even = _mm256_cmpeq_epi64(_mm256_and_si256(si, ones), _mm256_setzero_si256());
    const __m256d abs = _mm256_andnot_pd(_mm256_set1_pd(-0.0), s);
    const __m256i finite = _mm256_castpd_si256(_mm256_cmp_pd(abs, _mm256_set1_pd(__builtin_inf()), _CMP_LT_OQ));
    // the sign bit of s xor e, as all-ones where they differ (toward zero: bits - 1), else +1
    const __m256i differ = _mm256_cmpgt_epi64(_mm256_setzero_si256(), _mm256_castpd_si256(_mm256_xor_pd(s, e)));
    const __m256i step = _mm256_or_si256(differ, ones);  // -1 where they differ, else +1
    const __m256i fix = _mm256_and_si256(_mm256_and_si256(inexact, even), finite);
    return round(_mm256_castsi256_pd(_mm256_add_epi64(si, _mm256_and_si256(fix, step))));
  }
  static V fma(V a, V b, V c) { return {fma1(a.lo, b.lo, c.lo), fma1(a.hi, b.hi, c.hi)}; }
  static __m256d sign1(__m256d a) {
    const __m256d zero = _mm256_setzero_pd();
    const __m256d pos = _mm256_and_pd(_mm256_cmp_pd(a, zero, _CMP_GT_OQ), _mm256_set1_pd(1.0));
    const __m256d neg = _mm256_and_pd(_mm256_cmp_pd(a, zero, _CMP_LT_OQ), _mm256_set1_pd(-1.0));
    return _mm256_or_pd(pos, neg);
  }
  static V sign(V a) { return {sign1(a.lo), sign1(a.hi)}; }
  static V widen(__m256 f) {
    return {_mm256_cvtps_pd(_mm256_castps256_ps128(f)), _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1))};
  }
  static __m256 narrow(V d) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(d.lo)), _mm256_cvtpd_ps(d.hi), 1);
  }
};
#endif

}  // namespace exact
