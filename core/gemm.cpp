// The GEMMs of a layer's forward and backward (see gemm.h).
#include "core/gemm.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/decoder_layout.h"

namespace tf::core {

std::string_view gemm_pass_name(GemmPass p) {
  switch (p) {
    case GemmPass::kAny: return "any";
    case GemmPass::kForward: return "forward";
    case GemmPass::kInputGrad: return "input_grad";
    case GemmPass::kWeightGrad: return "weight_grad";
  }
  return "?";
}

std::optional<GemmPass> parse_gemm_pass(std::string_view name) {
  for (GemmPass p : {GemmPass::kAny, GemmPass::kForward, GemmPass::kInputGrad, GemmPass::kWeightGrad})
    if (gemm_pass_name(p) == name) return p;
  return std::nullopt;
}

namespace {

// The causal half of an (s, s) score matrix, s(s+1)/2 (query, key) pairs, as a GEMM shape (m, n)
// with m * n = s(s+1)/2 exactly.
std::pair<int64_t, int64_t> causal_pairs_shape(int64_t s) {
  return s % 2 == 0 ? std::pair<int64_t, int64_t>{s + 1, s / 2} : std::pair<int64_t, int64_t>{s, (s + 1) / 2};
}

std::vector<LayerGemm> block_gemms(const DecoderShape& d, int64_t micro_batch) {
  const int64_t t = micro_batch * d.seq, h = d.hidden, f = d.ffn;
  const bool split = d.heads > 0 && h % d.heads == 0;
  const int64_t dh = split ? h / d.heads : h, heads = split ? d.heads : 1, bh = micro_batch * heads;
  const auto [cm, cn] = causal_pairs_shape(d.seq);
  const LayerGemm scores{cm, cn, dh, bh, GemmPass::kForward, true, true};  // Q K^T over the causal half
  const LayerGemm pv{cm, dh, cn, bh, GemmPass::kForward, false, true};     // P V
  return {{t, 3 * h, h}, scores, pv, {t, h, h}, {t, f, h}, {t, h, f}};
}

}  // namespace

std::vector<LayerGemm> forward_gemms(const ModelDesc& m, const LayerDesc& l, int64_t micro_batch) {
  const DecoderShape& d = m.spec.decoder;
  const int64_t t = micro_batch * d.seq, e = embed_width(d);
  switch (l.kind) {
    case LayerKind::kEmbedding:  // a gather, then project_in (T, h) = E[tok] (T, e) W_in^T
      if (has_embed_projection(d)) return {{t, d.hidden, e}};
      return {};
    case LayerKind::kLinear: {
      const std::vector<int64_t>& w = m.tensors[l.first_tensor].shape;  // (out, in)
      return {{micro_batch, w[0], w[1]}};                               // Y (B, out) = X (B, in) Wt
    }
    case LayerKind::kHead: {
      std::vector<LayerGemm> g;
      if (has_embed_projection(d)) g.push_back({t, e, d.hidden});  // z' (T, e) = z W_out^T
      // logits (T, V) = z' E^T, rows padded; an unaligned V as two products (decoder_layout.h)
      const int64_t main = decoder_layout::logits_main_columns(d.vocab), st = decoder_layout::logits_stride(d.vocab);
      g.push_back({t, main, e, 1, GemmPass::kForward, false, false, st});
      if (main < d.vocab) g.push_back({t, d.vocab - main, e, 1, GemmPass::kForward, false, false, st});
      return g;
    }
    case LayerKind::kBlock: return block_gemms(d, micro_batch);
  }
  return {};
}

std::vector<LayerGemm> backward_gemms(const std::vector<LayerGemm>& forward, bool input_grad) {
  std::vector<LayerGemm> out;
  for (const LayerGemm& g : forward) {
    const bool fused = g.fused_attention;
    const int64_t st = g.out_stride;  // dC's rows, which every backward product reads
    if (g.recomputed_in_backward) out.push_back({g.m, g.n, g.k, g.batch, GemmPass::kForward, false, fused, st});
    if (input_grad) out.push_back({g.m, g.k, g.n, g.batch, GemmPass::kInputGrad, false, fused, st});
    out.push_back({g.n, g.k, g.m, g.batch, GemmPass::kWeightGrad, false, fused, st});
  }
  return out;
}

bool layer_needs_input_grad(const ModelDesc& m, size_t index) {
  return !(index == 0 && m.layers.at(0).kind == LayerKind::kLinear);
}

double fused_attention_flops(const std::vector<LayerGemm>& gemms) {
  double f = 0;
  for (const LayerGemm& g : gemms)
    if (g.fused_attention) f += 2.0 * double(g.m) * double(g.n) * double(g.k) * double(g.batch);
  return f;
}

namespace {

// core::KernelClass's names, in its order.
constexpr std::array<std::string_view, kKernelClassCount> kKernelClassNames = {
    "other",
    "layer_norm_forward",
    "layer_norm_backward",
    "bias_act_forward",
    "bias_residual_forward",
    "bias_act_backward",
    "bias_grad",
    "embedding_forward",
    "embedding_backward",
    "cross_entropy",
    "attention_forward",
    "attention_backward",
};

}  // namespace

std::string_view kernel_class_name(KernelClass c) {
  const auto i = size_t(c);
  return i < kKernelClassNames.size() ? kKernelClassNames[i] : "?";
}

std::optional<KernelClass> parse_kernel_class(std::string_view name) {
  for (size_t i = 0; i < kKernelClassNames.size(); ++i)
    if (kKernelClassNames[i] == name) return KernelClass(i);
  return std::nullopt;
}

int64_t ElementwiseCost::bytes_of(const std::vector<KernelCost>& v) {
  int64_t b = 0;
  for (const KernelCost& k : v) b += k.bytes;
  return b;
}

int ElementwiseCost::kernels_of(const std::vector<KernelCost>& v) {
  int n = 0;
  for (const KernelCost& k : v) n += k.kernels;
  return n;
}

int64_t class_bytes(const ElementwiseCost& cost, KernelClass c) {
  int64_t b = 0;
  for (const std::vector<KernelCost>* v : {&cost.fwd, &cost.bwd})
    for (const KernelCost& k : *v)
      if (k.kind == c) b += k.bytes;
  return b;
}

namespace {

using enum KernelClass;

// An MLP layer's kernels (backends/cuda/workload_mlp.cu).
ElementwiseCost linear_elementwise(const ModelDesc& m, size_t index, int64_t B, int64_t e) {
  const LayerDesc& l = m.layers.at(index);
  const std::vector<int64_t>& w = m.tensors[l.first_tensor].shape;  // (out, in)
  const int64_t out = w[0], in = w[1];
  const bool first = index == 0, last = index + 1 == m.layers.size(), bias = m.spec.mlp_bias;
  ElementwiseCost c;
  if (first) c.fwd.push_back({kOther, B * in * e, 1});                                      // generated input X
  if (bias || !last) c.fwd.push_back({kOther, 2 * B * out * e + (bias ? out * e : 0), 1});  // bias + ReLU
  if (last) c.fwd.push_back({kOther, 2 * B * out * e, 2});                                  // loss and dY in place of Y
  if (bias) c.bwd.push_back({kOther, B * out * e + out * e, 2});                            // db: partial sums, finish
  if (!first) c.bwd.push_back({kOther, 3 * B * in * e, 1});                                 // dX masked by ReLU(X)
  return c;
}

// A decoder block (docs/decoder.md; T rows, e bytes per activation and parameter, fp32 statistics):
// forward, 6 kernels:
//   LN1, LN2          read x (T,h) and w, b; write y (T,h) and mean, rstd:  2*(2Th e + 2h e + 8T)
//   QKV bias          read (T,3h) and b; write (T,3h):                    6Th e + 3h e
//   attention traffic read qkv (T,3h); write o (T,h), lse (B,H,s) fp32:   4Th e + 4TH
//   out + residual    read y, x (T,h), b; write x2 (T,h):                 3Th e + h e
//   fc1 bias + act    read (T,f), b; write u, g (T,f):                    3Tf e + f e
//   fc2 + residual    read y, x2, b; write x3:                            3Th e + h e
//   = 20Th e + 3Tf e + 9h e + f e + 16T + 4TH
// backward, 14 kernels (each row sum is partial sums over fixed row ranges, then a fold: 2 kernels):
//   db2               read dx3 (T,h); write (h):                          Th e + h e           2
//   du = dg act'(u)   read dg, u (T,f); write du:                         3Tf e                1
//   db1               read du; write (f):                                 Tf e + f e           2
//   LN2' + residual   read dc, x2, dx3 (T,h), stats, w; write dx2, dw, db: 4Th e + 8T + 3h e   2
//   dbo               read dx2; write (h):                                Th e + h e           2
//   D = rowsum(dO o)  read dO, o; write (B,H,s) fp32:                     2Th e + 4TH          1
//   attention traffic dK, dV: read q, k, v, dO, lse, D, write dk, dv;
//                     dQ: read q, k, v, dO, lse, D, write dq:             11Th e + 16TH        0
//   dbqkv             read dqkv (T,3h); write (3h):                       3Th e + 3h e         2
//   LN1' + residual   as LN2':                                            4Th e + 8T + 3h e    2
//   = 26Th e + 4Tf e + 11h e + f e + 16T + 20TH
ElementwiseCost block_elementwise(const DecoderShape& d, int64_t B, int64_t e) {
  const int64_t t = B * d.seq, h = d.hidden, f = d.ffn, heads = std::max<int64_t>(d.heads, 1);
  ElementwiseCost c;
  c.fwd = {{kLayerNormForward, 2 * (2 * t * h * e + 2 * h * e + 8 * t), 2},
           {kBiasActForward, 6 * t * h * e + 3 * h * e + 3 * t * f * e + f * e, 2},
           {kAttentionForward, 4 * t * h * e + 4 * t * heads, 0},
           {kBiasResidualForward, 2 * (3 * t * h * e + h * e), 2}};
  c.bwd = {{kBiasGrad, (t * h * e + h * e) + (t * h * e + h * e) + (3 * t * h * e + 3 * h * e), 6},
           {kBiasActBackward, 3 * t * f * e + t * f * e + f * e, 3},
           {kLayerNormBackward, 2 * (4 * t * h * e + 8 * t + 3 * h * e), 4},
           {kAttentionBackward, 2 * t * h * e + 4 * t * heads + 11 * t * h * e + 16 * t * heads, 1}};
  return c;
}

// The embedding: forward gathers token rows (int32 ids) and adds position rows, 1 kernel
// (4T + T e_w e + Th e read, Th e written); with project_in (e_w != h) the gather writes E[tok]
// (T, e_w) and a second kernel adds the positions to the GEMM's output (3Th e). Backward: dPos (read
// dx0, write the (P + off, h) table) and the scatter into dE (read the token ids and the rows'
// gradients (T, e_w), the head's fp32 dE_head (V, e_w) when tied; write dE (V, e_w)), 2 kernels.
ElementwiseCost embedding_elementwise(const DecoderShape& d, int64_t B, int64_t e) {
  const int64_t t = B * d.seq, h = d.hidden, ew = embed_width(d), v = d.vocab;
  ElementwiseCost c;
  if (has_embed_projection(d))
    c.fwd = {{kEmbeddingForward, 4 * t + 2 * t * ew * e + 3 * t * h * e, 2}};
  else
    c.fwd = {{kEmbeddingForward, 4 * t + 3 * t * h * e, 1}};
  c.bwd = {
      {kEmbeddingBackward,
       t * h * e + position_rows(d) * h * e + 4 * t + t * ew * e + v * ew * e + (d.tied_embeddings ? 4 * v * ew : 0),
       2}};
  return c;
}

// The head: forward LNf (pre-LN models; 2Th e + 2h e + 8T) and the cross-entropy, whose loss (read the
// logits (T, V) and targets, write lse and the row losses: TV e + 12T) and dlogits (read logits, lse,
// targets, write dlogits: 2TV e + 8T) the CUDA workload computes in one kernel in the forward
// (cross_entropy_forward_backward, dlogits in place of the logits): one kernel of both counts, in the
// forward. Backward: LNf' (pre-LN: read dz, x_L, stats, w, write dx_L, dw, db: 3Th e + 8T + 3h e), 2 kernels.
ElementwiseCost head_elementwise(const DecoderShape& d, int64_t B, int64_t e) {
  const int64_t t = B * d.seq, h = d.hidden, v = d.vocab;
  ElementwiseCost c;
  c.fwd = {{kCrossEntropy, (t * v * e + 12 * t) + (2 * t * v * e + 8 * t), 1}};
  // a split logits GEMM's input gradient: its fp32 sum read once and rounded to dz' (decoder_layout.h)
  if (decoder_layout::logits_split(v)) c.bwd.push_back({kOther, t * embed_width(d) * (4 + e), 1});
  if (d.pre_ln) {
    c.fwd.push_back({kLayerNormForward, 2 * t * h * e + 2 * h * e + 8 * t, 1});
    c.bwd.push_back({kLayerNormBackward, 3 * t * h * e + 8 * t + 3 * h * e, 2});
  }
  return c;
}

}  // namespace

ElementwiseCost layer_elementwise(const ModelDesc& m, size_t index, int64_t micro_batch, int act_bytes) {
  const DecoderShape& d = m.spec.decoder;
  switch (m.layers.at(index).kind) {
    case LayerKind::kLinear: return linear_elementwise(m, index, micro_batch, act_bytes);
    case LayerKind::kBlock: return block_elementwise(d, micro_batch, act_bytes);
    case LayerKind::kEmbedding: return embedding_elementwise(d, micro_batch, act_bytes);
    case LayerKind::kHead: return head_elementwise(d, micro_batch, act_bytes);
  }
  return {};
}

}  // namespace tf::core
