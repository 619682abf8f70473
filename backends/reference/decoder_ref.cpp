// The CPU reference decoder (see decoder_ref.h): docs/decoder.md's forward and backward, step by step.
#include "backends/reference/decoder_ref.h"

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/decoder_math.h"
#include "core/error.h"
#include "core/optim/dtype.h"

namespace tf::backend::reference {

namespace {

using core::TensorDesc;

template <class T>
T rd(T x, bool on) {
  return on ? T(core::bf16_to_f32(core::f32_to_bf16(float(x)))) : x;
}
template <class T>
void round_all(RowMat<T>& m, bool on) {
  if (on) m = m.unaryExpr([](T v) { return rd(v, true); });
}

// The model's tensors by role (nullptr where the model has none).
using Tensors = core::DecoderTensors;

int64_t cols_of(const TensorDesc* t) { return t->shape.size() == 2 ? t->shape[1] : 1; }

// The flat weights and gradients of one pass, and the shape.
template <class T>
struct Ctx {
  const core::DecoderShape& d;
  const Tensors& ts;
  const T* w;  // (total_params) weights (bf16-rounded copy with round_like_gpu)
  T* g;        // (total_params) gradients, accumulated; nullptr in a forward-only pass
  bool round;
  int64_t batch, seq, rows;  // B, s, T = B * s

  Eigen::Map<const RowMat<T>> W(const TensorDesc* t) const { return {w + t->offset, t->shape[0], cols_of(t)}; }
  Eigen::Map<const ColVec<T>> V(const TensorDesc* t) const { return {w + t->offset, t->numel}; }
  Eigen::Map<RowMat<T>> GW(const TensorDesc* t) const { return {g + t->offset, t->shape[0], cols_of(t)}; }
  Eigen::Map<ColVec<T>> GV(const TensorDesc* t) const { return {g + t->offset, t->numel}; }

