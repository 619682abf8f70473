// The CPU kernel body, generic over an ISA traits type T. Included by exactly one translation unit
// per ISA, inside an anonymous namespace, so that no inline code is shared across ISA flags.
//
// T provides: W (lanes), V, M (mask), the Ops of update_rules.h (set1 mul add fma div sqrt sign),
// loadf/storef/storef_nt (fp32; storef_nt non-temporal where aligned, else plain), load_bf16/load_f16,
// store_bf16/store_f16, finite(V)->M, select(M,a,b),
// mask_bits(M)->uint32 (bit j = lane j is finite), acc_sq(double* acc /*W*/, V g): acc[j] += g[j]^2.
// Tails run the same vector body on zero-padded stack copies, so every element takes the same path.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "backends/backend.h"
#include "backends/cpu/exact_ops.h"
#include "backends/cpu/kernels.h"
#include "core/optim/dtype.h"
#include "core/optim/grad_stats.h"
#include "core/optim/update_rules.h"
#include "core/random.h"

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

// The prefetches of element i + tune.prefetch_elems of every stream (rw: the master and states are
// written back where they are read, so ask for them exclusive).
template <class T, OptimizerKind K, DType G>
inline void prefetch_ahead(const Ptrs& q, size_t i, const KernelTuning& tune, bool rw) {
  const size_t f = i + tune.prefetch_elems;
  const char* g = static_cast<const char*>(q.g) + f * core::dtype_bytes(G);
  constexpr bool two = core::state_count(K) == 2;
  if (tune.prefetch_level != 0) {  // into L2 only: the L1 fill buffers stay free for the demand loads
    __builtin_prefetch(g, 0, 2);
    __builtin_prefetch(q.pi + f, 0, 2);
    __builtin_prefetch(q.s1i + f, 0, 2);
    if constexpr (two) __builtin_prefetch(q.s2i + f, 0, 2);
    return;
  }
  __builtin_prefetch(g, 0, 3);
  if (rw) {
    __builtin_prefetch(q.pi + f, 1, 3);
    __builtin_prefetch(q.s1i + f, 1, 3);
    if constexpr (two) __builtin_prefetch(q.s2i + f, 1, 3);
  } else {  // out of place, the source is only read
    __builtin_prefetch(q.pi + f, 0, 3);
    __builtin_prefetch(q.s1i + f, 0, 3);
    if constexpr (two) __builtin_prefetch(q.s2i + f, 0, 3);
  }
}

// ISAs whose traits have an Exact type (exact_ops.h) and any_tiny(): their vectors holding values near the
// subnormal range take the rules in double, which give the same bits without the processor's subnormal
// assists. The scalar path (the reference) has none.
template <class T>
concept HasExact = requires(typename T::V x) {
  typename T::Exact;
  { T::any_tiny(x, 1u) } -> std::same_as<bool>;
};
template <class T>
struct ExactOf {
  using type = T;
};
template <HasExact T>
struct ExactOf<T> {
  using type = typename T::Exact;
};

// The thresholds below which a vector takes the exact path, as float bits (0 < |x| < limit). Above them
// no operation of the rules meets a subnormal operand or result: a scaled gradient >= 2^-50 squares to
// >= 2^-100 and times 1 - beta2 (>= 2^-17) stays normal; master and states >= 2^-90 times any factor of
// the rules stay normal. Only speed depends on them: both paths give the IEEE bits.
struct TinyLimits {
  uint32_t grad = 0, state = 0;
  static TinyLimits for_scale(float grad_scale) {
    TinyLimits t;
    const float g = grad_scale > 0.f && grad_scale < 0x1p100f ? 0x1p-50f / grad_scale : 0x1p-50f;
    t.grad = core::f32_bits(g < 0x1p100f ? g : 0x1p100f);
    t.state = core::f32_bits(0x1p-90f);
    return t;
  }
};

