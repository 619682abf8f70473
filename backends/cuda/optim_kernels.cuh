// CUDA optimizer kernels: the fused multi-tensor step and the gradient statistics, bit-identical to
// the CPU kernels (core/optim/update_rules.h order, core/optim/grad_stats.h sum of squares).
//
// Work split: one warp per grad_stats tile of 2048 elements. In iteration k (0..15) thread t owns
// elements 128k + 4t + j (j = 0..3), loaded as one 16-byte vector per fp32 array, so its double
// accumulator j is the canonical lane 4t + j. The warp folds its lanes with a shuffle-xor butterfly
// (the definition's step 3) and writes one tile sum. Tile sums are folded per chunk by
// fold_tiles_strided + fold_tiles_final (step 4, same order as core::fold_tile_sums).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/backend.h"
#include "backends/cuda/cuda_tuning.h"
#include "backends/cuda/launch.h"
#include "core/optim/grad_stats.h"
#include "core/optim/update_rules.h"

namespace tf::backend::cuda {

namespace kern {

// The Ops of update_rules.h with CUDA's correctly rounded intrinsics (no contraction, IEEE div/sqrt).
struct CudaOps {
  using V = float;
  TF_HD_MEMBER static V set1(float x) { return x; }
#if defined(__CUDA_ARCH__)
  __device__ __forceinline__ static V mul(V a, V b) { return __fmul_rn(a, b); }
  __device__ __forceinline__ static V add(V a, V b) { return __fadd_rn(a, b); }
  __device__ __forceinline__ static V fma(V a, V b, V c) { return __fmaf_rn(a, b, c); }
  // IEEE division and square root, correctly rounded, kept on their hardware fast paths for the values
  // training makes common. sqrt.rn leaves its fast path for every input below 2^-101 (zero included) and
  // div.rn for a zero dividend (both read from sm_90 machine code: the range check before the call to the
  // slow routine). A unit that never had a gradient holds m = v = 0, one whose gradients stopped long ago
  // subnormal m and v, and a warp with one such element runs the slow routine: on an H200 the fused AdamW
  // over half-zero data ran 8% below random data, and the MLP's steps 7-8%
  // (bench/results/2026-11-29-h200-gpu-optimizer-values). These inputs are mapped exactly:
  //   a / b with a = +-0 and b finite, non-zero: the zero with the sign of a xor b (IEEE 754, 6.3);
  //   a / b with a subnormal: (a 2^64) / b, times 2^-64 where that quotient is >= 2^-61 in magnitude (a 2^64
  //   is exact, and the true quotient >= 2^-125 is normal, so the scaling back is exact and the rounding is
  //   a / b's); else a / b as it is (a subnormal quotient: the instruction's own rounding);
  //   sqrt(+-0) = +-0; 0 < a < 2^-101: sqrt(a 2^64) 2^-32, where both scalings by powers of two are exact
  //   (a 2^64 < 2^-37, the root >= 2^-42.5 and times 2^-32 >= 2^-74.5: normal), so the rounding is sqrt(a)'s.
  // Every other input (NaN, infinities, negative square roots) goes to the instruction as it is.
  __device__ __forceinline__ static V div(V a, V b) {
    const float inf = __int_as_float(0x7F800000);
    const bool zero = a == 0.f && b != 0.f && fabsf(b) < inf;
    const bool tiny = a != 0.f && fabsf(a) < 0x1p-126f;
    const float q = __fdiv_rn(zero ? 1.f : (tiny ? __fmul_rn(a, 0x1p64f) : a), b);
    if (zero) return __int_as_float(int((unsigned(__float_as_int(a)) ^ unsigned(__float_as_int(b))) & 0x80000000u));
    if (!tiny) return q;
    return fabsf(q) >= 0x1p-61f ? __fmul_rn(q, 0x1p-64f) : __fdiv_rn(a, b);
  }
  __device__ __forceinline__ static V sqrt(V a) {
    const bool zero = a == 0.f, small = a > 0.f && a < 0x1p-101f;
    const float r = __fsqrt_rn(zero ? 1.f : (small ? __fmul_rn(a, 0x1p64f) : a));
    return zero ? a : (small ? __fmul_rn(r, 0x1p-32f) : r);
  }
#else  // host pass of nvcc only; never called
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static V fma(V a, V b, V c) { return __builtin_fmaf(a, b, c); }
  static V div(V a, V b) { return a / b; }
  static V sqrt(V a) { return __builtin_sqrtf(a); }
#endif
  // -1, 0 or +1; 0 for +-0 and NaN (comparisons with NaN are false), like the CPU paths.
  TF_HD_MEMBER static V sign(V a) { return a > 0.f ? 1.f : (a < 0.f ? -1.f : 0.f); }
};
using Bc = core::rules::Bcast<CudaOps>;

// state_count(K) == 2, as a constant usable in device code.
template <OptimizerKind K>
inline constexpr bool kTwoStates = core::state_count(K) == 2;

__device__ __forceinline__ bool finite(float x) { return fabsf(x) < __int_as_float(0x7F800000); }

// acc += double(g)^2: the square is exact, the add rounds (no fma).
__device__ __forceinline__ void acc_sq(double& acc, float g) {
  const double d = double(g);
  acc = __dadd_rn(acc, __dmul_rn(d, d));
}

template <DType C>
__device__ __forceinline__ uint32_t to_copy(float x) {
  if constexpr (C == DType::kBF16)
    return core::f32_to_bf16(x);
  else
    return core::f32_to_f16(x);
}

template <DType G>
__device__ __forceinline__ float from_grad16(uint32_t h) {
  if constexpr (G == DType::kBF16)
    return core::bf16_to_f32(uint16_t(h));
  else
    return core::f16_to_f32(uint16_t(h));
}

// --- vector memory access (16 B fp32, 8 B for 4 x 16-bit) ---------------------------------------
// Chunk pointers come from descriptors in memory, so plain dereferences would be generic-space
// accesses; the intrinsics below are explicit ld/st.global: .ca/.wb (the defaults) or .cs
// (streaming, evict first) when S.
template <bool S>
__device__ __forceinline__ float4 ld4(const float* p) {
  if constexpr (S)
    return __ldcs(reinterpret_cast<const float4*>(p));
  else
    return __ldca(reinterpret_cast<const float4*>(p));
}
template <bool S>
__device__ __forceinline__ void st4(float* p, float4 v) {
  if constexpr (S)
    __stcs(reinterpret_cast<float4*>(p), v);
  else
    __stwb(reinterpret_cast<float4*>(p), v);
}
template <DType G, bool S>
__device__ __forceinline__ float4 ld_grad4(const void* g, uint64_t i) {
  if constexpr (G == DType::kF32) {
    const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(g) + i);
    if constexpr (S)
      return __ldcs(q);
    else
      return __ldg(q);
  } else {
    const uint2* q = reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(g) + i);
    uint2 u;
    if constexpr (S)
      u = __ldcs(q);
    else
      u = __ldg(q);
    return make_float4(from_grad16<G>(u.x & 0xFFFFu), from_grad16<G>(u.x >> 16), from_grad16<G>(u.y & 0xFFFFu),
                       from_grad16<G>(u.y >> 16));
  }
}
template <DType G>
__device__ __forceinline__ float ld_grad1(const void* g, uint64_t i) {
  if constexpr (G == DType::kF32)
    return static_cast<const float*>(g)[i];
  else
    return from_grad16<G>(static_cast<const uint16_t*>(g)[i]);
}

