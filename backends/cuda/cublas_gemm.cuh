// cuBLAS error checking, an owning handle, and the three bf16 GEMMs of a row-major (torch) linear
// layer with fp32 accumulation. Host code only: usable from .cpp files linked to CUDA::cublas.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "core/error.h"
#include "core/workload_layout.h"

namespace tf::backend::cuda {

// Throws core::RuntimeFailure naming the call, file:line and the cuBLAS status.
[[noreturn]] inline void cublas_fail(cublasStatus_t st, const char* call, const char* file, int line) {
  throw core::RuntimeFailure(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                             cublasGetStatusString(st) + " (" + cublasGetStatusName(st) + ")");
}

#define TF_CUBLAS_CHECK(expr)                                                     \
  do {                                                                            \
    const cublasStatus_t tf_cublas_st_ = (expr);                                  \
    if (tf_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                   \
      ::tf::backend::cuda::cublas_fail(tf_cublas_st_, #expr, __FILE__, __LINE__); \
  } while (0)

// A cuBLAS handle on the current device, owning, with a fixed workspace: its own of
// core::kCublasWorkspaceBytes, or a caller's (a workload allocates it from its buffer list).
// cublasSetStream resets the workspace to cuBLAS's default pool, so set_stream() installs ours again
// every time: the GEMMs then allocate nothing and pick the same kernels (same bits) on every call.
// Math mode: fp32 accumulation throughout, no reduced-precision split-K reduction.
class CublasHandle {
 public:
  CublasHandle() : owned_(size_t(core::kCublasWorkspaceBytes)), ws_(owned_.get()), ws_bytes_(owned_.bytes()) { init(); }
  // With `workspace` (device, `bytes` long), which must outlive the handle.
  CublasHandle(void* workspace, size_t bytes) : ws_(workspace), ws_bytes_(bytes) { init(); }
  ~CublasHandle() {
    if (h_) (void)cublasDestroy(h_);  // never throws from a destructor
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return h_; }
  size_t workspace_bytes() const { return ws_bytes_; }
  void set_stream(cudaStream_t s) {
    TF_CUBLAS_CHECK(cublasSetStream(h_, s));
    TF_CUBLAS_CHECK(cublasSetWorkspace(h_, ws_, ws_bytes_));
  }

 private:
  void init() {
    TF_CUBLAS_CHECK(cublasCreate(&h_));
    try {
      TF_CUBLAS_CHECK(
          cublasSetMathMode(h_, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
      TF_CUBLAS_CHECK(cublasSetPointerMode(h_, CUBLAS_POINTER_MODE_HOST));
    } catch (...) {
      (void)cublasDestroy(h_);
      h_ = nullptr;
      throw;
    }
  }
  DeviceMemory owned_;  // empty when the caller's workspace is used
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  cublasHandle_t h_ = nullptr;
};

// The linear layer y = x·Wᵀ + b in torch's row-major layout, on column-major cuBLAS:
//   X (B × in), Y and dY (B × out), dX (B × in), W and dW (out × in), all row-major bf16 (dW bf16
//   or fp32). A row-major M (r × c) is, in the same memory, the column-major Mᵀ (c × r) with
//   leading dimension c. So every product is computed transposed, Cᵀ = op(A)·op(B) in cuBLAS terms
//   (m × k times k × n; A is stored m × k if N else k × m, B is k × n if N else n × k):
//   forward     Yᵀ (out × B) = W (out × in) · Xᵀ (in × B):     A = W  stored Wᵀ (in × out, ld in) -> T
//                                                              B = X  stored Xᵀ (in × B, ld in)   -> N
//               m = out, n = B, k = in, ldc = out
//   data grad   dXᵀ (in × B) = Wᵀ (in × out) · dYᵀ (out × B):  A = W  stored Wᵀ (in × out, ld in) -> N
//                                                              B = dY stored dYᵀ (out × B, ld out) -> N
//               m = in, n = B, k = out, ldc = in
//   weight grad dWᵀ (in × out) = Xᵀ (in × B) · dY (B × out):   A = X  stored Xᵀ (in × B, ld in)   -> N
//                                                              B = dY stored dYᵀ (out × B, ld out) -> T
//               m = in, n = out, k = B, ldc = in
// Y and dY may be stored with a row stride above `out` (out_stride: the head's logits, whose rows are
// padded to 16-byte alignment, core::decoder_layout::logits_stride); every ldc or ldb that says out above
// is then that stride.
// All take bf16 inputs, accumulate in fp32 (CUBLAS_COMPUTE_32F) and compute alpha·acc + beta·C in
// fp32 before the single rounding to C's type.
struct LinearDims {
  int batch = 0, in = 0, out = 0;
  int out_stride = 0;  // elements between rows of Y and dY; 0: out (packed)
};
// The row stride of Y and dY.
inline int out_ld(const LinearDims& d) { return d.out_stride > 0 ? d.out_stride : d.out; }

// The column-major arguments of one GEMM (operands named at each function below). Separate from
// the call so that a host test can check them against a column-major GEMM written from the BLAS
// definition, without a GPU.
struct GemmArgs {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
};
// A = W, B = X, C = Y.
inline GemmArgs forward_gemm(const LinearDims& d) {
  return {CUBLAS_OP_T, CUBLAS_OP_N, d.out, d.batch, d.in, d.in, d.in, out_ld(d)};
}
// A = W, B = dY, C = dX.
inline GemmArgs data_grad_gemm(const LinearDims& d) {
  return {CUBLAS_OP_N, CUBLAS_OP_N, d.in, d.batch, d.out, d.in, out_ld(d), d.in};
}
// A = X, B = dY, C = dW.
inline GemmArgs weight_grad_gemm(const LinearDims& d) {
  return {CUBLAS_OP_N, CUBLAS_OP_T, d.in, d.out, d.batch, d.in, out_ld(d), d.in};
}

// C = 1 · op(A)·op(B) + beta · C; A and B bf16, fp32 accumulation, C of c_type.
inline void gemm_bf16(CublasHandle& h, const GemmArgs& g, const void* a, const void* b, float beta, void* c,
                      cudaDataType c_type) {
  const float alpha = 1.0f;
  TF_CUBLAS_CHECK(cublasGemmEx(h.get(), g.ta, g.tb, g.m, g.n, g.k, &alpha, a, CUDA_R_16BF, g.lda, b, CUDA_R_16BF, g.ldb,
                               &beta, c, c_type, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// y (B × out) bf16 = x (B × in) · Wᵀ + beta · y.
inline void linear_forward(CublasHandle& h, const LinearDims& d, const uint16_t* x, const uint16_t* w, float beta,
                           uint16_t* y) {
  gemm_bf16(h, forward_gemm(d), w, x, beta, y, CUDA_R_16BF);
}

// dx (B × in) bf16 = dy (B × out) · W.
inline void linear_backward_data(CublasHandle& h, const LinearDims& d, const uint16_t* dy, const uint16_t* w,
                                 uint16_t* dx) {
  gemm_bf16(h, data_grad_gemm(d), w, dy, 0.0f, dx, CUDA_R_16BF);
}

// dw (out × in), bf16 or fp32 (dw_type) = dyᵀ · x.
inline void linear_backward_weight(CublasHandle& h, const LinearDims& d, const uint16_t* x, const uint16_t* dy,
                                   void* dw, cudaDataType dw_type) {
  gemm_bf16(h, weight_grad_gemm(d), x, dy, 0.0f, dw, dw_type);
}

}  // namespace tf::backend::cuda
