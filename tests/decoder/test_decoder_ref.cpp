// The CPU reference decoder: hand-computed cases, finite differences in double, float against double, micro-batch sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/reference/decoder_ref.h"
#include "core/decoder_math.h"
#include "core/error.h"
#include "core/init.h"
#include "core/model.h"
#include "core/optim/dtype.h"
#include "core/token_data.h"

using namespace tf::backend::reference;
using tf::core::ModelDesc;
using tf::core::ModelSpec;
using tf::core::TensorDesc;

namespace {

// Weights far from a trained model's but exercising every path: LayerNorm weights 1 + 0.2 n,
// biases 0.2 n, matrices 0.3 n (attention far from uniform, activations on both sides of 0).
std::vector<double> test_weights(const ModelDesc& m, uint64_t seed, double matrix_std = 0.3) {
  std::vector<double> w(static_cast<size_t>(m.total_params));  // (total_params) fp64, model order
  for (const TensorDesc& t : m.tensors) {
    const bool ln = t.name.ends_with("ln1.weight") || t.name.ends_with("ln2.weight") || t.name == "final_ln.weight";
    const bool bias = t.name.ends_with(".bias");
    for (int64_t i = 0; i < t.numel; ++i) {
      const double n = tf::core::init_standard_normal(seed, t.offset + i);
      w[size_t(t.offset + i)] = ln ? 1 + 0.2 * n : bias ? 0.2 * n : matrix_std * n;
    }
  }
  return w;
}

struct Tokens {
  std::vector<int32_t> in, tg;  // (B, s) int32 each
  DecoderBatch batch() const { return {in, tg}; }
};
// B samples of the built-in stream (core/token_data.h), micro-shard k.
Tokens tokens(const ModelDesc& m, int64_t b, int64_t k = 0) {
  const int64_t s = m.spec.decoder.seq;
  Tokens t{std::vector<int32_t>(static_cast<size_t>(b * s)), std::vector<int32_t>(static_cast<size_t>(b * s))};
  tf::core::TokenSource(m.spec.decoder.vocab, s).micro_batch(1, 0, k, b, t.in, t.tg);
  return t;
}

ModelDesc model(const char* preset, int64_t seq, bool tied = true) {
  ModelSpec s = tf::core::model_preset(preset);
  s.decoder.seq = seq;
  s.decoder.tied_embeddings = tied;
  return tf::core::describe_model(s);
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// max |g| over a tensor
template <class T>
double tensor_max(const std::vector<T>& g, const TensorDesc& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel; ++i) m = std::max(m, std::abs(double(g[size_t(t.offset + i)])));
  return m;
}

}  // namespace

// ---- (c) hand-computed cases ---------------------------------------------------------------------

TEST(DecoderRefHand, LayerNormOfOneRow) {
  // x = [1, 2, 3, 4]: mean 2.5, var (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25, rstd = 1 / sqrt(1.25001)
  RowMat<double> x(1, 4);
  x << 1, 2, 3, 4;
  ColVec<double> w(4), b(4);
  w << 1, 2, 0.5, -1;
  b << 0, 0.1, 0, 0.2;
  RowMat<double> y;
  ColVec<double> mean, rstd;
  layer_norm_forward<double>(x, w, b, 1e-5, false, y, mean, rstd);
  const double r = 1 / std::sqrt(1.25001);  // 0.894423613...
  EXPECT_DOUBLE_EQ(mean(0), 2.5);
  EXPECT_DOUBLE_EQ(rstd(0), r);
  EXPECT_DOUBLE_EQ(y(0, 0), -1.5 * r);
  EXPECT_DOUBLE_EQ(y(0, 1), -0.5 * r * 2 + 0.1);
  EXPECT_DOUBLE_EQ(y(0, 2), 0.5 * r * 0.5);
  EXPECT_DOUBLE_EQ(y(0, 3), -1.5 * r + 0.2);
  // rounded: each output is the bf16 of the float value
  RowMat<float> yf;
  ColVec<float> mf, rf;
  layer_norm_forward<float>(x.cast<float>(), w.cast<float>(), b.cast<float>(), 1e-5f, true, yf, mf, rf);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(float(tf::core::bf16_to_f32(tf::core::f32_to_bf16(yf(0, k)))), yf(0, k));
    EXPECT_NEAR(yf(0, k), y(0, k), std::abs(y(0, k)) * 0x1p-8);
  }
}

