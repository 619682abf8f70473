// The GEMMs of a layer's forward and backward: shapes and the pass each belongs to (which fixes the
// operand layout cuBLAS runs), shared by the simulator's cost model and `twinflow calibrate`.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/model.h"

namespace tf::core {

// A GEMM's pass. The workloads issue each pass in one cuBLAS layout (backends/cuda/cublas_gemm.cuh):
// forward Y = X Wt (TN), input gradient dX = dY W (NN), weight gradient dW = dYt X (NT). kAny: a rate
// measured without saying which (it applies to every pass).
enum class GemmPass : uint8_t { kAny, kForward, kInputGrad, kWeightGrad };
// "any", "forward", "input_grad", "weight_grad".
std::string_view gemm_pass_name(GemmPass p);
std::optional<GemmPass> parse_gemm_pass(std::string_view name);

// `batch` independent products C (m, n) = A (m, k) x B (k, n).
struct LayerGemm {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  GemmPass pass = GemmPass::kForward;
  // Computed again in backward before its gradients (the fused attention's scores).
  bool recomputed_in_backward = false;
  // A product inside the fused attention kernel (backends/cuda/attention.cu), not a cuBLAS call: timed
  // at the profile's measured attention rate when it has one (gpu.attention_tflops_by_shape).
  bool fused_attention = false;
  // The row stride, in elements, of the forward's C (m, n) as the workload stores it and of its gradient
  // dC, which the backward's products read; 0: n (packed). The head's logits: decoder_layout::logits_stride.
  int64_t out_stride = 0;
  bool operator==(const LayerGemm&) const = default;
};

// FLOPs (2 m n k per product) of the fused attention's entries of a GEMM list (forward or backward).
double fused_attention_flops(const std::vector<LayerGemm>& gemms);

// The forward GEMMs of one layer for one micro-batch; their FLOPs add up to model.cpp's count.
// Linear (MLP): Y (B, out) = X (B, in) Wt. Decoder block: QKV; the fused causal attention's two
// products per (sample, head) as a strided batch, each over the causal half (s(s+1)/2 (query, key)
// pairs, written as the equivalent shape (m, n) with m*n = s(s+1)/2: (s+1, s/2) for even s, else
// (s, (s+1)/2)): scores Q K^T (m, n, d), then P V (m, d, n); out-projection, fc1, fc2. Embedding:
// project_in when e != h, else none (a gather). Head: project_out when e != h, then the logits.
// The fused attention is one kernel, not cuBLAS: these shapes give its FLOPs and a rate estimate.
std::vector<LayerGemm> forward_gemms(const ModelDesc& m, const LayerDesc& l, int64_t micro_batch);
// The backward of each forward C = A x B: the forward again when it is recomputed_in_backward (the
// attention scores), the input gradient dA (m, k) = dC Bt (unless input_grad is false: the model's
// first linear layer, whose input is data) and the weight gradient as the workloads compute it,
// dBt (n, k) = dCt A. For the attention that is dQ, dK, dP and dV: with the recomputed scores, the
// 5 products of model.cpp's attention backward.
std::vector<LayerGemm> backward_gemms(const std::vector<LayerGemm>& forward, bool input_grad = true);
// Whether layer `index`'s backward computes its input's gradient: every layer but an MLP's first.
bool layer_needs_input_grad(const ModelDesc& m, size_t index);

// The classes of memory-bound kernels, each a kernel of backends/cuda/decoder_kernels.cuh (or the
// fused attention's own traffic) whose achieved rate `twinflow calibrate --scenario` measures
// (gpu.decoder_kernel_gbps: the class's bytes below over its measured time); kOther (an MLP's
// kernels) and an unmeasured class run at gpu.hbm_gbps.
enum class KernelClass : uint8_t {
  kOther,
  kLayerNormForward,     // layer_norm_forward
  kLayerNormBackward,    // layer_norm_backward (with the residual gradient in a block)
  kBiasActForward,       // bias_act_forward: QKV's bias, fc1's bias and activation
  kBiasResidualForward,  // bias_residual_forward: out-projection and fc2 with their residuals
  kBiasActBackward,      // bias_act_backward: du = dg act'(u) and db1
  kBiasGrad,             // bias_grad: db2, dbo, dbqkv
  kEmbeddingForward,     // embedding_forward (gather_rows + add_positions with project_in)
  kEmbeddingBackward,    // position_grad + token_embedding_grad
  kCrossEntropy,         // cross_entropy_forward_backward: the loss and dlogits, one kernel in the forward
  kAttentionForward,     // the fused attention's q, k, v, o, lse traffic (its FLOPs are GEMM entries)
  kAttentionBackward,    // D = rowsum(dO o O) and the backward's traffic
};
inline constexpr int kKernelClassCount = 12;
// "other", "layer_norm_forward", ..., "attention_backward".
std::string_view kernel_class_name(KernelClass c);
std::optional<KernelClass> parse_kernel_class(std::string_view name);

// `kernels` launches of one class moving `bytes` (read + written) in all.
struct KernelCost {
  KernelClass kind = KernelClass::kOther;
  int64_t bytes = 0;
  int kernels = 0;
  bool operator==(const KernelCost&) const = default;
};

// The memory-bound kernels of a layer's forward and backward besides its GEMMs, for one micro-batch:
// bytes read + written and kernel launches, by class. For an MLP these are the CUDA workload's own
// kernels (backends/cuda/workload_mlp.cu): the input generator (first layer), bias + ReLU, the loss
// and its gradient (last layer); backward: the bias gradient (two kernels) and the ReLU mask of the
// input gradient. For a decoder, the kernels docs/decoder.md writes (formulas in gemm.cpp):
// LayerNorms with their fp32 statistics, bias adds after the GEMMs' rounding, the activation,
// residual adds, the fused attention's own traffic (q, k, v, o, lse: no s x s matrix; its launches
// are counted with its GEMM entries), row sums for bias and LayerNorm gradients (partial sums, then a
// fold), the embedding's gather and scatter, the cross-entropy and dlogits.
struct ElementwiseCost {
  std::vector<KernelCost> fwd, bwd;
  int64_t fwd_bytes() const { return bytes_of(fwd); }
  int64_t bwd_bytes() const { return bytes_of(bwd); }
  int fwd_kernels() const { return kernels_of(fwd); }
  int bwd_kernels() const { return kernels_of(bwd); }
  static int64_t bytes_of(const std::vector<KernelCost>& v);
  static int kernels_of(const std::vector<KernelCost>& v);
};
ElementwiseCost layer_elementwise(const ModelDesc& m, size_t index, int64_t micro_batch, int act_bytes);
// The bytes of class `c` in a cost's forward and backward.
int64_t class_bytes(const ElementwiseCost& cost, KernelClass c);

}  // namespace tf::core
