// Causal flash attention on bf16 tensor cores (mma.sync m16n8k16, ldmatrix, cp.async): the forward, and the
// backward as D = rowsum(dO∘O), dK/dV per key tile and dQ per query tile (docs/decoder.md; API in
// decoder_kernels.cuh, tiles and fragment index math in attention_tiles.cuh, device pieces shared with the
// wgmma forward of ForwardTiles::kWgmma, attention_wgmma.cu, in attention_device.cuh; the wgmma dK/dV of
// BackwardKernel::kWgmma is attention_wgmma_bwd.cu).
//
// Structure (FlashAttention-2): each warp owns 16 rows (or, in the d = 64 forward's 4-warp shape, two m16
// tiles of queries) and keeps its accumulators in registers; tiles live in shared memory with rows padded
// by 16 bytes (a row stride of 144, 176 or 272 bytes puts the 8 rows of every ldmatrix phase in 8
// different 16-byte bank groups: no conflicts); the next K/V (or Q/dO) tile is fetched with cp.async
// while the current one is used (double buffering, one __syncthreads on each side of the compute).
// Causality: key tiles above the diagonal are skipped (never loaded); only tiles that cross the diagonal
// or the sequence end (tile_needs_mask) run the elementwise mask. Rows past s are zero-filled on load
// and never stored. No atomics: every output element is written once by one thread.
//
// Instruction budget (bench/results/attention-notes.md): the tensor cores wait on the elementwise work
// between the products, so that work is kept small: P and dS become mma operands through one
// cvt.rn.bf16x2.f32 per pair (attn::pack_bf16x2_operand), a row's maximum and sum are trees over a
// thread's columns (short dependency chains) with the maximum taken over the raw scores (fl(c·s) is
// monotone in s for c > 0, so max fl(c·s) = fl(c·max s): one multiply a row), and cp.async addresses
// take a few integer operations per 16-byte chunk.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include "backends/cuda/attention_device.cuh"
#include "backends/cuda/attention_tiles.cuh"
#include "backends/cuda/attention_wgmma.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/decoder_kernels.cuh"
#include "core/error.h"

namespace tf::backend::cuda {
namespace {

using attn::FragCoord;
using attn::kBwdQueryTile;
using attn::kBwdThreads;
using attn::kKeyTile;
// attention_device.cuh
using attn::cp_async_commit;
using attn::cp_async_wait;
using attn::exp2_normal;
using attn::finish_rows;
using attn::kFullMask;
using attn::kLn2;
using attn::kLog2e;
using attn::mask_scores;
using attn::row_extreme_tree;
using attn::row_sum_tree;
using attn::smem_addr;
using attn::store_warp_rows;
using attn::tile_stride;

// ---- PTX -----------------------------------------------------------------------------------------

// 16 bytes global -> shared without waiting (cp.async.cg: cached in L2 only). !valid: src-size 0, so
// nothing is read and the 16 bytes are zero-filled (src must still be a valid address).
__device__ __forceinline__ void cp_async16(uint16_t* dst, const uint16_t* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// 4 bytes global -> shared without waiting (cp.async.ca); !valid: zero-filled, nothing read.
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void ldsm_x4(const uint16_t* p, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(const uint16_t* p, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// c += a·b on one 16 x 8 x 16 tile: bf16 inputs, fp32 accumulation (fragments: attention_tiles.cuh).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- tiles ---------------------------------------------------------------------------------------

// Rows [row0, row0 + kRows) of one head of one sample (g: the sample's row 0 at the head's column,
// row stride ld < 2^31 elements) into a [kRows][tile_stride(kD)] tile by the kThreads threads of the block;
// rows >= s zero-filled (their source is row 0, never read). Fully unrolled: when a row's kD / 8 16-byte
// chunks divide the block, thread t copies chunk t % (kD / 8) of rows t / (kD / 8) + i·kPass; otherwise
// chunk c = t + i·kThreads is (row c / (kD / 8), column 8·(c % (kD / 8))). A chunk costs a compare, a
// select and one 32 x 32 -> 64-bit multiply-add.
template <int kRows, int kD, int kThreads>
__device__ __forceinline__ void load_tile_async(uint16_t* tile, const uint16_t* g, int ld, int row0, int s) {
  constexpr int kChunks = kD / 8, kTotal = kRows * kChunks;  // 16-byte chunks per row, per tile
  const auto copy = [&](int r, int ch) {
    const int row = row0 + r;
    const bool valid = row < s;
    cp_async16(tile + r * tile_stride(kD) + ch * 8, g + int64_t(valid ? row : 0) * ld + ch * 8, valid);
  };
  if constexpr (kThreads % kChunks == 0 && kRows % (kThreads / kChunks) == 0) {
    constexpr int kPass = kThreads / kChunks;  // rows the block copies per pass
    const int r = int(threadIdx.x) / kChunks, ch = int(threadIdx.x) % kChunks;
#pragma unroll
    for (int i = 0; i < kRows / kPass; ++i) copy(r + i * kPass, ch);
  } else {
#pragma unroll
    for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
      const int c = int(threadIdx.x) + i * kThreads;
      if (kTotal % kThreads != 0 && c >= kTotal) break;
      copy(c / kChunks, c % kChunks);
    }
  }
}

// Both tiles of a pair (K and V, or Q and dO) for rows [row0, row0 + kRows), each with its row stride.
template <int kRows, int kD, int kThreads>
__device__ __forceinline__ void load_pair_async(uint16_t* t0, const uint16_t* g0, int ld0, uint16_t* t1,
                                                const uint16_t* g1, int ld1, int row0, int s) {
  load_tile_async<kRows, kD, kThreads>(t0, g0, ld0, row0, s);
  load_tile_async<kRows, kD, kThreads>(t1, g1, ld1, row0, s);
}

// The double-buffering step that opens every loop iteration: when there is a next tile, `prefetch()` starts
// its copies (into the buffer last read in the previous iteration, before that iteration's closing
// barrier) and commits them; then this thread's copies of the current tile are waited for, and the barrier
// makes every thread's copies visible to the block.
template <class Prefetch>
__device__ __forceinline__ void advance_pipeline(bool has_next, Prefetch&& prefetch) {
  if (has_next) {
    prefetch();
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// acc[mt][2·np], acc[mt][2·np + 1] += a(mt) · the two n-tiles of one ldmatrix.x4 (b0, b1 of n-tile 2·np,
// then of 2·np + 1): every product of the kernels goes through here.
template <int kMT, int kNTiles, class AFrag>
__device__ __forceinline__ void mma_ntile_pair(float (&acc)[kMT][kNTiles][4], int np, const uint32_t (&b)[4],
                                               AFrag&& a) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    mma_bf16(acc[mt][2 * np], a(mt), b[0], b[1]);
    mma_bf16(acc[mt][2 * np + 1], a(mt), b[2], b[3]);
  }
}

// acc[mt][nt] += A[mt] · Bᵀ: A from registers (kKSteps k-steps of 16), B's kNTiles n-tiles from the rows of
// a row-major [n][k] tile (K in Q·Kᵀ), loaded two n-tiles per ldmatrix.
template <int kMT, int kKSteps, int kNTiles>
__device__ __forceinline__ void mma_regs_nk(float (&acc)[kMT][kNTiles][4], const uint32_t (&a)[kMT][kKSteps][4],
                                            const uint16_t* b_tile, int stride, int lane) {
  const FragCoord bo = attn::ldsm_b_nk_offset(lane);
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      uint32_t b[4];
      ldsm_x4(b_tile + (np * 16 + bo.row) * stride + ks * 16 + bo.col, b);
      mma_ntile_pair(acc, np, b, [&](int mt) -> const uint32_t(&)[4] { return a[mt][ks]; });
    }
}

// acc[nt] += A · Bᵀ with A the 16 rows [a_row0, a_row0 + 16) of a row-major [m][k] tile, loaded one
// k-step at a time (the backward keeps its registers for accumulators).
template <int kKSteps, int kNTiles>
__device__ __forceinline__ void mma_smem_nk(float (&acc)[1][kNTiles][4], const uint16_t* a_tile, int a_row0,
                                            const uint16_t* b_tile, int stride, int lane) {
  const FragCoord ao = attn::ldsm_a_offset(lane);
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    uint32_t a[1][1][4];
    ldsm_x4(a_tile + (a_row0 + ao.row) * stride + ks * 16 + ao.col, a[0][0]);
    mma_regs_nk<1, 1, kNTiles>(acc, a, b_tile + ks * 16, stride, lane);
  }
}

// acc[mt][nt] += C[mt] · B: the fp32 C fragments over kKCols columns become A fragments (bf16,
// attn::c_pair_to_a); B's kNTiles n-tiles come from a row-major [k][n] tile (V in P·V) via ldmatrix.trans.
template <int kMT, int kKCols, int kNTiles>
__device__ __forceinline__ void mma_c_kn(float (&acc)[kMT][kNTiles][4], const float (&c)[kMT][kKCols / 8][4],
                                         const uint16_t* b_tile, int stride, int lane) {
  const FragCoord bo = attn::ldsm_a_offset(lane);
#pragma unroll
  for (int kk = 0; kk < kKCols / 16; ++kk) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) attn::c_pair_to_a(c[mt][2 * kk], c[mt][2 * kk + 1], a[mt]);
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      uint32_t b[4];
      ldsm_x4_trans(b_tile + (kk * 16 + bo.row) * stride + np * 16 + bo.col, b);
      mma_ntile_pair(acc, np, b, [&](int mt) -> const uint32_t(&)[4] { return a[mt]; });
    }
  }
}

