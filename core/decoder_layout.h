// Geometry of the decoder's CUDA kernels that buffer sizes depend on (docs/decoder.md): the row chunks
// of the deterministic column sums, the attention kernels' head dimensions, and how an activation
// buffer is sized. backends/cuda/decoder_kernels.cu launches with these; core/alloc_plan.cpp sizes the
// decoder workload's buffers from them (usable from .cu files: no library calls).
#pragma once

#include <cstdint>

#include "core/workload_layout.h"

namespace tf::core::decoder_layout {

// LayerNorm backward: one thread block per chunk of this many rows, each writing one fp32 (dw, db)
// partial row pair; the partials are folded in chunk order (decoder_kernels.cuh, "Folds"). 32 rows: a
// block's fold and partial row are paid once per 4 rows a warp (n <= 1024), and the partials of GPT-350M's
// micro-batch are 4 MB a call (16 rows: 8 MB written and read again).
constexpr int64_t kLayerNormChunkRows = 32;
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

// The head's logits (docs/decoder.md, "The head's logits on the GPU"). On an H200, cuBLAS's bf16 GEMMs took
// their slow kernels where a leading dimension was not 16-byte aligned or the product's m or k was not a
// multiple of 8: GPT-2's three logits GEMMs (V = 50257) ran at 95-150 TFLOP/s against 670-830 for OPT's
// V = 50272 (bench/results/2026-11-29-h200-decoder-head). So:
// - the (T, V) bf16 logits and dlogits have rows logits_stride(V) apart, V rounded up to a multiple of 8
//   (the pad columns are never read or written);
// - where V is not a multiple of 8 (logits_split), every logits GEMM runs as two: the first
//   logits_main_columns(V) vocabulary entries (V rounded down to 8), then the other 1 to 7. The forward
//   and the weight gradient write disjoint parts of their outputs. The input gradient dz = dlogits·E sums
//   over V: both parts accumulate into an fp32 (T, e) scratch (logits_grad_scratch_bytes), rounded once
//   to bf16 after.
inline constexpr int64_t kLogitsRowAlign = 8;
constexpr int64_t logits_stride(int64_t vocab) {
  return (vocab + kLogitsRowAlign - 1) / kLogitsRowAlign * kLogitsRowAlign;
}
constexpr bool logits_split(int64_t vocab) { return vocab > kLogitsRowAlign && vocab % kLogitsRowAlign != 0; }
constexpr int64_t logits_main_columns(int64_t vocab) {
  return logits_split(vocab) ? vocab / kLogitsRowAlign * kLogitsRowAlign : vocab;
}
constexpr int64_t logits_grad_scratch_bytes(int64_t rows, int64_t embed_width, int64_t vocab) {
  return logits_split(vocab) ? rows * embed_width * 4 : 0;
}

// A (rows, width) bf16 activation as the decoder workload allocates it: GEMM slack rows past its end
// (core::kGemmSlackRows), since most activations are some GEMM's operand.
constexpr int64_t activation_buffer_bytes(int64_t rows, int64_t width) { return (rows + kGemmSlackRows) * width * 2; }

}  // namespace tf::core::decoder_layout
