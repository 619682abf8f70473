// The CPU kernel body, generic over an ISA traits type T. Included by exactly one translation unit
// per ISA, inside an anonymous namespace, so that no inline code is shared across ISA flags.
//
// T provides: W (lanes), V, M (mask), the Ops of update_rules.h (set1 mul add fma div sqrt sign),
// loadf/storef/storef_nt (fp32; storef_nt non-temporal where aligned, else plain), load_bf16/load_f16,
// store_bf16/store_f16, finite(V)->M, select(M,a,b),
// mask_bits(M)->uint32 (bit j = lane j is finite), acc_sq(double* acc /*W*/, V g): acc[j] += g[j]^2.
// Tails run the same vector body on zero-padded stack copies, so every element takes the same path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "core/optim/grad_stats.h"
#include "core/optim/update_rules.h"

namespace tf::backend::cpu::body {

template <class T, DType G>
typename T::V load_grad(const void* base, size_t i) {
  if constexpr (G == DType::kF32) return T::loadf(static_cast<const float*>(base) + i);
  if constexpr (G == DType::kBF16) return T::load_bf16(static_cast<const uint16_t*>(base) + i);
  if constexpr (G == DType::kF16) return T::load_f16(static_cast<const uint16_t*>(base) + i);
}

template <class T, DType C>
void store_copy(void* base, size_t i, typename T::V v, bool nt = false) {
  if constexpr (C == DType::kBF16) T::store_bf16(static_cast<uint16_t*>(base) + i, v, nt);
  if constexpr (C == DType::kF16) T::store_f16(static_cast<uint16_t*>(base) + i, v, nt);
}

struct Ptrs {
  float* p;
  float* s1;
  float* s2;  // may point to scratch for one-state optimizers
  const void* g;
  void* copy;  // null when C == none
  // where master and states are read: p, s1, s2 themselves (in place) or an out-of-place source
  const float* pi;
  const float* s1i;
  const float* s2i;
};

// The master and states' stores: non-temporal for an out-of-place update when asked (its destination
// is not read again in this pass, so the store need not read the line first).
template <class T>
void store_state(float* p, typename T::V v, bool nt) {
  if (nt)
    T::storef_nt(p, v);
  else
    T::storef(p, v);
}

// One vector of W elements at offset i. lane = position of element i in its tile modulo 128.
template <class T, OptimizerKind K, DType G, DType C>
inline uint32_t vec_step(const core::rules::Bcast<T>& b, const Ptrs& q, size_t i, double* acc_lane,
                         const KernelTuning& tune) {
  using V = typename T::V;
  const bool out_of_place = q.pi != q.p;
  if (tune.prefetch_elems != 0) {
    const size_t f = i + tune.prefetch_elems;
    const int rw = out_of_place ? 0 : 1;  // out of place, the source is only read
    __builtin_prefetch(static_cast<const char*>(q.g) + f * core::dtype_bytes(G), 0, 3);
    if (rw) {
      __builtin_prefetch(q.pi + f, 1, 3);
      __builtin_prefetch(q.s1i + f, 1, 3);
      if constexpr (core::state_count(K) == 2) __builtin_prefetch(q.s2i + f, 1, 3);
    } else {
      __builtin_prefetch(q.pi + f, 0, 3);
      __builtin_prefetch(q.s1i + f, 0, 3);
      if constexpr (core::state_count(K) == 2) __builtin_prefetch(q.s2i + f, 0, 3);
    }
  }
  const V graw = load_grad<T, G>(q.g, i);
  T::acc_sq(acc_lane, graw);
  const V g = core::rules::scale_grad<T>(b, graw);
  const auto ok = T::finite(g);
  const V p0 = T::loadf(q.pi + i), m0 = T::loadf(q.s1i + i);
  const V v0 = core::state_count(K) == 2 ? T::loadf(q.s2i + i) : p0;
  V p = p0, m = m0, v = v0;
  core::rules::update<K, T>(b, g, p, m, v);
  const bool nt = out_of_place && tune.stream_out_of_place;
  store_state<T>(q.p + i, T::select(ok, p, p0), nt);
  store_state<T>(q.s1 + i, T::select(ok, m, m0), nt);
  if constexpr (core::state_count(K) == 2) store_state<T>(q.s2 + i, T::select(ok, v, v0), nt);
  const uint32_t bits = T::mask_bits(ok);
  if constexpr (C != DType::kNone) {
    constexpr uint32_t all = T::W == 32 ? 0xFFFFFFFFu : ((1u << T::W) - 1u);
    if (bits == all) {
      store_copy<T, C>(q.copy, i, p, tune.stream_copy);
    } else {  // rare: keep the old copy on non-finite lanes
      uint16_t old[T::W];
      std::memcpy(old, static_cast<uint16_t*>(q.copy) + i, sizeof old);
      store_copy<T, C>(q.copy, i, p);
      for (unsigned j = 0; j < T::W; ++j)
        if (!((bits >> j) & 1u)) static_cast<uint16_t*>(q.copy)[i + j] = old[j];
    }
  }
  return uint32_t(T::W) - uint32_t(__builtin_popcount(bits));
}

template <class T, OptimizerKind K, DType G, DType C>
uint64_t step_tiles(const OptimChunk& c, const StepScalars& s, const KernelTuning& tune, size_t t0, size_t t1,
                    double* tile_sums) {
  const core::rules::Bcast<T> b(s);
  constexpr size_t W = T::W;
  const size_t n = c.param.count;
  Ptrs q{static_cast<float*>(c.param.data),
         static_cast<float*>(c.state1.data),
         static_cast<float*>(c.state2.data),
         c.grad.data,
         c.param_copy.data,
         nullptr,
         nullptr,
         nullptr};
  const bool out_of_place = c.from.param != nullptr;
  q.pi = out_of_place ? c.from.param : q.p;
  q.s1i = out_of_place ? c.from.state1 : q.s1;
  q.s2i = out_of_place ? c.from.state2 : q.s2;
  uint64_t bad = 0;
  alignas(64) double acc[core::kStatsLanes];
  for (size_t t = t0; t < t1; ++t) {
    for (double& a : acc) a = 0.0;
    const size_t base = t * core::kStatsTile;
    const size_t end = base + core::kStatsTile < n ? base + core::kStatsTile : n;
    size_t i = base;
    for (; i + W <= end; i += W) bad += vec_step<T, K, G, C>(b, q, i, acc + (i - base) % core::kStatsLanes, tune);
    if (i < end) {  // tail: zero-padded copies, same vector body
      const size_t r = end - i;
      alignas(64) float tp[W] = {}, ts1[W] = {}, ts2[W] = {};
      alignas(64) uint16_t tg16[W] = {}, tc[W] = {};
      alignas(64) float tg32[W] = {};
      std::memcpy(tp, q.pi + i, r * 4);
      std::memcpy(ts1, q.s1i + i, r * 4);
      if constexpr (core::state_count(K) == 2) std::memcpy(ts2, q.s2i + i, r * 4);
      void* tg = G == DType::kF32 ? static_cast<void*>(tg32) : static_cast<void*>(tg16);
      std::memcpy(tg, static_cast<const char*>(q.g) + i * core::dtype_bytes(G), r * core::dtype_bytes(G));
      if constexpr (C != DType::kNone) std::memcpy(tc, static_cast<uint16_t*>(q.copy) + i, r * 2);
      const Ptrs tq{tp, ts1, ts2, tg, tc, tp, ts1, ts2};  // in place on the stack copies
      const KernelTuning plain{0, false, false};          // stack copies: no prefetch, no streaming stores
      bad += vec_step<T, K, G, C>(b, tq, 0, acc + (i - base) % core::kStatsLanes, plain);
      std::memcpy(q.p + i, tp, r * 4);
      std::memcpy(q.s1 + i, ts1, r * 4);
      if constexpr (core::state_count(K) == 2) std::memcpy(q.s2 + i, ts2, r * 4);
      if constexpr (C != DType::kNone) std::memcpy(static_cast<uint16_t*>(q.copy) + i, tc, r * 2);
    }
    tile_sums[t - t0] = core::fold_tile_lanes(acc);
  }
  if ((tune.stream_copy && C != DType::kNone) || (out_of_place && tune.stream_out_of_place)) T::store_fence();
  return bad;
}

template <class T, DType G>
uint64_t stats_tiles(const BufferView& grad, size_t t0, size_t t1, double* tile_sums) {
  constexpr size_t W = T::W;
  const size_t n = grad.count;
  uint64_t bad = 0;
  alignas(64) double acc[core::kStatsLanes];
  for (size_t t = t0; t < t1; ++t) {
    for (double& a : acc) a = 0.0;
    const size_t base = t * core::kStatsTile;
    const size_t end = base + core::kStatsTile < n ? base + core::kStatsTile : n;
    for (size_t i = base; i < end; i += W) {
      typename T::V g;
      if (i + W <= end) {
        g = load_grad<T, G>(grad.data, i);
      } else {
        alignas(64) float t32[W] = {};
        alignas(64) uint16_t t16[W] = {};
        void* tg = G == DType::kF32 ? static_cast<void*>(t32) : static_cast<void*>(t16);
        std::memcpy(tg, static_cast<const char*>(grad.data) + i * core::dtype_bytes(G),
                    (end - i) * core::dtype_bytes(G));
        g = load_grad<T, G>(tg, 0);
      }
      T::acc_sq(acc + (i - base) % core::kStatsLanes, g);
      bad += uint32_t(W) - uint32_t(__builtin_popcount(T::mask_bits(T::finite(g))));
    }
    tile_sums[t - t0] = core::fold_tile_lanes(acc);
  }
  return bad;
}

// Runtime (kind, grad dtype, copy dtype) -> instantiation.
template <class T>
uint64_t step_dispatch(OptimizerKind k, const OptimChunk& c, const StepScalars& s, const KernelTuning& tune, size_t t0,
                       size_t t1, double* sums) {
  auto by_copy = [&]<OptimizerKind K, DType G>() -> uint64_t {
    switch (c.param_copy.dtype) {
      case DType::kBF16: return step_tiles<T, K, G, DType::kBF16>(c, s, tune, t0, t1, sums);
      case DType::kF16: return step_tiles<T, K, G, DType::kF16>(c, s, tune, t0, t1, sums);
      default: return step_tiles<T, K, G, DType::kNone>(c, s, tune, t0, t1, sums);
    }
  };
  auto by_grad = [&]<OptimizerKind K>() -> uint64_t {
    switch (c.grad.dtype) {
      case DType::kBF16: return by_copy.template operator()<K, DType::kBF16>();
      case DType::kF16: return by_copy.template operator()<K, DType::kF16>();
      default: return by_copy.template operator()<K, DType::kF32>();
    }
  };
  switch (k) {
    case OptimizerKind::kAdamW: return by_grad.template operator()<OptimizerKind::kAdamW>();
    case OptimizerKind::kAdam: return by_grad.template operator()<OptimizerKind::kAdam>();
    case OptimizerKind::kAdagrad: return by_grad.template operator()<OptimizerKind::kAdagrad>();
    case OptimizerKind::kLion: return by_grad.template operator()<OptimizerKind::kLion>();
  }
  return 0;
}

template <class T>
uint64_t stats_dispatch(const BufferView& grad, size_t t0, size_t t1, double* sums) {
  switch (grad.dtype) {
    case DType::kBF16: return stats_tiles<T, DType::kBF16>(grad, t0, t1, sums);
    case DType::kF16: return stats_tiles<T, DType::kF16>(grad, t0, t1, sums);
    default: return stats_tiles<T, DType::kF32>(grad, t0, t1, sums);
  }
}

}  // namespace tf::backend::cpu::body