// ---- forward -------------------------------------------------------------------------------------

// A forward tile shape: kWarps warps of kMT m16 query tiles each (kBr query rows a block) over 64-key
// tiles. kMinBlocks: the blocks an SM is to hold, which caps the registers ptxas may use. kStages: K/V
// buffers; with 3 the tile being refilled was last read two iterations ago, behind the barrier that
// opens the previous iteration, so an iteration needs one barrier (d = 64: 74 KB a block, two an SM),
// with 2 a second barrier closes each iteration (d = 80, 128, where a third stage would cost a block).
template <int kD, int kWarps, int kMT>
struct Fwd {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsPerWarp = 16 * kMT;
  static constexpr int kBr = kRowsPerWarp * kWarps;  // query rows per block
  static constexpr int kKSteps = kD / 16, kDTiles = kD / 8, kSTiles = kKeyTile / 8;
  static constexpr int kMinBlocks = 2;
  static constexpr int kStages = kD == 64 ? 3 : 2;
  // Q [kBr], K [kStages][64], V [kStages][64] rows of tile_stride(kD) bf16
  static constexpr size_t kSmemBytes = size_t(kBr + 2 * kStages * kKeyTile) * tile_stride(kD) * 2;
  static_assert(kBr == attn::fwd_query_tile(kD), "the block's query rows are attn::fwd_query_tile(d)");
};

// p = 2^(fl(s·scale_log2) - m_use) of a tile's scores in place (exp2_normal when kNormal, else exp2f),
// then l = l·alpha + the tile's sum, acc_o·alpha, and acc_o += bf16(p)·V (v_tile: the tile's V rows).
template <bool kNormal, int kMT, int kSTiles, int kDTiles>
__device__ __forceinline__ void exp_sum_pv(float (&s)[kMT][kSTiles][4], const float (&m_use)[kMT][2],
                                           const float (&alpha)[kMT][2], float (&row_sum)[kMT][2],
                                           float (&acc_o)[kMT][kDTiles][4], const uint16_t* v_tile, int stride,
                                           float scale_log2, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float x = s[mt][nt][i] * scale_log2 - m_use[mt][i >> 1];
        s[mt][nt][i] = kNormal ? exp2_normal(x) : exp2f(x);
      }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) row_sum[mt][hf] = row_sum[mt][hf] * alpha[mt][hf] + row_sum_tree(s[mt], hf);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc_o[mt][dt][i] = acc_o[mt][dt][i] * alpha[mt][i >> 1];
  mma_c_kn<kMT, kSTiles * 8, kDTiles>(acc_o, s, v_tile, stride, lane);
}

