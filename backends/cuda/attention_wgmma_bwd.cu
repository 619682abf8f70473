// The causal flash attention backward's dK/dV pass for d = 64 on Hopper's warpgroup MMAs (wgmma.mma_async: sm_90a
// code only, this file is compiled for 90a alone, backends/cuda/CMakeLists.txt). BackwardKernel::kWgmma
// (decoder_kernels.cuh); attention.cu checks the arguments, runs D = rowsum(dO∘O) and dQ with its mma.sync kernels
// and calls attention_dkdv_wgmma64 between them. Operand layouts, descriptors and fences: attention_wgmma.cuh (the
// forward's, verified on an H200).
//
// A block: one 64-key tile (keys k0 ..) as one warpgroup of 128 threads, the grid and attn::grouped_block order of
// the mma.sync dK/dV kernel (attention.cu's attention_dkdv_kernel), over the query tiles of 64 from the diagonal
// to the end. Warp w holds keys k0 + 16w .. k0 + 16w + 15 (the accumulator's rows), as warp w of the mma.sync
// kernel does, and every thread holds the same (key, query) elements as there (the wgmma accumulator of a warp
// has the m16n8 C layout over its 16 rows and 8 n-tiles). Shared memory, 128-byte swizzled tiles (1024-byte
// aligned by hand): K, V [64][64] (loaded once), Q, dO [3][64][64] (a ring of 3 stages) and their lse, D [3][2][64]
// fp32: 64 KB + 1.5 KB + 1 KB of alignment slack, 3 blocks an SM.
// An iteration j (query tile i0 + j in stage j % 3):
//   wait for this thread's copies of tile j, fence them to the async proxy, barrier;
//   start tile j + 1's copies (cp.async) into stage (j + 1) % 3, last read by iteration j - 2's products (waited
//     for within it, before this barrier);
//   Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (4 + 4 x m64n64k16, both operands K-major from shared memory, one commit group),
//     waited for; Pᵀ = 2^(Sᵀ·scale_log2 - lse·log2 e) (lse per query: per accumulator column; masked: 0) and its
//     bf16 A fragments; dSᵀ = Pᵀ ∘ (dPᵀ - D) (D per column) and its fragments;
//   dV += bf16(Pᵀ)·dO and dK += bf16(dSᵀ)·Q (4 + 4 x m64n64k16, A from registers, dO and Q read transposed, one
//     commit group), waited for.
// The end: dK·d^-½, dK and dV staged in the Q ring with core's bf16 rounding and written to dqkv's dk and dv
// columns (attn::store_warp_rows, as the mma.sync kernel). The elementwise steps are the mma.sync kernel's, element
// for element (the one-MUFU exponential where the warp's lower bound of the arguments is >= -126, exp2f
// elsewhere; attn::pack_bf16x2_operand for Pᵀ and dSᵀ): only the products' accumulation order inside the tensor
// core differs. Deterministic: fixed order everywhere, no atomics, every output written once by one thread.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/attention_device.cuh"
#include "backends/cuda/attention_tiles.cuh"
#include "backends/cuda/attention_wgmma.cuh"
#include "backends/cuda/attention_wgmma.h"
#include "backends/cuda/cuda_check.cuh"