TEST(DecoderRefHand, GeluTanhAndItsDerivative) {
  // values from the formula evaluated independently (Python's math.tanh); derivatives checked there
  // against central differences too
  const double u[] = {1.0, -1.0, 0.5, 3.0, -2.0};
  const double g[] = {0.841191990607477, -0.1588080093925231, 0.34571400982483486, 2.9963626079181394,
                      -0.04540230591282446};
  const double dg[] = {1.0829640838451025, -0.08296408384510229, 0.8673699035335876, 1.0115841666312024,
                       -0.0860992566243311};
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(tf::core::gelu_tanh(u[i]), g[i], 1e-15) << u[i];
    EXPECT_NEAR(tf::core::gelu_tanh_grad(u[i]), dg[i], 1e-15) << u[i];
  }
  EXPECT_EQ(tf::core::gelu_tanh(0.0), 0.0);
  EXPECT_EQ(tf::core::activation(tf::core::Activation::kRelu, -2.0), 0.0);
  EXPECT_EQ(tf::core::activation(tf::core::Activation::kRelu, 2.5), 2.5);
  EXPECT_EQ(tf::core::activation_grad(tf::core::Activation::kRelu, 0.0), 0.0);
  EXPECT_EQ(tf::core::activation_grad(tf::core::Activation::kRelu, 1e-30), 1.0);
}

TEST(DecoderRefHand, CausalAttentionOfThreeTokens) {
  // one sample, s = 3, h = 4, 2 heads of d = 2; qkv columns: q (0..3), k (4..7), v (8..11).
  // head 0 (columns 0-1): q1 = [sqrt2 ln3, 0], q2 = [sqrt2 ln2, 0]; k0 = 0, k1 = [1, 0], k2 = [2, 0]
  //   scores S = q k^T / sqrt2: row 1 [0, ln3], row 2 [0, ln2, ln4]
  //   P: row 0 [1], row 1 [1/4, 3/4], row 2 [1/7, 2/7, 4/7]; lse: S00 = 0, ln 4, ln 7
  // head 1 (columns 2-3): q = 0, so P is uniform over the causal keys: lse = ln(i + 1)
  const double s2 = std::sqrt(2.0);
  RowMat<double> qkv = RowMat<double>::Zero(3, 12);
  qkv(1, 0) = s2 * std::log(3.0);
  qkv(2, 0) = s2 * std::log(2.0);
  qkv(1, 4) = 1;
  qkv(2, 4) = 2;
  const double v[3][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {-7, 0, 1, 2}};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) qkv(r, 8 + c) = v[r][c];
  RowMat<double> o, lse;
  attention_forward<double>(qkv, 1, 2, false, o, lse);
  const double p[3][3] = {{1, 0, 0}, {0.25, 0.75, 0}, {1.0 / 7, 2.0 / 7, 4.0 / 7}};
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 2; ++c) {
      double want0 = 0, want1 = 0;
      for (int k = 0; k <= i; ++k) want0 += p[i][k] * v[k][c], want1 += v[k][2 + c] / (i + 1);
      EXPECT_NEAR(o(i, c), want0, 1e-14) << i << "," << c;
      EXPECT_NEAR(o(i, 2 + c), want1, 1e-14) << i << "," << c;
    }
  EXPECT_NEAR(lse(0, 0), 0, 1e-15);
  EXPECT_NEAR(lse(0, 1), std::log(4.0), 1e-14);
  EXPECT_NEAR(lse(0, 2), std::log(7.0), 1e-14);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(lse(1, i), std::log(i + 1.0), 1e-15);
}

