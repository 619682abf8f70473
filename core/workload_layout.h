// Geometry of the workloads' device buffers, which their sizes depend on: the cuBLAS workspace every
// GEMM workload's handle owns, GEMM slack, and the toy MLP workload's launch shapes (the decoder's are
// core/decoder_layout.h's). backends/cuda allocates and
// launches with these; core/alloc_plan.cpp sizes the buffers from them (usable from .cu files).
#pragma once

#include <cstdint>

namespace tf::core {

// The workspace of a workload's cuBLAS handle (backends/cuda/cublas_gemm.cuh): NVIDIA's recommendation
// for Hopper. A fixed workspace keeps cuBLAS from allocating and from changing kernels between calls.
constexpr int64_t kCublasWorkspaceBytes = int64_t(32) << 20;

// GEMM operands get slack past their end: cuBLAS's small-n kernels (micro-batch below the tile width)
// were seen reading up to one tile of rows past the operand under compute-sanitizer. The MLP and the
// decoder workloads size their GEMM operands with it.
constexpr int64_t kGemmSlackRows = 256;

namespace mlp_layout {
// Row-striding kernels (input, bias + activation, loss): blocks = min(B, this), fixed for a given B.
constexpr int64_t kRowBlocks = 1024;
// Bias gradient: blocks of 8 row lanes; row chunks per column block (partials summed in order),
// at most 64 and of at least 256 rows, a multiple of the lanes.
constexpr int64_t kBiasLanes = 8;
constexpr int64_t kBiasMaxChunks = 64;
constexpr int64_t kBiasMinChunkRows = 256;
// The sparse teacher: inputs combined per output feature (backends/cuda/mlp_data.h).
constexpr int64_t kTeacherTaps = 4;

constexpr int64_t row_blocks(int64_t batch) { return batch < kRowBlocks ? batch : kRowBlocks; }
constexpr int64_t bias_chunk_rows(int64_t batch) {
  const int64_t spread = (batch + kBiasMaxChunks - 1) / kBiasMaxChunks;
  const int64_t rows = spread > kBiasMinChunkRows ? spread : kBiasMinChunkRows;
  return (rows + kBiasLanes - 1) / kBiasLanes * kBiasLanes;
}
constexpr int64_t bias_chunks(int64_t batch) { return (batch + bias_chunk_rows(batch) - 1) / bias_chunk_rows(batch); }
}  // namespace mlp_layout

}  // namespace tf::core