// The fused update of one vector of W elements at offset i, split in its loads and the rest so that
// several vectors' loads can be issued before any is computed (KernelTuning::unroll).
template <class T, OptimizerKind K, DType G, DType C>
struct UpdatePass {
  using V = typename T::V;
  using X = typename ExactOf<T>::type;
  struct Loaded {
    V graw, p0, m0, v0;
  };
  const core::rules::Bcast<T>& b;
  Ptrs q;
  KernelTuning tune;
  bool rw;                                    // in place: the master and states are written where they are read
  bool nt_state;                              // out of place with streaming stores
  const core::rules::Bcast<X>* bx = nullptr;  // the exact path's scalars (HasExact<T> only)
  TinyLimits tiny;
  static constexpr bool kSums = true;

  // The update of one loaded vector into p, m, v; the rules in double where a lane is near the subnormals.
  [[gnu::always_inline]] void update(const Loaded& l, V& g, V& p, V& m, V& v) const {
    if constexpr (HasExact<T>) {
      if (tune.exact_path != 0 &&
          (T::any_tiny(l.graw, tiny.grad) || T::any_tiny(l.p0, tiny.state) || T::any_tiny(l.m0, tiny.state) ||
           (core::state_count(K) == 2 && T::any_tiny(l.v0, tiny.state)))) [[unlikely]] {
        const typename X::V gx = core::rules::scale_grad<X>(*bx, X::widen(l.graw));
        typename X::V px = X::widen(l.p0), mx = X::widen(l.m0), vx = X::widen(l.v0);
        core::rules::update<K, X>(*bx, gx, px, mx, vx);
        g = X::narrow(gx), p = X::narrow(px), m = X::narrow(mx), v = X::narrow(vx);
        return;
      }
    }
    g = core::rules::scale_grad<T>(b, l.graw);
    core::rules::update<K, T>(b, g, p, m, v);
  }

  // Inlined into the tile loops (out of line, GCC 12 also reports its own intrinsics' undefined-vector
  // idiom as uninitialized).
  [[gnu::always_inline]] void prefetch(size_t i) const { prefetch_ahead<T, K, G>(q, i, tune, rw); }
  [[gnu::always_inline]] Loaded load(size_t i) const {
    Loaded l;
    l.graw = load_grad<T, G>(q.g, i);
    l.p0 = T::loadf(q.pi + i);
    l.m0 = T::loadf(q.s1i + i);
    l.v0 = core::state_count(K) == 2 ? T::loadf(q.s2i + i) : l.p0;
    return l;
  }
  // acc_lane: the tile's 128 accumulators at this vector's lane (position in its tile modulo 128).
  // Returns the vector's non-finite count.
  [[gnu::always_inline]] uint32_t finish(size_t i, const Loaded& l, double* acc_lane) const {
    T::acc_sq(acc_lane, l.graw);
    V g, p = l.p0, m = l.m0, v = l.v0;
    update(l, g, p, m, v);
    const auto ok = T::finite(g);
    store_state<T>(q.p + i, T::select(ok, p, l.p0), nt_state);
    store_state<T>(q.s1 + i, T::select(ok, m, l.m0), nt_state);
    if constexpr (core::state_count(K) == 2) store_state<T>(q.s2 + i, T::select(ok, v, l.v0), nt_state);
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
  // The last r < W elements from i: the same vector body on zero-padded stack copies, so that every
  // element takes the same path.
  uint32_t tail(size_t i, size_t r, double* acc_lane) const {
    constexpr size_t W = T::W;
    alignas(64) float tp[W] = {}, ts1[W] = {}, ts2[W] = {};
    alignas(64) uint16_t tg16[W] = {}, tc[W] = {};
    alignas(64) float tg32[W] = {};
    std::memcpy(tp, q.pi + i, r * 4);
    std::memcpy(ts1, q.s1i + i, r * 4);
    if constexpr (core::state_count(K) == 2) std::memcpy(ts2, q.s2i + i, r * 4);
    void* tg = G == DType::kF32 ? static_cast<void*>(tg32) : static_cast<void*>(tg16);
    std::memcpy(tg, static_cast<const char*>(q.g) + i * core::dtype_bytes(G), r * core::dtype_bytes(G));
    if constexpr (C != DType::kNone) std::memcpy(tc, static_cast<uint16_t*>(q.copy) + i, r * 2);
    KernelTuning plain;  // stack copies: no streaming stores
    plain.stream_copy = false;
    plain.exact_path = tune.exact_path;
    const UpdatePass stack{b, {tp, ts1, ts2, tg, tc, tp, ts1, ts2}, plain, true, false, bx, tiny};  // in place
    const uint32_t bad = stack.finish(0, stack.load(0), acc_lane);
    std::memcpy(q.p + i, tp, r * 4);
    std::memcpy(q.s1 + i, ts1, r * 4);
    if constexpr (core::state_count(K) == 2) std::memcpy(q.s2 + i, ts2, r * 4);
    if constexpr (C != DType::kNone) std::memcpy(static_cast<uint16_t*>(q.copy) + i, tc, r * 2);
    return bad;
  }
};

// The optimizer's traffic without its arithmetic (StreamTilesFn): p += g, s1 += g, s2 += g (Two), the
// copy written from p. No statistics.
template <class T, DType G, DType C, bool Two>
struct StreamPass {
  using V = typename T::V;
  struct Loaded {
    V g, p, m, v;
  };
  Ptrs q;
  KernelTuning tune;
  static constexpr bool kSums = false;

