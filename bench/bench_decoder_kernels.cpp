// Times the decoder's CUDA kernels (backends/cuda/decoder_kernels.cuh) at the shapes of GPT-2-124M and
// OPT-1.3B (B 8, s 1024) and of the ZeRO-Offload++ tutorial's GPT-350M (B 8, s 2048), read from core's
// model presets: CUDA events between launches, median of 20 after 3 warm-up runs, printed as GB/s (bytes
// from the kernels' *_bytes functions) or TFLOP/s (attention_*_flops, causal counted as half).
// `bench_decoder_kernels attention` times only the attention kernels.
// Host code only (the kernels' launch API); exits 0 with a note when no CUDA device is usable.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/calibrate.h"
#include "backends/cuda/cublas_gemm.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/decoder_kernels.cuh"
#include "backends/cuda/logits_gemm.h"
#include "core/decoder_layout.h"
#include "core/model.h"
#include "core/optim/dtype.h"
#include "core/random.h"

using namespace tf;
using namespace tf::backend::cuda;

namespace {

constexpr int kWarmup = 3, kIters = 20;

// A decoder shape to time: a core model preset (its published shape, core/model.cpp) at a batch and
// sequence length; the position table holds at least `seq` rows.
struct Shape {
  std::string name;
  int64_t batch, seq, hidden, heads, ffn, vocab, positions, pos_offset;
  Activation act;
};
Shape preset_shape(const char* preset, int64_t batch, int64_t seq) {
  core::ModelSpec spec = core::model_preset(preset);
  spec.decoder.seq = seq;
  core::normalize_model(spec);
  const core::DecoderShape& d = spec.decoder;
  const int64_t positions = std::max(d.max_positions, seq);
  Shape s{preset, batch, seq, d.hidden, d.heads, d.ffn, d.vocab, positions, d.pos_offset, Activation::kGeluTanh};
  if (d.activation == core::Activation::kRelu) s.act = Activation::kRelu;
  return s;
}
std::vector<Shape> shapes() {
  return {preset_shape("gpt2-124m", 8, 1024), preset_shape("opt-1.3b", 8, 1024), preset_shape("gpt2-350m", 8, 2048)};
}

// A device buffer of n values: bf16 uniform in [lo, hi) (or fp32 / int32 below), from a 1 Mi pattern
// repeated (the values only need to be finite and varied).
DeviceMemory bf16_buffer(size_t n, double lo, double hi, uint64_t seed) {
  constexpr size_t kPattern = size_t(1) << 20;
  std::vector<uint16_t> p(std::min(n, kPattern));
  for (size_t i = 0; i < p.size(); ++i) {
    const double u = double(core::splitmix64(seed * 0x9E3779B97F4A7C15ull + i) >> 11) * 0x1.0p-53;
    p[i] = core::f32_to_bf16(float(lo + (hi - lo) * u));
  }
  DeviceMemory d(n * 2);
  for (size_t at = 0; at < n; at += p.size())
    TF_CUDA_CHECK(cudaMemcpy(d.as<uint16_t>() + at, p.data(), std::min(p.size(), n - at) * 2, cudaMemcpyHostToDevice));
  return d;
}
DeviceMemory f32_buffer(size_t n, float value) {
  const std::vector<float> h(n, value);
  DeviceMemory d(n * 4);
  TF_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), n * 4, cudaMemcpyHostToDevice));
  return d;
}
DeviceMemory i32_buffer(const std::vector<int32_t>& h) {
  DeviceMemory d(h.size() * 4);
  TF_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

// Milliseconds of `launch`: kWarmup untimed runs, then kIters runs between events recorded back to back
// (one synchronize at the end), summarised by calibrate::make_stat (median and spread).
calibrate::Stat timed_ms(cudaStream_t s, const std::function<void()>& launch) {
  for (int it = 0; it < kWarmup; ++it) launch();
  std::vector<Event> ev(kIters + 1);
  ev[0].record(s);
  for (int it = 0; it < kIters; ++it) {
    launch();
    ev[size_t(it) + 1].record(s);
  }
  TF_CUDA_CHECK(cudaEventSynchronize(ev.back().get()));
  std::vector<double> ms;
  for (int it = 0; it < kIters; ++it) ms.push_back(elapsed_ms(ev[size_t(it)], ev[size_t(it) + 1]));
  return calibrate::make_stat(std::move(ms));
}

void report_bytes(const char* kernel, const std::string& shape, const calibrate::Stat& ms, int64_t bytes) {
  std::printf("  %-32s %-22s %9.1f us (spread %5.1f%%) %9.1f GB/s\n", kernel, shape.c_str(), ms.median * 1e3,
              100 * ms.spread, double(bytes) / (ms.median * 1e-3) / 1e9);
}
void report_flops(const char* kernel, const std::string& shape, const calibrate::Stat& ms, double flops) {
  std::printf("  %-32s %-22s %9.1f us (spread %5.1f%%) %9.1f TFLOP/s\n", kernel, shape.c_str(), ms.median * 1e3,
              100 * ms.spread, flops / (ms.median * 1e-3) / 1e12);
}
// snprintf rather than "(" + std::to_string(...): GCC 12 warns falsely on the latter (-Wrestrict, PR105329).
std::string dims(int64_t rows, int64_t cols) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "(%lld, %lld)", (long long)rows, (long long)cols);
  return buf;
}

