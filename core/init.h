// Initial decoder weights (docs/decoder.md, "Initialisation"): GPT-2's rule per tensor, drawn from a
// counter-based generator of (seed, model-order element), so every rank, ratio and world size starts
// from the same weights.
#pragma once

#include <cstdint>
#include <span>

#include "core/model.h"

namespace tf::core {

inline constexpr double kInitStd = 0.02;  // GPT-2's normal(0, 0.02) for weights and embeddings

// How one tensor starts: normal(0, std), or the constant `value` (biases 0, LayerNorm weights 1).
struct TensorInit {
  bool normal = false;
  double std = 0;    // normal: the standard deviation
  double value = 0;  // constant
};
// docs/decoder.md's rule: weights and embeddings normal(0, 0.02), the residual projections
// (attn.out.weight, mlp.fc2.weight) normal(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm weights 1.
// Throws InputError for an MLP (its workload has its own data) or a tensor of another model.
TensorInit tensor_init(const ModelDesc& model, const TensorDesc& tensor);

// A standard normal draw for model-order element `element`: Box-Muller in double on two uniforms,
// splitmix64(mix(seed, kInitStream, 2 * element)) and (..., 2 * element + 1).
double init_standard_normal(uint64_t seed, int64_t element);

// Fills out[i] with the initial fp32 weight of element first + i (the normal draw times std,
// rounded once to float, or the constant). [first, first + out.size()) must lie inside the model's
// parameters. Splits the range over `threads` threads (0: the machine's cores); the values do not
// depend on the split. Throws InputError for a bad range, RuntimeFailure if a thread cannot start.
void init_weights(const ModelDesc& model, uint64_t seed, int64_t first, std::span<float> out, int threads = 0);
// The same, and each value's bf16 rounding (f32_to_bf16) into lp[i] by the thread that drew it (what the
// engine uploads as the replica's copy; one pass instead of a serial one after it). Throws InputError
// unless lp.size() == out.size().
void init_weights(const ModelDesc& model, uint64_t seed, int64_t first, std::span<float> out, std::span<uint16_t> lp,
                  int threads = 0);

}  // namespace tf::core
