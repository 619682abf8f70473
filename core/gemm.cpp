// The GEMMs of a layer's forward and backward (see gemm.h).
#include "core/gemm.h"

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

std::vector<LayerGemm> backward_gemms(const std::vector<LayerGemm>& forward) {
  std::vector<LayerGemm> out;
  for (const LayerGemm& g : forward) {
    out.push_back({g.m, g.k, g.n, g.batch, GemmPass::kInputGrad});
    out.push_back({g.n, g.k, g.m, g.batch, GemmPass::kWeightGrad});
  }
  return out;
}

}  // namespace tf::core