  [[gnu::always_inline]] void prefetch(size_t i) const {
    prefetch_ahead<T, Two ? OptimizerKind::kAdamW : OptimizerKind::kAdagrad, G>(q, i, tune, true);
  }
  [[gnu::always_inline]] Loaded load(size_t i) const {
    Loaded l;
    l.g = load_grad<T, G>(q.g, i);
    l.p = T::loadf(q.p + i);
    l.m = T::loadf(q.s1 + i);
    l.v = Two ? T::loadf(q.s2 + i) : l.p;
    return l;
  }
  [[gnu::always_inline]] uint32_t finish(size_t i, const Loaded& l, double*) const {
    const V p = T::add(l.p, l.g);
    T::storef(q.p + i, p);
    T::storef(q.s1 + i, T::add(l.m, l.g));
    if constexpr (Two) T::storef(q.s2 + i, T::add(l.v, l.g));
    if constexpr (C != DType::kNone) store_copy<T, C>(q.copy, i, p, tune.stream_copy);
    return 0;
  }
  uint32_t tail(size_t i, size_t r, double*) const {  // element by element: traffic, not bits, matters here
    for (size_t j = i; j < i + r; ++j) {
      float g = 0;
      if constexpr (G == DType::kF32) g = static_cast<const float*>(q.g)[j];
      if constexpr (G == DType::kBF16) g = core::bf16_to_f32(static_cast<const uint16_t*>(q.g)[j]);
      if constexpr (G == DType::kF16) g = core::f16_to_f32(static_cast<const uint16_t*>(q.g)[j]);
      q.p[j] += g;
      q.s1[j] += g;
      if constexpr (Two) q.s2[j] += g;
      if constexpr (C == DType::kBF16) static_cast<uint16_t*>(q.copy)[j] = core::f32_to_bf16(q.p[j]);
      if constexpr (C == DType::kF16) static_cast<uint16_t*>(q.copy)[j] = core::f32_to_f16(q.p[j]);
    }
    return 0;
  }
};

// S full tiles (kStatsTile elements from base[s]) in lockstep: per round, U vectors of each tile are
// prefetched and loaded, then computed. acc: S x kStatsLanes accumulators. Each accumulator lane sees
// its elements in ascending order whatever S and U are, so the tile sums keep their bits.
template <class T, class P, unsigned S, unsigned U>
uint64_t lockstep_tiles(const P& pass, const size_t (&base)[S], double* acc) {
  constexpr size_t W = T::W;
  static_assert(core::kStatsTile % (U * W) == 0 && U * W <= core::kStatsLanes);
  const bool pf = pass.tune.prefetch_elems != 0;
  uint64_t bad = 0;
  for (size_t j = 0; j < core::kStatsTile; j += U * W) {
    typename P::Loaded l[S][U];
    for (unsigned s = 0; s < S; ++s)
      for (unsigned u = 0; u < U; ++u) {
        if (pf) pass.prefetch(base[s] + j + u * W);
        l[s][u] = pass.load(base[s] + j + u * W);
      }
    for (unsigned s = 0; s < S; ++s)
      for (unsigned u = 0; u < U; ++u)
        bad += pass.finish(base[s] + j + u * W, l[s][u], acc + s * core::kStatsLanes + (j + u * W) % core::kStatsLanes);
  }
  return bad;
}

// Tiles [t0, t1) of a chunk of n elements: full tiles S at a time (the first half of the run beside the
// second), then the rest one at a time, then the chunk's partial last tile vector by vector. With
// P::kSums, tile t's canonical sum goes to tile_sums[t - t0].
template <class T, class P, unsigned S, unsigned U>
uint64_t run_tiles(const P& pass, size_t n, size_t t0, size_t t1, double* tile_sums) {
  constexpr size_t W = T::W;
  alignas(64) double acc[S * core::kStatsLanes];
  const auto fold = [&](size_t t, const double* a) {
    if constexpr (P::kSums) tile_sums[t - t0] = core::fold_tile_lanes(a);
  };
  const size_t full_end = t1 < n / core::kStatsTile ? t1 : n / core::kStatsTile;
  uint64_t bad = 0;
  size_t t = t0;
  if constexpr (S == 2) {
    const size_t half = full_end > t0 ? (full_end - t0) / 2 : 0;
    for (size_t j = 0; j < half; ++j) {
      const size_t base[2] = {(t0 + j) * core::kStatsTile, (t0 + half + j) * core::kStatsTile};
      for (double& a : acc) a = 0.0;
      bad += lockstep_tiles<T, P, 2, U>(pass, base, acc);
      fold(t0 + j, acc);
      fold(t0 + half + j, acc + core::kStatsLanes);
    }
    t = t0 + 2 * half;
  }
  for (; t < full_end; ++t) {
    const size_t base[1] = {t * core::kStatsTile};
    for (double& a : acc) a = 0.0;
    bad += lockstep_tiles<T, P, 1, U>(pass, base, acc);
    fold(t, acc);
  }
  for (; t < t1; ++t) {  // the chunk's last tile, shorter than kStatsTile
    for (double& a : acc) a = 0.0;
    const size_t base = t * core::kStatsTile;
    size_t i = base;
    for (; i + W <= n; i += W) {
      if (pass.tune.prefetch_elems != 0) pass.prefetch(i);
      bad += pass.finish(i, pass.load(i), acc + (i - base) % core::kStatsLanes);
    }
    if (i < n) bad += pass.tail(i, n - i, acc + (i - base) % core::kStatsLanes);
    fold(t, acc);
  }
  return bad;
}

// run_tiles with S and the tuning's unroll (check_tuning has vetted it).
template <class T, class P, unsigned S>
uint64_t run_unrolled(const P& pass, size_t n, size_t t0, size_t t1, double* tile_sums) {
  switch (pass.tune.unroll) {
    case 4: return run_tiles<T, P, S, 4>(pass, n, t0, t1, tile_sums);
    case 2: return run_tiles<T, P, S, 2>(pass, n, t0, t1, tile_sums);
    default: return run_tiles<T, P, S, 1>(pass, n, t0, t1, tile_sums);
  }
}

// run_tiles with the tuning's interleave or unroll (check_tuning allows interleave 2 with unroll 1 only: the
// pairs would multiply the instantiations of every optimizer for little), then the fence that orders streaming stores
// before the caller's next synchronisation.
template <class T, class P>
uint64_t run_tuned(const P& pass, size_t n, size_t t0, size_t t1, double* tile_sums, bool streamed) {
  const uint64_t bad = pass.tune.interleave == 2 ? run_tiles<T, P, 2, 1>(pass, n, t0, t1, tile_sums)
                                                 : run_unrolled<T, P, 1>(pass, n, t0, t1, tile_sums);
  if (streamed) T::store_fence();
  return bad;
}

inline Ptrs chunk_ptrs(const OptimChunk& c) {
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
  return q;
}

template <class T, OptimizerKind K, DType G, DType C>
uint64_t step_tiles(const OptimChunk& c, const StepScalars& s, const KernelTuning& tune, size_t t0, size_t t1,
                    double* tile_sums) {
  const core::rules::Bcast<T> b(s);
  const core::rules::Bcast<typename ExactOf<T>::type> bx(s);
  const Ptrs q = chunk_ptrs(c);
  const bool out_of_place = c.from.param != nullptr;
  const bool nt_state = out_of_place && tune.stream_out_of_place;
  const UpdatePass<T, K, G, C> pass{b, q, tune, !out_of_place, nt_state, &bx, TinyLimits::for_scale(s.grad_scale)};
  return run_tuned<T>(pass, c.param.count, t0, t1, tile_sums, (tune.stream_copy && C != DType::kNone) || nt_state);
}

// The bound's pass walks one tile at a time, one vector at a time (unroll and interleave do not apply:
// they reorder arithmetic-heavy code, and would multiply the instantiations), with the tuning's
// prefetching and copy stores.
template <class T, DType G, DType C>
void stream_tiles(const OptimChunk& c, const KernelTuning& tune, size_t t0, size_t t1) {
  const Ptrs q = chunk_ptrs(c);
  const size_t n = c.param.count;
  if (c.state2.data != nullptr)
    (void)run_tiles<T, StreamPass<T, G, C, true>, 1, 1>({q, tune}, n, t0, t1, nullptr);
  else
    (void)run_tiles<T, StreamPass<T, G, C, false>, 1, 1>({q, tune}, n, t0, t1, nullptr);
  if (tune.stream_copy && C != DType::kNone) T::store_fence();
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
void stream_dispatch(const OptimChunk& c, const KernelTuning& tune, size_t t0, size_t t1) {
  auto by_copy = [&]<DType G>() {
    switch (c.param_copy.dtype) {
      case DType::kBF16: return stream_tiles<T, G, DType::kBF16>(c, tune, t0, t1);
      case DType::kF16: return stream_tiles<T, G, DType::kF16>(c, tune, t0, t1);
      default: return stream_tiles<T, G, DType::kNone>(c, tune, t0, t1);
    }
  };
  switch (c.grad.dtype) {
    case DType::kBF16: return by_copy.template operator()<DType::kBF16>();
    case DType::kF16: return by_copy.template operator()<DType::kF16>();
    default: return by_copy.template operator()<DType::kF32>();
  }
}

template <class T>
uint64_t stats_dispatch(const BufferView& grad, size_t t0, size_t t1, double* sums) {
  switch (grad.dtype) {
    case DType::kBF16: return stats_tiles<T, DType::kBF16>(grad, t0, t1, sums);
    case DType::kF16: return stats_tiles<T, DType::kF16>(grad, t0, t1, sums);
    default: return stats_tiles<T, DType::kF32>(grad, t0, t1, sums);
  }
}

// Operands for check_exact() below: half drawn with random bits over every exponent (zeros, subnormals,
// the largest normals, infinities and NaNs included; in every 4th block of 16, c = +-0), half made for the
// FMA's double rounding: c with a random significand and a b = half c's ulp times (1 - 2^-2j), so that
// a b + c falls within 2^-(2j) ulps of a midpoint, where a sum rounded to nearest in double would land on it.
struct ExactOperands {
  float a, b, c;
};
inline ExactOperands exact_operands(uint64_t i, uint64_t seed) {
  const uint64_t h = core::splitmix64(seed ^ (i * 0x2545F4914F6CDD1Dull)), k = core::splitmix64(h),
                 m = core::splitmix64(k);
  if (((i / 16) & 3) == 0)  // every 4th block of 16: random a and b, c = +-0 (the FMA's exact-sum shortcut)
    return {core::f32_from_bits(uint32_t(h >> 32)), core::f32_from_bits(uint32_t(k >> 32)),
            core::f32_from_bits(uint32_t(m >> 63) << 31)};
  if (h & 1)
    return {core::f32_from_bits(uint32_t(h >> 32)), core::f32_from_bits(uint32_t(k >> 32)),
            core::f32_from_bits(uint32_t(m >> 32))};
  const int j = 12 + int((h >> 8) % 12u);     // 12 .. 23
  const int e = int((h >> 16) % 200u) - 100;  // c's binade
  const float c =
      core::f32_from_bits((uint32_t(e + 127) << 23) | uint32_t(k & 0x7FFFFFu) | uint32_t((h >> 40) & 1u) << 31);
  const float x = core::f32_from_bits(uint32_t(127 - j) << 23);  // 2^-j
  const float a = (1.0f + x) * core::f32_from_bits(uint32_t(e - 24 + 127 + int((m >> 8) % 7u) - 3) << 23);
  const float b =
      (1.0f - x) * core::f32_from_bits(uint32_t(127 - int((m >> 8) % 7u) + 3) << 23) * ((m & 1) ? -1.f : 1.f);
  return {a, b, c};
}

// KernelTable::check_exact for an ISA with an exact path: its operations against T's fp32 instructions.
template <class T>
requires HasExact<T> uint64_t check_exact(uint64_t n, uint64_t seed, std::string* first) {
  using X = typename T::Exact;
  constexpr unsigned W = T::W;
  uint64_t bad = 0;
  alignas(64) float a[W], b[W], c[W], hw[W], ex[W];
  const char* names[] = {"mul", "add", "div", "sqrt", "fma"};
  for (uint64_t i = 0; i < n; i += W) {
    for (unsigned j = 0; j < W; ++j) {
      const ExactOperands o = exact_operands(i + j, seed);
      a[j] = o.a, b[j] = o.b, c[j] = o.c;
    }
    const typename T::V va = T::loadf(a), vb = T::loadf(b), vc = T::loadf(c);
    const typename X::V xa = X::widen(va), xb = X::widen(vb), xc = X::widen(vc);
    for (int op = 0; op < 5; ++op) {
      switch (op) {
        case 0: T::storef(hw, T::mul(va, vb)), T::storef(ex, X::narrow(X::mul(xa, xb))); break;
        case 1: T::storef(hw, T::add(va, vb)), T::storef(ex, X::narrow(X::add(xa, xb))); break;
        case 2: T::storef(hw, T::div(va, vb)), T::storef(ex, X::narrow(X::div(xa, xb))); break;
        case 3: T::storef(hw, T::sqrt(va)), T::storef(ex, X::narrow(X::sqrt(xa))); break;
        default: T::storef(hw, T::fma(va, vb, vc)), T::storef(ex, X::narrow(X::fma(xa, xb, xc))); break;
      }
      for (unsigned j = 0; j < W; ++j) {
        const uint32_t h = core::f32_bits(hw[j]), e = core::f32_bits(ex[j]);
        if (h == e || (hw[j] != hw[j] && ex[j] != ex[j])) continue;
        if (bad++ == 0 && first) {
          char text[160];
          std::snprintf(text, sizeof text, "%s a=0x%08x b=0x%08x c=0x%08x: 0x%08x vs the instruction's 0x%08x",
                        names[op], core::f32_bits(a[j]), core::f32_bits(b[j]), core::f32_bits(c[j]), e, h);
          *first = text;
        }
      }
    }
  }
  return bad;
}

}  // namespace tf::backend::cpu::body
