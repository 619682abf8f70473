// Causal flash attention forward for d = 64 on Hopper's warpgroup MMAs (wgmma.mma_async: sm_90a code only, this
// file is compiled for 90a alone, backends/cuda/CMakeLists.txt). ForwardTiles::kWgmma (decoder_kernels.cuh);
// attention.cu checks the arguments and calls attention_forward_wgmma64. The operand layouts, descriptors and
// the accumulator layout are those bench/device/wgmma_probe.cu verified on an H200
// (bench/results/attention-notes.md, "The wgmma building block, verified"); their helpers are in
// attention_wgmma.cuh, shared with the wgmma dK/dV (attention_wgmma_bwd.cu).
//
// A block: 128 query rows as 2 warpgroups of 64 rows (warpgroup g: rows q0 + 64g ..), 256 threads, over 64-key
// tiles 0 .. the diagonal, in attn::grouped_block's order (as the mma.sync forward). Shared memory, 128-byte
// swizzled tiles of 64 bf16 a row (16-byte chunk c of row r at chunk c ^ (r % 8)), 1024-byte aligned:
//   Q [128][64] (loaded once), K [3][64][64], V [3][64][64] (a ring of 3 stages): 64 KB + 1 KB of alignment.
// An iteration j (tile j in stage j % 3):
//   wait for this thread's copies of tile j, fence them to the async proxy, barrier;
//   start tile j + 1's copies (cp.async, 16-byte chunks) into stage (j + 1) % 3: that stage was last read by the
//     products of iteration j - 2, which every warpgroup waited for within that iteration, before this barrier;
//   per warpgroup that sees a key of the tile: S = Q·Kᵀ (4 x m64n64k16, both operands K-major from shared memory),
//     waited for; the online softmax on the accumulator in registers (each thread holds 2 rows x 16 columns; a
//     row's 4 threads are a quad), O·alpha; then O += bf16(P)·V (4 x m64n64k16, P from registers, V read
//     transposed), waited for. (Leaving P·V in flight across the next tile's S made ptxas serialize every wgmma,
//     C7515; the 4 warpgroups an SM holds keep the tensor cores fed instead.)
// The softmax steps, exponentials, sums and the epilogue (o / l, lse, core's bf16 rounding of o) are the
// mma.sync forward's (attention_device.cuh): the wgmma accumulator of a warp has the m16n8 C layout over its 16
// rows and 8 n-tiles. Only the products' accumulation order inside the tensor core differs (so do the bits).
// Deterministic: fixed order everywhere, no atomics, every output written once by one thread.
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

using attn::kKeyTile;

constexpr int kD = 64;
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kBr = 64 * kWarpgroups;  // query rows a block
constexpr int kStages = 3;             // K/V ring
using wg::kRowBytes;                   // 128: one swizzle row
using wg::kTileBytes;                  // a 64 x 64 bf16 tile (a warpgroup's Q, one K or V stage)
constexpr int kSmemBytes = 1024 + kBr * kRowBytes + 2 * kStages * kTileBytes;  // + the alignment slack
static_assert(kBr == attn::fwd_query_tile(kD), "the block's query rows are attn::fwd_query_tile(d)");
static_assert(kKeyTile == 64 && kRowBytes == 128, "a K/V tile is 64 rows of one 128-byte swizzle row");
static_assert(kBr * attn::tile_stride(kD) * 2 <= kBr * kRowBytes + kStages * kTileBytes,
              "the epilogue stages o in Q and the K ring");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

using wg::Acc;
using wg::descriptor;
using wg::fence_proxy_async;
using wg::load_tile_swizzled;
using wg::pv;
using wg::scores;

