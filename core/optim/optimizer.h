// Optimizer contract shared by every backend: kinds, hyper-parameters, per-step scalars, byte counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/optim/dtype.h"

namespace tf::core {

enum class OptimizerKind : uint8_t { kAdamW, kAdam, kAdagrad, kLion };

std::string_view optimizer_name(OptimizerKind k);
// Accepts the torch/DeepSpeed spellings, case-insensitive: adamw, adam, adagrad, lion. Throws InputError.
OptimizerKind parse_optimizer(std::string_view s);

// Number of fp32 state arrays beside the master weight: AdamW/Adam 2 (m, v), Adagrad 1 (sum), Lion 1 (m).
constexpr int state_count(OptimizerKind k) { return (k == OptimizerKind::kAdamW || k == OptimizerKind::kAdam) ? 2 : 1; }

// torch.optim semantics. Adam adds weight_decay*param to the gradient (L2); AdamW and Lion decay the
// weight (decoupled); Adagrad adds L2 like torch.optim.Adagrad.
struct HyperParams {
  double lr = 1e-3;
  double beta1 = 0.9;    // Lion: interpolation beta for the update direction
  double beta2 = 0.999;  // Lion: momentum beta
  double eps = 1e-8;
  double weight_decay = 0.0;
  double lr_decay = 0.0;                   // Adagrad only
  double initial_accumulator_value = 0.0;  // Adagrad only
};

// Defaults that match torch.optim (and the Lion paper) for a kind.
HyperParams default_hyper_params(OptimizerKind k);

// Throws InputError naming the field, its value and the accepted range:
// lr >= 0, betas in [0, 1), eps > 0 (Adam*, Adagrad), weight_decay >= 0, lr_decay >= 0,
// initial_accumulator_value >= 0, all finite.
void validate(OptimizerKind k, const HyperParams& hp);

// Scalars computed once per step on the host (in double, rounded once to float) and handed to every
// kernel as the same floats. The per-element rule (update_rules.h) uses only these.
struct StepScalars {
  float grad_scale = 1.f;  // 1/loss_scale x clip coefficient
  float beta1 = 0.f, one_minus_beta1 = 0.f;
  float beta2 = 0.f, one_minus_beta2 = 0.f;
  float step_size = 0.f;     // AdamW/Adam: lr/(1-beta1^t); Adagrad: lr/(1+(t-1)*lr_decay); Lion: lr
  float inv_sqrt_bc2 = 1.f;  // AdamW/Adam: 1/sqrt(1-beta2^t)
  float eps = 0.f;
  float decay = 1.f;   // AdamW/Lion: 1 - lr*weight_decay; else 1
  float l2 = 0.f;      // Adam/Adagrad: weight_decay; else 0
  int32_t has_l2 = 0;  // l2 != 0 (torch skips the add when weight_decay == 0)
};

// step is 1-based (the first update is step 1). grad_scale = 1/loss_scale x clip coefficient.
StepScalars make_step_scalars(OptimizerKind k, const HyperParams& hp, int64_t step, double grad_scale);

// Bytes one element moves through memory in one fused update: the gradient read, param + states
// read and written, and the low-precision copy written. E.g. AdamW, bf16 grad, bf16 copy: 2+12 read,
// 12+2 written = 28.
struct ElementBytes {
  size_t read = 0, written = 0;
  size_t total() const { return read + written; }
};
ElementBytes bytes_per_element(OptimizerKind k, DType grad, DType param_copy);

// FLOPs per element, counting each add/mul/fma/div/sqrt as one (for reporting arithmetic intensity).
int flops_per_element(OptimizerKind k);

}  // namespace tf::core