// The online softmax over one key tile and its P·V (rows: this warp's queries from warp_q0; columns:
// keys from k0): s becomes p = 2^(fl(s·scale_log2) - m) (kMask: invisible pairs 0), the running max m of
// fl(s·scale_log2) and the thread's partial row sum l are updated (l = l·alpha + the tile's sum), the
// output accumulators are rescaled by alpha = 2^(m_old - m) and get bf16(p)·V. Every row of the warp
// goes through each step together (independent chains). The exponentials are exp2f's: when the smallest
// score of every row of the warp keeps its argument >= -126 (fl is monotone, so every argument of the
// row is >= that one), one MUFU each (exp2_normal). kMask and the exponential path are template
// arguments, so each combination is straight-line code.
template <bool kMask, int kMT, int kSTiles, int kDTiles>
__device__ __forceinline__ void softmax_pv(float (&s)[kMT][kSTiles][4], float (&row_max)[kMT][2],
                                           float (&row_sum)[kMT][2], float (&acc_o)[kMT][kDTiles][4],
                                           const uint16_t* v_tile, int stride, int warp_q0, int k0, int seq,
                                           float scale_log2, int lane) {
  float mx[kMT][2], mn[kMT][2], m_use[kMT][2], alpha[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) mn[mt][hf] = row_extreme_tree<false>(s[mt], hf);  // before the mask
  if constexpr (kMask) mask_scores(s, warp_q0, k0, seq, lane);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) mx[mt][hf] = row_extreme_tree<true>(s[mt], hf);
#pragma unroll
  for (int o = 1; o <= 2; o *= 2)  // the quad holding each row
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) mx[mt][hf] = fmaxf(mx[mt][hf], __shfl_xor_sync(kFullMask, mx[mt][hf], o));
  bool normal = true;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float m_new = fmaxf(row_max[mt][hf], mx[mt][hf] * scale_log2);
      m_use[mt][hf] = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: a row past s
      alpha[mt][hf] = exp2f(row_max[mt][hf] - m_use[mt][hf]);
      row_max[mt][hf] = m_new;
      normal = normal && mn[mt][hf] * scale_log2 - m_use[mt][hf] >= -126.0f;
    }
  if (__all_sync(kFullMask, normal))
    exp_sum_pv<true>(s, m_use, alpha, row_sum, acc_o, v_tile, stride, scale_log2, lane);
  else
    exp_sum_pv<false>(s, m_use, alpha, row_sum, acc_o, v_tile, stride, scale_log2, lane);
}

// Grid: B·H x query tiles in attn::grouped_block's order (heaviest, the last tile, first). Per block: Q
// (kBr x d) once, then key tiles 0 .. the diagonal through a ring of F::kStages buffers. Reads its Q rows
// and K, V rows 0 .. the tile's last query; writes o rows and lse. A warp skips the tiles where its rows
// see no key (its p would all be 0: alpha 1, nothing added) and masks only the tiles its own rows cross.
template <int kD, int kWarps, int kMT>
__global__ void __launch_bounds__(Fwd<kD, kWarps, kMT>::kThreads, Fwd<kD, kWarps, kMT>::kMinBlocks)
    attention_forward_kernel(const uint16_t* __restrict__ qkv, uint16_t* __restrict__ o, float* __restrict__ lse,
                             int seq, int heads, int batch_heads, float scale_log2) {
  using F = Fwd<kD, kWarps, kMT>;
  constexpr int kStride = tile_stride(kD), kKV = kKeyTile * kStride;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sq = smem;                   // (kBr, d) bf16
  uint16_t* sk = sq + F::kBr * kStride;  // (kStages, 64, d) bf16
  uint16_t* sv = sk + F::kStages * kKV;  // (kStages, 64, d) bf16
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_qt = int(attn::ceil_div(seq, F::kBr));
  const attn::BlockTile bt = attn::grouped_block(int(blockIdx.x), batch_heads, n_qt);  // heaviest: last tile
  const int b = bt.bh / heads, head = bt.bh % heads, q0 = (n_qt - 1 - bt.rank) * F::kBr;
  const int h = heads * kD, ld = 3 * h;                          // < 2^31 (check_attention)
  const uint16_t* gq = qkv + int64_t(b) * seq * ld + head * kD;  // (s, d) of this head, row stride 3h
  const uint16_t* gk = gq + h;
  const uint16_t* gv = gq + 2 * h;
  const int n_kt = int(attn::causal_key_tiles(q0, F::kBr, seq, kKeyTile));
  load_tile_async<F::kBr, kD, F::kThreads>(sq, gq, ld, q0, seq);
  load_pair_async<kKeyTile, kD, F::kThreads>(sk, gk, ld, sv, gv, ld, 0, seq);
  cp_async_commit();
  const int warp_row0 = warp * F::kRowsPerWarp, warp_q0 = q0 + warp_row0;
  uint32_t qf[kMT][F::kKSteps][4];
  float acc_o[kMT][F::kDTiles][4] = {};
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) row_max[mt][0] = row_max[mt][1] = -INFINITY, row_sum[mt][0] = row_sum[mt][1] = 0;
  for (int j = 0, cur = 0; j < n_kt; ++j, cur = cur + 1 == F::kStages ? 0 : cur + 1) {
    const int nxt = cur + 1 == F::kStages ? 0 : cur + 1, k0 = j * kKeyTile;
    advance_pipeline(j + 1 < n_kt, [&] {
      load_pair_async<kKeyTile, kD, F::kThreads>(sk + nxt * kKV, gk, ld, sv + nxt * kKV, gv, ld, k0 + kKeyTile, seq);
    });
    if (attn::tile_has_visible(warp_q0, F::kRowsPerWarp, k0, seq)) {  // warp-uniform; always true at j = 0
      if (j == 0) {
        const FragCoord ao = attn::ldsm_a_offset(lane);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int ks = 0; ks < F::kKSteps; ++ks)
            ldsm_x4(sq + (warp_row0 + 16 * mt + ao.row) * kStride + ks * 16 + ao.col, qf[mt][ks]);
      }
      float acc_s[kMT][F::kSTiles][4] = {};
      mma_regs_nk<kMT, F::kKSteps, F::kSTiles>(acc_s, qf, sk + cur * kKV, kStride, lane);
      const uint16_t* v_tile = sv + cur * kKV;
      if (attn::tile_needs_mask(warp_q0, F::kRowsPerWarp, k0, kKeyTile, seq))
        softmax_pv<true>(acc_s, row_max, row_sum, acc_o, v_tile, kStride, warp_q0, k0, seq, scale_log2, lane);
      else
        softmax_pv<false>(acc_s, row_max, row_sum, acc_o, v_tile, kStride, warp_q0, k0, seq, scale_log2, lane);
    }
    if constexpr (F::kStages == 2) __syncthreads();  // every warp is done with buffer cur before it is refilled
  }
  finish_rows(acc_o, row_max, row_sum, warp_q0, seq, lse + (int64_t(b) * heads + head) * seq, lane);
  store_warp_rows<kMT, kD>(acc_o, sq, warp_row0, o + int64_t(b) * seq * h + head * kD, h, q0, seq, lane);
}

