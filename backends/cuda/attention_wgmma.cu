// Causal flash attention forward for d = 64 on Hopper's warpgroup MMAs (wgmma.mma_async: sm_90a code only, this
// file is compiled for 90a alone, backends/cuda/CMakeLists.txt). ForwardTiles::kWgmma (decoder_kernels.cuh);
// attention.cu checks the arguments and calls attention_forward_wgmma64. The operand layouts, descriptors and
// the accumulator layout are those bench/device/wgmma_probe.cu verified on an H200
// (bench/results/attention-notes.md, "The wgmma building block, verified").
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
#include "backends/cuda/attention_wgmma.h"
#include "backends/cuda/cuda_check.cuh"

namespace tf::backend::cuda {
namespace {

using attn::kKeyTile;

constexpr int kD = 64;
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kBr = 64 * kWarpgroups;      // query rows a block
constexpr int kStages = 3;                 // K/V ring
constexpr int kRowBytes = kD * 2;          // 128: one swizzle row
constexpr int kTileBytes = 64 * kRowBytes;  // a 64 x 64 bf16 tile (a warpgroup's Q, one K or V stage)
constexpr int kSmemBytes = 1024 + kBr * kRowBytes + 2 * kStages * kTileBytes;  // + the alignment slack
static_assert(kBr == attn::fwd_query_tile(kD), "the block's query rows are attn::fwd_query_tile(d)");
static_assert(kKeyTile == 64 && kRowBytes == 128, "a K/V tile is 64 rows of one 128-byte swizzle row");
static_assert(kBr * attn::tile_stride(kD) * 2 <= kBr * kRowBytes + kStages * kTileBytes,
              "the epilogue stages o in Q and the K ring");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

using Acc = float[1][8][4];  // an m64n64 fp32 accumulator: [0][j][i] is wgmma register 4j + i

// Byte offset of 16-byte chunk `chunk` of row `row` in a 128-byte-swizzled tile (wgmma_probe's swizzled()).
__device__ __forceinline__ uint32_t swizzled_chunk(int row, int chunk) {
  return uint32_t(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// 16 bytes global -> shared (address `dst`) without waiting, cp.async.cg; !valid: zero-filled, nothing read.
__device__ __forceinline__ void cp_async16(uint32_t dst, const uint16_t* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// Rows [row0, row0 + kRows) of one head (g: the sample's row 0 at the head's column, row stride ld) into the
// swizzled [kRows][64] tile at shared address `tile`, by the block's threads: thread t copies chunk t % 8 of
// rows t / 8 + 32i (the 8 chunks of a row go to one 128-byte row, permuted). Rows >= s are zero-filled.
template <int kRows>
__device__ __forceinline__ void load_tile_swizzled(uint32_t tile, const uint16_t* g, int ld, int row0, int s) {
  constexpr int kPass = kThreads / 8;  // rows a pass; a multiple of 8, so a thread's swizzle is the same each pass
  static_assert(kRows % kPass == 0 && kPass % 8 == 0, "whole passes");
  const int r = int(threadIdx.x) / 8, ch = int(threadIdx.x) % 8;
  const uint32_t dst = tile + swizzled_chunk(r, ch);
#pragma unroll
  for (int i = 0; i < kRows / kPass; ++i) {
    const int row = row0 + r + i * kPass;
    const bool valid = row < s;
    cp_async16(dst + uint32_t(i * kPass * kRowBytes), g + int64_t(valid ? row : 0) * ld + ch * 8, valid);
  }
}

// The writes of this thread's completed cp.async copies (generic proxy) made visible to the wgmma operand reads
// (async proxy); the barrier after it publishes them to the block.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A shared-memory matrix descriptor (wgmma_probe's descriptor(), PTX ISA "Matrix Descriptor Format"): start
// address >> 4 in bits 0-13, leading-dimension byte offset >> 4 in 16-29, stride-dimension byte offset >> 4 in
// 32-45, 128-byte swizzle (1) in 62-63. Shared addresses are below 2^18, so adding (bytes >> 4) to a descriptor
// moves its start address without a carry out of bits 0-13.
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = 0;
  d |= uint64_t((addr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo & 0x3FFFF) >> 4) << 16;
  d |= uint64_t((sbo & 0x3FFFF) >> 4) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving register reads or writes of `d` across this point (an empty volatile asm that
// "changes" them): around wgmma.fence and after wgmma.wait_group, so that ordinary instructions touch an
// accumulator only while no wgmma owns it.
__device__ __forceinline__ void fence_operand(Acc& d) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(d[0][j][i])::"memory");
}
__device__ __forceinline__ void fence_operand(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[k][i])::"memory");
}

// The 32 accumulator operands %0 .. %31 of an m64n64 wgmma, in register order.
#define TF_WG_D32                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define TF_WG_ACC(C, d)                                                                                               \
  C(d[0][0]), C(d[0][1]), C(d[0][2]), C(d[0][3]), C(d[1][0]), C(d[1][1]), C(d[1][2]), C(d[1][3]), C(d[2][0]),         \
      C(d[2][1]), C(d[2][2]), C(d[2][3]), C(d[3][0]), C(d[3][1]), C(d[3][2]), C(d[3][3]), C(d[4][0]), C(d[4][1]),     \
      C(d[4][2]), C(d[4][3]), C(d[5][0]), C(d[5][1]), C(d[5][2]), C(d[5][3]), C(d[6][0]), C(d[6][1]), C(d[6][2]),     \
      C(d[6][3]), C(d[7][0]), C(d[7][1]), C(d[7][2]), C(d[7][3])

// d = A·B (kAccumulate false: d's old value ignored, scale-d 0) or d += A·B, m64n64k16, A and B K-major from
// shared memory through descriptors (wgmma_probe's mma_ss).
template <bool kAccumulate>
__device__ __forceinline__ void mma_ss(Acc& acc, uint64_t da, uint64_t db) {
  float(&d)[8][4] = acc[0];
  if constexpr (kAccumulate)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TF_WG_D32 "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : TF_WG_ACC("+f", d)
        : "l"(da), "l"(db), "r"(1));
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TF_WG_D32 "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : TF_WG_ACC("=f", d)
        : "l"(da), "l"(db), "r"(0));
}