namespace tf::backend::cuda {
namespace {

using attn::kBwdQueryTile;
using attn::kKeyTile;
using wg::kTileBytes;

constexpr int kD = 64;
constexpr int kThreads = 128;                      // one warpgroup
constexpr int kStages = 3;                         // the Q/dO ring
constexpr int kStatBytes = 2 * kBwdQueryTile * 4;  // a stage's lse and D (fp32)
constexpr int kSmemBytes = 1024 + 2 * kTileBytes + 2 * kStages * kTileBytes + kStages * kStatBytes;
constexpr int kMinBlocks = 3;  // an SM: 3 x 67 KB of shared memory; 168 registers a thread at most
static_assert(kKeyTile == 64 && kBwdQueryTile == 64, "64-key blocks over 64-query tiles: m64n64 products");
static_assert(2 * kBwdQueryTile == kThreads, "lse and D: one 4-byte copy a thread");
static_assert(2 * kKeyTile * attn::tile_stride(kD) * 2 <= kStages * kTileBytes, "the epilogue stages dK, dV in Q");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

using attn::kLog2e;
using wg::Acc;
using wg::descriptor;
using wg::fence_operand;
using wg::load_tile_swizzled;

// 4 bytes global -> shared (address `dst`) without waiting, cp.async.ca; !valid: zero-filled, nothing read.
__device__ __forceinline__ void cp_async4(uint32_t dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

// lse and D of queries q0 .. q0 + 63 (0 past s) into a stage's [2][64] fp32 (shared address `stat`) by cp.async,
// in the group of the tile's Q and dO: threads 0 .. 63 copy lse, 64 .. 127 D (attention.cu's
// load_row_stats_async).
__device__ __forceinline__ void load_stats(uint32_t stat, const float* lse_bh, const float* delta_bh, int q0, int seq) {
  const int t = int(threadIdx.x), i = t % kBwdQueryTile;
  const bool valid = q0 + i < seq;
  const float* src = t < kBwdQueryTile ? lse_bh : delta_bh;
  cp_async4(stat + uint32_t(4 * t), valid ? src + q0 + i : src, valid);
}

// Q, dO rows q0 .. q0 + 63 and their lse, D into one stage of the ring, not committed.
__device__ __forceinline__ void load_query_tile(uint32_t sq, uint32_t sdo, uint32_t stat, const uint16_t* gq, int ld,
                                                const uint16_t* gdo, int h, const float* lse_bh, const float* delta_bh,
                                                int q0, int seq) {
  load_tile_swizzled<kBwdQueryTile, kThreads>(sq, gq, ld, q0, seq);
  load_tile_swizzled<kBwdQueryTile, kThreads>(sdo, gdo, h, q0, seq);
  load_stats(stat, lse_bh, delta_bh, q0, seq);
}

// Pᵀ in place of Sᵀ: 2^(fl(s·scale_log2) - fl(lse·log2 e)) (exp2_normal when kNormal, else exp2f), 0 where the
// mask hides the pair (attention.cu's dkdv_tile_rest). Rows: keys from key0 (this warp's 16); columns: queries
// from q0, whose lse are sl[0 .. 63].
template <bool kNormal>
__device__ __forceinline__ void probs_t(Acc& st, const float* sl, int key0, int q0, bool mask, int seq,
                                        float scale_log2, int lane) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const attn::FragCoord c = attn::mma_c_coord(lane, i);  // row: key in the warp's 16, col: query in the n-tile
      const int ql = 8 * nt + c.col;
      const float x = st[0][nt][i] * scale_log2 - sl[ql] * kLog2e;
      const float p = kNormal ? attn::exp2_normal(x) : exp2f(x);
      st[0][nt][i] = mask && !attn::element_visible(q0 + ql, key0 + c.row, seq) ? 0.0f : p;
    }
}

// Whether every exponential argument of this warp's tile is >= -126 (then exp2_normal is exp2f): fl(fl(min s·c) -
// fl(max lse·log2 e)) bounds each fl(fl(s·c) - fl(lse·log2 e)) from below (attention.cu's dkdv_tile).
__device__ __forceinline__ bool warp_args_normal(const Acc& st, const float* sl, float scale_log2, int lane) {
  const float s_min = fminf(attn::row_extreme_tree<false>(st[0], 0), attn::row_extreme_tree<false>(st[0], 1));
  float lse_max = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) lse_max = fmaxf(lse_max, sl[8 * nt + attn::mma_c_coord(lane, e).col]);
  return __all_sync(attn::kFullMask, s_min * scale_log2 - lse_max * kLog2e >= -126.0f);
}

// The descriptors of one query tile's stage: Q and dO K-major (LBO 16, SBO 1024: B of Sᵀ, dPᵀ) and read
// transposed (LBO 8192, SBO 1024: B of dK, dV).
struct QueryTileDesc {
  uint64_t q, dout, q_t, dout_t;
};

