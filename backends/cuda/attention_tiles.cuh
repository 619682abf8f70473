// Causal flash attention's tile schedule and mma.m16n8k16 / ldmatrix fragment index math (host and device).
#pragma once

// No CUDA header: a plain C++ test checks this math on the host (tests/cuda/test_decoder_kernels.cpp).
#include <cstdint>

#include "core/optim/dtype.h"  // TF_HD, core::f32_to_bf16

namespace tf::backend::cuda::attn {

// --- tiles (docs/decoder.md: "Attention backward ...") ---------------------------------------
inline constexpr int kBwdWarps = 4;                           // warps per block of both backward kernels
inline constexpr int kBwdThreads = 32 * kBwdWarps;            // threads per block
inline constexpr int kKeyTile = 64;                           // keys per K/V tile (forward, dQ) and per dK/dV block
inline constexpr int kBwdQueryTile = 64;                      // queries per tile in both backward kernels
inline constexpr int kBwdKeysPerWarp = kKeyTile / kBwdWarps;  // 16: dK/dV: one m16 tile of keys per warp

// Forward query rows per block: 128 for d = 64 (4 warps x 32 rows, two m16 tiles a warp, or 8 warps x 16
// rows: ForwardTiles in decoder_kernels.cuh), 64 for d = 80 and 128 (4 warps x 16 rows).
TF_HD constexpr int fwd_query_tile(int head_dim) { return head_dim == 64 ? 128 : 64; }

TF_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The block order of every attention kernel: a 1-D grid of bh_count x n_tiles blocks ((sample, head)
// pairs x tiles) in groups of kHeadGroup pairs. A group's blocks take its tiles by rank, heaviest (rank
// 0) first, all of the group's pairs per rank, before the next group's blocks start: one pair's blocks
// run close together and find its K, V (or Q, dO) rows in L2 (a group's are ~8 MB at s 1024, d 64),
// where a pair-major order streamed every rank through DRAM again, and the lightest blocks still end
// each group. The last group may hold fewer pairs.
inline constexpr int kHeadGroup = 32;
struct BlockTile {
  int bh, rank;  // (sample, head) pair b·H + head; tile rank, 0 = heaviest
};
// block < bh_count·n_tiles < 2^31 (the launches check it), so 32-bit arithmetic.
TF_HD BlockTile grouped_block(int block, int bh_count, int n_tiles) {
  const int g = block / (kHeadGroup * n_tiles), i = block % (kHeadGroup * n_tiles);
  const int pairs = bh_count - g * kHeadGroup < kHeadGroup ? bh_count - g * kHeadGroup : kHeadGroup;
  return {g * kHeadGroup + i % pairs, i / pairs};
}

// Key tiles a query tile [q0, q0 + q_rows) visits: causal attention reads keys 0 .. last query
// (the last valid one, below s), so tiles past it are fully masked and skipped.
TF_HD int64_t causal_key_tiles(int64_t q0, int64_t q_rows, int64_t s, int64_t key_tile) {
  const int64_t q_end = q0 + q_rows < s ? q0 + q_rows : s;
  return ceil_div(q_end, key_tile);
}

// The first query tile a key tile starting at k0 visits: queries below k0 see none of its keys.
TF_HD int64_t causal_first_query_tile(int64_t k0, int64_t query_tile) { return k0 / query_tile; }

// Whether a visited tile (queries [q0, q0 + q_rows), keys [k0, k0 + k_rows)) holds an element that
// element_visible() rejects: a key above a query, or a row or key past s. Only those tiles run the
// elementwise mask.
TF_HD bool tile_needs_mask(int64_t q0, int64_t q_rows, int64_t k0, int64_t k_rows, int64_t s) {
  return k0 + k_rows - 1 > q0 || q0 + q_rows > s || k0 + k_rows > s;
}

// Causal visibility of key k from query q in a sample of s tokens (k < s follows from k <= q < s).
TF_HD bool element_visible(int64_t q, int64_t k, int64_t s) { return k <= q && q < s; }

// Whether queries [q0, q0 + q_rows) see any key of a tile starting at k0 (k0 < s): some query q < s
// with q >= k0. The forward's warps skip the tiles (of their block's schedule) where they see none.
TF_HD bool tile_has_visible(int64_t q0, int64_t q_rows, int64_t k0, int64_t s) {
  return q0 < s && k0 <= q0 + q_rows - 1;
}

// --- fragments of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 ---------------------------
// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": lane = 4 * groupID +
// threadID_in_group. Every .b32 register of A or B holds two bf16 elements, the lower index in the
// low half. Coordinates below are those of the low element; the high one is at col + 1 (A) or k + 1 (B).
struct FragCoord {
  int row, col;  // B: row = k, col = n
};
// A (16 x 16, row-major), registers a0..a3: row = groupID + 8 (a1, a3), col = 2 * tig + 8 (a2, a3).
TF_HD FragCoord mma_a_coord(int lane, int reg) {
  return {(lane >> 2) + 8 * (reg & 1), 2 * (lane & 3) + 8 * (reg >> 1)};
}
// B (16 x 8, "col"), registers b0, b1: k = 2 * tig + 8 (b1), n = groupID.
TF_HD FragCoord mma_b_coord(int lane, int reg) { return {2 * (lane & 3) + 8 * reg, lane >> 2}; }
// C / D (16 x 8, fp32), elements c0..c3: row = groupID + 8 (c2, c3), col = 2 * tig + 1 (c1, c3).
TF_HD FragCoord mma_c_coord(int lane, int i) { return {(lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)}; }

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 (PTX ISA, "ldmatrix"): lanes 8m .. 8m + 7 give the
// row addresses of matrix m, which lands in register m; without .trans a lane receives (row lane / 4,
// cols 2 * (lane % 4) + {0, 1}) of each matrix, with .trans (rows 2 * (lane % 4) + {0, 1}, col lane / 4).
// The offsets below are the (row, col) of the 16-byte row this lane points at, from a tile's corner.
//
// A 16 x 16 tile of a row-major [m][k] array -> a0..a3 (matrices: rows +0/+8, cols +0/+8, in a's
// order). The same offsets with .trans on a row-major [k][n] array load B for two n-tiles
// (b0, b1 of n-tile 0, then of n-tile 1): matrix (k +0/+8, n +0/+8).
TF_HD FragCoord ldsm_a_offset(int lane) { return {(lane & 7) + 8 * ((lane >> 3) & 1), 8 * (lane >> 4)}; }
// B for two n-tiles from a row-major [n][k] array without .trans (K in Q·Kᵀ): b0, b1 of n-tile 0,
// then of n-tile 1: matrix (n +0/+8, k +0/+8).
TF_HD FragCoord ldsm_b_nk_offset(int lane) { return {(lane & 7) + 8 * (lane >> 4), 8 * ((lane >> 3) & 1)}; }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// cvt.rn.bf16x2.f32 of (lo, hi): IEEE round to nearest even, subnormals kept, overflow to Inf.
static __device__ __forceinline__ uint32_t cvt_rn_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));  // d = {hi: a, lo: b}
  return r;
}
#endif