// ---- backward --------------------------------------------------------------------------------------

// delta[b][head][t] = Σ_c dO[r][head·d + c]·O[r][head·d + c] in fp32, c ascending from +0 (r = b·s + t).
// One thread per (row, head). Reads o, dout (T, h) once; writes (B, H, s) fp32.
template <int kD>
__global__ void __launch_bounds__(256)
    attention_delta_kernel(const uint16_t* __restrict__ o, const uint16_t* __restrict__ dout, int64_t rows, int seq,
                           int heads, float* __restrict__ delta) {
  const int64_t h = int64_t(heads) * kD;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * heads;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / heads;
    const int head = int(i - r * heads);
    const uint16_t* po = o + r * h + head * kD;
    const uint16_t* pd = dout + r * h + head * kD;
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < kD; c += 8) {
      const uint4 a = *reinterpret_cast<const uint4*>(po + c), g = *reinterpret_cast<const uint4*>(pd + c);
      const uint32_t wa[4] = {a.x, a.y, a.z, a.w}, wg[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        acc = acc + __uint_as_float(wg[k] << 16) * __uint_as_float(wa[k] << 16);
        acc = acc + __uint_as_float(wg[k] & 0xFFFF0000u) * __uint_as_float(wa[k] & 0xFFFF0000u);
      }
    }
    const int64_t b = r / seq, t = r - b * seq;
    delta[(b * heads + head) * seq + t] = acc;
  }
}

template <int kD>
struct Bwd {
  static constexpr int kKSteps = kD / 16, kDTiles = kD / 8;
  static constexpr int kQTiles = kBwdQueryTile / 8;  // n-tiles of S^T over a query tile (dK/dV)
  static constexpr int kSTiles = kKeyTile / 8;       // n-tiles of S over a key tile (dQ)
  // dK/dV: K, V [64], Q, dO [2][64] rows of tile_stride(kD) bf16, then lse and D [2][64] fp32
  static constexpr size_t kDkdvSmemBytes =
      size_t(2 * kKeyTile + 4 * kBwdQueryTile) * tile_stride(kD) * 2 + 2 * 2 * kBwdQueryTile * 4;
  // blocks an SM is to hold (the register cap): 3 for d = 64 (168 registers), 2 above
  static constexpr int kDkdvMinBlocks = kD == 64 ? 3 : 2;
  // dQ: Q, dO [64], K, V [2][64] rows
  static constexpr size_t kDqSmemBytes = size_t(2 * kBwdQueryTile + 4 * kKeyTile) * tile_stride(kD) * 2;
};

// sl[i] = lse[q0 + i] and sd[i] = delta[q0 + i] for a query tile (0 past s) by cp.async, in the group of
// the tile's Q and dO: threads 0 .. 63 copy lse, 64 .. 127 D (a plain load would stall its warp for the
// round trip at the start of every iteration).
__device__ __forceinline__ void load_row_stats_async(float* sl, float* sd, const float* lse_bh, const float* delta_bh,
                                                     int q0, int seq) {
  static_assert(2 * kBwdQueryTile == kBwdThreads, "one 4-byte copy a thread");
  const int t = int(threadIdx.x), i = t % kBwdQueryTile;
  const bool valid = q0 + i < seq;
  if (t < kBwdQueryTile)
    cp_async4(sl + i, valid ? lse_bh + q0 + i : lse_bh, valid);
  else
    cp_async4(sd + i, valid ? delta_bh + q0 + i : delta_bh, valid);
}

