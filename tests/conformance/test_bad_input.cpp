// Bad input on every backend: a clear error, no crash, and no buffer modified.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "tests/backends_under_test.h"

using namespace tf;
using backend::BufferView;
using backend::OptimChunk;
using core::DType;
using core::OptimizerKind;

namespace {

class BadInput : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (auto& e : test::backends_under_test())
      if (e.name == GetParam()) entry_ = e;
    if (!entry_.unavailable.empty()) GTEST_SKIP() << entry_.unavailable;
    be_ = entry_.make();
    const size_t bytes = (n_ + 64) * 4;
    for (auto* b : {&p_, &m_, &v_, &g_, &c_}) *b = be_->allocate(bytes);
    std::vector<uint8_t> pattern(bytes);
    for (size_t i = 0; i < bytes; ++i) pattern[i] = uint8_t(i * 7 + 3);
    for (auto* b : {&p_, &m_, &v_, &g_, &c_}) be_->upload(**b, pattern.data(), bytes);
    before_ = snapshot();
  }
  std::vector<uint8_t> snapshot() {
    std::vector<uint8_t> all;
    for (auto* b : {&p_, &m_, &v_, &g_, &c_}) {
      std::vector<uint8_t> x((*b)->bytes());
      be_->download(x.data(), **b, x.size());
      all.insert(all.end(), x.begin(), x.end());
    }
    return all;
  }
  OptimChunk good() {
    OptimChunk c;
    c.param = {p_->data(), n_, DType::kF32};
    c.state1 = {m_->data(), n_, DType::kF32};
    c.state2 = {v_->data(), n_, DType::kF32};
    c.grad = {g_->data(), n_, DType::kBF16};
    c.param_copy = {c_->data(), n_, DType::kBF16};
    return c;
  }
  // Runs a step that must fail with InputError whose message contains `needle`, and checks that
  // no buffer changed.
  void expect_rejected(const OptimChunk& c, const std::string& needle, OptimizerKind k = OptimizerKind::kAdamW) {
    core::StepScalars s = core::make_step_scalars(k, core::default_hyper_params(k), 1, 1.0);
    try {
      be_->step(k, std::span<const OptimChunk>(&c, 1), s);
      ADD_FAILURE() << "accepted bad input, expected an error containing '" << needle << "'";
    } catch (const core::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(snapshot() == before_) << "a rejected call modified a buffer";
  }

  const size_t n_ = 1000;
  test::BackendEntry entry_;
  std::unique_ptr<backend::OptimizerBackend> be_;
  std::unique_ptr<backend::Buffer> p_, m_, v_, g_, c_;
  std::vector<uint8_t> before_;
};

TEST_P(BadInput, MismatchedSizes) {
  OptimChunk c = good();
  c.state2.count = n_ - 1;
  expect_rejected(c, "buffer size mismatch: state2 has 999 elements, param has 1000");
  c = good();
  c.grad.count = n_ + 1;
  expect_rejected(c, "grad has 1001 elements");
}

TEST_P(BadInput, MisalignedPointers) {
  OptimChunk c = good();
  c.param.data = static_cast<char*>(c.param.data) + 2;
  expect_rejected(c, "param pointer");
  if (be_->caps().buffer_alignment >= 16) {
    c = good();
    c.state1.data = static_cast<float*>(c.state1.data) + 1;  // 4-byte aligned, not 16
    expect_rejected(c, "not aligned to 16 bytes");
  }
}

TEST_P(BadInput, WrongDtypesAndStates) {
  OptimChunk c = good();
  c.param.dtype = DType::kBF16;
  expect_rejected(c, "param must be fp32");
  c = good();
  c.grad.dtype = DType::kNone;
  expect_rejected(c, "grad dtype");
  c = good();
  c.param_copy.dtype = DType::kF32;
  expect_rejected(c, "param_copy must be bf16, fp16 or none");
  c = good();  // Lion has one state: a second one is a caller bug
  expect_rejected(c, "lion has one state", OptimizerKind::kLion);
  c = good();
  c.state2 = {};
  expect_rejected(c, "adamw needs state2");
}

TEST_P(BadInput, OverlappingBuffers) {
  OptimChunk c = good();
  c.state1.data = static_cast<float*>(c.param.data) + 16;
  expect_rejected(c, "overlap");
}

// An out-of-place source (OptimChunk::from) must be whole and must not overlap what the pass writes; the
// GPU backend refuses one (only the CPU segment speculates).
TEST_P(BadInput, OutOfPlaceSources) {
  std::vector<float> src(3 * n_ + 64, 0.f);  // (3n) fp32: master, state1, state2
  OptimChunk c = good();
  c.from = {src.data(), src.data() + n_, nullptr};
  expect_rejected(c, "out-of-place source needs");
  c = good();
  c.from = {static_cast<const float*>(c.state1.data), src.data() + n_, src.data() + 2 * n_};
  expect_rejected(c, "overlaps state1");
  if (be_->caps().device_memory) {
    c = good();
    c.from = {src.data(), src.data() + n_, src.data() + 2 * n_};
    expect_rejected(c, "CPU backend only");
  }
}

TEST_P(BadInput, NullData) {
  OptimChunk c = good();
  c.grad.data = nullptr;
  expect_rejected(c, "grad is null");
}

TEST_P(BadInput, HyperParametersOutOfRangeNeverReachTheKernel) {
  core::HyperParams hp = core::default_hyper_params(OptimizerKind::kAdamW);
  hp.beta2 = 1.5;
  EXPECT_THROW(core::make_step_scalars(OptimizerKind::kAdamW, hp, 1, 1.0), core::InputError);
  hp = core::default_hyper_params(OptimizerKind::kAdam);
  hp.eps = -1;
  EXPECT_THROW(core::make_step_scalars(OptimizerKind::kAdam, hp, 1, 1.0), core::InputError);
  EXPECT_THROW(core::parse_optimizer("adafactor"), core::InputError);
  EXPECT_TRUE(snapshot() == before_);
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (auto& e : test::backends_under_test()) out.push_back(e.name);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BadInput, testing::ValuesIn(names()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