// Two fp32 values as one bf16x2 register (round to nearest even, core/optim/dtype.h), lo in bits 0..15:
// the conversion of every stored bf16 value (a NaN becomes core's canonical 0x7FC0). On the device one
// cvt.rn.bf16x2.f32 (IEEE round to nearest even, subnormals kept, overflow to Inf: core::f32_to_bf16's
// bits for every non-NaN input) and a NaN fix-up, instead of five integer operations per value.
TF_HD uint32_t pack_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r = cvt_rn_bf16x2(lo, hi);
  if (lo != lo) r = (r & 0xFFFF0000u) | core::kBF16CanonicalNaN;
  if (hi != hi) r = (r & 0x0000FFFFu) | (uint32_t(core::kBF16CanonicalNaN) << 16);
  return r;
#else
  return uint32_t(core::f32_to_bf16(lo)) | (uint32_t(core::f32_to_bf16(hi)) << 16);
#endif
}

// The same rounding for tensor-core operands that are never stored (P and dS): on the device the
// cvt alone. A NaN becomes the hardware's NaN rather than 0x7FC0; as an mma operand any NaN makes the
// products it enters NaN, so no stored result can tell the two apart.
TF_HD uint32_t pack_bf16x2_operand(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return cvt_rn_bf16x2(lo, hi);
#else
  return pack_bf16x2(lo, hi);
#endif
}

// The C fragments of two adjacent n-tiles (a 16 x 16 fp32 block, columns 0..7 in c0, 8..15 in c1)
// as the A fragment of the same block in bf16: C's (row g, cols 2t, 2t+1) is A's a0, (row g + 8) a1,
// and the second n-tile's a2, a3. Flash attention feeds P and dS to the next product this way.
TF_HD void c_pair_to_a(const float* c0, const float* c1, uint32_t* a) {
  a[0] = pack_bf16x2_operand(c0[0], c0[1]);
  a[1] = pack_bf16x2_operand(c0[2], c0[3]);
  a[2] = pack_bf16x2_operand(c1[0], c1[1]);
  a[3] = pack_bf16x2_operand(c1[2], c1[3]);
}

}  // namespace tf::backend::cuda::attn