  // bf16(bf16(x W^T) + b) (b may be null: bf16(x W^T))
  RowMat<T> linear(const RowMat<T>& x, const TensorDesc* w_t, const TensorDesc* b_t) const {
    RowMat<T> y = x * W(w_t).transpose();
    round_all(y, round);
    if (b_t != nullptr) {
      y.rowwise() += V(b_t).transpose();
      round_all(y, round);
    }
    return y;
  }
  // bf16(resid + (bf16(x W^T) + b)): one rounding after the sum
  RowMat<T> residual(const RowMat<T>& resid, const RowMat<T>& x, const TensorDesc* w_t, const TensorDesc* b_t) const {
    RowMat<T> y = x * W(w_t).transpose();
    round_all(y, round);
    y.rowwise() += V(b_t).transpose();
    RowMat<T> out = resid + y;
    round_all(out, round);
    return out;
  }
  // Weight gradient dW += dy^T x and bias gradient db += sum over rows of dy.
  void weight_grads(const RowMat<T>& dy, const RowMat<T>& x, const TensorDesc* w_t, const TensorDesc* b_t) const {
    GW(w_t).noalias() += dy.transpose() * x;
    if (b_t != nullptr) GV(b_t) += dy.colwise().sum().transpose();
  }
};

template <class T>
struct LayerNormCache {
  RowMat<T> in;          // (T, n) the LayerNorm's input
  ColVec<T> mean, rstd;  // (T) each
};

// What one block keeps for its backward (see block_forward for pre- and post-LN).
template <class T>
struct BlockCache {
  RowMat<T> attn_in;  // (T, h) the attention's input: LN1(x) (pre-LN) or x (post-LN)
  RowMat<T> qkv;      // (T, 3h)
  RowMat<T> o;        // (T, h)
  RowMat<T> lse;      // (B * H, s) row b * H + j
  RowMat<T> x2;       // (T, h) after the attention's residual (and LN1, post-LN)
  RowMat<T> mlp_in;   // (T, h) LN2(x2) (pre-LN) or x2 (post-LN)
  RowMat<T> u, g;     // (T, f) fc1 output, activation output
  LayerNormCache<T> ln1, ln2;
};

template <class T>
struct Forward {
  RowMat<T> ein;  // (T, e) the gathered token rows E[tok]
  std::vector<BlockCache<T>> blocks;
  LayerNormCache<T> lnf;  // pre-LN: LNf's input x_L
  RowMat<T> z;            // (T, h) LNf(x_L) (pre-LN) or x_L
  RowMat<T> zp;           // (T, e) z' = bf16(z W_out^T), or z when e = h
  RowMat<T> logits;       // (T, V)
  ColVec<T> lse;          // (T) log-sum-exp of each row of the logits
  double loss = 0;
};

// log sum exp of each row, max-shifted: (rows).
template <class T>
ColVec<T> row_log_sum_exp(const RowMat<T>& m) {
  ColVec<T> out(m.rows());
  for (int64_t r = 0; r < m.rows(); ++r) {
    const T mx = m.row(r).maxCoeff();
    T sum = 0;
    for (int64_t v = 0; v < m.cols(); ++v) sum += std::exp(m(r, v) - mx);
    out(r) = mx + std::log(sum);
  }
  return out;
}

template <class T>
RowMat<T> layer_norm(const Ctx<T>& c, const RowMat<T>& x, const TensorDesc* w, const TensorDesc* b,
                     LayerNormCache<T>& cache) {
  RowMat<T> y;
  layer_norm_forward<T>(x, c.V(w), c.V(b), T(c.d.ln_eps), c.round, y, cache.mean, cache.rstd);
  cache.in = x;
  return y;
}

// dx = LN'(dy) (not rounded); dw, db accumulated.
template <class T>
RowMat<T> layer_norm_backward(const Ctx<T>& c, const RowMat<T>& dy, const LayerNormCache<T>& cache,
                              const TensorDesc* w_t, const TensorDesc* b_t) {
  const auto w = c.V(w_t);
  auto dw = c.GV(w_t);
  auto db = c.GV(b_t);
  const int64_t n = dy.cols();
  RowMat<T> dx(dy.rows(), n);
  for (int64_t r = 0; r < dy.rows(); ++r) {
    const ColVec<T> xhat = ((cache.in.row(r).transpose().array() - cache.mean(r)) * cache.rstd(r)).matrix();
    const ColVec<T> dyr = dy.row(r).transpose();
    dw.array() += dyr.array() * xhat.array();
    db += dyr;
    const ColVec<T> dxhat = (dyr.array() * w.array()).matrix();
    const T mean_dxhat = dxhat.sum() / T(n), mean_dxhat_xhat = dxhat.dot(xhat) / T(n);
    dx.row(r) = (cache.rstd(r) * (dxhat.array() - mean_dxhat - xhat.array() * mean_dxhat_xhat)).matrix().transpose();
  }
  return dx;
}

// dqkv (T, 3h), not rounded: per (sample, head) the scores recomputed, P = exp(S - lse),
// D = rowsum(dO o o), dV = P^T dO, dP = dO V^T, dS = P o (dP - D), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d).
template <class T>
RowMat<T> attention_backward(const Ctx<T>& c, const BlockCache<T>& bc, const RowMat<T>& dout) {
  const int64_t h = c.d.hidden, heads = c.d.heads, dh = h / heads, s = c.seq;
  const T scale = T(1) / std::sqrt(T(dh));
  RowMat<T> dqkv = RowMat<T>::Zero(c.rows, 3 * h);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < heads; ++j) {
      const auto q = bc.qkv.block(b * s, j * dh, s, dh);
      const auto k = bc.qkv.block(b * s, h + j * dh, s, dh);
      const auto v = bc.qkv.block(b * s, 2 * h + j * dh, s, dh);
      const auto o = bc.o.block(b * s, j * dh, s, dh);
      const auto dO = dout.block(b * s, j * dh, s, dh);
      RowMat<T> p = (q * k.transpose()) * scale;
      for (int64_t i = 0; i < s; ++i)
        for (int64_t kk = 0; kk < s; ++kk) p(i, kk) = kk <= i ? std::exp(p(i, kk) - bc.lse(b * heads + j, i)) : T(0);
      const ColVec<T> D = (dO.array() * o.array()).rowwise().sum().matrix();
      const RowMat<T> dP = dO * v.transpose();
      const RowMat<T> dS = (p.array() * (dP.colwise() - D).array()).matrix();
      dqkv.block(b * s, 2 * h + j * dh, s, dh) = p.transpose() * dO;
      dqkv.block(b * s, j * dh, s, dh) = (dS * k) * scale;
      dqkv.block(b * s, h + j * dh, s, dh) = (dS.transpose() * q) * scale;
    }
  return dqkv;
}

// One block forward (docs/decoder.md). Pre-LN: attn_in = LN1(x), x2 = bf16(x + attn),
// mlp_in = LN2(x2), out = bf16(x2 + mlp). Post-LN: attn_in = x, x2 = LN1(bf16(x + attn)), mlp_in = x2,
// out = LN2(bf16(x2 + mlp)).
template <class T>
RowMat<T> block_forward(const Ctx<T>& c, const Tensors::Block& t, const RowMat<T>& x, BlockCache<T>& bc) {
  const bool pre = c.d.pre_ln;
  bc.attn_in = pre ? layer_norm(c, x, t.ln1_w, t.ln1_b, bc.ln1) : x;
  bc.qkv = c.linear(bc.attn_in, t.qkv_w, t.qkv_b);
  attention_forward<T>(bc.qkv, c.batch, c.d.heads, c.round, bc.o, bc.lse);
  const RowMat<T> h1 = c.residual(x, bc.o, t.out_w, t.out_b);
  bc.x2 = pre ? h1 : layer_norm(c, h1, t.ln1_w, t.ln1_b, bc.ln1);
  bc.mlp_in = pre ? layer_norm(c, bc.x2, t.ln2_w, t.ln2_b, bc.ln2) : bc.x2;
  bc.u = c.linear(bc.mlp_in, t.fc1_w, t.fc1_b);
  bc.g = bc.u.unaryExpr([&](T u) { return rd(core::activation(c.d.activation, u), c.round); });
  const RowMat<T> h2 = c.residual(bc.x2, bc.g, t.fc2_w, t.fc2_b);
  return pre ? h2 : layer_norm(c, h2, t.ln2_w, t.ln2_b, bc.ln2);
}

// One block backward: given d(out), returns dx; accumulates the block's weight gradients.
template <class T>
RowMat<T> block_backward(const Ctx<T>& c, const Tensors::Block& t, const BlockCache<T>& bc, const RowMat<T>& dout) {
  const bool pre = c.d.pre_ln;
  RowMat<T> dh2 = pre ? dout : layer_norm_backward(c, dout, bc.ln2, t.ln2_w, t.ln2_b);
  if (!pre) round_all(dh2, c.round);
  c.weight_grads(dh2, bc.g, t.fc2_w, t.fc2_b);
  RowMat<T> du = dh2 * c.W(t.fc2_w);  // dg
  round_all(du, c.round);
  for (int64_t r = 0; r < du.rows(); ++r)
    for (int64_t k = 0; k < du.cols(); ++k)
      du(r, k) = rd(du(r, k) * core::activation_grad(c.d.activation, bc.u(r, k)), c.round);
  c.weight_grads(du, bc.mlp_in, t.fc1_w, t.fc1_b);
  RowMat<T> dmlp_in = du * c.W(t.fc1_w);
  round_all(dmlp_in, c.round);
  RowMat<T> dx2 = dh2 + (pre ? layer_norm_backward(c, dmlp_in, bc.ln2, t.ln2_w, t.ln2_b) : dmlp_in);
  round_all(dx2, c.round);
  RowMat<T> dh1 = pre ? dx2 : layer_norm_backward(c, dx2, bc.ln1, t.ln1_w, t.ln1_b);
  if (!pre) round_all(dh1, c.round);
  c.weight_grads(dh1, bc.o, t.out_w, t.out_b);
  RowMat<T> dO = dh1 * c.W(t.out_w);
  round_all(dO, c.round);
  RowMat<T> dqkv = attention_backward(c, bc, dO);
  round_all(dqkv, c.round);
  c.weight_grads(dqkv, bc.attn_in, t.qkv_w, t.qkv_b);
  RowMat<T> dattn_in = dqkv * c.W(t.qkv_w);
  round_all(dattn_in, c.round);
  RowMat<T> dx = dh1 + (pre ? layer_norm_backward(c, dattn_in, bc.ln1, t.ln1_w, t.ln1_b) : dattn_in);
  round_all(dx, c.round);
  return dx;
}

// x0 = bf16(E'[tok] + Pos[t + off]), E' = E[tok] or bf16(E[tok] W_in^T).
template <class T>
RowMat<T> embed_forward(const Ctx<T>& c, std::span<const int32_t> tokens, Forward<T>& f) {
  const auto E = c.W(c.ts.tokens);
  const auto pos = c.W(c.ts.positions);
  f.ein.resize(c.rows, E.cols());
  for (int64_t r = 0; r < c.rows; ++r) f.ein.row(r) = E.row(tokens[size_t(r)]);
  RowMat<T> x = c.ts.project_in ? c.linear(f.ein, c.ts.project_in, nullptr) : f.ein;
  for (int64_t r = 0; r < c.rows; ++r) x.row(r) += pos.row(r % c.seq + c.d.pos_offset);
  round_all(x, c.round);
  return x;
}

template <class T>
void embed_backward(const Ctx<T>& c, std::span<const int32_t> tokens, const Forward<T>& f, const RowMat<T>& dx0) {
  auto dpos = c.GW(c.ts.positions);
  for (int64_t r = 0; r < c.rows; ++r) dpos.row(r % c.seq + c.d.pos_offset) += dx0.row(r);
  RowMat<T> dein = dx0;
  if (c.ts.project_in) {
    c.weight_grads(dx0, f.ein, c.ts.project_in, nullptr);
    dein = dx0 * c.W(c.ts.project_in);
    round_all(dein, c.round);
  }
  auto dE = c.GW(c.ts.tokens);
  for (int64_t r = 0; r < c.rows; ++r)
    if (tokens[size_t(r)] != c.d.pad_token) dE.row(tokens[size_t(r)]) += dein.row(r);  // OPT's padding_idx
}

// z = LNf(x_L) (pre-LN) or x_L; z' = bf16(z W_out^T) when e != h; logits = bf16(z' H^T); the loss.
template <class T>
void head_forward(const Ctx<T>& c, const RowMat<T>& xl, std::span<const int32_t> targets, Forward<T>& f) {
  f.z = c.d.pre_ln ? layer_norm(c, xl, c.ts.lnf_w, c.ts.lnf_b, f.lnf) : xl;
  f.zp = c.ts.project_out ? c.linear(f.z, c.ts.project_out, nullptr) : f.z;
  f.logits = c.linear(f.zp, c.ts.head, nullptr);
  f.lse = row_log_sum_exp(f.logits);
  double sum = 0;
  for (int64_t r = 0; r < c.rows; ++r) sum += double(f.lse(r) - f.logits(r, targets[size_t(r)]));
  f.loss = sum / double(c.rows);
}

// dlogit = bf16((softmax - onehot) gscale); returns dx_L.
template <class T>
RowMat<T> head_backward(const Ctx<T>& c, std::span<const int32_t> targets, const Forward<T>& f, T gscale) {
  RowMat<T> dlogit(c.rows, f.logits.cols());
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t v = 0; v < dlogit.cols(); ++v) {
      const T p = std::exp(f.logits(r, v) - f.lse(r)) - (v == targets[size_t(r)] ? T(1) : T(0));
      dlogit(r, v) = rd(p * gscale, c.round);
    }
  c.weight_grads(dlogit, f.zp, c.ts.head, nullptr);  // dE_head, or the untied head's gradient
  RowMat<T> dz = dlogit * c.W(c.ts.head);            // dz'
  round_all(dz, c.round);
  if (c.ts.project_out) {
    c.weight_grads(dz, f.z, c.ts.project_out, nullptr);
    dz = RowMat<T>(dz * c.W(c.ts.project_out));
    round_all(dz, c.round);
  }
  if (!c.d.pre_ln) return dz;
  RowMat<T> dxl = layer_norm_backward(c, dz, f.lnf, c.ts.lnf_w, c.ts.lnf_b);
  round_all(dxl, c.round);
  return dxl;
}

