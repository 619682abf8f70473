// Hyper-parameter validation, per-step scalars and byte counts.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/optim/optimizer.h"

using namespace tf::core;

namespace {
std::string error_of(OptimizerKind k, const HyperParams& hp) {
  try {
    validate(k, hp);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Optimizer, RejectsOutOfRangeHyperParams) {
  HyperParams hp = default_hyper_params(OptimizerKind::kAdamW);
  EXPECT_EQ(error_of(OptimizerKind::kAdamW, hp), "");
  hp.lr = -1e-3;
  EXPECT_NE(error_of(OptimizerKind::kAdamW, hp).find("'lr' = -0.001 is out of range"), std::string::npos);
  hp = default_hyper_params(OptimizerKind::kAdam);
  hp.beta1 = 1.0;
  EXPECT_NE(error_of(OptimizerKind::kAdam, hp).find("'beta1' = 1 is out of range; expected [0, 1)"), std::string::npos);
  hp = default_hyper_params(OptimizerKind::kAdam);
  hp.beta2 = -0.1;
  EXPECT_NE(error_of(OptimizerKind::kAdam, hp).find("beta2"), std::string::npos);
  hp = default_hyper_params(OptimizerKind::kAdagrad);
  hp.eps = 0;
  EXPECT_NE(error_of(OptimizerKind::kAdagrad, hp).find("'eps' = 0"), std::string::npos);
  hp = default_hyper_params(OptimizerKind::kAdamW);
  hp.weight_decay = NAN;
  EXPECT_NE(error_of(OptimizerKind::kAdamW, hp).find("weight_decay"), std::string::npos);
  hp = default_hyper_params(OptimizerKind::kLion);
  EXPECT_EQ(error_of(OptimizerKind::kLion, hp), "");  // eps unused by Lion
}

TEST(Optimizer, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_optimizer("AdamW"), OptimizerKind::kAdamW);
  EXPECT_EQ(parse_optimizer("lion"), OptimizerKind::kLion);
  EXPECT_THROW(parse_optimizer("sgd"), InputError);
}

TEST(Optimizer, StepScalarsFollowTorchFormulas) {
  HyperParams hp;
  hp.lr = 1e-3;
  hp.beta1 = 0.9;
  hp.beta2 = 0.999;
  hp.weight_decay = 0.01;
  const StepScalars s = make_step_scalars(OptimizerKind::kAdamW, hp, 3, 0.5);
  EXPECT_EQ(s.grad_scale, 0.5f);
  EXPECT_EQ(s.step_size, float(1e-3 / (1 - std::pow(0.9, 3))));
  EXPECT_EQ(s.inv_sqrt_bc2, float(1 / std::sqrt(1 - std::pow(0.999, 3))));
  EXPECT_EQ(s.decay, float(1 - 1e-3 * 0.01));
  EXPECT_EQ(s.has_l2, 0);
  const StepScalars a = make_step_scalars(OptimizerKind::kAdam, hp, 1, 1.0);
  EXPECT_EQ(a.decay, 1.0f);
  EXPECT_EQ(a.l2, 0.01f);
  EXPECT_EQ(a.has_l2, 1);
  HyperParams ag = default_hyper_params(OptimizerKind::kAdagrad);
  ag.lr_decay = 0.5;
  EXPECT_EQ(make_step_scalars(OptimizerKind::kAdagrad, ag, 3, 1).step_size, float(1e-2 / 2.0));
  EXPECT_THROW(make_step_scalars(OptimizerKind::kAdamW, hp, 0, 1), InputError);
  EXPECT_THROW(make_step_scalars(OptimizerKind::kAdamW, hp, 1, NAN), InputError);
}

TEST(Optimizer, BytesPerElementCountsEveryStream) {
  // AdamW, bf16 grad, bf16 copy: 2+12 read, 12+2 written
  const ElementBytes b = bytes_per_element(OptimizerKind::kAdamW, DType::kBF16, DType::kBF16);
  EXPECT_EQ(b.read, 14u);
  EXPECT_EQ(b.written, 14u);
  // torch's fused AdamW: fp32 grad, no copy: 16 read, 12 written
  EXPECT_EQ(bytes_per_element(OptimizerKind::kAdamW, DType::kF32, DType::kNone).total(), 28u);
  EXPECT_EQ(bytes_per_element(OptimizerKind::kLion, DType::kF16, DType::kF16).total(), 2u + 8u + 8u + 2u);
}