// Embedding forward and both embedding gradients.
void bench_embedding(const Shape& m, cudaStream_t s) {
  const EmbeddingDims d{m.batch, m.seq, m.hidden, m.vocab, m.positions + m.pos_offset, m.pos_offset};
  const int64_t T = d.rows(), h = m.hidden;
  std::vector<int32_t> tok(static_cast<size_t>(T));
  for (int64_t r = 0; r < T; ++r) tok[size_t(r)] = int32_t(core::splitmix64(uint64_t(r)) % uint64_t(m.vocab));
  const TokenRowIndex ix = sort_token_rows(tok.data(), T, m.vocab);
  DeviceMemory dtok = i32_buffer(tok), starts = i32_buffer(ix.starts), by_tok = i32_buffer(ix.rows);
  DeviceMemory E = bf16_buffer(size_t(m.vocab * h), -0.1, 0.1, 1),
               pos = bf16_buffer(size_t(d.pos_rows * h), -0.1, 0.1, 2);
  DeviceMemory x0(size_t(T * h) * 2), dpos(size_t(d.pos_rows * h) * 2), dE(size_t(m.vocab * h) * 2);
  DeviceMemory head = f32_buffer(size_t(m.vocab * h), 1e-3f);
  const uint16_t* e = E.as<uint16_t>();
  const std::string shape = dims(T, h);
  report_bytes(
      "embedding_forward", shape,
      timed_ms(s, [&] { embedding_forward(dtok.as<int32_t>(), e, pos.as<uint16_t>(), d, x0.as<uint16_t>(), s); }),
      embedding_forward_bytes(d));
  report_bytes("position_grad", shape,
               timed_ms(s, [&] { position_grad(x0.as<uint16_t>(), d, core::DType::kBF16, dpos.as<uint16_t>(), s); }),
               position_grad_bytes(d));
  const auto token_grad = [&](const char* name, const DeviceMemory& index_starts, const DeviceMemory& index_rows,
                              int in_flight = 16) {
    report_bytes(name, dims(m.vocab, h),
                 timed_ms(s,
                          [&] {
                            token_embedding_grad(x0.as<uint16_t>(), index_starts.as<int32_t>(),
                                                 index_rows.as<int32_t>(), head.as<float>(), T, m.vocab, h,
                                                 core::DType::kBF16, dE.as<uint16_t>(), s, in_flight);
                          }),
                 token_embedding_grad_bytes(T, m.vocab, h, true));
  };
  token_grad("token_embedding_grad (+head)", starts, by_tok);
  // Text as GPT-2 tokenizes it: one id is a tenth of the rows or more (220, a lone space, is 2,057-3,371 of
  // GPT-350M's 16,384 on the shipped data), a long chain for the one vocabulary row that sums them
  std::vector<int32_t> skewed = tok;
  for (int64_t r = 0; r < T; r += 10) skewed[size_t(r)] = int32_t(std::min<int64_t>(220, m.vocab - 1));
  const TokenRowIndex sx = sort_token_rows(skewed.data(), T, m.vocab);
  const DeviceMemory sk_starts = i32_buffer(sx.starts), sk_rows = i32_buffer(sx.rows);
  token_grad("token_embedding_grad 10% one id", sk_starts, sk_rows);
  token_grad("  the same, 1 row in flight", sk_starts, sk_rows, 1);
}

