// The GEMM lists and memory-bound kernels of decoder layers: FLOPs against model.cpp, shapes and bytes by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/gemm.h"
#include "core/model.h"

using namespace tf::core;

namespace {

double flops_of(const std::vector<LayerGemm>& gemms) {
  double f = 0;
  for (const LayerGemm& g : gemms) f += 2.0 * double(g.m) * double(g.n) * double(g.k) * double(g.batch);
  return f;
}

}  // namespace

TEST(Gemm, DecoderGemmFlopsAddUpToTheModelsCount) {
  for (const char* name : {"gpt-tiny", "opt-tiny", "opt-tiny-proj", "gpt2-124m", "opt-350m", "gpt3-350m"}) {
    for (int64_t seq : {int64_t(0), int64_t(7)}) {  // the preset's (even) seq, and an odd one
      ModelSpec spec = model_preset(name);
      if (seq) spec.decoder.seq = seq;
      const ModelDesc m = describe_model(spec);
      const int64_t b = 3, tokens = b * m.spec.decoder.seq;
      for (size_t i = 0; i < m.layers.size(); ++i) {
        const LayerDesc& l = m.layers[i];
        const std::vector<LayerGemm> fwd = forward_gemms(m, l, b);
        const std::vector<LayerGemm> bwd = backward_gemms(fwd, layer_needs_input_grad(m, i));
        const std::string where = std::string(name) + " seq " + std::to_string(m.spec.decoder.seq) + " " + l.name;
        EXPECT_DOUBLE_EQ(flops_of(fwd), l.fwd_flops_per_token * double(tokens)) << where;
        EXPECT_DOUBLE_EQ(flops_of(bwd), l.bwd_flops_per_token * double(tokens)) << where;
      }
    }
  }
}

TEST(Gemm, BlockGemmsAreTheFusedAttentionsCausalHalf) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));  // h 64, H 4 (d 16), f 256, s 64
  const std::vector<LayerGemm> fwd = forward_gemms(m, m.layers[1], 2);
  // T = 128; the causal half of 64 x 64 is 64*65/2 = 2080 = 65 x 32 pairs per (sample, head)
  const std::vector<LayerGemm> want = {{128, 192, 64},
                                       {65, 32, 16, 8, GemmPass::kForward, true, true},
                                       {65, 16, 32, 8, GemmPass::kForward, false, true},
                                       {128, 64, 64},
                                       {128, 256, 64},
                                       {128, 64, 256}};
  EXPECT_EQ(fwd, want);
  const std::vector<LayerGemm> bwd = backward_gemms(fwd);
  ASSERT_EQ(bwd.size(), 13u);  // 6 x (input, weight gradient) + the recomputed scores
  EXPECT_EQ(bwd[2], (LayerGemm{65, 32, 16, 8, GemmPass::kForward, false, true}));
  EXPECT_EQ(bwd[3], (LayerGemm{65, 16, 32, 8, GemmPass::kInputGrad, false, true}));   // dQ = dS K
  EXPECT_EQ(bwd[4], (LayerGemm{32, 16, 65, 8, GemmPass::kWeightGrad, false, true}));  // dK = dS^T Q
  // the fused attention's FLOPs: forward 2 products of 2*65*32*16*8 each; backward 5
  EXPECT_DOUBLE_EQ(fused_attention_flops(fwd), 2 * 2.0 * 65 * 32 * 16 * 8);
  EXPECT_DOUBLE_EQ(fused_attention_flops(bwd), 5 * 2.0 * 65 * 32 * 16 * 8);
  // an odd sequence: 7*8/2 = 28 = 7 x 4
  ModelSpec odd = model_preset("gpt-tiny");
  odd.decoder.seq = 7;
  const ModelDesc mo = describe_model(odd);
  EXPECT_EQ(forward_gemms(mo, mo.layers[1], 1)[1], (LayerGemm{7, 4, 16, 4, GemmPass::kForward, true, true}));
}