TEST(DecoderRefHand, CrossEntropyRows) {
  // row 0: logits [0, ln2, ln5] -> lse ln 8, target 1: ln 8 - ln 2 = ln 4; row 1: [3, 3, 3], target
  // 2: ln 3
  RowMat<double> logits(2, 3);
  logits << 0, std::log(2.0), std::log(5.0), 3, 3, 3;
  const std::vector<int32_t> targets = {1, 2};
  const ColVec<double> ce = cross_entropy_rows<double>(logits, targets);
  EXPECT_NEAR(ce(0), std::log(4.0), 1e-15);
  EXPECT_NEAR(ce(1), std::log(3.0), 1e-15);
}

TEST(DecoderRefHand, OneLayerModelWithZeroBlockIsLayerNormThenTiedHead) {
  // 1 layer, h 4, 2 heads, f 8, V 3, s 2. Block matrices and biases 0: q = k = v = 0, o = 0, the fc1
  // output is 0 and fc2's too, so the block passes x through. E = the first three unit rows,
  // positions 0: x0 = e_tok. LNf (w 1, b 0) of [1, 0, 0, 0]: mean 0.25, var 0.1875,
  // z = [0.75, -0.25, -0.25, -0.25] r with r = 1 / sqrt(0.18751) = 2.30933949519...; logits = z E^T =
  // z[0..2]. Token 0 -> target 0: ln(e^0.75r + 2 e^-0.25r) - 0.75r = 0.18119898653165833; token 1
  // -> target 0: the logits are [-0.25r, 0.75r, -0.25r]: ln(e^0.75r + 2 e^-0.25r) + 0.25r =
  // 2.4905384817246996. The mean is the loss.
  ModelSpec s = tf::core::model_preset("gpt-tiny");
  s.decoder.layers = 1, s.decoder.hidden = 4, s.decoder.heads = 2, s.decoder.ffn = 8, s.decoder.vocab = 3;
  s.decoder.seq = 2, s.decoder.max_positions = 2;
  const ModelDesc m = tf::core::describe_model(s);
  std::vector<double> w(static_cast<size_t>(m.total_params), 0.0);  // (total_params) fp64
  for (int v = 0; v < 3; ++v) w[size_t(v * 4 + v)] = 1;             // E (3, 4): unit rows
  for (const char* ln : {"layers.0.ln1.weight", "layers.0.ln2.weight", "final_ln.weight"}) {
    const TensorDesc& t = *m.find_tensor(ln);
    for (int64_t i = 0; i < t.numel; ++i) w[size_t(t.offset + i)] = 1;
  }
  const std::vector<int32_t> tok = {0, 1}, tgt = {0, 0};
  const double loss = decoder_loss<double>(m, w, {tok, tgt});
  EXPECT_NEAR(loss, (0.18119898653165833 + 2.4905384817246996) / 2, 1e-14);
}

// ---- (a) finite differences in double ------------------------------------------------------------