// The part of a dK/dV tile after its two products (see dkdv_tile): Pᵀ from the scores in st (exp2_normal
// when kNormal, else exp2f; masked: 0), dV += Pᵀ·dO, dSᵀ = Pᵀ ∘ (dPᵀ - D) in dpt, dK += dSᵀ·Q.
template <bool kNormal, int kD>
__device__ __forceinline__ void dkdv_tile_rest(float (&st)[1][kBwdQueryTile / 8][4],
                                               float (&dpt)[1][kBwdQueryTile / 8][4], float (&acc_dk)[1][kD / 8][4],
                                               float (&acc_dv)[1][kD / 8][4], const uint16_t* sq, const uint16_t* sdo,
                                               const float* sl, const float* sd, int key0, int q0, bool mask, int seq,
                                               float scale_log2, int lane) {
  using B = Bwd<kD>;
  constexpr int kStride = tile_stride(kD);
#pragma unroll
  for (int nt = 0; nt < B::kQTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const FragCoord c = attn::mma_c_coord(lane, i);  // row: key in the warp's 16, col: query in the n-tile
      const int ql = 8 * nt + c.col;
      const float x = st[0][nt][i] * scale_log2 - sl[ql] * kLog2e;
      const float p = kNormal ? exp2_normal(x) : exp2f(x);
      st[0][nt][i] = mask && !attn::element_visible(q0 + ql, key0 + c.row, seq) ? 0.0f : p;
    }
  mma_c_kn<1, kBwdQueryTile, B::kDTiles>(acc_dv, st, sdo, kStride, lane);
#pragma unroll
  for (int nt = 0; nt < B::kQTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      dpt[0][nt][i] = st[0][nt][i] * (dpt[0][nt][i] - sd[8 * nt + attn::mma_c_coord(lane, i).col]);
  mma_c_kn<1, kBwdQueryTile, B::kDTiles>(acc_dk, dpt, sq, kStride, lane);
}

// One query tile of the dK/dV block (warp: keys key0 .. key0 + 15; tile: queries q0 ..):
//   Sᵀ = K·Qᵀ, Pᵀ = 2^(Sᵀ·scale_log2 - lse·log2 e) (masked: 0), dPᵀ = V·dOᵀ, dV += Pᵀ·dO,
//   dSᵀ = Pᵀ ∘ (dPᵀ - D), dK += dSᵀ·Q.
// The exponentials are exp2f's, as one MUFU each when every argument of the warp's tile is >= -126:
// fl(fl(min s·c) - fl(max lse·log2 e)) bounds each fl(fl(s·c) - fl(lse·log2 e)) from below (fl is monotone).
template <int kD>
__device__ __forceinline__ void dkdv_tile(float (&acc_dk)[1][kD / 8][4], float (&acc_dv)[1][kD / 8][4],
                                          const uint16_t* sk, const uint16_t* sv, const uint16_t* sq,
                                          const uint16_t* sdo, const float* sl, const float* sd, int warp, int key0,
                                          int q0, bool mask, int seq, float scale_log2, int lane) {
  using B = Bwd<kD>;
  constexpr int kStride = tile_stride(kD);
  float st[1][B::kQTiles][4] = {}, dpt[1][B::kQTiles][4] = {};
  mma_smem_nk<B::kKSteps, B::kQTiles>(st, sk, warp * 16, sq, kStride, lane);
  mma_smem_nk<B::kKSteps, B::kQTiles>(dpt, sv, warp * 16, sdo, kStride, lane);
  const float s_min = fminf(row_extreme_tree<false>(st[0], 0), row_extreme_tree<false>(st[0], 1));
  float lse_max = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < B::kQTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) lse_max = fmaxf(lse_max, sl[8 * nt + attn::mma_c_coord(lane, e).col]);
  if (__all_sync(kFullMask, s_min * scale_log2 - lse_max * kLog2e >= -126.0f))
    dkdv_tile_rest<true, kD>(st, dpt, acc_dk, acc_dv, sq, sdo, sl, sd, key0, q0, mask, seq, scale_log2, lane);
  else
    dkdv_tile_rest<false, kD>(st, dpt, acc_dk, acc_dv, sq, sdo, sl, sd, key0, q0, mask, seq, scale_log2, lane);
}

