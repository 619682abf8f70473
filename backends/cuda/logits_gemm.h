// The head's three logits GEMMs as the decoder workload runs them (core/decoder_layout.h, "The head's
// logits"; docs/decoder.md): rows of the (T, V) logits and dlogits logits_stride(V) apart, and a V that is
// not a multiple of 8 split into two products, so that cuBLAS keeps its aligned tensor-core kernels.
// Host code only: usable from .cpp files linked to CUDA::cublas and tf_cuda (bench_decoder_kernels times these).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cublas_gemm.cuh"
#include "backends/cuda/decoder_kernels.cuh"
#include "core/decoder_layout.h"
#include "core/optim/dtype.h"

namespace tf::backend::cuda {

// The logits' linear layer: z (T, e) -> logits (T, V), with the workload's row stride.
inline LinearDims logits_dims(int64_t rows, int64_t embed_width, int64_t vocab) {
  return LinearDims{int(rows), int(embed_width), int(vocab), int(core::decoder_layout::logits_stride(vocab))};
}

namespace logits_detail {
// `count` vocabulary entries of `d` as a layer of their own, the same rows and stride (the caller offsets
// the pointers to the first entry).
inline LinearDims part(const LinearDims& d, int count) { return LinearDims{d.batch, d.in, count, d.out_stride}; }
inline int main_columns(const LinearDims& d) { return int(core::decoder_layout::logits_main_columns(d.out)); }
}  // namespace logits_detail

// logits (T, V) bf16 = z · Eᵀ, E (V, e) bf16: one product, or the main columns then the rest (disjoint
// columns of the output, each element computed once).
inline void logits_forward(CublasHandle& h, const LinearDims& d, const uint16_t* z, const uint16_t* E,
                           uint16_t* logits) {
  const int main = logits_detail::main_columns(d);
  linear_forward(h, logits_detail::part(d, main), z, E, 0.0f, logits);
  if (main < d.out)
    linear_forward(h, logits_detail::part(d, d.out - main), z, E + int64_t(main) * d.in, 0.0f, logits + main);
}

// dz (T, e) bf16 = dlogits · E. Split: both parts' products accumulate in fp32 into `scratch` (T, e)
// (core::decoder_layout::logits_grad_scratch_bytes; may be null when V is not split), then one rounding
// to bf16 on `stream` (the handle's).
inline void logits_input_grad(CublasHandle& h, const LinearDims& d, const uint16_t* dlogits, const uint16_t* E,
                              uint16_t* dz, float* scratch, cudaStream_t stream) {
  const int main = logits_detail::main_columns(d);
  if (main == d.out) return linear_backward_data(h, d, dlogits, E, dz);
  if (!scratch) throw core::InputError("logits_input_grad: a split vocabulary needs the fp32 scratch");
  gemm_bf16(h, data_grad_gemm(logits_detail::part(d, main)), E, dlogits, 0.0f, scratch, CUDA_R_32F);
  gemm_bf16(h, data_grad_gemm(logits_detail::part(d, d.out - main)), E + int64_t(main) * d.in, dlogits + main, 1.0f,
            scratch, CUDA_R_32F);
  f32_to_grad(scratch, int64_t(d.batch) * d.in, core::DType::kBF16, dz, stream);
}

// dE (V, e), bf16 or fp32 (dw_type) = dlogitsᵀ · z: rows [0, main) and [main, V) by two products.
inline void logits_weight_grad(CublasHandle& h, const LinearDims& d, const uint16_t* z, const uint16_t* dlogits,
                               void* dE, cudaDataType dw_type) {
  const int main = logits_detail::main_columns(d);
  linear_backward_weight(h, logits_detail::part(d, main), z, dlogits, dE, dw_type);
  if (main == d.out) return;
  const int64_t elem = dw_type == CUDA_R_32F ? 4 : 2;
  linear_backward_weight(h, logits_detail::part(d, d.out - main), z, dlogits + main,
                         static_cast<char*>(dE) + int64_t(main) * d.in * elem, dw_type);
}

}  // namespace tf::backend::cuda