// Per tensor up to 8 elements (a stride through it and the largest gradient), plus every element of
// the position rows no sample reads (their gradient must be exactly 0). Central differences with
// step 1e-6: truncation O(1e-12 |L'''|), cancellation ~2^-52 |L| / 1e-6 = 2e-9 at |L| ~ 10.
// Bound: |fd - g| <= 1e-6 |g| + 5e-9. OPT's padding row is not the loss's derivative by design (its
// lookups add nothing: PaddingTokenRowGetsNoLookupGradient), so the check runs without it.
void check_gradient(const ModelDesc& with_pad) {
  ModelSpec spec = with_pad.spec;
  spec.decoder.pad_token = -1;
  const ModelDesc m = tf::core::describe_model(spec);
  const std::vector<double> w = test_weights(m, 21);
  const Tokens tk = tokens(m, 2);
  const DecoderResult<double> r = decoder_forward_backward<double>(m, w, tk.batch());
  EXPECT_NEAR(r.loss, decoder_loss<double>(m, w, tk.batch()), 0);
  std::vector<double> wp = w;
  int64_t checked = 0;
  double worst = 0;
  for (const TensorDesc& t : m.tensors) {
    std::vector<int64_t> picks;
    for (int64_t i = 0; i < 7; ++i) picks.push_back(t.numel <= 7 ? i % t.numel : (i * t.numel) / 7 + i % 3);
    int64_t best = 0;
    for (int64_t i = 0; i < t.numel; ++i)
      if (std::abs(r.grad[size_t(t.offset + i)]) > std::abs(r.grad[size_t(t.offset + best)])) best = i;
    picks.push_back(best);
    EXPECT_GT(tensor_max(r.grad, t), 0.0) << m.spec.name << " " << t.name;  // every tensor has a gradient
    for (int64_t i : picks) {
      const size_t e = size_t(t.offset + i);
      const double h = 1e-6;
      wp[e] = w[e] + h;
      const double up = decoder_loss<double>(m, wp, tk.batch());
      wp[e] = w[e] - h;
      const double down = decoder_loss<double>(m, wp, tk.batch());
      wp[e] = w[e];
      const double fd = (up - down) / (2 * h), g = r.grad[e];
      worst = std::max(worst, std::abs(fd - g) / (1e-6 * std::abs(g) + 5e-9));
      EXPECT_LE(std::abs(fd - g), 1e-6 * std::abs(g) + 5e-9) << m.spec.name << " " << t.name << "[" << i << "]";
      checked++;
    }
  }
  // positions no sample reads: rows [0, off) and [off + s, P + off)
  const TensorDesc& pos = *m.find_tensor("embed.positions.weight");
  const int64_t h = m.spec.decoder.hidden, off = m.spec.decoder.pos_offset, s = m.spec.decoder.seq;
  for (int64_t row = 0; row < pos.shape[0]; ++row)
    if (row < off || row >= off + s) {
      for (int64_t c = 0; c < h; ++c) ASSERT_EQ(r.grad[size_t(pos.offset + row * h + c)], 0.0) << row;
    }
  std::printf("%s: %lld elements checked, worst error / bound = %.3g\n", m.spec.name.c_str(), (long long)checked,
              worst);
}

TEST(DecoderRefGradient, GptTinyMatchesFiniteDifferences) { check_gradient(model("gpt-tiny", 8)); }
TEST(DecoderRefGradient, GptTinyUntiedMatchesFiniteDifferences) { check_gradient(model("gpt-tiny", 8, false)); }
TEST(DecoderRefGradient, OptTinyMatchesFiniteDifferences) { check_gradient(model("opt-tiny", 16)); }
TEST(DecoderRefGradient, OptTinyProjPostLnMatchesFiniteDifferences) { check_gradient(model("opt-tiny-proj", 16)); }
TEST(DecoderRefGradient, OptTinyProjUntiedMatchesFiniteDifferences) {
  check_gradient(model("opt-tiny-proj", 12, false));
}

// OPT's padding token (transformers' nn.Embedding(padding_idx = 1)): its lookups add nothing to its
// embedding row, so with an untied head that row's gradient is exactly 0 and with the tied head it is
// the head's part alone; every other element has the same bits as without a padding token, and the
// batch does hold the token (else the test could not fail).
TEST(DecoderRefGradient, PaddingTokenRowGetsNoLookupGradient) {
  for (bool tied : {false, true}) {
    const ModelDesc m = model("opt-tiny", 16, tied);
    ASSERT_EQ(m.spec.decoder.pad_token, 1);
    ModelSpec none = m.spec;
    none.decoder.pad_token = -1;
    const ModelDesc n = tf::core::describe_model(none);
    const std::vector<double> w = test_weights(m, 4);
    const Tokens tk = tokens(m, 4);
    ASSERT_NE(std::count(tk.in.begin(), tk.in.end(), 1), 0) << "the batch must hold the padding token";
    const DecoderResult<double> a = decoder_forward_backward<double>(m, w, tk.batch());
    const DecoderResult<double> b = decoder_forward_backward<double>(n, w, tk.batch());
    EXPECT_EQ(a.loss, b.loss);
    const TensorDesc& E = *m.find_tensor("embed.tokens.weight");
    const int64_t e = E.shape[1];
    const size_t row_begin = size_t(E.offset + 1 * e), row_end = row_begin + size_t(e);
    int64_t differing = 0;
    for (size_t i = 0; i < a.grad.size(); ++i) {
      if (i >= row_begin && i < row_end) {
        if (!tied) {
          ASSERT_EQ(a.grad[i], 0.0) << "untied: row 1 element " << i - row_begin;
        }
        differing += a.grad[i] != b.grad[i];
      } else {
        ASSERT_EQ(a.grad[i], b.grad[i]) << "element " << i << " outside the padding row";
      }
    }
    EXPECT_GT(differing, e / 2) << (tied ? "tied" : "untied");
  }
}

