// The GEMMs of a layer's forward and backward (see gemm.h).
#include "core/gemm.h"

#include <algorithm>

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

std::vector<LayerGemm> forward_gemms(const ModelDesc& m, const LayerDesc& l, int64_t micro_batch) {
  const DecoderShape& d = m.spec.decoder;
  switch (l.kind) {
    case LayerKind::kEmbedding: return {};  // a gather
    case LayerKind::kLinear: {
      const std::vector<int64_t>& w = m.tensors[l.first_tensor].shape;  // (out, in)
      return {{micro_batch, w[0], w[1]}};                               // Y (B, out) = X (B, in) Wt
    }
    case LayerKind::kHead: return {{micro_batch * d.seq, d.vocab, d.hidden}};
    case LayerKind::kBlock: {
      const int64_t t = micro_batch * d.seq, h = d.hidden, f = d.ffn;
      // Attention per (sample, head): scores (s, s) = Q (s, dh) Kt, then (s, dh) = P (s, s) V.
      const bool split = d.heads > 0 && h % d.heads == 0;
      const int64_t dh = split ? h / d.heads : h, heads = split ? d.heads : 1;
      return {{t, 3 * h, h},
              {d.seq, d.seq, dh, micro_batch * heads},
              {d.seq, dh, d.seq, micro_batch * heads},
              {t, h, h},
              {t, f, h},
              {t, h, f}};
    }
  }
  return {};
}

std::vector<LayerGemm> backward_gemms(const std::vector<LayerGemm>& forward, bool input_grad) {
  std::vector<LayerGemm> out;
  for (const LayerGemm& g : forward) {
    if (input_grad) out.push_back({g.m, g.k, g.n, g.batch, GemmPass::kInputGrad});
    out.push_back({g.n, g.k, g.m, g.batch, GemmPass::kWeightGrad});
  }
  return out;
}

bool layer_needs_input_grad(const ModelDesc& m, size_t index) {
  return !(index == 0 && m.layers.at(0).kind == LayerKind::kLinear);
}

ElementwiseCost layer_elementwise(const ModelDesc& m, size_t index, int64_t micro_batch, int act_bytes) {
  const LayerDesc& l = m.layers.at(index);
  const int64_t e = act_bytes, B = micro_batch;
  ElementwiseCost c;
  switch (l.kind) {
    case LayerKind::kLinear: {
      const std::vector<int64_t>& w = m.tensors[l.first_tensor].shape;  // (out, in)
      const int64_t out = w[0], in = w[1];
      const bool first = index == 0, last = index + 1 == m.layers.size(), bias = m.spec.mlp_bias;
      if (first) c.fwd_bytes += B * in * e, c.fwd_kernels += 1;                      // generated input X
      if (bias || !last) c.fwd_bytes += 2 * B * out * e + (bias ? out * e : 0), c.fwd_kernels += 1;  // bias + ReLU
      if (last) c.fwd_bytes += 2 * B * out * e, c.fwd_kernels += 2;                  // loss and dY in place of Y
      if (bias) c.bwd_bytes += B * out * e + out * e, c.bwd_kernels += 2;            // db: partial sums, finish
      if (!first) c.bwd_bytes += 3 * B * in * e, c.bwd_kernels += 1;                 // dX masked by ReLU(X)
      return c;
    }
    case LayerKind::kBlock: {
      const DecoderShape& d = m.spec.decoder;
      const int64_t t = B * d.seq, h = d.hidden, f = d.ffn, heads = std::max<int64_t>(d.heads, 1);
      // 2 LN (r+w), 2 residual adds (2 r + 1 w), bias adds of QKV/out/fc1/fc2 (r+w), GeLU (r+w), softmax (r+w)
      c.fwd_bytes = e * (t * h * (4 + 6) + 2 * t * (3 * h + h + f + h) + 2 * t * f + 2 * B * heads * d.seq * d.seq);
      c.fwd_kernels = 10;
      c.bwd_bytes = 2 * c.fwd_bytes;
      c.bwd_kernels = 16;
      return c;
    }
    case LayerKind::kEmbedding: {
      const int64_t t = B * m.spec.decoder.seq, h = m.spec.decoder.hidden;
      c.fwd_bytes = e * 3 * t * h, c.fwd_kernels = 1;  // token + position rows gathered and added
      c.bwd_bytes = e * 3 * t * h, c.bwd_kernels = 1;  // scattered back
      return c;
    }
    case LayerKind::kHead: {
      const int64_t t = B * m.spec.decoder.seq, v = m.spec.decoder.vocab;
      c.fwd_bytes = e * 2 * t * v + e * 2 * t * m.spec.decoder.hidden, c.fwd_kernels = 2;  // final LN, softmax + loss
      c.bwd_bytes = e * 2 * t * v, c.bwd_kernels = 1;                                       // dlogits
      return c;
    }
  }
  return c;
}

}  // namespace tf::core