// Grid: B·H x key tiles in attn::grouped_block's order (key tile 0, the most query tiles, first). Per
// block: K, V (64 x d) once, then query tiles from the diagonal to the end, double-buffered with their
// lse and D. Writes the dk, dv columns of dqkv for its keys.
template <int kD>
__global__ void __launch_bounds__(kBwdThreads, Bwd<kD>::kDkdvMinBlocks)
    attention_dkdv_kernel(const uint16_t* __restrict__ qkv, const uint16_t* __restrict__ dout,
                          const float* __restrict__ lse, const float* __restrict__ delta, uint16_t* __restrict__ dqkv,
                          int seq, int heads, int batch_heads, float scale_log2, float scale) {
  constexpr int kStride = tile_stride(kD), kQ = kBwdQueryTile * kStride;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sk = smem;                                 // (64, d) bf16
  uint16_t* sv = sk + kKeyTile * kStride;              // (64, d) bf16
  uint16_t* sq = sv + kKeyTile * kStride;              // (2, 64, d) bf16
  uint16_t* sdo = sq + 2 * kQ;                         // (2, 64, d) bf16
  float* sl = reinterpret_cast<float*>(sdo + 2 * kQ);  // (2, 64) fp32: lse
  float* sd = sl + 2 * kBwdQueryTile;                  // (2, 64) fp32: D
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const attn::BlockTile bt = attn::grouped_block(int(blockIdx.x), batch_heads, int(attn::ceil_div(seq, kKeyTile)));
  const int b = bt.bh / heads, head = bt.bh % heads, k0 = bt.rank * kKeyTile;  // heaviest: tile 0
  const int h = heads * kD, ld = 3 * h;                                        // < 2^31 (check_attention)
  const uint16_t* gq = qkv + int64_t(b) * seq * ld + head * kD;
  const uint16_t* gdo = dout + int64_t(b) * seq * h + head * kD;  // (s, d), row stride h
  const float* lse_bh = lse + (int64_t(b) * heads + head) * seq;
  const float* delta_bh = delta + (int64_t(b) * heads + head) * seq;
  const int i0 = int(attn::causal_first_query_tile(k0, kBwdQueryTile));
  const int n_qt = int(attn::ceil_div(seq, kBwdQueryTile));
  load_pair_async<kKeyTile, kD, kBwdThreads>(sk, gq + h, ld, sv, gq + 2 * h, ld, k0, seq);
  load_pair_async<kBwdQueryTile, kD, kBwdThreads>(sq, gq, ld, sdo, gdo, h, i0 * kBwdQueryTile, seq);
  load_row_stats_async(sl, sd, lse_bh, delta_bh, i0 * kBwdQueryTile, seq);
  cp_async_commit();
  float acc_dk[1][kD / 8][4] = {}, acc_dv[1][kD / 8][4] = {};
  for (int i = i0; i < n_qt; ++i) {
    const int cur = (i - i0) & 1, nxt = cur ^ 1;
    advance_pipeline(i + 1 < n_qt, [&] {
      const int next0 = (i + 1) * kBwdQueryTile;
      load_pair_async<kBwdQueryTile, kD, kBwdThreads>(sq + nxt * kQ, gq, ld, sdo + nxt * kQ, gdo, h, next0, seq);
      load_row_stats_async(sl + nxt * kBwdQueryTile, sd + nxt * kBwdQueryTile, lse_bh, delta_bh, next0, seq);
    });
    const int q0 = i * kBwdQueryTile;
    const bool mask = attn::tile_needs_mask(q0, kBwdQueryTile, k0, kKeyTile, seq);
    dkdv_tile<kD>(acc_dk, acc_dv, sk, sv, sq + cur * kQ, sdo + cur * kQ, sl + cur * kBwdQueryTile,
                  sd + cur * kBwdQueryTile, warp, k0 + warp * 16, q0, mask, seq, scale_log2, lane);
    __syncthreads();
  }
#pragma unroll
  for (int dt = 0; dt < kD / 8; ++dt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc_dk[0][dt][i] = acc_dk[0][dt][i] * scale;
  uint16_t* g = dqkv + int64_t(b) * seq * ld + head * kD;
  store_warp_rows<1, kD>(acc_dk, sk, warp * 16, g + h, ld, k0, seq, lane);  // K, V rows are warp-private now
  store_warp_rows<1, kD>(acc_dv, sv, warp * 16, g + 2 * h, ld, k0, seq, lane);
}

// The part of a dQ tile after its two products: dS = P ∘ (dP - D) in dp with P = 2^(s·scale_log2 - lse2)
// (exp2_normal when kNormal, else exp2f; masked: 0), then dQ += dS·K. Rows: the warp's queries from
// q_row0 (this thread's two: lse2, dd); columns: keys from k0 (k_tile).
template <bool kNormal, int kD>
__device__ __forceinline__ void dq_tile_rest(float (&s)[1][kKeyTile / 8][4], float (&dp)[1][kKeyTile / 8][4],
                                             float (&acc_dq)[1][kD / 8][4], const uint16_t* k_tile,
                                             const float (&lse2)[2], const float (&dd)[2], int q_row0, int k0,
                                             bool mask, int seq, float scale_log2, int lane) {
#pragma unroll
  for (int nt = 0; nt < kKeyTile / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const FragCoord c = attn::mma_c_coord(lane, i);
      const float x = s[0][nt][i] * scale_log2 - lse2[i >> 1];
      const float p = kNormal ? exp2_normal(x) : exp2f(x);
      const bool visible = !mask || attn::element_visible(q_row0 + c.row, k0 + 8 * nt + c.col, seq);
      dp[0][nt][i] = visible ? p * (dp[0][nt][i] - dd[i >> 1]) : 0.0f;
    }
  mma_c_kn<1, kKeyTile, kD / 8>(acc_dq, dp, k_tile, tile_stride(kD), lane);
}

// Grid: B·H x query tiles in attn::grouped_block's order (the heaviest, last, first). Per block: Q, dO
// (64 x d) once, then key tiles 0 .. the diagonal, double-buffered: S = Q·Kᵀ, dP = dO·Vᵀ, dS = P ∘ (dP -
// D), dQ += dS·K. Writes the dq columns of dqkv for its queries.
template <int kD>
__global__ void __launch_bounds__(kBwdThreads)
    attention_dq_kernel(const uint16_t* __restrict__ qkv, const uint16_t* __restrict__ dout,
                        const float* __restrict__ lse, const float* __restrict__ delta, uint16_t* __restrict__ dqkv,
                        int seq, int heads, int batch_heads, float scale_log2, float scale) {
  using B = Bwd<kD>;
  constexpr int kStride = tile_stride(kD), kKV = kKeyTile * kStride;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sq = smem;                           // (64, d) bf16
  uint16_t* sdo = sq + kBwdQueryTile * kStride;  // (64, d) bf16
  uint16_t* sk = sdo + kBwdQueryTile * kStride;  // (2, 64, d) bf16
  uint16_t* sv = sk + 2 * kKV;                   // (2, 64, d) bf16
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_qt = int(attn::ceil_div(seq, kBwdQueryTile));
  const attn::BlockTile bt = attn::grouped_block(int(blockIdx.x), batch_heads, n_qt);  // heaviest: last tile
  const int b = bt.bh / heads, head = bt.bh % heads, q0 = (n_qt - 1 - bt.rank) * kBwdQueryTile;
  const int h = heads * kD, ld = 3 * h;  // < 2^31 (check_attention)
  const uint16_t* gq = qkv + int64_t(b) * seq * ld + head * kD;
  const uint16_t* gk = gq + h;
  const uint16_t* gv = gq + 2 * h;
  const int n_kt = int(attn::causal_key_tiles(q0, kBwdQueryTile, seq, kKeyTile));
  load_pair_async<kBwdQueryTile, kD, kBwdThreads>(sq, gq, ld, sdo, dout + int64_t(b) * seq * h + head * kD, h, q0, seq);
  load_pair_async<kKeyTile, kD, kBwdThreads>(sk, gk, ld, sv, gv, ld, 0, seq);
  cp_async_commit();
  float lse2[2], dd[2];  // this thread's two rows (C rows g and g + 8)
  for (int hf = 0; hf < 2; ++hf) {
    const int q = q0 + warp * 16 + attn::mma_c_coord(lane, 2 * hf).row;
    const int64_t at = (int64_t(b) * heads + head) * seq + q;
    lse2[hf] = q < seq ? lse[at] * kLog2e : 0.0f;
    dd[hf] = q < seq ? delta[at] : 0.0f;
  }
  float acc_dq[1][kD / 8][4] = {};
  for (int j = 0; j < n_kt; ++j) {
    const int cur = j & 1;
    advance_pipeline(j + 1 < n_kt, [&] {
      load_pair_async<kKeyTile, kD, kBwdThreads>(sk + (cur ^ 1) * kKV, gk, ld, sv + (cur ^ 1) * kKV, gv, ld,
                                                 (j + 1) * kKeyTile, seq);
    });
    float s[1][B::kSTiles][4] = {}, dp[1][B::kSTiles][4] = {};
    mma_smem_nk<B::kKSteps, B::kSTiles>(s, sq, warp * 16, sk + cur * kKV, kStride, lane);
    mma_smem_nk<B::kKSteps, B::kSTiles>(dp, sdo, warp * 16, sv + cur * kKV, kStride, lane);
    const bool mask = attn::tile_needs_mask(q0, kBwdQueryTile, int64_t(j) * kKeyTile, kKeyTile, seq);
    const bool normal = row_extreme_tree<false>(s[0], 0) * scale_log2 - lse2[0] >= -126.0f &&
                        row_extreme_tree<false>(s[0], 1) * scale_log2 - lse2[1] >= -126.0f;
    if (__all_sync(kFullMask, normal))
      dq_tile_rest<true, kD>(s, dp, acc_dq, sk + cur * kKV, lse2, dd, q0 + warp * 16, j * kKeyTile, mask, seq,
                             scale_log2, lane);
    else
      dq_tile_rest<false, kD>(s, dp, acc_dq, sk + cur * kKV, lse2, dd, q0 + warp * 16, j * kKeyTile, mask, seq,
                              scale_log2, lane);
    __syncthreads();
  }
#pragma unroll
  for (int dt = 0; dt < kD / 8; ++dt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc_dq[0][dt][i] = acc_dq[0][dt][i] * scale;
  store_warp_rows<1, kD>(acc_dq, sq, warp * 16, dqkv + int64_t(b) * seq * ld + head * kD, ld, q0, seq, lane);
}

// out[i] = attn::pack_bf16x2_operand(src[2i], src[2i + 1]): the operand rounding on its own, for its test.
__global__ void __launch_bounds__(256)
    operand_pack_kernel(const float* __restrict__ src, int64_t n, uint32_t* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = attn::pack_bf16x2_operand(src[2 * i], src[2 * i + 1]);
}

// ---- launches ---------------------------------------------------------------------------------------

void check_attention(const AttentionDims& d, const char* fn) {
  auto fail = [&](const std::string& what) { throw core::InputError(std::string(fn) + ": " + what); };
  if (d.batch < 1 || d.seq < 1 || d.heads < 1)
    fail("batch, seq and heads must be >= 1, got " + std::to_string(d.batch) + ", " + std::to_string(d.seq) + ", " +
         std::to_string(d.heads));
  if (d.head_dim != 64 && d.head_dim != 80 && d.head_dim != 128)
    fail("head_dim must be 64, 80 or 128, got " + std::to_string(d.head_dim));
  if (attn::ceil_div(d.seq, kKeyTile) > 65535) fail("seq = " + std::to_string(d.seq) + " exceeds 65535 tiles of 64");
  if (3 * d.hidden() > INT32_MAX)
    fail("3 x heads x head_dim = " + std::to_string(3 * d.hidden()) + " must stay below 2^31 (qkv's row stride)");
  if (d.batch * d.heads > INT32_MAX || d.rows() > INT32_MAX)
    fail("batch x heads and batch x seq must stay below 2^31, got " + std::to_string(d.batch) + " x " +
         std::to_string(d.heads) + " x " + std::to_string(d.seq));
  const int64_t blocks = d.batch * d.heads * attn::ceil_div(d.seq, kKeyTile);  // one per (sample, head, tile)
  if (blocks > INT32_MAX)
    fail("batch x heads x ceil(seq / 64) = " + std::to_string(blocks) + " exceeds 2^31 - 1 blocks; split the call");
}
void check_pointer(const void* p, const char* fn, const char* name) {
  if (!p) throw core::InputError(std::string(fn) + ": " + name + " is null; pass a device buffer");
  if (reinterpret_cast<uintptr_t>(p) & 15u)
    throw core::InputError(std::string(fn) + ": " + name + " must be 16-byte aligned (a cudaMalloc'd buffer is)");
}

// The one fp32 constant of the scaled scores: d^-½·log2 e, from double, rounded once.
float scale_log2_of(int64_t head_dim) { return float(1.0 / std::sqrt(double(head_dim)) * 1.4426950408889634); }
float scale_of(int64_t head_dim) { return float(1.0 / std::sqrt(double(head_dim))); }

#if defined(TF_HAVE_WGMMA_ATTENTION)
// The current device and its compute capability (major·10 + minor), asked of CUDA once per device: the decoder
// asks for every layer and micro-batch.
struct DeviceCc {
  int dev = 0, cc = 0;
};
DeviceCc current_cc() {
  constexpr int kDevices = 64;
  static std::array<std::atomic<int>, kDevices> known{};  // 0: not asked yet
  DeviceCc d;
  TF_CUDA_CHECK(cudaGetDevice(&d.dev));
  const bool cached = d.dev >= 0 && d.dev < kDevices;
  if (cached && (d.cc = known[size_t(d.dev)].load(std::memory_order_relaxed)) != 0) return d;
  int major = 0, minor = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d.dev));
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d.dev));
  d.cc = 10 * major + minor;
  if (cached) known[size_t(d.dev)].store(d.cc, std::memory_order_relaxed);
  return d;
}
#endif