template <class T>
Forward<T> run_forward(const Ctx<T>& c, const DecoderBatch& batch) {
  Forward<T> f;
  f.blocks.resize(c.ts.blocks.size());
  RowMat<T> x = embed_forward(c, batch.tokens, f);
  for (size_t i = 0; i < c.ts.blocks.size(); ++i) x = block_forward(c, c.ts.blocks[i], x, f.blocks[i]);
  head_forward(c, x, batch.targets, f);
  return f;
}

template <class T>
void run_backward(const Ctx<T>& c, const DecoderBatch& batch, const Forward<T>& f, T gscale) {
  RowMat<T> dx = head_backward(c, batch.targets, f, gscale);
  for (size_t i = c.ts.blocks.size(); i-- > 0;) dx = block_backward(c, c.ts.blocks[i], f.blocks[i], dx);
  embed_backward(c, batch.tokens, f, dx);
}

// Checks the inputs; returns the batch size B.
template <class T>
int64_t check_inputs(const core::ModelDesc& m, size_t weights, const DecoderBatch& batch, const DecoderOptions& o) {
  const std::string where = "reference decoder: ";
  if (m.spec.type != core::ModelType::kDecoder)
    throw core::InputError(where + "model '" + m.spec.name + "' is not a decoder");
  if (int64_t(weights) != m.total_params)
    throw core::InputError(where + std::to_string(weights) + " weights, model '" + m.spec.name + "' has " +
                           std::to_string(m.total_params));
  const int64_t s = m.spec.decoder.seq, n = int64_t(batch.tokens.size());
  if (n == 0 || n % s != 0 || batch.targets.size() != batch.tokens.size())
    throw core::InputError(where + "tokens (" + std::to_string(n) + ") and targets (" +
                           std::to_string(batch.targets.size()) + ") must both be B x seq = B x " + std::to_string(s));
  auto check_ids = [&](std::span<const int32_t> ids, const char* what) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= m.spec.decoder.vocab)
        throw core::InputError(where + what + std::to_string(i) + " is id " + std::to_string(ids[i]) +
                               "; allowed [0, " + std::to_string(m.spec.decoder.vocab) + ")");
  };
  check_ids(batch.tokens, "token ");
  check_ids(batch.targets, "target ");
  if (!(o.loss_scale > 0 && std::isfinite(o.loss_scale)) || o.world < 1 || o.grad_accum < 1)
    throw core::InputError(where + "loss_scale must be finite and > 0, world and grad_accum >= 1");
  if (o.round_like_gpu && !std::is_same_v<T, float>)
    throw core::InputError(where + "round_like_gpu is for float; the double reference rounds nowhere");
  return n / s;
}

