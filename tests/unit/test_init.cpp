// Initial decoder weights: the per-tensor rule, the distribution, and independence from the range split and threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/init.h"
#include "core/model.h"
#include "core/optim/dtype.h"

using namespace tf::core;

namespace {

std::vector<float> all_weights(const ModelDesc& m, uint64_t seed, int threads) {
  std::vector<float> w(size_t(m.total_params));  // (total_params) fp32, model order
  init_weights(m, seed, 0, w, threads);
  return w;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(Init, RulePerTensorFollowsGpt2) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));  // 2 layers: residual std 0.02 / 2
  for (const TensorDesc& t : m.tensors) {
    const TensorInit r = tensor_init(m, t);
    const std::string& n = t.name;
    if (n.ends_with("ln1.weight") || n.ends_with("ln2.weight") || n == "final_ln.weight") {
      EXPECT_FALSE(r.normal) << n;
      EXPECT_EQ(r.value, 1.0) << n;
    } else if (n.ends_with(".bias")) {
      EXPECT_FALSE(r.normal) << n;
      EXPECT_EQ(r.value, 0.0) << n;
    } else if (n.ends_with("attn.out.weight") || n.ends_with("mlp.fc2.weight")) {
      EXPECT_TRUE(r.normal) << n;
      EXPECT_DOUBLE_EQ(r.std, 0.01) << n;
    } else {
      EXPECT_TRUE(r.normal) << n;
      EXPECT_EQ(r.std, 0.02) << n;
    }
  }
  // OPT's projections and an untied head are weights: 0.02
  ModelSpec s = model_preset("opt-tiny-proj");
  s.decoder.tied_embeddings = false;
  const ModelDesc o = describe_model(s);
  for (const char* n : {"embed.project_in.weight", "head.project_out.weight", "lm_head.weight"})
    EXPECT_EQ(tensor_init(o, *o.find_tensor(n)).std, 0.02) << n;
}

TEST(Init, ValuesFollowTheRuleElementwise) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));
  const std::vector<float> w = all_weights(m, 7, 2);
  for (const TensorDesc& t : m.tensors) {
    const TensorInit r = tensor_init(m, t);
    double sum = 0, sq = 0;
    int64_t within1 = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      const int64_t e = t.offset + i;
      const float v = w[size_t(e)];
      if (!r.normal) {
        ASSERT_EQ(v, float(r.value)) << t.name << "[" << i << "]";
        continue;
      }
      // each element is the standard draw of its index times std, rounded once to float
      ASSERT_TRUE(same_bits(v, float(r.std * init_standard_normal(7, e)))) << t.name << "[" << i << "]";
      sum += v;
      sq += double(v) * v;
      within1 += std::abs(v) <= r.std;
    }
    if (!r.normal || t.numel < 16384) continue;
    // normal(0, std): for n >= 16384 draws the sample mean is within 5 standard errors (5 std /
    // sqrt(n) <= 0.04 std), the sample std within 3% (its standard error is std / sqrt(2n) = 0.55%),
    // and the share within one std 0.6827 +- 0.02 (binomial standard error 0.0036).
    const double n = double(t.numel), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_LT(std::abs(mean), 5 * r.std / std::sqrt(n)) << t.name;
    EXPECT_NEAR(sd / r.std, 1.0, 0.03) << t.name;
    EXPECT_NEAR(double(within1) / n, 0.6827, 0.02) << t.name;
  }
}

TEST(Init, RangesAndThreadsGiveTheSameBits) {
  const ModelDesc m = describe_model(model_preset("opt-tiny-proj"));
  const std::vector<float> one = all_weights(m, 3, 1), many = all_weights(m, 3, 7);
  ASSERT_EQ(one.size(), many.size());
  for (size_t i = 0; i < one.size(); ++i) ASSERT_TRUE(same_bits(one[i], many[i])) << i;
  // a shard's ranges, cutting through tensors at odd places
  for (int64_t first : {int64_t(0), int64_t(1), int64_t(1279), int64_t(5000), m.total_params - 3}) {
    const int64_t count = std::min<int64_t>(3001, m.total_params - first);
    std::vector<float> part(static_cast<size_t>(count));  // (count) fp32
    init_weights(m, 3, first, part, 3);
    for (int64_t i = 0; i < count; ++i) ASSERT_TRUE(same_bits(part[size_t(i)], one[size_t(first + i)])) << first + i;
  }
  // another seed gives other draws (the constants, biases and LayerNorm weights, agree)
  const std::vector<float> other = all_weights(m, 4, 2);
  int64_t draws = 0, equal = 0;
  for (const TensorDesc& t : m.tensors) {
    if (!tensor_init(m, t).normal) continue;
    for (int64_t e = t.offset; e < t.offset + t.numel; ++e) draws++, equal += one[size_t(e)] == other[size_t(e)];
  }
  EXPECT_GT(draws, 20000);
  EXPECT_LT(equal, 5);
}

// With a bf16 output the same values, and each one's f32_to_bf16 beside it, for any range and thread count
// (the engine draws a chunk's GPU part and writes its CPU part straight into the host master this way).
TEST(Init, TheBf16OutputIsEachValuesRounding) {
  const ModelDesc m = describe_model(model_preset("opt-tiny-proj"));
  const std::vector<float> ref = all_weights(m, 5, 1);
  for (int threads : {1, 4}) {
    for (int64_t first : {int64_t(0), int64_t(777), m.total_params - 4097}) {
      const int64_t count = std::min<int64_t>(70001, m.total_params - first);
      std::vector<float> part(static_cast<size_t>(count));      // (count) fp32
      std::vector<uint16_t> lp(static_cast<size_t>(count), 0);  // (count) bf16
      init_weights(m, 5, first, part, lp, threads);
      int64_t rounded = 0;  // values whose bf16 differs from their top half (rounding, not truncation, was checked)
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_TRUE(same_bits(part[size_t(i)], ref[size_t(first + i)])) << first + i;
        ASSERT_EQ(lp[size_t(i)], f32_to_bf16(part[size_t(i)])) << first + i;
        uint32_t bits = 0;
        std::memcpy(&bits, &part[size_t(i)], 4);
        rounded += lp[size_t(i)] != uint16_t(bits >> 16);
      }
      EXPECT_GT(rounded, count / 8) << "first " << first;
    }
  }
  std::vector<float> four(4);
  std::vector<uint16_t> three(3);
  EXPECT_THROW(init_weights(m, 5, 0, four, three), InputError);
}

TEST(Init, BadRangesAndModelsAreInputErrors) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));
  std::vector<float> buf(10);
  EXPECT_THROW(init_weights(m, 1, -1, buf), InputError);
  EXPECT_THROW(init_weights(m, 1, m.total_params - 9, buf), InputError);
  try {
    init_weights(m, 1, m.total_params, buf);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("outside model 'gpt-tiny'"), std::string::npos) << e.what();
  }
  init_weights(m, 1, m.total_params - 10, buf);  // the last ten: fine
  const ModelDesc mlp = describe_model(make_mlp({4, 4}));
  EXPECT_THROW(init_weights(mlp, 1, 0, buf), InputError);
  TensorDesc foreign = m.tensors[3];
  foreign.name = "layers.9.ln1.weight";
  EXPECT_THROW(tensor_init(m, foreign), InputError);
}