// One element: accumulate the raw square, scale, update; keeps p/m/v when the scaled gradient is
// not finite. Returns whether it was finite.
template <OptimizerKind K>
__device__ __forceinline__ bool elem(const Bc& b, float graw, float& p, float& m, float& v, double& acc) {
  acc_sq(acc, graw);
  const float g = core::rules::scale_grad<CudaOps>(b, graw);
  const bool ok = finite(g);
  float pn = p, mn = m, vn = v;
  core::rules::update<K, CudaOps>(b, g, pn, mn, vn);
  p = ok ? pn : p;
  m = ok ? mn : m;
  v = ok ? vn : v;
  return ok;
}

// A full tile (2048 elements from `base`), U iterations' loads in flight at once.
template <OptimizerKind K, DType G, DType C, int U, bool S>
__device__ __forceinline__ void step_tile_full(const Bc& b, const ChunkDesc& d, uint64_t base, int lane,
                                               double (&acc)[4], uint32_t& bad) {
  constexpr bool kTwo = kTwoStates<K>;
  float* __restrict__ P = d.p;
  float* __restrict__ M = d.s1;
  float* __restrict__ V = d.s2;
#pragma unroll 1
  for (int it = 0; it < 16; it += U) {
    float4 g[U], p[U], m[U], v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint64_t i = base + uint64_t((it + u) * 128 + lane * 4);
      g[u] = ld_grad4<G, S>(d.g, i);
      p[u] = ld4<S>(P + i);
      m[u] = ld4<S>(M + i);
      if constexpr (kTwo)
        v[u] = ld4<S>(V + i);
      else
        v[u] = p[u];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint64_t i = base + uint64_t((it + u) * 128 + lane * 4);
      const bool ok0 = elem<K>(b, g[u].x, p[u].x, m[u].x, v[u].x, acc[0]);
      const bool ok1 = elem<K>(b, g[u].y, p[u].y, m[u].y, v[u].y, acc[1]);
      const bool ok2 = elem<K>(b, g[u].z, p[u].z, m[u].z, v[u].z, acc[2]);
      const bool ok3 = elem<K>(b, g[u].w, p[u].w, m[u].w, v[u].w, acc[3]);
      st4<S>(P + i, p[u]);
      st4<S>(M + i, m[u]);
      if constexpr (kTwo) st4<S>(V + i, v[u]);
      if constexpr (C != DType::kNone) {
        uint2* q = reinterpret_cast<uint2*>(static_cast<uint16_t*>(d.copy) + i);
        uint2 c = make_uint2(to_copy<C>(p[u].x) | (to_copy<C>(p[u].y) << 16),
                             to_copy<C>(p[u].z) | (to_copy<C>(p[u].w) << 16));
        if (!(ok0 && ok1 && ok2 && ok3)) {  // rare: keep the old copy where the gradient was not finite
          const uint2 old = __ldca(q);
          if (!ok0) c.x = (c.x & 0xFFFF0000u) | (old.x & 0xFFFFu);
          if (!ok1) c.x = (c.x & 0x0000FFFFu) | (old.x & 0xFFFF0000u);
          if (!ok2) c.y = (c.y & 0xFFFF0000u) | (old.y & 0xFFFFu);
          if (!ok3) c.y = (c.y & 0x0000FFFFu) | (old.y & 0xFFFF0000u);
        }
        if constexpr (S)
          __stcs(q, c);
        else
          __stwb(q, c);
      }
      bad += uint32_t(!ok0) + uint32_t(!ok1) + uint32_t(!ok2) + uint32_t(!ok3);
    }
  }
}

