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
  bool operator==(const LayerGemm&) const = default;
};

// The forward GEMMs of one layer for one micro-batch; their FLOPs add up to model.cpp's count.
// Linear (MLP): Y (B, out) = X (B, in) Wt. Decoder block: QKV, QK^T and PV per (sample, head) as a
// strided batch, out-projection, fc1, fc2. Head: the logits. Embedding: none (a gather).
std::vector<LayerGemm> forward_gemms(const ModelDesc& m, const LayerDesc& l, int64_t micro_batch);
// The backward of each forward C = A x B: the input gradient dA (m, k) = dC Bt (unless input_grad is
// false: the model's first linear layer, whose input is data) and the weight gradient as the
// workloads compute it, dBt (n, k) = dCt A.
std::vector<LayerGemm> backward_gemms(const std::vector<LayerGemm>& forward, bool input_grad = true);
// Whether layer `index`'s backward computes its input's gradient: every layer but an MLP's first.
bool layer_needs_input_grad(const ModelDesc& m, size_t index);

// The memory-bound kernels of a layer's forward and backward besides its GEMMs, for one micro-batch:
// bytes read + written and kernel launches. For an MLP these are the CUDA workload's own kernels
// (backends/cuda/workload_mlp.cu): the input generator (first layer), bias + ReLU, the loss and its
// gradient (last layer); backward: the bias gradient (two kernels) and the ReLU mask of the input
// gradient. For a decoder (simulator only, not yet measured) an estimate of a GEMM-based block: two
// layer norms, the attention softmax over (seq, seq) per head, GeLU, two residual adds and the bias
// adds, and twice that in backward; the embedding's gather; the head's softmax and cross-entropy.
struct ElementwiseCost {
  int64_t fwd_bytes = 0, bwd_bytes = 0;
  int fwd_kernels = 0, bwd_kernels = 0;
};
ElementwiseCost layer_elementwise(const ModelDesc& m, size_t index, int64_t micro_batch, int act_bytes);

}  // namespace tf::core
