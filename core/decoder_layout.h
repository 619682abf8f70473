// Geometry of the decoder's CUDA kernels that buffer sizes depend on (docs/decoder.md): the row chunks
// of the deterministic column sums, the attention kernels' head dimensions, and how an activation
// buffer is sized. backends/cuda/decoder_kernels.cu launches with these; core/alloc_plan.cpp sizes the
// decoder workload's buffers from them (usable from .cu files: no library calls).
#pragma once

#include <cstdint>

#include "core/workload_layout.h"

namespace tf::core::decoder_layout {

// LayerNorm backward: one thread block per chunk of this many rows, each writing one fp32 (dw, db)
// partial row pair; the partials are folded in chunk order (decoder_kernels.cuh, "Folds").
constexpr int64_t kLayerNormChunkRows = 16;
// Bias gradients (and bias + activation backward): one fp32 partial row per chunk of this many rows.
constexpr int64_t kBiasChunkRows = 64;

constexpr int64_t chunks_of(int64_t rows, int64_t chunk_rows) { return (rows + chunk_rows - 1) / chunk_rows; }
// fp32 scratch of layer_norm_backward over (rows, n): (chunks, 2n).
constexpr int64_t layer_norm_partial_floats(int64_t rows, int64_t n) {
  return chunks_of(rows, kLayerNormChunkRows) * 2 * n;
}
// fp32 scratch of bias_grad and bias_act_backward over (rows, n): (chunks, n).
constexpr int64_t bias_grad_partial_floats(int64_t rows, int64_t n) { return chunks_of(rows, kBiasChunkRows) * n; }

// The head dimensions d = h / H the fused attention kernels are compiled for (backends/cuda/
// attention.cu refuses the others at launch; tests/cuda/test_decoder_workload.cpp holds the two lists
// equal).
inline constexpr int64_t kAttentionHeadDims[] = {64, 80, 128};
constexpr bool attention_head_dim_supported(int64_t d) {
  for (int64_t s : kAttentionHeadDims)
    if (s == d) return true;
  return false;
}

// The row stride of the (T, V) bf16 logits and dlogits, in elements: the vocabulary rounded up to a
// multiple of 8, so that every row starts 16-byte aligned. cuBLAS runs its tensor-core kernels only on
// operands whose leading dimension is 16-byte aligned; GPT-2's V = 50257 as the stride sent the head's
// three GEMMs to its unaligned kernels (docs/decoder.md, "The head"). The pad columns are never read or
// written.
inline constexpr int64_t kLogitsRowAlign = 8;
constexpr int64_t logits_stride(int64_t vocab) {
  return (vocab + kLogitsRowAlign - 1) / kLogitsRowAlign * kLogitsRowAlign;
}

// A (rows, width) bf16 activation as the decoder workload allocates it: GEMM slack rows past its end
// (core::kGemmSlackRows), since most activations are some GEMM's operand.
constexpr int64_t activation_buffer_bytes(int64_t rows, int64_t width) { return (rows + kGemmSlackRows) * width * 2; }

}  // namespace tf::core::decoder_layout