// ForwardTiles::kWgmma's and BackwardKernel::kWgmma's conditions (decoder_kernels.cuh): d = 64, a build with their
// sm_90a code (the TF_HAVE_WGMMA_ATTENTION definition, backends/cuda/CMakeLists.txt) and a compute-capability-9.0
// current device. option: the enum's name ("ForwardTiles", "BackwardKernel"), for the message.
void check_wgmma(const AttentionDims& d, const char* fn, const char* option = "ForwardTiles") {
  const auto fail = [&](const std::string& what) {
    throw core::InputError(std::string(fn) + ": " + option + "::kWgmma " + what + "; use " + option + "::kDefault");
  };
  if (d.head_dim != 64) fail("takes head_dim 64 only, got " + std::to_string(d.head_dim));
#if defined(TF_HAVE_WGMMA_ATTENTION)
  if (const DeviceCc c = current_cc(); c.cc != 90)
    fail("needs a compute capability 9.0 GPU (H100, H200: its code is sm_90a), device " + std::to_string(c.dev) +
         " is " + std::to_string(c.cc / 10) + "." + std::to_string(c.cc % 10));
#else
  fail("is not in this build (CMAKE_CUDA_ARCHITECTURES without 90, so no sm_90a code)");
#endif
}

// Whether kDefault runs the wgmma kernels (forward and dK/dV): where check_wgmma would pass.
bool default_is_wgmma(const AttentionDims& d) {
#if defined(TF_HAVE_WGMMA_ATTENTION)
  return d.head_dim == 64 && current_cc().cc == 90;
#else
  (void)d;
  return false;
#endif
}