// One query tile (queries q0 ..; this warp's keys key0 ..): Sᵀ and dPᵀ (one commit group), Pᵀ, its bf16 A
// fragments, dSᵀ = Pᵀ ∘ (dPᵀ - D) and its fragments, then dV += bf16(Pᵀ)·dO and dK += bf16(dSᵀ)·Q (one commit
// group), each group waited for in place. sl, sd: the tile's lse and D.
__device__ __forceinline__ void dkdv_tile(Acc& acc_dk, Acc& acc_dv, uint64_t desc_k, uint64_t desc_v,
                                          const QueryTileDesc& qd, const float* sl, const float* sd, int key0, int q0,
                                          bool mask, int seq, float scale_log2, int lane) {
  Acc st, dpt;
  wg::wgmma_fence();
  wg::issue_ss_k64(st, desc_k, qd.q);      // Sᵀ = K·Qᵀ
  wg::issue_ss_k64(dpt, desc_v, qd.dout);  // dPᵀ = V·dOᵀ
  wg::wgmma_commit();
  wg::wgmma_wait<0>();
  fence_operand(st);
  fence_operand(dpt);
  if (warp_args_normal(st, sl, scale_log2, lane))
    probs_t<true>(st, sl, key0, q0, mask, seq, scale_log2, lane);
  else
    probs_t<false>(st, sl, key0, q0, mask, seq, scale_log2, lane);
  uint32_t a_p[4][4], a_ds[4][4];  // k-step ks: columns (queries) 16ks .. 16ks + 15
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) attn::c_pair_to_a(st[0][2 * ks], st[0][2 * ks + 1], a_p[ks]);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      dpt[0][nt][i] = st[0][nt][i] * (dpt[0][nt][i] - sd[8 * nt + attn::mma_c_coord(lane, i).col]);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) attn::c_pair_to_a(dpt[0][2 * ks], dpt[0][2 * ks + 1], a_ds[ks]);
  fence_operand(a_p);
  fence_operand(a_ds);
  fence_operand(acc_dv);
  fence_operand(acc_dk);
  wg::wgmma_fence();
  wg::issue_rs_tb_k64(acc_dv, a_p, qd.dout_t);  // dV += bf16(Pᵀ)·dO
  wg::issue_rs_tb_k64(acc_dk, a_ds, qd.q_t);    // dK += bf16(dSᵀ)·Q
  wg::wgmma_commit();
  wg::wgmma_wait<0>();
  fence_operand(acc_dv);
  fence_operand(acc_dk);
}

// The block's work (the kernel's body on sm_90a). Reads its K, V rows and the Q, dO rows, lse and D of queries
// k0 .. s - 1; writes the dk and dv columns of dqkv for its keys.
__device__ __forceinline__ void dkdv_block(const uint16_t* __restrict__ qkv, const uint16_t* __restrict__ dout,
                                           const float* __restrict__ lse, const float* __restrict__ delta,
                                           uint16_t* __restrict__ dqkv, int seq, int heads, int batch_heads,
                                           float scale_log2, float scale) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = attn::smem_addr(smem_raw), base = (raw + 1023u) & ~1023u;  // swizzle atoms: 1024-aligned
  const uint32_t sk = base, sv = sk + kTileBytes, sq = sv + kTileBytes, sdo = sq + kStages * kTileBytes;
  const uint32_t sstat = sdo + kStages * kTileBytes;  // [kStages][2][64] fp32: lse, D
  const float* stat = reinterpret_cast<const float*>(smem_raw + (sstat - raw));
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const attn::BlockTile bt = attn::grouped_block(int(blockIdx.x), batch_heads, int(attn::ceil_div(seq, kKeyTile)));
  const int b = bt.bh / heads, head = bt.bh % heads, k0 = bt.rank * kKeyTile;  // heaviest: tile 0
  const int h = heads * kD, ld = 3 * h;                                        // < 2^31 (check_attention)
  const uint16_t* gq = qkv + int64_t(b) * seq * ld + head * kD;                // (s, d) of this head, stride 3h
  const uint16_t* gdo = dout + int64_t(b) * seq * h + head * kD;               // (s, d), row stride h
  const float* lse_bh = lse + (int64_t(b) * heads + head) * seq;
  const float* delta_bh = delta + (int64_t(b) * heads + head) * seq;
  const int i0 = int(attn::causal_first_query_tile(k0, kBwdQueryTile));
  const int n_qt = int(attn::ceil_div(seq, kBwdQueryTile));
  load_tile_swizzled<kKeyTile, kThreads>(sk, gq + h, ld, k0, seq);
  load_tile_swizzled<kKeyTile, kThreads>(sv, gq + 2 * h, ld, k0, seq);
  load_query_tile(sq, sdo, sstat, gq, ld, gdo, h, lse_bh, delta_bh, i0 * kBwdQueryTile, seq);
  attn::cp_async_commit();
  const uint64_t desc_k = descriptor(sk, 16, 1024), desc_v = descriptor(sv, 16, 1024);
  const QueryTileDesc qd0{descriptor(sq, 16, 1024), descriptor(sdo, 16, 1024), descriptor(sq, 8192, 1024),
                          descriptor(sdo, 8192, 1024)};
  Acc acc_dk = {}, acc_dv = {};
  for (int i = i0, cur = 0; i < n_qt; ++i, cur = cur + 1 == kStages ? 0 : cur + 1) {
    const int nxt = cur + 1 == kStages ? 0 : cur + 1, q0 = i * kBwdQueryTile;
    attn::cp_async_wait<0>();
    wg::fence_proxy_async();
    __syncthreads();
    if (i + 1 < n_qt) {
      load_query_tile(sq + uint32_t(nxt * kTileBytes), sdo + uint32_t(nxt * kTileBytes),
                      sstat + uint32_t(nxt * kStatBytes), gq, ld, gdo, h, lse_bh, delta_bh, q0 + kBwdQueryTile, seq);
      attn::cp_async_commit();
    }
    const uint64_t step = uint64_t(cur * (kTileBytes >> 4));  // the stage's start in the descriptors' address field
    const QueryTileDesc qd{qd0.q + step, qd0.dout + step, qd0.q_t + step, qd0.dout_t + step};
    const float* sl = stat + cur * 2 * kBwdQueryTile;
    const bool mask = attn::tile_needs_mask(q0, kBwdQueryTile, k0, kKeyTile, seq);
    dkdv_tile(acc_dk, acc_dv, desc_k, desc_v, qd, sl, sl + kBwdQueryTile, k0 + 16 * warp, q0, mask, seq, scale_log2,
              lane);
  }