// ---- (b) float against double ----------------------------------------------------------------------

// Matrices normal(0, 0.1). Float without rounding: loss within 1e-6 relative; each gradient element
// within 4e-6 max|g_tensor| + 4e-5 |g| of double (float's unit roundoff 6e-8 grown through two
// blocks and sums of up to 256 products; measured worst 9e-7 max|g_tensor|, under 1/4 of the bound).
// Float with round_like_gpu (bf16 weights, activations and gradients, unit roundoff 2^-9): loss
// within 2e-3 relative (measured 3e-4), each gradient element within 0.25 max|g_tensor| + 0.05 |g|
// (measured worst 0.11 max|g_tensor|, on OPT's ReLU models where a rounded pre-activation can cross
// 0), every gradient a bf16 value, and the result differs from the unrounded float.
TEST(DecoderRefPrecision, FloatAgreesWithDoubleWithinStatedBounds) {
  for (const ModelDesc& m : {model("gpt-tiny", 16), model("opt-tiny", 16), model("opt-tiny-proj", 16, false)}) {
    const std::vector<double> wd = test_weights(m, 5, 0.1);
    const std::vector<float> wf = to_float(wd);
    const std::vector<double> wdf(wf.begin(), wf.end());  // the double oracle on the float weights
    const Tokens tk = tokens(m, 2, 3);
    const DecoderResult<double> d = decoder_forward_backward<double>(m, wdf, tk.batch());
    const DecoderResult<float> f = decoder_forward_backward<float>(m, wf, tk.batch());
    DecoderOptions gpu;
    gpu.round_like_gpu = true;
    const DecoderResult<float> b = decoder_forward_backward<float>(m, wf, tk.batch(), gpu);
    EXPECT_NEAR(f.loss, d.loss, 1e-6 * d.loss) << m.spec.name;
    EXPECT_NEAR(b.loss, d.loss, 2e-3 * d.loss) << m.spec.name;
    EXPECT_NE(b.loss, f.loss) << m.spec.name;
    double worst_f = 0, worst_b = 0;
    for (const TensorDesc& t : m.tensors) {
      const double mx = tensor_max(d.grad, t);
      for (int64_t i = 0; i < t.numel; ++i) {
        const size_t e = size_t(t.offset + i);
        const double g = d.grad[e], bound_f = 4e-6 * mx + 4e-5 * std::abs(g), bound_b = 0.25 * mx + 0.05 * std::abs(g);
        ASSERT_LE(std::abs(f.grad[e] - g), bound_f) << m.spec.name << " " << t.name << "[" << i << "]";
        ASSERT_LE(std::abs(b.grad[e] - g), bound_b) << m.spec.name << " " << t.name << "[" << i << "]";
        ASSERT_EQ(tf::core::bf16_to_f32(tf::core::f32_to_bf16(b.grad[e])), b.grad[e]) << t.name << "[" << i << "]";
        worst_f = std::max(worst_f, std::abs(f.grad[e] - g) / bound_f);
        worst_b = std::max(worst_b, std::abs(b.grad[e] - g) / bound_b);
      }
    }
    std::printf(
        "%s: loss double %.9f float %.9f bf16-like %.6f; worst gradient error / bound: float %.3g, "
        "bf16-like %.3g\n",
        m.spec.name.c_str(), d.loss, f.loss, b.loss, worst_f, worst_b);
  }
}

// ---- (d) micro-batches sum to the batch gradient --------------------------------------------------