// The last, partial tile of a chunk: element by element, the same rules and lanes.
template <OptimizerKind K, DType G, DType C>
__device__ __forceinline__ void step_tile_partial(const Bc& b, const ChunkDesc& d, uint64_t base, int lane,
                                                  double (&acc)[4], uint32_t& bad) {
  constexpr bool kTwo = kTwoStates<K>;
  for (int it = 0; it < 16; ++it) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint64_t i = base + uint64_t(it * 128 + lane * 4 + j);
      if (i < d.n) {
        const float graw = ld_grad1<G>(d.g, i);
        float p = d.p[i], m = d.s1[i], v = kTwo ? d.s2[i] : p;
        const bool ok = elem<K>(b, graw, p, m, v, acc[j]);
        d.p[i] = p;
        d.s1[i] = m;
        if constexpr (kTwo) d.s2[i] = v;
        if constexpr (C != DType::kNone)
          if (ok) static_cast<uint16_t*>(d.copy)[i] = uint16_t(to_copy<C>(p));
        bad += uint32_t(!ok);
      }
    }
  }
}

// grad_stats.h step 3: r_t = (a0 + a1) + (a2 + a3), then a butterfly over 16, 8, 4, 2, 1.
// Lane 0 ends with r[0] = r[0] + r[off] at each level, as in core::fold_tile_lanes.
__device__ __forceinline__ double fold_lanes(const double (&acc)[4]) {
  double r = __dadd_rn(__dadd_rn(acc[0], acc[1]), __dadd_rn(acc[2], acc[3]));
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) r = __dadd_rn(r, __shfl_xor_sync(0xFFFFFFFFu, r, off));
  return r;
}

// The chunk holding group tile t: the last c with local_tile_begin <= t (chunks have >= 1 tile).
__device__ __forceinline__ uint32_t find_chunk(const ChunkDesc* __restrict__ d, uint32_t count, uint64_t t) {
  uint32_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (d[mid].local_tile_begin <= t)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

__device__ __forceinline__ void add_nonfinite(uint32_t bad, unsigned long long* out) {
  bad = __reduce_add_sync(0xFFFFFFFFu, bad);
  if ((threadIdx.x & 31) == 0 && bad != 0) atomicAdd(out, (unsigned long long)bad);
}

// MB: blocks per SM the register budget is held to (__launch_bounds__), i.e. 65536 / (256 MB) registers.
template <OptimizerKind K, DType G, DType C, int U, int MB, bool S>
__global__ void __launch_bounds__(kBlockThreads, MB)
    step_kernel(const ChunkDesc* __restrict__ descs, uint32_t count, uint64_t tiles, const StepScalars sc,
                double* __restrict__ tile_sums, unsigned long long* __restrict__ nonfinite) {
  const Bc b(sc);
  const int lane = int(threadIdx.x & 31);
  uint32_t bad = 0;
  const uint64_t stride = uint64_t(gridDim.x) * kWarpsPerBlock;
  for (uint64_t t = uint64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); t < tiles; t += stride) {
    const ChunkDesc& d = descs[count == 1 ? 0 : find_chunk(descs, count, t)];
    const uint64_t lt = t - d.local_tile_begin;
    const uint64_t base = lt * core::kStatsTile;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    if (base + core::kStatsTile <= d.n)
      step_tile_full<K, G, C, U, S>(b, d, base, lane, acc, bad);
    else
      step_tile_partial<K, G, C>(b, d, base, lane, acc, bad);
    const double r = fold_lanes(acc);
    if (lane == 0) tile_sums[d.sum_begin + lt] = r;
  }
  add_nonfinite(bad, nonfinite);
}

}  // namespace kern
}  // namespace tf::backend::cuda