// Layer norm, bias/activation/residual and bias gradients at the block's widths.
void bench_block_elementwise(const Shape& m, cudaStream_t s) {
  const int64_t T = m.batch * m.seq, h = m.hidden, f = m.ffn;
  DeviceMemory x = bf16_buffer(size_t(T * f), -2, 2, 3), y = bf16_buffer(size_t(T * f), -2, 2, 4);
  DeviceMemory r = bf16_buffer(size_t(T * h), -2, 2, 5), g(size_t(T * f) * 2), out(size_t(T * f) * 2);
  DeviceMemory w = bf16_buffer(size_t(f), 0.5, 1.5, 6), b = bf16_buffer(size_t(f), -0.1, 0.1, 7);
  DeviceMemory mean(size_t(T) * 4), rstd(size_t(T) * 4), dw(size_t(f) * 2), db(size_t(f) * 2);
  DeviceMemory partials(size_t(std::max(layer_norm_partial_floats(T, h), bias_grad_partial_floats(T, f))) * 4);
  const auto p = [](const DeviceMemory& m) { return m.as<uint16_t>(); };
  report_bytes(
      "layer_norm_forward", dims(T, h),
      timed_ms(
          s, [&] { layer_norm_forward(p(x), p(w), p(b), T, h, 1e-5f, p(out), mean.as<float>(), rstd.as<float>(), s); }),
      layer_norm_forward_bytes(T, h));
  report_bytes("layer_norm_backward (+dresid)", dims(T, h),
               timed_ms(s,
                        [&] {
                          layer_norm_backward(p(y), p(x), mean.as<float>(), rstd.as<float>(), p(w), p(r), T, h, p(out),
                                              partials.as<float>(), core::DType::kBF16, p(dw), p(db), s);
                        }),
               layer_norm_backward_bytes(T, h, true));
  report_bytes("bias_act_forward qkv (none)", dims(T, 3 * h),
               timed_ms(s, [&] { bias_act_forward(p(y), p(b), T, 3 * h, Activation::kNone, nullptr, s); }),
               bias_act_forward_bytes(T, 3 * h, Activation::kNone));
  report_bytes(m.act == Activation::kRelu ? "bias_act_forward fc1 (relu)" : "bias_act_forward fc1 (gelu)", dims(T, f),
               timed_ms(s, [&] { bias_act_forward(p(y), p(b), T, f, m.act, p(g), s); }),
               bias_act_forward_bytes(T, f, m.act));
  report_bytes("bias_residual_forward", dims(T, h),
               timed_ms(s, [&] { bias_residual_forward(p(x), p(b), p(r), T, h, p(out), s); }),
               bias_residual_forward_bytes(T, h));
  report_bytes(m.act == Activation::kRelu ? "bias_act_backward fc1 (relu)" : "bias_act_backward fc1 (gelu)", dims(T, f),
               timed_ms(s,
                        [&] {
                          bias_act_backward(p(x), p(y), T, f, m.act, p(out), partials.as<float>(), core::DType::kBF16,
                                            p(db), s);
                        }),
               bias_act_backward_bytes(T, f));
  report_bytes("bias_grad qkv", dims(T, 3 * h),
               timed_ms(s, [&] { bias_grad(p(x), T, 3 * h, partials.as<float>(), core::DType::kBF16, p(db), s); }),
               bias_grad_bytes(T, 3 * h));
}