TEST(Gemm, ProjectionsAreGemmsOfTheEmbeddingAndHead) {
  const ModelDesc m = describe_model(model_preset("opt-tiny-proj"));  // e 16, h 32, V 80, s 16
  EXPECT_EQ(forward_gemms(m, m.layers[0], 2), (std::vector<LayerGemm>{{32, 32, 16}}));
  // the logits' rows are logits_stride(80) = 80 apart (core/decoder_layout.h)
  EXPECT_EQ(forward_gemms(m, m.layers.back(), 2),
            (std::vector<LayerGemm>{{32, 16, 32}, {32, 80, 16, 1, GemmPass::kForward, false, false, 80}}));
  const ModelDesc g = describe_model(model_preset("gpt-tiny"));
  EXPECT_TRUE(forward_gemms(g, g.layers[0], 2).empty());
  EXPECT_TRUE(layer_needs_input_grad(g, 0));  // the embedding's gradient reaches the token rows
}

// A vocabulary that is not a multiple of 8 (GPT-2's 50257): the logits GEMMs run as two products, the
// first 50256 entries and the last one, rows 50264 apart, in the forward and in each backward pass; the
// FLOPs are the unsplit product's, and the input gradient's fp32 sum is rounded by one more kernel.
TEST(Gemm, AnUnalignedVocabularyRunsTheLogitsAsTwoProducts) {
  ModelSpec spec = model_preset("gpt2-124m");
  spec.decoder.layers = 1;
  const ModelDesc m = describe_model(spec);
  const int64_t T = 2 * 1024, h = 768;
  const std::vector<LayerGemm> fwd = forward_gemms(m, m.layers.back(), 2);
  EXPECT_EQ(fwd, (std::vector<LayerGemm>{{T, 50256, h, 1, GemmPass::kForward, false, false, 50264},
                                         {T, 1, h, 1, GemmPass::kForward, false, false, 50264}}));
  EXPECT_EQ(backward_gemms(fwd), (std::vector<LayerGemm>{{T, h, 50256, 1, GemmPass::kInputGrad, false, false, 50264},
                                                         {50256, h, T, 1, GemmPass::kWeightGrad, false, false, 50264},
                                                         {T, h, 1, 1, GemmPass::kInputGrad, false, false, 50264},
                                                         {1, h, T, 1, GemmPass::kWeightGrad, false, false, 50264}}));
  double flops = 0;
  for (const LayerGemm& g : fwd) flops += 2.0 * double(g.m * g.n * g.k);
  EXPECT_EQ(flops, 2.0 * double(T) * 50257 * double(h));
  ModelSpec aligned = spec;
  aligned.decoder.vocab = 50264;
  const ElementwiseCost odd = layer_elementwise(m, m.layers.size() - 1, 2, 2),
                        even = layer_elementwise(describe_model(aligned), m.layers.size() - 1, 2, 2);
  EXPECT_EQ(odd.bwd_bytes() - even.bwd_bytes(), T * h * (4 + 2));  // dz' read in fp32, written in bf16
  EXPECT_EQ(odd.bwd_kernels(), even.bwd_kernels() + 1);
}

