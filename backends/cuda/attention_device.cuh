// Device pieces shared by the attention kernels (attention.cu's mma.sync kernels, attention_wgmma.cu's wgmma
// forward): cp.async groups, the one-MUFU exponential, the row trees of the online softmax over C-fragment
// rows, the causal mask, and the forward's epilogue (o / l, lse, bf16 rows through shared memory). Device
// code: include from .cu files only (attention_tiles.cuh holds the host-testable index math).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/attention_tiles.cuh"

namespace tf::backend::cuda::attn {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr unsigned kFullMask = 0xffffffffu;

// Shared-memory row stride of a [rows][d] bf16 tile, in elements: 16 bytes of padding per row.
__host__ __device__ constexpr int tile_stride(int d) { return d + 8; }

// ---- PTX -----------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 2^x as one MUFU.EX2 (ex2.approx.ftz.f32). exp2f (ex2.approx.f32 without ftz) is the same instruction
// for x >= -126, -inf and NaN, and adds a predicated halving and squaring that keep the subnormal results
// of x < -126: callers take this path only for tiles whose every finite argument is >= -126, so the
// bits are exp2f's.
__device__ __forceinline__ float exp2_normal(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// ---- the online softmax's pieces (rows of m16n8 C fragments, or of a wgmma m64nN accumulator, whose
// layout per warp is the same: attention_wgmma.cu) ------------------------------------------------------

// The maximum (kMax) or minimum of a thread's values of one C row (elements 2·hf, 2·hf + 1 of every
// n-tile): a tree (exact, so the order does not change the bits; a NaN is ignored as fmaxf does).
template <bool kMax, int kN>
__device__ __forceinline__ float row_extreme_tree(const float (&c)[kN][4], int hf) {
  const auto op = [](float a, float b) { return kMax ? fmaxf(a, b) : fminf(a, b); };
  float v[kN];
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) v[nt] = op(c[nt][2 * hf], c[nt][2 * hf + 1]);
#pragma unroll
  for (int w = 1; w < kN; w *= 2)
#pragma unroll
    for (int i = 0; i + w < kN; i += 2 * w) v[i] = op(v[i], v[i + w]);
  return v[0];
}

// The fp32 sum of the same values in a fixed tree: the two columns of each n-tile, then the n-tiles
// pairwise ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)).
template <int kN>
__device__ __forceinline__ float row_sum_tree(const float (&c)[kN][4], int hf) {
  float v[kN];
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) v[nt] = c[nt][2 * hf] + c[nt][2 * hf + 1];
#pragma unroll
  for (int w = 1; w < kN; w *= 2)
#pragma unroll
    for (int i = 0; i + w < kN; i += 2 * w) v[i] = v[i] + v[i + w];
  return v[0];
}

// Scores of invisible (query, key) pairs (attn::element_visible) become -inf. Rows: this warp's queries
// from warp_q0; columns: keys from k0.
template <int kMT, int kSTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kMT][kSTiles][4], int warp_q0, int k0, int seq, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const FragCoord c = attn::mma_c_coord(lane, i);
        if (!attn::element_visible(warp_q0 + 16 * mt + c.row, k0 + 8 * nt + c.col, seq)) s[mt][nt][i] = -INFINITY;
      }
}

// ---- the forward's epilogue --------------------------------------------------------------------------

// o = acc / l and lse = (m + log2 l)·ln 2 for this warp's rows (l summed over the quad first).
template <int kMT, int kDTiles>
__device__ __forceinline__ void finish_rows(float (&acc_o)[kMT][kDTiles][4], const float (&row_max)[kMT][2],
                                            const float (&row_sum)[kMT][2], int warp_q0, int seq, float* lse_bh,
                                            int lane) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = row_sum[mt][hf];
      l = l + __shfl_xor_sync(kFullMask, l, 1);
      l = l + __shfl_xor_sync(kFullMask, l, 2);
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        acc_o[mt][dt][2 * hf] = acc_o[mt][dt][2 * hf] / l;
        acc_o[mt][dt][2 * hf + 1] = acc_o[mt][dt][2 * hf + 1] / l;
      }
      const int q = warp_q0 + 16 * mt + attn::mma_c_coord(lane, 2 * hf).row;
      if ((lane & 3) == 0 && q < seq) lse_bh[q] = (row_max[mt][hf] + log2f(l)) * kLn2;
    }
}

// Writes a warp's accumulators (rows warp_row0 + 16·mt + C's row of the tile, columns 8·nt + C's column)
// as bf16 rows of a (T, ld) matrix: staged in the warp's own rows of `stage` (a [rows][tile_stride(kD)]
// tile no other warp reads any more), then 16-byte stores of the rows below s. g: the sample's row 0
// at the head's column; tile_row0: the tile's first row in the sample.
template <int kMT, int kD>
__device__ __forceinline__ void store_warp_rows(const float (&acc)[kMT][kD / 8][4], uint16_t* stage, int warp_row0,
                                                uint16_t* g, int64_t ld, int tile_row0, int s, int lane) {
  constexpr int kStride = tile_stride(kD), kChunks = kD / 8, kRows = 16 * kMT;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const FragCoord c = attn::mma_c_coord(lane, 2 * hf);
        *reinterpret_cast<uint32_t*>(stage + (warp_row0 + 16 * mt + c.row) * kStride + 8 * nt + c.col) =
            attn::pack_bf16x2(acc[mt][nt][2 * hf], acc[mt][nt][2 * hf + 1]);
      }
  __syncwarp();
  for (int i = lane; i < kRows * kChunks; i += 32) {
    const int r = i / kChunks, ch = i - r * kChunks;
    const int row = tile_row0 + warp_row0 + r;
    if (row < s)
      *reinterpret_cast<uint4*>(g + int64_t(row) * ld + ch * 8) =
          *reinterpret_cast<const uint4*>(stage + (warp_row0 + r) * kStride + ch * 8);
  }
}

}  // namespace tf::backend::cuda::attn