// The head: the fused cross-entropy over the logits as the workload stores them (rows
// core::decoder_layout::logits_stride apart), then the logits' three GEMMs (forward, input gradient,
// the tied head's fp32 weight gradient): each as one GEMM with the rows V apart (as before the padding)
// and 64-aligned, then as the workload runs them (backends/cuda/logits_gemm.h).
void bench_head(const Shape& m, cudaStream_t s) {
  const int64_t T = m.batch * m.seq, V = m.vocab, h = m.hidden, ld = core::decoder_layout::logits_stride(V);
  const int64_t ld64 = (V + 63) / 64 * 64;
  DeviceMemory logits = bf16_buffer(size_t(T * ld64), -8, 8, 8), loss(size_t(T) * 4), sum(4);
  std::vector<int32_t> target(static_cast<size_t>(T));
  for (int64_t r = 0; r < T; ++r) target[size_t(r)] = int32_t(core::splitmix64(uint64_t(r) + 99) % uint64_t(V));
  DeviceMemory dt = i32_buffer(target);
  report_bytes("cross_entropy (+sum)", dims(T, V),
               timed_ms(s,
                        [&] {
                          cross_entropy_forward_backward(logits.as<uint16_t>(), dt.as<int32_t>(), T, V, ld,
                                                         1.0f / float(T), loss.as<float>(), sum.as<float>(), s);
                        }),
               cross_entropy_bytes(T, V));
  DeviceMemory z = bf16_buffer(size_t(T * h), -1, 1, 12), E = bf16_buffer(size_t(V * h), -0.1, 0.1, 13);
  DeviceMemory dz(size_t(T * h) * 2), dE(size_t(V * h) * 4);
  DeviceMemory dz32(size_t(core::decoder_layout::logits_grad_scratch_bytes(T, h, V)) + 4);
  CublasHandle blas;
  blas.set_stream(s);
  const double flops = 2.0 * double(T) * double(V) * double(h);
  const uint16_t* zp = z.as<uint16_t>();
  const uint16_t* Ep = E.as<uint16_t>();
  uint16_t* lp = logits.as<uint16_t>();
  // one GEMM each, rows V apart (as before the padding) and 64-aligned
  for (const int64_t stride : {V, ld64}) {
    const LinearDims d{int(T), int(h), int(V), int(stride)};
    char shape[64];
    std::snprintf(shape, sizeof shape, "(%lld, %lld) ld %lld", (long long)T, (long long)V, (long long)stride);
    report_flops("logits = z Et, one GEMM", shape, timed_ms(s, [&] { linear_forward(blas, d, zp, Ep, 0.0f, lp); }),
                 flops);
    report_flops("dz = dlogits E, one GEMM", shape,
                 timed_ms(s, [&] { linear_backward_data(blas, d, lp, Ep, dz.as<uint16_t>()); }), flops);
    report_flops("dE_head = dlogitst z, one GEMM", shape,
                 timed_ms(s, [&] { linear_backward_weight(blas, d, zp, lp, dE.get(), CUDA_R_32F); }), flops);
  }
  // as the workload runs them (logits_gemm.h)
  const LinearDims d = logits_dims(T, h, V);
  char shape[64];
  std::snprintf(shape, sizeof shape, "(%lld, %lld) workload's", (long long)T, (long long)V);
  report_flops("logits = z Et", shape, timed_ms(s, [&] { logits_forward(blas, d, zp, Ep, lp); }), flops);
  report_flops("dz = dlogits E", shape,
               timed_ms(s, [&] { logits_input_grad(blas, d, lp, Ep, dz.as<uint16_t>(), dz32.as<float>(), s); }), flops);
  report_flops("dE_head = dlogitst z (fp32)", shape,
               timed_ms(s, [&] { logits_weight_grad(blas, d, zp, lp, dE.get(), CUDA_R_32F); }), flops);
}

// Whether the current device is compute capability 9.0 (ForwardTiles::kWgmma and BackwardKernel::kWgmma run there
// only).
bool compute_capability_90() {
  int dev = 0, major = 0, minor = 0;
  TF_CUDA_CHECK(cudaGetDevice(&dev));
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major == 9 && minor == 0;
}