TEST(Gemm, DecoderElementwiseBytesByHand) {
  // gpt-tiny, one sample: T 64, h 64, f 256, H 4, V 512, 64 positions, 2-byte activations.
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));
  const ElementwiseCost blk = layer_elementwise(m, 1, 1, 2);
  // 20*64*64*2 + 3*64*256*2 + 9*64*2 + 256*2 + 16*64 + 4*64*4
  EXPECT_EQ(blk.fwd_bytes(), 163'840 + 98'304 + 1'152 + 512 + 1'024 + 1'024);
  EXPECT_EQ(blk.fwd_kernels(), 6);
  // 26*64*64*2 + 4*64*256*2 + 11*64*2 + 256*2 + 16*64 + 20*64*4: no s x s term
  EXPECT_EQ(blk.bwd_bytes(), 212'992 + 131'072 + 1'408 + 512 + 1'024 + 5'120);
  EXPECT_EQ(blk.bwd_kernels(), 14);
  const ElementwiseCost emb = layer_elementwise(m, 0, 1, 2);
  EXPECT_EQ(emb.fwd_bytes(), 4 * 64 + 3 * 64 * 64 * 2);  // ids, token and position rows, x0
  // dx0 read twice (dPos, scatter), the position table, ids, dE written, the head's fp32 dE_head
  EXPECT_EQ(emb.bwd_bytes(), 2 * 64 * 64 * 2 + 64 * 64 * 2 + 4 * 64 + 512 * 64 * 2 + 4 * 512 * 64);
  const ElementwiseCost head = layer_elementwise(m, 3, 1, 2);
  // the fused cross-entropy (loss and dlogits, one kernel in the forward, as the workload runs it) + LNf
  EXPECT_EQ(head.fwd_bytes(),
            64 * 512 * 2 + 12 * 64 + 2 * 64 * 512 * 2 + 8 * 64 + 2 * 64 * 64 * 2 + 2 * 64 * 2 + 8 * 64);
  EXPECT_EQ(head.bwd_bytes(), 3 * 64 * 64 * 2 + 8 * 64 + 3 * 64 * 2);  // LNf' alone
  EXPECT_EQ(head.fwd_kernels(), 2);
  EXPECT_EQ(head.bwd_kernels(), 2);
  // the bytes scale with the micro-batch (every term but the parameters' is per row)
  EXPECT_EQ(layer_elementwise(m, 1, 2, 2).fwd_bytes() - blk.fwd_bytes(), blk.fwd_bytes() - 9 * 64 * 2 - 256 * 2);
}

TEST(Gemm, DecoderElementwiseClassesByHand) {
  // gpt-tiny, one sample: T 64, h 64, f 256, H 4, V 512, 2-byte activations; the classes calibrate times
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));
  const ElementwiseCost blk = layer_elementwise(m, 1, 1, 2);
  EXPECT_EQ(class_bytes(blk, KernelClass::kLayerNormForward), 2 * (2 * 64 * 64 * 2 + 2 * 64 * 2 + 8 * 64));
  EXPECT_EQ(class_bytes(blk, KernelClass::kBiasActForward), 6 * 64 * 64 * 2 + 3 * 64 * 2 + 3 * 64 * 256 * 2 + 256 * 2);
  EXPECT_EQ(class_bytes(blk, KernelClass::kBiasResidualForward), 2 * (3 * 64 * 64 * 2 + 64 * 2));
  EXPECT_EQ(class_bytes(blk, KernelClass::kAttentionForward), 4 * 64 * 64 * 2 + 4 * 64 * 4);
  EXPECT_EQ(class_bytes(blk, KernelClass::kBiasGrad), 5 * 64 * 64 * 2 + 5 * 64 * 2);
  EXPECT_EQ(class_bytes(blk, KernelClass::kBiasActBackward), 4 * 64 * 256 * 2 + 256 * 2);
  EXPECT_EQ(class_bytes(blk, KernelClass::kLayerNormBackward), 2 * (4 * 64 * 64 * 2 + 8 * 64 + 3 * 64 * 2));
  EXPECT_EQ(class_bytes(blk, KernelClass::kAttentionBackward), 13 * 64 * 64 * 2 + 20 * 64 * 4);
  EXPECT_EQ(class_bytes(blk, KernelClass::kCrossEntropy), 0);
  const ElementwiseCost head = layer_elementwise(m, 3, 1, 2);
  // the loss (T V e + 12 T) and dlogits (2 T V e + 8 T): one fused kernel, one class
  EXPECT_EQ(class_bytes(head, KernelClass::kCrossEntropy), 3 * 64 * 512 * 2 + 20 * 64);
  EXPECT_EQ(class_bytes(head, KernelClass::kLayerNormForward), 2 * 64 * 64 * 2 + 2 * 64 * 2 + 8 * 64);
  // names round-trip
  for (int c = 0; c < kKernelClassCount; ++c)
    EXPECT_EQ(parse_kernel_class(kernel_class_name(KernelClass(c))), KernelClass(c)) << c;
  EXPECT_EQ(parse_kernel_class("layer_norm"), std::nullopt);
}