template <int kD, int kWarps, int kMT>
void launch_forward(const uint16_t* qkv, const AttentionDims& d, uint16_t* o, float* lse, cudaStream_t stream) {
  using F = Fwd<kD, kWarps, kMT>;
  const auto kernel = attention_forward_kernel<kD, kWarps, kMT>;
  TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(F::kSmemBytes)));
  const unsigned grid = unsigned(d.batch * d.heads * attn::ceil_div(d.seq, F::kBr));  // attn::grouped_block
  kernel<<<grid, F::kThreads, F::kSmemBytes, stream>>>(qkv, o, lse, int(d.seq), int(d.heads), int(d.batch * d.heads),
                                                       scale_log2_of(kD));
  TF_CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

// wgmma_dkdv: the dK/dV pass by attention_dkdv_wgmma64 (BackwardKernel::kWgmma, checked by the caller; d = 64).
template <int kD>
void launch_backward(const uint16_t* qkv, const uint16_t* o, const uint16_t* dout, const float* lse,
                     const AttentionDims& d, float* delta, uint16_t* dqkv, cudaStream_t stream, bool wgmma_dkdv) {
  using B = Bwd<kD>;
  const int64_t pairs = d.rows() * d.heads;
  attention_delta_kernel<kD><<<unsigned(std::min<int64_t>((pairs + 255) / 256, 65536)), 256, 0, stream>>>(
      o, dout, d.rows(), int(d.seq), int(d.heads), delta);
  TF_CUDA_CHECK_LAUNCH("attention_delta_kernel");
  const int bh = int(d.batch * d.heads);
  if (wgmma_dkdv) {
#if defined(TF_HAVE_WGMMA_ATTENTION)
    attention_dkdv_wgmma64(qkv, dout, lse, delta, d, dqkv, stream, scale_log2_of(kD), scale_of(kD));
#endif
  } else {
    TF_CUDA_CHECK(cudaFuncSetAttribute(attention_dkdv_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(B::kDkdvSmemBytes)));
    const unsigned grid_kv = unsigned(bh * attn::ceil_div(d.seq, kKeyTile));  // attn::grouped_block
    attention_dkdv_kernel<kD><<<grid_kv, kBwdThreads, B::kDkdvSmemBytes, stream>>>(
        qkv, dout, lse, delta, dqkv, int(d.seq), int(d.heads), bh, scale_log2_of(kD), scale_of(kD));
    TF_CUDA_CHECK_LAUNCH("attention_dkdv_kernel");
  }
  TF_CUDA_CHECK(
      cudaFuncSetAttribute(attention_dq_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(B::kDqSmemBytes)));
  const unsigned grid_q = unsigned(bh * attn::ceil_div(d.seq, kBwdQueryTile));
  attention_dq_kernel<kD><<<grid_q, kBwdThreads, B::kDqSmemBytes, stream>>>(
      qkv, dout, lse, delta, dqkv, int(d.seq), int(d.heads), bh, scale_log2_of(kD), scale_of(kD));
  TF_CUDA_CHECK_LAUNCH("attention_dq_kernel");
}

}  // namespace

void attention_forward(const uint16_t* qkv, const AttentionDims& d, uint16_t* o, float* lse, cudaStream_t stream,
                       ForwardTiles tiles) {
  constexpr const char* fn = "attention_forward";
  check_attention(d, fn);
  check_pointer(qkv, fn, "qkv"), check_pointer(o, fn, "o"), check_pointer(lse, fn, "lse");
  if (tiles == ForwardTiles::kDefault && default_is_wgmma(d)) tiles = ForwardTiles::kWgmma;
  if (tiles == ForwardTiles::kWgmma) {
    check_wgmma(d, fn);
#if defined(TF_HAVE_WGMMA_ATTENTION)
    attention_forward_wgmma64(qkv, d, o, lse, stream, scale_log2_of(64));
#endif
    return;
  }
  switch (d.head_dim) {
    case 64:
      if (tiles == ForwardTiles::kWarps8x16)
        launch_forward<64, 8, 1>(qkv, d, o, lse, stream);
      else
        launch_forward<64, 4, 2>(qkv, d, o, lse, stream);
      break;
    case 80: launch_forward<80, 4, 1>(qkv, d, o, lse, stream); break;
    default: launch_forward<128, 4, 1>(qkv, d, o, lse, stream); break;
  }
}

void attention_backward(const uint16_t* qkv, const uint16_t* o, const uint16_t* dout, const float* lse,
                        const AttentionDims& d, float* delta, uint16_t* dqkv, cudaStream_t stream,
                        BackwardKernel kernel) {
  constexpr const char* fn = "attention_backward";
  check_attention(d, fn);
  check_pointer(qkv, fn, "qkv"), check_pointer(o, fn, "o"), check_pointer(dout, fn, "dout");
  check_pointer(lse, fn, "lse"), check_pointer(delta, fn, "delta"), check_pointer(dqkv, fn, "dqkv");
  const bool wgmma_dkdv =
      kernel == BackwardKernel::kWgmma || (kernel == BackwardKernel::kDefault && default_is_wgmma(d));
  if (wgmma_dkdv) check_wgmma(d, fn, "BackwardKernel");
  switch (d.head_dim) {
    case 64: launch_backward<64>(qkv, o, dout, lse, d, delta, dqkv, stream, wgmma_dkdv); break;
    case 80: launch_backward<80>(qkv, o, dout, lse, d, delta, dqkv, stream, false); break;
    default: launch_backward<128>(qkv, o, dout, lse, d, delta, dqkv, stream, false); break;
  }
}

void attention_operand_pack(const float* src, int64_t n, uint32_t* out, cudaStream_t stream) {
  constexpr const char* fn = "attention_operand_pack";
  if (n < 1) throw core::InputError(std::string(fn) + ": n must be >= 1, got " + std::to_string(n));
  if (!src || !out) throw core::InputError(std::string(fn) + ": src and out must be device buffers, got null");
  operand_pack_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 65536)), 256, 0, stream>>>(src, n, out);
  TF_CUDA_CHECK_LAUNCH("operand_pack_kernel");
}

double attention_forward_flops(const AttentionDims& d) {
  return 0.5 * 4.0 * double(d.seq) * double(d.seq) * double(d.head_dim) * double(d.batch) * double(d.heads);
}
double attention_backward_flops(const AttentionDims& d) { return 2.5 * attention_forward_flops(d); }

}  // namespace tf::backend::cuda
