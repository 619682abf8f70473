// Scalar CPU optimizer kernels: the plain-C++ instantiation of core/optim/update_rules.h.
#include <cmath>

#include "backends/cpu/kernel_body.h"
#include "backends/cpu/kernels.h"

namespace tf::backend::cpu {
namespace {

struct Scalar {
  static constexpr unsigned W = 1;
  using V = float;
  using M = bool;
  static V set1(float x) { return x; }
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static V fma(V a, V b, V c) { return __builtin_fmaf(a, b, c); }
  static V div(V a, V b) { return a / b; }
  static V sqrt(V a) { return __builtin_sqrtf(a); }
  static V sign(V a) { return a > 0.f ? 1.f : (a < 0.f ? -1.f : 0.f); }
  static V loadf(const float* p) { return *p; }
  static void storef(float* p, V v) { *p = v; }
  static void storef_nt(float* p, V v) { *p = v; }
  static V load_bf16(const uint16_t* p) { return core::bf16_to_f32(*p); }
  static V load_f16(const uint16_t* p) { return core::f16_to_f32(*p); }
  static void store_bf16(uint16_t* p, V v, bool) { *p = core::f32_to_bf16(v); }
  static void store_f16(uint16_t* p, V v, bool) { *p = core::f32_to_f16(v); }
  static void store_fence() {}
  static M finite(V v) { return std::isfinite(v); }
  static V select(M m, V a, V b) { return m ? a : b; }
  static uint32_t mask_bits(M m) { return m ? 1u : 0u; }
  static void acc_sq(double* acc, V g) {
    const double d = double(g);
    acc[0] = acc[0] + d * d;
  }
};

uint64_t step(OptimizerKind k, const OptimChunk& c, const StepScalars& s, const KernelTuning& tune, size_t t0,
              size_t t1, double* sums) {
  return body::step_dispatch<Scalar>(k, c, s, tune, t0, t1, sums);
}
uint64_t stats(const BufferView& g, size_t t0, size_t t1, double* sums) {
  return body::stats_dispatch<Scalar>(g, t0, t1, sums);
}
void streams(const OptimChunk& c, const KernelTuning& tune, size_t t0, size_t t1) {
  body::stream_dispatch<Scalar>(c, tune, t0, t1);
}

}  // namespace

KernelTable kernels_scalar() { return {&step, &stats, &streams}; }

}  // namespace tf::backend::cpu