// p = 2^(fl(s·scale_log2) - m_use) in place (exp2_normal when kNormal, else exp2f), l = l·alpha + the tile's
// sum, o·alpha: attention.cu's exp_sum_pv before its product.
template <bool kNormal>
__device__ __forceinline__ void exp_sum_rescale(Acc& s, const float (&m_use)[2], const float (&alpha)[2],
                                                float (&row_sum)[2], Acc& o, float scale_log2) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float x = s[0][nt][i] * scale_log2 - m_use[i >> 1];
      s[0][nt][i] = kNormal ? attn::exp2_normal(x) : exp2f(x);
    }
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) row_sum[hf] = row_sum[hf] * alpha[hf] + attn::row_sum_tree(s[0], hf);
#pragma unroll
  for (int dt = 0; dt < 8; ++dt)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[0][dt][i] = o[0][dt][i] * alpha[i >> 1];
}

// The online softmax of one key tile for this warp's 16 rows (from warp_q0; keys from k0), attention.cu's
// softmax_pv before its product: the row minimum (before the mask) and maximum as trees, the maximum over the
// quad, m, alpha and the exponential path (one MUFU when every argument of the warp's rows is >= -126), then
// exp_sum_rescale. kMask: invisible pairs become -inf first (p = 0).
template <bool kMask>
__device__ __forceinline__ void online_softmax(Acc& s, float (&row_max)[2], float (&row_sum)[2], Acc& o, int warp_q0,
                                               int k0, int seq, float scale_log2, int lane) {
  float mx[2], mn[2], m_use[2], alpha[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) mn[hf] = attn::row_extreme_tree<false>(s[0], hf);
  if constexpr (kMask) attn::mask_scores(s, warp_q0, k0, seq, lane);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) mx[hf] = attn::row_extreme_tree<true>(s[0], hf);
#pragma unroll
  for (int x = 1; x <= 2; x *= 2)  // the quad holding each row
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(attn::kFullMask, mx[hf], x));
  bool normal = true;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float m_new = fmaxf(row_max[hf], mx[hf] * scale_log2);
    m_use[hf] = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: a row past s
    alpha[hf] = exp2f(row_max[hf] - m_use[hf]);
    row_max[hf] = m_new;
    normal = normal && mn[hf] * scale_log2 - m_use[hf] >= -126.0f;
  }
  if (__all_sync(attn::kFullMask, normal))
    exp_sum_rescale<true>(s, m_use, alpha, row_sum, o, scale_log2);
  else
    exp_sum_rescale<false>(s, m_use, alpha, row_sum, o, scale_log2);
}