TEST(DecoderRefMicroBatches, SumOverMicroBatchesIsTheBatchGradient) {
  // 4 samples as one micro-batch; as 2 x 2 with grad_accum 2; as 4 x 1 spread over world 2 with
  // grad_accum 2. gscale = loss_scale / (T world grad_accum) makes each sum the gradient of the
  // batch's mean loss times the loss scale (here 8): equal up to double rounding of the sums,
  // |a - b| <= 1e-12 max|g_tensor| elementwise.
  const ModelDesc m = model("opt-tiny", 8);
  const std::vector<double> w = test_weights(m, 9);
  const Tokens all = tokens(m, 4);
  const int64_t s = 8;
  DecoderOptions whole;
  whole.loss_scale = 8;
  const DecoderResult<double> ref = decoder_forward_backward<double>(m, w, all.batch(), whole);
  auto part = [&](int64_t first, int64_t count, int64_t world, int64_t accum) {
    DecoderOptions o;
    o.loss_scale = 8, o.world = world, o.grad_accum = accum;
    const std::span<const int32_t> in(all.in), tg(all.tg);
    return decoder_forward_backward<double>(
        m, w, {in.subspan(size_t(first * s), size_t(count * s)), tg.subspan(size_t(first * s), size_t(count * s))}, o);
  };
  for (int64_t per : {2, 1}) {
    std::vector<double> sum(w.size(), 0.0);
    double loss = 0;
    const int64_t parts = 4 / per, world = per == 1 ? 2 : 1, accum = parts / world;
    for (int64_t p = 0; p < parts; ++p) {
      const DecoderResult<double> r = part(p * per, per, world, accum);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += r.grad[i];
      loss += r.loss / double(parts);
    }
    EXPECT_NEAR(loss, ref.loss, 1e-13);
    for (const TensorDesc& t : m.tensors) {
      const double mx = tensor_max(ref.grad, t);
      for (int64_t i = 0; i < t.numel; ++i)
        ASSERT_NEAR(sum[size_t(t.offset + i)], ref.grad[size_t(t.offset + i)], 1e-12 * mx) << t.name << "[" << i << "]";
    }
  }
  // the loss scale scales the gradient and nothing else
  const DecoderResult<double> one = decoder_forward_backward<double>(m, w, all.batch());
  EXPECT_EQ(one.loss, ref.loss);
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(8 * one.grad[i], ref.grad[i], 1e-15 * std::abs(ref.grad[i]));
}

// ---- inputs ---------------------------------------------------------------------------------------

TEST(DecoderRefInputs, InitialLossIsNearLnVAndBadInputIsRefused) {
  const ModelDesc m = model("gpt-tiny", 8);
  std::vector<float> w(static_cast<size_t>(m.total_params));  // (total_params) fp32
  tf::core::init_weights(m, 1, 0, w);
  const Tokens tk = tokens(m, 2);
  // normal(0, 0.02) weights give logits z E^T of standard deviation ~0.02 sqrt(64) = 0.16 (the input
  // token's own, through the tied embedding, near 1): close to a uniform guess, ln 512 = 6.238
  EXPECT_NEAR(decoder_loss<float>(m, w, tk.batch()), std::log(512.0), 0.15);
  EXPECT_THROW(decoder_loss<float>(m, std::span<const float>(w).first(10), tk.batch()), tf::core::InputError);
  Tokens bad = tk;
  bad.in[3] = 512;
  EXPECT_THROW(decoder_loss<float>(m, w, bad.batch()), tf::core::InputError);
  bad = tk;
  bad.tg[0] = -1;
  EXPECT_THROW(decoder_loss<float>(m, w, bad.batch()), tf::core::InputError);
  bad.in.resize(7), bad.tg.resize(7);  // not B x seq
  EXPECT_THROW(decoder_loss<float>(m, w, bad.batch()), tf::core::InputError);
  DecoderOptions o;
  o.round_like_gpu = true;
  const std::vector<double> wd(w.begin(), w.end());
  EXPECT_THROW(decoder_loss<double>(m, wd, tk.batch(), o), tf::core::InputError);
  o = {};
  o.world = 0;
  EXPECT_THROW(decoder_loss<float>(m, w, tk.batch(), o), tf::core::InputError);
  EXPECT_THROW(decoder_loss<float>(tf::core::describe_model(tf::core::make_mlp({4, 4})), w, tk.batch()),
               tf::core::InputError);
}