// Runs the pass: the forward, and the backward when `grad` is given.
template <class T>
double run(const core::ModelDesc& m, std::span<const T> weights, const DecoderBatch& batch, const DecoderOptions& o,
           std::vector<T>* grad) {
  const int64_t b = check_inputs<T>(m, weights.size(), batch, o);
  const Tensors ts(m);
  std::vector<T> rounded;  // (total_params) the bf16 copy the GPU reads, with round_like_gpu
  if (o.round_like_gpu) {
    rounded.assign(weights.begin(), weights.end());
    for (T& v : rounded) v = rd(v, true);
  }
  if (grad != nullptr) grad->assign(weights.size(), T(0));
  const int64_t s = m.spec.decoder.seq;
  const Ctx<T> c{m.spec.decoder,
                 ts,
                 o.round_like_gpu ? rounded.data() : weights.data(),
                 grad ? grad->data() : nullptr,
                 o.round_like_gpu,
                 b,
                 s,
                 b * s};
  const Forward<T> f = run_forward(c, batch);
  if (grad != nullptr) {
    run_backward(c, batch, f, T(core::decoder_grad_scale(o.loss_scale, b * s, o.world, o.grad_accum)));
    if (o.round_like_gpu)
      for (T& v : *grad) v = rd(v, true);
  }
  return f.loss;
}

}  // namespace