// The block's work (the kernel's body on sm_90a). Reads its Q rows and K, V rows 0 .. the block's last query;
// writes its o rows and lse. A warpgroup skips the tiles where its rows see no key; a warp masks only the tiles
// its own 16 rows cross (attn::tile_needs_mask), as the mma.sync forward's warps do.
__device__ __forceinline__ void forward_block(const uint16_t* __restrict__ qkv, uint16_t* __restrict__ o,
                                              float* __restrict__ lse, int seq, int heads, int batch_heads,
                                              float scale_log2) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = attn::smem_addr(smem_raw), base = (raw + 1023u) & ~1023u;  // swizzle atoms: 1024-aligned
  const uint32_t sq = base, sk = sq + kBr * kRowBytes, sv = sk + kStages * kTileBytes;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, wg = warp / 4;
  const int n_qt = int(attn::ceil_div(seq, kBr));
  const attn::BlockTile bt = attn::grouped_block(int(blockIdx.x), batch_heads, n_qt);  // heaviest: last tile
  const int b = bt.bh / heads, head = bt.bh % heads, q0 = (n_qt - 1 - bt.rank) * kBr;
  const int h = heads * kD, ld = 3 * h;                          // < 2^31 (check_attention)
  const uint16_t* gq = qkv + int64_t(b) * seq * ld + head * kD;  // (s, d) of this head, row stride 3h
  const uint16_t* gk = gq + h;
  const uint16_t* gv = gq + 2 * h;
  const int n_kt = int(attn::causal_key_tiles(q0, kBr, seq, kKeyTile));
  load_tile_swizzled<kBr, kThreads>(sq, gq, ld, q0, seq);
  load_tile_swizzled<kKeyTile, kThreads>(sk, gk, ld, 0, seq);
  load_tile_swizzled<kKeyTile, kThreads>(sv, gv, ld, 0, seq);
  attn::cp_async_commit();
  const int wg_q0 = q0 + 64 * wg, warp_q0 = q0 + 16 * warp;  // warp w holds rows 16(w % 4) .. of its warpgroup
  const uint64_t dq = descriptor(sq + uint32_t(wg * kTileBytes), 16, 1024);
  const uint64_t dk0 = descriptor(sk, 16, 1024), dv0 = descriptor(sv, 8192, 1024);
  Acc acc_o = {};
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {};  // finish_rows takes [kMT][2]
  for (int j = 0, cur = 0; j < n_kt; ++j, cur = cur + 1 == kStages ? 0 : cur + 1) {
    const int nxt = cur + 1 == kStages ? 0 : cur + 1, k0 = j * kKeyTile;
    attn::cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (j + 1 < n_kt) {
      load_tile_swizzled<kKeyTile, kThreads>(sk + uint32_t(nxt * kTileBytes), gk, ld, k0 + kKeyTile, seq);
      load_tile_swizzled<kKeyTile, kThreads>(sv + uint32_t(nxt * kTileBytes), gv, ld, k0 + kKeyTile, seq);
      attn::cp_async_commit();
    }
    if (attn::tile_has_visible(wg_q0, 64, k0, seq)) {  // warpgroup-uniform; always true at j = 0 for rows < s
      Acc s;
      scores(s, dq, dk0 + uint64_t(cur * (kTileBytes >> 4)));
      if (attn::tile_needs_mask(warp_q0, 16, k0, kKeyTile, seq))  // warp-uniform
        online_softmax<true>(s, row_max[0], row_sum[0], acc_o, warp_q0, k0, seq, scale_log2, lane);
      else
        online_softmax<false>(s, row_max[0], row_sum[0], acc_o, warp_q0, k0, seq, scale_log2, lane);
      pv(acc_o, s, dv0 + uint64_t(cur * (kTileBytes >> 4)));
    }
  }
  __syncthreads();  // every warpgroup's products are done: Q and the K ring become the output's staging
  attn::finish_rows<1, 8>(acc_o, row_max, row_sum, warp_q0, seq, lse + (int64_t(b) * heads + head) * seq, lane);
  uint16_t* stage = reinterpret_cast<uint16_t*>(smem_raw + (base - raw));
  attn::store_warp_rows<1, kD>(acc_o, stage, 16 * warp, o + int64_t(b) * seq * h + head * kD, h, q0, seq, lane);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Grid: B·H x ceil(s / 128) blocks (attn::grouped_block), 256 threads, kSmemBytes of dynamic shared memory. An
// empty body in every compilation pass but sm_90a's (the host's; the file is built for 90a only).
__global__ void __launch_bounds__(kThreads, 2)
    attention_forward_wgmma_kernel(const uint16_t* __restrict__ qkv, uint16_t* __restrict__ o,
                                   float* __restrict__ lse, int seq, int heads, int batch_heads, float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  forward_block(qkv, o, lse, seq, heads, batch_heads, scale_log2);
#else
  (void)qkv, (void)o, (void)lse, (void)seq, (void)heads, (void)batch_heads, (void)scale_log2;
#endif
}

}  // namespace

void attention_forward_wgmma64(const uint16_t* qkv, const AttentionDims& d, uint16_t* o, float* lse,
                               cudaStream_t stream, float scale_log2) {
  TF_CUDA_CHECK(
      cudaFuncSetAttribute(attention_forward_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const unsigned grid = unsigned(d.batch * d.heads * attn::ceil_div(d.seq, kBr));  // attn::grouped_block
  attention_forward_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(qkv, o, lse, int(d.seq), int(d.heads),
                                                                         int(d.batch * d.heads), scale_log2);
  TF_CUDA_CHECK_LAUNCH("attention_forward_wgmma_kernel");
}

}  // namespace tf::backend::cuda
