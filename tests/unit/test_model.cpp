// Model descriptions: preset sizes against published counts, tensor lists, FLOPs, activations, validation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/model.h"

using namespace tf::core;

namespace {

std::string error_of(const ModelSpec& spec) {
  try {
    validate(spec);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Closed form for the decoder described in model.h: per block 4h^2 + 2hf + 9h + f (QKV, out, fc1,
// fc2 with biases, two LNs), embeddings (V + P)h, final LN 2h, untied head Vh.
int64_t closed_form(const DecoderShape& d) {
  const int64_t h = d.hidden, f = d.ffn;
  return d.layers * (4 * h * h + 2 * h * f + 9 * h + f) + (d.vocab + d.max_positions) * h + 2 * h +
         (d.tied_embeddings ? 0 : d.vocab * h);
}

}  // namespace

TEST(Model, Gpt2MediumMatchesHuggingFaceCountExactly) {
  // HF transformers "gpt2-medium": 354,823,168 parameters (tied LM head).
  EXPECT_EQ(parameter_count(model_preset("gpt2-350m")), 354'823'168);
}

TEST(Model, PresetsMatchPublishedSizesWithin2Percent) {
  for (const char* name : {"gpt2-350m", "opt-6.7b", "opt-13b", "opt-30b", "opt-175b"}) {
    const ModelSpec spec = model_preset(name);
    const double n = double(parameter_count(spec));
    const auto published = published_parameter_count(name);
    ASSERT_TRUE(published.has_value()) << name;
    EXPECT_LT(std::abs(n / *published - 1.0), 0.02) << name << ": " << n << " vs published " << *published;
    EXPECT_EQ(int64_t(n), closed_form(describe_model(spec).spec.decoder)) << name;
  }
  // OPT-13B/30B/175B as HF's configs give them (12.85e9, 29.97e9, 174.6e9).
  EXPECT_EQ(parameter_count(model_preset("opt-13b")), 12'853'473'280);
  EXPECT_EQ(parameter_count(model_preset("opt-30b")), 29'974'540'288);
  EXPECT_EQ(parameter_count(model_preset("opt-175b")), 174'604'468'224);
}

TEST(Model, Gpt2TenBillionIsTheTutorialShape) {
  // The ZeRO-Offload tutorial calls 50 x 4096 "10B": 12*L*h^2 is 10.07e9 and the embeddings add
  // 0.21e9, so the real count is 2.8% above the round name (stated in model.cpp, not hidden).
  const ModelSpec spec = model_preset("gpt2-10b");
  EXPECT_EQ(spec.decoder.layers, 50);
  EXPECT_EQ(spec.decoder.hidden, 4096);
  EXPECT_EQ(spec.decoder.heads, 32);
  const double n = double(parameter_count(spec));
  EXPECT_EQ(int64_t(n), closed_form(describe_model(spec).spec.decoder));
  EXPECT_NEAR(n / 10e9, 1.028, 0.001);
  EXPECT_GT(12.0 * 50 * 4096.0 * 4096.0 / 10e9, 1.0);
}

TEST(Model, PresetLookupIsCaseInsensitiveWithAliases) {
  EXPECT_EQ(model_preset("GPT-350M").name, "gpt2-350m");
  EXPECT_EQ(model_preset("gpt-350m").name, "gpt2-350m");
  EXPECT_EQ(model_preset("OPT-30B").name, "opt-30b");
  EXPECT_EQ(model_preset("gpt-10b").name, "gpt2-10b");
  EXPECT_EQ(model_preset("toy-mlp").type, ModelType::kMlp);
  try {
    model_preset("opt-66b");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model preset 'opt-66b'; allowed: gpt2-350m"), std::string::npos);
  }
}

TEST(Model, DecoderTensorsInForwardOrder) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));  // 2 layers, h 64, f 256, V 512, P 64
  ASSERT_EQ(m.layers.size(), 4u);                                // embed, 2 blocks, head
  EXPECT_EQ(m.layers[0].kind, LayerKind::kEmbedding);
  EXPECT_EQ(m.layers[1].kind, LayerKind::kBlock);
  EXPECT_EQ(m.layers[3].kind, LayerKind::kHead);
  EXPECT_EQ(m.layers[3].shared_tensor, 0);  // tied LM head reads the token embedding
  ASSERT_EQ(m.tensors.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(m.tensors[0].name, "embed.tokens.weight");
  EXPECT_EQ(m.tensors[0].shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(m.tensors[1].name, "embed.positions.weight");
  EXPECT_EQ(m.tensors[2].name, "layers.0.ln1.weight");
  EXPECT_EQ(m.tensors[4].name, "layers.0.attn.qkv.weight");
  EXPECT_EQ(m.tensors[4].shape, (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(m.tensors[10].name, "layers.0.mlp.fc1.weight");
  EXPECT_EQ(m.tensors[10].shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(m.tensors[12].name, "layers.0.mlp.fc2.weight");
  EXPECT_EQ(m.tensors[12].shape, (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(m.tensors.back().name, "final_ln.bias");
  // layers own contiguous runs that cover the list; counts add up
  int64_t total = 0;
  size_t next = 0;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    EXPECT_EQ(m.layers[l].first_tensor, next);
    int64_t sum = 0;
    for (size_t t = next; t < next + m.layers[l].tensor_count; ++t) {
      EXPECT_EQ(m.tensors[t].layer, int32_t(l));
      int64_t prod = 1;
      for (int64_t d : m.tensors[t].shape) prod *= d;
      EXPECT_EQ(m.tensors[t].numel, prod);
      sum += m.tensors[t].numel;
    }
    EXPECT_EQ(sum, m.layers[l].params);
    total += sum;
    next += m.layers[l].tensor_count;
  }
  EXPECT_EQ(next, m.tensors.size());
  EXPECT_EQ(total, m.total_params);
  EXPECT_EQ(m.tokens_per_sample(), 64);
}

TEST(Model, UntiedHeadAddsItsWeight) {
  ModelSpec s = model_preset("gpt-tiny");
  const int64_t tied = parameter_count(s);
  s.decoder.tied_embeddings = false;
  const ModelDesc m = describe_model(s);
  EXPECT_EQ(m.total_params, tied + 512 * 64);
  EXPECT_EQ(m.tensors.back().name, "lm_head.weight");
  EXPECT_EQ(m.layers.back().shared_tensor, -1);
}

TEST(Model, FlopsPerToken) {
  const ModelDesc m = describe_model(model_preset("gpt2-350m"));
  const double h = 1024, s = 1024, v = 50257;
  const LayerDesc& block = m.layers[1];
  // Narayanan et al. 2021: 24*h^2 + 4*s*h per token per layer forward when ffn = 4h
  EXPECT_DOUBLE_EQ(block.fwd_flops_per_token, 24 * h * h + 4 * s * h);
  EXPECT_DOUBLE_EQ(block.bwd_flops_per_token, 2 * block.fwd_flops_per_token);
  EXPECT_DOUBLE_EQ(m.layers.back().fwd_flops_per_token, 2 * h * v);
  EXPECT_DOUBLE_EQ(m.layers[0].fwd_flops_per_token, 0);
  const double fwd = 24 * (24 * h * h + 4 * s * h) + 2 * h * v;
  EXPECT_DOUBLE_EQ(m.train_flops_per_token(false), 3 * fwd);
  EXPECT_DOUBLE_EQ(m.train_flops_per_token(true), 3 * fwd + 24 * (24 * h * h + 4 * s * h));

  const ModelDesc toy = describe_model(model_preset("toy-mlp"));
  ASSERT_EQ(toy.layers.size(), 4u);
  EXPECT_DOUBLE_EQ(toy.layers[0].fwd_flops_per_token, 2.0 * 4096 * 4096);
  EXPECT_EQ(toy.tokens_per_sample(), 1);
}

TEST(Model, ActivationBytesFollowKorthikanti) {
  const ModelDesc m = describe_model(model_preset("gpt2-350m"));
  const int64_t s = 1024, h = 1024, a = 16, b = 3, v = 50257;
  const ActivationBytes blk = activation_bytes(m, m.layers[1], b, 2);
  EXPECT_EQ(blk.full, 34 * s * b * h + 5 * a * s * s * b);  // the paper's 16-bit figure
  EXPECT_EQ(blk.checkpointed, 2 * s * b * h);
  const ActivationBytes blk32 = activation_bytes(m, m.layers[1], b, 4);
  EXPECT_EQ(blk32.full, s * b * h * 34 + 2 * 4 * s * b * 4 * h + a * s * s * b * 9);
  const ActivationBytes emb = activation_bytes(m, m.layers[0], b, 2);
  EXPECT_EQ(emb.full, s * b * h);
  EXPECT_EQ(emb.checkpointed, emb.full);
  const ActivationBytes head = activation_bytes(m, m.layers.back(), b, 2);
  EXPECT_EQ(head.full, 4 * s * b * h + 4 * s * b * v);
  // the spec-based form agrees
  EXPECT_EQ(activation_bytes(m.spec, LayerKind::kBlock, 0, b, 2).full, blk.full);

  const ModelDesc toy = describe_model(make_mlp({8, 16, 4}));
  EXPECT_EQ(activation_bytes(toy, toy.layers[0], 5, 2).full, 2 * 5 * 8);
  EXPECT_EQ(activation_bytes(toy, toy.layers[1], 5, 2).full, 2 * 5 * 16 + 4 * 5 * 4);
  EXPECT_THROW(activation_bytes(toy, toy.layers[0], 0, 2), InputError);
  EXPECT_THROW(activation_bytes(toy, toy.layers[0], 1, 3), InputError);
}

TEST(Model, ActivationOverflowIsAnInputError) {
  ModelSpec s = model_preset("opt-175b");
  s.decoder.seq = kMaxSeq;
  s.decoder.max_positions = kMaxSeq;
  const ModelDesc m = describe_model(s);
  try {
    activation_bytes(m, m.layers[1], int64_t(1) << 20, 4);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("overflows 64 bits"), std::string::npos);
  }
}

TEST(Model, ValidationNamesTheFieldAndRange) {
  ModelSpec s = model_preset("gpt-tiny");
  EXPECT_EQ(error_of(s), "");
  s.decoder.heads = 7;
  EXPECT_EQ(error_of(s), "model.heads: 7 does not divide hidden 64; allowed: a divisor of hidden");
  s = model_preset("gpt-tiny");
  s.decoder.layers = -2;
  EXPECT_EQ(error_of(s), "model.layers: -2 is out of range; allowed [1, 100000]");
  s = model_preset("gpt-tiny");
  s.decoder.hidden = 0;
  EXPECT_NE(error_of(s).find("model.hidden: 0 is out of range"), std::string::npos);
  s = model_preset("gpt-tiny");
  s.decoder.seq = 128;  // > 64 positions
  EXPECT_NE(error_of(s).find("model.seq: 128 exceeds max_positions 64"), std::string::npos);
  EXPECT_EQ(error_of(make_mlp({4})), "model.dims: needs 2 to 4097 sizes [in, hidden..., out], got 1");
  EXPECT_EQ(error_of(make_mlp({4, -1, 2})), "model.dims[1]: -1 is out of range; allowed [1, 16777216]");
  EXPECT_THROW(describe_model(make_mlp({4, 0})), InputError);
}

TEST(Model, NormalizeFillsDefaults) {
  ModelSpec s;
  s.type = ModelType::kDecoder;
  s.decoder = DecoderShape{2, 32, 4, 0, 10, 8, 0, true};
  normalize_model(s);
  EXPECT_EQ(s.decoder.ffn, 128);
  EXPECT_EQ(s.decoder.max_positions, 8);
  EXPECT_EQ(error_of(s), "");
}