void bench_attention(const Shape& m, cudaStream_t s) {
  const AttentionDims d{m.batch, m.seq, m.heads, m.hidden / m.heads};
  const int64_t T = d.rows(), h = d.hidden();
  DeviceMemory qkv = bf16_buffer(size_t(T * 3 * h), -2, 2, 9), dout = bf16_buffer(size_t(T * h), -1, 1, 10);
  DeviceMemory o(size_t(T * h) * 2), lse(size_t(d.batch * d.heads * d.seq) * 4), delta(lse.bytes());
  DeviceMemory dqkv(size_t(T * 3 * h) * 2);
  char shape[64];
  std::snprintf(shape, sizeof shape, "B%lld H%lld s%lld d%lld", (long long)d.batch, (long long)d.heads,
                (long long)d.seq, (long long)d.head_dim);
  report_flops("attention_forward (causal)", shape,
               timed_ms(s, [&] { attention_forward(qkv.as<uint16_t>(), d, o.as<uint16_t>(), lse.as<float>(), s); }),
               attention_forward_flops(d));
  if (d.head_dim == 64)  // every tile shape, for ForwardTiles::kDefault's choice (decoder_kernels.cuh)
    for (const ForwardTiles t : {ForwardTiles::kWarps4x32, ForwardTiles::kWarps8x16, ForwardTiles::kWgmma}) {
      if (t == ForwardTiles::kWgmma && !compute_capability_90()) continue;  // wgmma: sm_90a code only
      const char* name = t == ForwardTiles::kWarps4x32   ? "attention_forward 4 warps x 32"
                         : t == ForwardTiles::kWarps8x16 ? "attention_forward 8 warps x 16"
                                                         : "attention_forward wgmma";
      report_flops(
          name, shape,
          timed_ms(s, [&] { attention_forward(qkv.as<uint16_t>(), d, o.as<uint16_t>(), lse.as<float>(), s, t); }),
          attention_forward_flops(d));
    }
  report_flops("attention_backward (causal)", shape,
               timed_ms(s,
                        [&] {
                          attention_backward(qkv.as<uint16_t>(), o.as<uint16_t>(), dout.as<uint16_t>(), lse.as<float>(),
                                             d, delta.as<float>(), dqkv.as<uint16_t>(), s);
                        }),
               attention_backward_flops(d));
  if (d.head_dim == 64 && compute_capability_90())  // the whole backward with the wgmma dK/dV (sm_90a code only)
    report_flops("attention_backward wgmma dkdv", shape,
                 timed_ms(s,
                          [&] {
                            attention_backward(qkv.as<uint16_t>(), o.as<uint16_t>(), dout.as<uint16_t>(),
                                               lse.as<float>(), d, delta.as<float>(), dqkv.as<uint16_t>(), s,
                                               BackwardKernel::kWgmma);
                          }),
                 attention_backward_flops(d));
}

}  // namespace

int main(int argc, char** argv) {
  const bool attention_only = argc > 1 && std::string(argv[1]) == "attention";
  if (argc > 2 || (argc == 2 && !attention_only)) {
    std::fprintf(stderr, "usage: bench_decoder_kernels [attention]\n");
    return 2;
  }
  std::string why;
  if (!cuda_available(&why)) {
    std::printf("bench_decoder_kernels: no usable CUDA device (%s); nothing timed\n", why.c_str());
    return 0;
  }
  const GpuInfo gpu = gpu_info(0);
  std::printf("bench_decoder_kernels on %s (%d SMs): median of %d after %d warm-up runs\n", gpu.name.c_str(),
              gpu.sm_count, kIters, kWarmup);
  Stream stream;
  for (const Shape& m : shapes()) {
    std::printf("%s, B %lld, s %lld\n", m.name.c_str(), (long long)m.batch, (long long)m.seq);
    if (!attention_only) {
      bench_embedding(m, stream.get());
      bench_block_elementwise(m, stream.get());
      bench_head(m, stream.get());
    }
    bench_attention(m, stream.get());
  }
  return 0;
}
