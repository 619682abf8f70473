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
// The backward of each forward C = A x B: the input gradient dA (m, k) = dC Bt and the weight gradient
// as the workloads compute it, dBt (n, k) = dCt A.
std::vector<LayerGemm> backward_gemms(const std::vector<LayerGemm>& forward);

}  // namespace tf::core
