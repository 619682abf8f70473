// Optimizer contract: parsing, validation, per-step scalars and byte counts.
#include "core/optim/optimizer.h"

#include <cctype>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/strings.h"

namespace tf::core {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kNone: return "none";
  }
  return "?";
}

DType parse_dtype(std::string_view s, std::string_view what) {
  const std::string l = ascii_lower(s);
  if (l == "fp32" || l == "f32" || l == "float32" || l == "float") return DType::kF32;
  if (l == "bf16" || l == "bfloat16") return DType::kBF16;
  if (l == "fp16" || l == "f16" || l == "float16" || l == "half") return DType::kF16;
  if (l == "none") return DType::kNone;
  throw InputError(std::string(what) + ": unknown dtype '" + std::string(s) +
                   "' (expected one of fp32, bf16, fp16, none)");
}

std::string_view optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdagrad: return "adagrad";
    case OptimizerKind::kLion: return "lion";
  }
  return "?";
}

OptimizerKind parse_optimizer(std::string_view s) {
  const std::string l = ascii_lower(s);
  if (l == "adamw") return OptimizerKind::kAdamW;
  if (l == "adam") return OptimizerKind::kAdam;
  if (l == "adagrad") return OptimizerKind::kAdagrad;
  if (l == "lion") return OptimizerKind::kLion;
  throw InputError("unknown optimizer '" + std::string(s) + "' (expected one of adamw, adam, adagrad, lion)");
}

HyperParams default_hyper_params(OptimizerKind k) {
  HyperParams hp;
  switch (k) {
    case OptimizerKind::kAdamW: hp.weight_decay = 1e-2; break;
    case OptimizerKind::kAdam: break;
    case OptimizerKind::kAdagrad:
      hp.lr = 1e-2;
      hp.eps = 1e-10;
      break;
    case OptimizerKind::kLion:
      hp.lr = 1e-4;
      hp.beta2 = 0.99;
      hp.eps = 0;
      break;
  }
  return hp;
}

namespace {
void check(bool ok, OptimizerKind k, const char* field, double v, const char* range) {
  if (ok) return;
  std::ostringstream os;
  os << optimizer_name(k) << ": hyper-parameter '" << field << "' = " << v << " is out of range; expected " << range;
  throw InputError(os.str());
}
}  // namespace

void validate(OptimizerKind k, const HyperParams& hp) {
  auto fin = [](double v) { return std::isfinite(v); };
  check(fin(hp.lr) && hp.lr >= 0, k, "lr", hp.lr, "a finite value >= 0");
  check(fin(hp.weight_decay) && hp.weight_decay >= 0, k, "weight_decay", hp.weight_decay, "a finite value >= 0");
  if (k != OptimizerKind::kAdagrad) {
    check(fin(hp.beta1) && hp.beta1 >= 0 && hp.beta1 < 1, k, "beta1", hp.beta1, "[0, 1)");
    check(fin(hp.beta2) && hp.beta2 >= 0 && hp.beta2 < 1, k, "beta2", hp.beta2, "[0, 1)");
  }
  if (k != OptimizerKind::kLion) check(fin(hp.eps) && hp.eps > 0, k, "eps", hp.eps, "a finite value > 0");
  if (k == OptimizerKind::kAdagrad) {
    check(fin(hp.lr_decay) && hp.lr_decay >= 0, k, "lr_decay", hp.lr_decay, "a finite value >= 0");
    check(fin(hp.initial_accumulator_value) && hp.initial_accumulator_value >= 0, k, "initial_accumulator_value",
          hp.initial_accumulator_value, "a finite value >= 0");
  }
  // decoupled decay must keep the weight's sign: 1 - lr*wd in [0, 1]
  if (k == OptimizerKind::kAdamW || k == OptimizerKind::kLion)
    check(hp.lr * hp.weight_decay <= 1, k, "weight_decay", hp.weight_decay, "lr*weight_decay <= 1");
}

StepScalars make_step_scalars(OptimizerKind k, const HyperParams& hp, int64_t step, double grad_scale) {
  validate(k, hp);
  if (step < 1) throw InputError("optimizer step must be >= 1 (1-based), got " + std::to_string(step));
  if (!std::isfinite(grad_scale) || grad_scale < 0)
    throw InputError("grad_scale must be finite and >= 0, got " + std::to_string(grad_scale));
  StepScalars s;
  s.grad_scale = float(grad_scale);
  s.eps = float(hp.eps);
  const double t = double(step);
  switch (k) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam: {
      const double bc1 = 1.0 - std::pow(hp.beta1, t);
      const double bc2 = 1.0 - std::pow(hp.beta2, t);
      s.beta1 = float(hp.beta1);
      s.one_minus_beta1 = float(1.0 - hp.beta1);
      s.beta2 = float(hp.beta2);
      s.one_minus_beta2 = float(1.0 - hp.beta2);
      s.step_size = float(hp.lr / bc1);
      s.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
      if (k == OptimizerKind::kAdamW) {
        s.decay = float(1.0 - hp.lr * hp.weight_decay);
      } else {
        s.l2 = float(hp.weight_decay);
        s.has_l2 = hp.weight_decay != 0;
      }
      break;
    }
    case OptimizerKind::kAdagrad:
      s.step_size = float(hp.lr / (1.0 + (t - 1.0) * hp.lr_decay));
      s.l2 = float(hp.weight_decay);
      s.has_l2 = hp.weight_decay != 0;
      break;
    case OptimizerKind::kLion:
      s.beta1 = float(hp.beta1);
      s.one_minus_beta1 = float(1.0 - hp.beta1);
      s.beta2 = float(hp.beta2);
      s.one_minus_beta2 = float(1.0 - hp.beta2);
      s.step_size = float(hp.lr);
      s.decay = float(1.0 - hp.lr * hp.weight_decay);
      break;
  }
  return s;
}

ElementBytes bytes_per_element(OptimizerKind k, DType grad, DType param_copy) {
  const size_t fp32_arrays = 1 + size_t(state_count(k));  // master + states, read and written
  ElementBytes b;
  b.read = dtype_bytes(grad) + 4 * fp32_arrays;
  b.written = 4 * fp32_arrays + dtype_bytes(param_copy);
  return b;
}

int flops_per_element(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kAdamW: return 10;   // scale, 2x(mul+fma) moments, sqrt, fma, div, decay, fma
    case OptimizerKind::kAdam: return 10;    // scale, l2 fma, moments 4, sqrt, fma, div, fma
    case OptimizerKind::kAdagrad: return 6;  // scale, l2 fma, fma, sqrt, add, div, fma
    case OptimizerKind::kLion: return 8;     // scale, mul+fma, sign, decay, fma, mul+fma
  }
  return 0;
}

}  // namespace tf::core