template <class T>
void layer_norm_forward(const RowMat<T>& x, const ColVec<T>& w, const ColVec<T>& b, T eps, bool round, RowMat<T>& y,
                        ColVec<T>& mean, ColVec<T>& rstd) {
  const int64_t n = x.cols();
  y.resize(x.rows(), n);
  mean.resize(x.rows());
  rstd.resize(x.rows());
  for (int64_t r = 0; r < x.rows(); ++r) {
    T sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += x(r, k);
    const T mu = sum / T(n);
    T sq = 0;
    for (int64_t k = 0; k < n; ++k) sq += (x(r, k) - mu) * (x(r, k) - mu);
    const T rs = T(1) / std::sqrt(sq / T(n) + eps);
    mean(r) = mu;
    rstd(r) = rs;
    for (int64_t k = 0; k < n; ++k) y(r, k) = rd(((x(r, k) - mu) * rs) * w(k) + b(k), round);
  }
}

template <class T>
void attention_forward(const RowMat<T>& qkv, int64_t batch, int64_t heads, bool round, RowMat<T>& o, RowMat<T>& lse) {
  const int64_t h = qkv.cols() / 3, dh = h / heads, s = qkv.rows() / batch;
  const T scale = T(1) / std::sqrt(T(dh));
  o.resize(qkv.rows(), h);
  lse.resize(batch * heads, s);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < heads; ++j) {
      const auto q = qkv.block(b * s, j * dh, s, dh);
      const auto k = qkv.block(b * s, h + j * dh, s, dh);
      const auto v = qkv.block(b * s, 2 * h + j * dh, s, dh);
      RowMat<T> p = (q * k.transpose()) * scale;  // S
      for (int64_t i = 0; i < s; ++i) {
        const T mx = p.row(i).head(i + 1).maxCoeff();
        T sum = 0;
        for (int64_t kk = 0; kk <= i; ++kk) sum += (p(i, kk) = std::exp(p(i, kk) - mx));
        for (int64_t kk = 0; kk < s; ++kk) p(i, kk) = kk <= i ? p(i, kk) / sum : T(0);
        lse(b * heads + j, i) = mx + std::log(sum);
      }
      o.block(b * s, j * dh, s, dh) = p * v;
    }
  round_all(o, round);
}

