// The wgmma building blocks of the d = 64 attention kernels on Hopper (attention_wgmma.cu's forward,
// attention_wgmma_bwd.cu's dK/dV): 128-byte swizzled shared-memory tiles filled by cp.async, shared-memory matrix
// descriptors, wgmma.mma_async m64n64k16 bf16 -> fp32 with both operands K-major from shared memory (mma_ss) or A
// from registers and B read transposed (mma_rs_tb), and the fences around them. The layouts are those
// bench/device/wgmma_probe.cu verified on an H200 (bench/results/attention-notes.md, "The wgmma building block,
// verified"). Device code for sm_90a only: include from the files of the tf_cuda_wgmma object library
// (backends/cuda/CMakeLists.txt); the device functions exist under __CUDA_ARCH_FEAT_SM90_ALL alone.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/attention_device.cuh"
#include "backends/cuda/attention_tiles.cuh"

namespace tf::backend::cuda::wg {

constexpr int kRowBytes = 64 * 2;           // 128: one swizzle row, 64 bf16 (d = 64)
constexpr int kTileBytes = 64 * kRowBytes;  // a 64 x 64 bf16 tile: 8 KB, 8 swizzle atoms of 1 KB

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
// swizzled [kRows][64] tile at shared address `tile`, by the block's kThreads threads: thread t copies chunk t % 8
// of rows t / 8 + (kThreads / 8)·i (the 8 chunks of a row go to one 128-byte row, permuted). Rows >= s are zero-filled.
template <int kRows, int kThreads>
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
#define TF_WG_D32                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define TF_WG_ACC(C, d)                                                                                           \
  C(d[0][0]), C(d[0][1]), C(d[0][2]), C(d[0][3]), C(d[1][0]), C(d[1][1]), C(d[1][2]), C(d[1][3]), C(d[2][0]),     \
      C(d[2][1]), C(d[2][2]), C(d[2][3]), C(d[3][0]), C(d[3][1]), C(d[3][2]), C(d[3][3]), C(d[4][0]), C(d[4][1]), \
      C(d[4][2]), C(d[4][3]), C(d[5][0]), C(d[5][1]), C(d[5][2]), C(d[5][3]), C(d[6][0]), C(d[6][1]), C(d[6][2]), \
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

// d = A·Bᵀ over k = 64 for the warpgroup's 64 rows (A's) and 64 columns (B's rows), both K-major in shared
// memory: 4 k-steps of 16 (32 bytes further along the 128-byte rows of both operands: +2 in the descriptors'
// address field), issued only (the caller fences before and commits, waits after).
__device__ __forceinline__ void issue_ss_k64(Acc& d, uint64_t da, uint64_t db) {
  mma_ss<false>(d, da, db);
#pragma unroll
  for (int ks = 1; ks < 4; ++ks) mma_ss<true>(d, da + 2 * ks, db + 2 * ks);
}

// s = Q·Kᵀ for the warpgroup's 64 rows and the tile's 64 keys (issue_ss_k64), waited for.
__device__ __forceinline__ void scores(Acc& s, uint64_t dq, uint64_t dk) {
  wgmma_fence();
  issue_ss_k64(s, dq, dk);
  wgmma_commit();
  wgmma_wait<0>();
  fence_operand(s);
}

// d += A·B over k = 64: A from registers (a[ks]: k-step ks's fragment, attn::c_pair_to_a of the accumulator
// columns 16ks .. 16ks + 15), B a row-major [64][64] swizzled tile read transposed (mma_rs_tb; +2048 bytes, +128 in
// the address field, a k-step), issued only (the caller fences before and commits, waits after).
__device__ __forceinline__ void issue_rs_tb_k64(Acc& d, const uint32_t (&a)[4][4], uint64_t db) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) mma_rs_tb(d, a[ks], db + 128 * ks);
}

// o += bf16(p)·V, waited for: k-step ks takes p's columns 16ks .. 16ks + 15, registers 8ks .. 8ks + 7, as its A
// fragment (attn::c_pair_to_a: the probe's packing) and V's rows 16ks .., 2048 bytes further (+128 in the
// address field); LBO 8192 and SBO 1024 as the probe. Any row-major [64][64] swizzled tile serves as V (the
// backward: dO in dV += Pᵀ·dO, Q in dK += dSᵀ·Q).
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

#undef TF_WG_D32
#undef TF_WG_ACC

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace tf::backend::cuda::wg