#pragma unroll
  for (int dt = 0; dt < 8; ++dt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc_dk[0][dt][i] = acc_dk[0][dt][i] * scale;
  __syncthreads();  // every warp's products are done: the Q ring becomes the output's staging
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem_raw + (sq - raw));
  uint16_t* g = dqkv + int64_t(b) * seq * ld + head * kD;
  attn::store_warp_rows<1, kD>(acc_dk, stage, 16 * warp, g + h, ld, k0, seq, lane);
  attn::store_warp_rows<1, kD>(acc_dv, stage + kKeyTile * attn::tile_stride(kD), 16 * warp, g + 2 * h, ld, k0, seq,
                               lane);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Grid: B·H x ceil(s / 64) blocks (attn::grouped_block), 128 threads, kSmemBytes of dynamic shared memory. An empty
// body in every compilation pass but sm_90a's (the host's; the file is built for 90a only).
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    attention_dkdv_wgmma_kernel(const uint16_t* __restrict__ qkv, const uint16_t* __restrict__ dout,
                                const float* __restrict__ lse, const float* __restrict__ delta,
                                uint16_t* __restrict__ dqkv, int seq, int heads, int batch_heads, float scale_log2,
                                float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  dkdv_block(qkv, dout, lse, delta, dqkv, seq, heads, batch_heads, scale_log2, scale);
#else
  (void)qkv, (void)dout, (void)lse, (void)delta, (void)dqkv, (void)seq, (void)heads, (void)batch_heads,
      (void)scale_log2, (void)scale;
#endif
}

}  // namespace

void attention_dkdv_wgmma64(const uint16_t* qkv, const uint16_t* dout, const float* lse, const float* delta,
                            const AttentionDims& d, uint16_t* dqkv, cudaStream_t stream, float scale_log2,
                            float scale) {
  TF_CUDA_CHECK(
      cudaFuncSetAttribute(attention_dkdv_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int bh = int(d.batch * d.heads);
  const unsigned grid = unsigned(bh * attn::ceil_div(d.seq, kKeyTile));  // attn::grouped_block
  attention_dkdv_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(qkv, dout, lse, delta, dqkv, int(d.seq),
                                                                      int(d.heads), bh, scale_log2, scale);
  TF_CUDA_CHECK_LAUNCH("attention_dkdv_wgmma_kernel");
}

}  // namespace tf::backend::cuda