// d += A·B, m64n64k16, A from registers (4 x b32: 8 bf16 a thread), B from shared memory read transposed
// (tnspB 1: V row-major keys x d, wgmma_probe's mma_rs_tb).
__device__ __forceinline__ void mma_rs_tb(Acc& acc, const uint32_t (&a)[4], uint64_t db) {
  float(&d)[8][4] = acc[0];
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TF_WG_D32 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : TF_WG_ACC("+f", d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// s = Q·Kᵀ for the warpgroup's 64 rows and the tile's 64 keys: 4 k-steps of 16 (32 bytes further along the
// 128-byte rows of both operands: +2 in the descriptors' address field), waited for.
__device__ __forceinline__ void scores(Acc& s, uint64_t dq, uint64_t dk) {
  wgmma_fence();
  mma_ss<false>(s, dq, dk);
#pragma unroll
  for (int ks = 1; ks < 4; ++ks) mma_ss<true>(s, dq + 2 * ks, dk + 2 * ks);
  wgmma_commit();
  wgmma_wait<0>();
  fence_operand(s);
}

// o += bf16(p)·V, waited for: k-step ks takes p's columns 16ks .. 16ks + 15, registers 8ks .. 8ks + 7, as its A
// fragment (attn::c_pair_to_a: the probe's packing) and V's rows 16ks .., 2048 bytes further (+128 in the
// address field); LBO 8192 and SBO 1024 as the probe.
__device__ __forceinline__ void pv(Acc& o, const Acc& p, uint64_t dv) {
  uint32_t a[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) attn::c_pair_to_a(p[0][2 * ks], p[0][2 * ks + 1], a[ks]);
  fence_operand(a);
  fence_operand(o);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) mma_rs_tb(o, a[ks], dv + 128 * ks);
  wgmma_commit();
  wgmma_wait<0>();
  fence_operand(o);
}

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
  load_tile_swizzled<kBr>(sq, gq, ld, q0, seq);
  load_tile_swizzled<kKeyTile>(sk, gk, ld, 0, seq);
  load_tile_swizzled<kKeyTile>(sv, gv, ld, 0, seq);
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
      load_tile_swizzled<kKeyTile>(sk + uint32_t(nxt * kTileBytes), gk, ld, k0 + kKeyTile, seq);
      load_tile_swizzled<kKeyTile>(sv + uint32_t(nxt * kTileBytes), gv, ld, k0 + kKeyTile, seq);
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

#undef TF_WG_D32
#undef TF_WG_ACC

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