template <class T>
ColVec<T> cross_entropy_rows(const RowMat<T>& logits, std::span<const int32_t> targets) {
  ColVec<T> out = row_log_sum_exp(logits);
  for (int64_t r = 0; r < logits.rows(); ++r) out(r) -= logits(r, targets[size_t(r)]);
  return out;
}

template <class T>
DecoderResult<T> decoder_forward_backward(const core::ModelDesc& model, std::span<const T> weights,
                                          const DecoderBatch& batch, const DecoderOptions& options) {
  DecoderResult<T> r;
  r.loss = run(model, weights, batch, options, &r.grad);
  return r;
}

template <class T>
double decoder_loss(const core::ModelDesc& model, std::span<const T> weights, const DecoderBatch& batch,
                    const DecoderOptions& options) {
  return run<T>(model, weights, batch, options, nullptr);
}

#define TF_DECODER_REF_INSTANTIATE(T)                                                                            \
  template DecoderResult<T> decoder_forward_backward<T>(const core::ModelDesc&, std::span<const T>,              \
                                                        const DecoderBatch&, const DecoderOptions&);             \
  template double decoder_loss<T>(const core::ModelDesc&, std::span<const T>, const DecoderBatch&,               \
                                  const DecoderOptions&);                                                        \
  template void layer_norm_forward<T>(const RowMat<T>&, const ColVec<T>&, const ColVec<T>&, T, bool, RowMat<T>&, \
                                      ColVec<T>&, ColVec<T>&);                                                   \
  template void attention_forward<T>(const RowMat<T>&, int64_t, int64_t, bool, RowMat<T>&, RowMat<T>&);          \
  template ColVec<T> cross_entropy_rows<T>(const RowMat<T>&, std::span<const int32_t>);
TF_DECODER_REF_INSTANTIATE(float)
TF_DECODER_REF_INSTANTIATE(double)
#undef TF_DECODER_REF_INSTANTIATE

}  // namespace tf::backend::reference
