// The GPT-2/OPT decoder workload on the GPU: docs/decoder.md's forward and backward, one layer per call,
// with cuBLAS GEMMs (bf16 operands, fp32 accumulation, one rounding) and the kernels of decoder_kernels.cuh.
//
// Layers (core::ModelDesc): 0 the embedding, 1..L the blocks, L + 1 the head, which reads the token
// embedding of layer 0 through LayerWeights::shared when the embeddings are tied. Per micro-batch the
// engine calls forward(0..L+1), then backward(L+1..0), on one stream; everything here is ordered by it.
//   forward(0)      the micro-batch's tokens, targets and token-row index (sampled on the host when the
//                   step begins: core::TokenSource at global micro-shard k = mb·world + rank) to the
//                   device; x0 = bf16(E'[tok] + Pos[t + off])
//   forward(1..L)   a block, pre-LN or post-LN, keeping what its backward reads (with activation
//                   checkpointing only its input x_i: the block set is shared and recomputed)
//   forward(L + 1)  z = LNf(x_L), z' = z·W_outᵀ, logits = z'·Eᵀ, the fused cross-entropy: the loss sum
//                   of the micro-batch and dlogits = (softmax - onehot)·gscale in place of the logits
//   backward(L + 1) dz' = dlogits·E, dE_head = dlogitsᵀ·z' in fp32 (kept for the embedding), W_out's and
//                   LNf's gradients, dx_L
//   backward(i)     (recompute the block,) the block's weight gradients and dx_{i-1}
//   backward(0)     the position gradient and dE = bf16(dE_head + Σ_rows dx0) (token_embedding_grad)
// Weight gradients land in the layer's gradient buffer at each tensor's offset in the grad dtype (bf16
// straight from the GEMM, fp16 through fp32 scratch), padding zero. Every buffer is core::workload_buffers'
// (kDecoder), allocated by name. Deterministic: one cuBLAS handle on a fixed workspace, one stream,
// kernels without atomics, and the same shapes whatever the ratio, so the bits do not depend on it.
#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/cuda/cublas_gemm.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/decoder_kernels.cuh"
#include "backends/cuda/logits_gemm.h"
#include "backends/cuda/workload.cuh"
#include "core/alloc_plan.h"
#include "core/decoder_layout.h"
#include "core/decoder_math.h"
#include "core/error.h"
#include "core/token_data.h"

namespace tf::backend::cuda {
namespace {

namespace buf = core::buf;

// Where one tensor sits in its layer's flat buffer (elements from the layer's first).
struct TensorAt {
  int64_t offset = -1;  // -1: the model has no such tensor
  bool present() const { return offset >= 0; }
};

// core::DecoderTensors as offsets in their layers (docs/decoder.md "Shapes and names").
struct DecoderTensors {
  TensorAt tokens, positions, project_in;  // layer 0
  struct Block {
    TensorAt ln1_w, ln1_b, qkv_w, qkv_b, out_w, out_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  std::vector<Block> blocks;                 // layers 1..L
  TensorAt lnf_w, lnf_b, project_out, head;  // the head; `head` (V, e): in the embedding layer when tied

  explicit DecoderTensors(const core::ModelDesc& m) {
    const core::DecoderTensors r(m);
    auto at = [&](const core::TensorDesc* d) {
      TensorAt t;
      if (d) t.offset = d->offset - m.tensors[m.layers[size_t(d->layer)].first_tensor].offset;
      return t;
    };
    tokens = at(r.tokens), positions = at(r.positions), project_in = at(r.project_in);
    for (const core::DecoderTensors::Block& b : r.blocks)
      blocks.push_back({at(b.ln1_w), at(b.ln1_b), at(b.qkv_w), at(b.qkv_b), at(b.out_w), at(b.out_b), at(b.ln2_w),
                        at(b.ln2_b), at(b.fc1_w), at(b.fc1_b), at(b.fc2_w), at(b.fc2_b)});
    lnf_w = at(r.lnf_w), lnf_b = at(r.lnf_b), project_out = at(r.project_out), head = at(r.head);
  }
};

// One block's kept activations (or the shared recompute set), views of named buffers.
struct BlockSet {
  uint16_t *a = nullptr, *qkv = nullptr, *o = nullptr, *x2 = nullptr, *c = nullptr, *u = nullptr, *g = nullptr;
  float* stats = nullptr;  // (4T + T·H) fp32: mean1, rstd1, mean2, rstd2, lse (B, H, s)
};

class DecoderWorkload final : public Workload {
 public:
  explicit DecoderWorkload(const WorkloadContext& ctx) : ctx_(ctx), t_(check_model(ctx)), d_(ctx.model->spec.decoder) {
    validate_context();
    rows_ = ctx_.micro_batch * d_.seq;
    if (rows_ > INT_MAX) throw core::InputError("decoder workload: micro_batch x seq exceeds a GEMM's int range");
    source_.emplace(core::open_token_source(ctx_.data, d_.vocab, d_.seq));
    DeviceGuard guard(ctx_.device);
    allocate();
  }

  const char* name() const override { return "decoder"; }

  void begin_step(int step, double loss_scale) override;
  void forward(int layer, int mb, LayerWeights w, cudaStream_t s) override;
  void backward(int layer, int mb, LayerWeights w, uint16_t* grad, cudaStream_t s) override;
  double step_loss() override;
  const std::vector<core::BufferSpec>& allocated() const override { return allocated_; }

 private:
  static DecoderTensors check_model(const WorkloadContext& c) {
    if (!c.model || c.model->spec.type != core::ModelType::kDecoder)
      throw core::InputError("decoder workload: the model is not a decoder (a GPT-2/OPT preset or {type: decoder})");
    return DecoderTensors(*c.model);
  }
  void validate_context() const;
  void allocate();
  void* buffer(std::string_view name) const;
  BlockSet block_set(int set) const;
  int64_t last_layer() const { return d_.layers + 1; }  // the head
  // The head's (V, e) matrix: the token embedding in the shared layer (tied), or its own lm_head.
  const uint16_t* head_matrix(const LayerWeights& w) const {
    return (d_.tied_embeddings ? w.shared : w.own) + t_.head.offset;
  }
  int64_t e() const { return core::embed_width(d_); }
  bool fp16() const { return ctx_.grad_dtype == core::DType::kF16; }
  LinearDims dims(int64_t in, int64_t out) const { return LinearDims{int(rows_), int(in), int(out)}; }
  LinearDims logits_dims() const { return cuda::logits_dims(rows_, e(), d_.vocab); }  // logits_gemm.h
  AttentionDims attention_dims() const { return {ctx_.micro_batch, d_.seq, d_.heads, core::head_dim(d_)}; }
  EmbeddingDims embedding_dims(int64_t width) const {
    return {ctx_.micro_batch, d_.seq, width, d_.vocab, core::position_rows(d_), d_.pos_offset};
  }
  void check_call(const char* what, int layer, int mb, const LayerWeights& w) const;

  // forward pieces
  void upload_batch(int mb, cudaStream_t s);
  void embedding_forward(const uint16_t* w, const uint16_t* E, cudaStream_t s);
  void block_forward(int block, const uint16_t* w, cudaStream_t s);
  void head_forward(int mb, const uint16_t* w, const uint16_t* E, cudaStream_t s);
  // backward pieces
  void head_backward(const uint16_t* w, const uint16_t* E, uint16_t* grad, cudaStream_t s);
  void block_backward_pre_ln(int block, const uint16_t* w, uint16_t* grad, cudaStream_t s);
  void block_backward_post_ln(int block, const uint16_t* w, uint16_t* grad, cudaStream_t s);
  void mlp_backward(const DecoderTensors::Block& b, const BlockSet& k, const uint16_t* mlp_in, const uint16_t* w,
                    uint16_t* grad, cudaStream_t s);
  void attention_backward_of(const DecoderTensors::Block& b, const BlockSet& k, const uint16_t* attn_in,
                             const uint16_t* w, uint16_t* grad, cudaStream_t s);
  void embedding_backward(const uint16_t* w, uint16_t* grad, cudaStream_t s);
  // dW (out, in) = dyᵀ·x in the grad dtype at `dw`.
  // A weight gradient's GEMM into a buffer of the given type (linear_backward_weight, or the head's
  // logits_weight_grad, which runs its split).
  using WeightGemm = void (*)(CublasHandle&, const LinearDims&, const uint16_t*, const uint16_t*, void*, cudaDataType);
  void weight_grad(const LinearDims& d, const uint16_t* x, const uint16_t* dy, uint16_t* dw, cudaStream_t s,
                   WeightGemm gemm = linear_backward_weight);
  void zero_padding(int layer, uint16_t* grad, cudaStream_t s) const;

  WorkloadContext ctx_;
  DecoderTensors t_;
  core::DecoderShape d_;
  int64_t rows_ = 0;  // T = B·s
  std::optional<core::TokenSource> source_;
  std::vector<std::pair<std::string, DeviceMemory>> device_;  // by core::workload_buffers' names
  PinnedMemory host_batch_;                                   // "decoder.host_batch": (grad_accum x (3T + V + 1)) int32
  const int32_t* host_batch_device_ = nullptr;                // host_batch_'s device alias (mapped pinned memory)
  std::vector<core::BufferSpec> allocated_;
  std::unique_ptr<CublasHandle> cublas_;
  // views of device_
  std::vector<uint16_t*> x_;  // (L + 1) "decoder.x.i": (T, h) bf16
  uint16_t *ein_ = nullptr, *z_ = nullptr, *zp_ = nullptr, *logits_ = nullptr;
  float* z_stats_ = nullptr;
  uint16_t *dx_ = nullptr, *dh_ = nullptr, *df_ = nullptr, *dqkv_ = nullptr, *de_ = nullptr;
  float *de_head_ = nullptr, *delta_ = nullptr, *partials_ = nullptr, *dw32_ = nullptr, *dz32_ = nullptr;
  int32_t *tokens_ = nullptr, *targets_ = nullptr, *token_starts_ = nullptr, *token_rows_ = nullptr;
  float *row_loss_ = nullptr, *loss_sums_ = nullptr;
  // per step
  int step_ = 0;
  double loss_scale_ = 1;
  std::vector<char> loss_done_;  // (grad_accum) micro-batches whose loss this step has
  CallOrder order_{"decoder", int(d_.layers) + 1};
};

void DecoderWorkload::validate_context() const {
  const WorkloadContext& c = ctx_;
  if (c.world < 1 || c.rank < 0 || c.rank >= c.world)
    throw core::InputError("decoder workload: rank " + std::to_string(c.rank) + " outside world " +
                           std::to_string(c.world));
  if (c.grad_accum < 1 || c.micro_batch < 1)
    throw core::InputError("decoder workload: micro_batch and grad_accum must be >= 1");
  if (c.grad_dtype != core::DType::kBF16 && c.grad_dtype != core::DType::kF16)
    throw core::InputError("decoder workload: gradients must be bf16 or fp16, got " +
                           std::string(core::dtype_name(c.grad_dtype)));
  if (c.layer_padded.size() != c.model->layers.size())
    throw core::InputError("decoder workload: layer_padded has " + std::to_string(c.layer_padded.size()) +
                           " entries for " + std::to_string(c.model->layers.size()) + " layers");
  for (size_t l = 0; l < c.layer_padded.size(); ++l)
    if (c.layer_padded[l] < c.model->layers[l].params)
      throw core::InputError("decoder workload: layer_padded[" + std::to_string(l) +
                             "] = " + std::to_string(c.layer_padded[l]) + " is below the layer's " +
                             std::to_string(c.model->layers[l].params) + " parameters");
  const int64_t hd = core::head_dim(d_);
  if (!core::decoder_layout::attention_head_dim_supported(hd))
    throw core::InputError("decoder workload: model '" + c.model->spec.name + "' has head dimension " +
                           std::to_string(hd) + " (hidden " + std::to_string(d_.hidden) + " / heads " +
                           std::to_string(d_.heads) +
                           "); the CUDA attention kernels take 64, 80 or 128: change model.heads");
  // the tensors docs/decoder.md gives this shape (core::describe_model's list)
  const bool proj = core::has_embed_projection(d_);
  bool complete = t_.tokens.present() && t_.positions.present() && proj == t_.project_in.present() &&
                  proj == t_.project_out.present() && d_.pre_ln == t_.lnf_w.present() && t_.head.present() &&
                  int64_t(t_.blocks.size()) == d_.layers;
  for (const DecoderTensors::Block& b : t_.blocks)
    complete = complete && b.ln1_w.present() && b.qkv_w.present() && b.out_w.present() && b.ln2_w.present() &&
               b.fc1_w.present() && b.fc2_w.present() && b.fc2_b.present();
  if (!complete)
    throw core::InputError("decoder workload: model '" + c.model->spec.name +
                           "' lacks tensors of docs/decoder.md's list (describe it with core::describe_model)");
  if (d_.hidden > kLayerNormMaxWidth)
    throw core::InputError("decoder workload: hidden " + std::to_string(d_.hidden) +
                           " exceeds the LayerNorm "
                           "kernels' widest row, " +
                           std::to_string(kLayerNormMaxWidth));
}

// core::workload_buffers' kDecoder list, allocated by name; then views by role.
void DecoderWorkload::allocate() {
  core::StepConfig shape;
  shape.micro_batch = ctx_.micro_batch;
  shape.grad_accum = ctx_.grad_accum;
  shape.grad_dtype = ctx_.grad_dtype;
  shape.checkpointing = ctx_.checkpointing;
  for (const core::BufferSpec& b : core::workload_buffers(*ctx_.model, core::WorkloadType::kDecoder, shape)) {
    if (b.place == core::MemPlace::kHost) {
      if (b.name != buf::kDecHostBatch)
        throw core::RuntimeFailure("decoder workload: unexpected host buffer '" + b.name + "' in the plan");
      host_batch_ = PinnedMemory(size_t(b.bytes));
      void* alias = nullptr;  // the same pages as the device addresses them (upload_batch's kernel reads them)
      TF_CUDA_CHECK(cudaHostGetDevicePointer(&alias, host_batch_.get(), 0));
      host_batch_device_ = static_cast<const int32_t*>(alias);
    } else {
      device_.emplace_back(b.name, DeviceMemory(size_t(b.bytes)));
    }
    allocated_.push_back(b);
  }
  for (int i = 0; i <= int(d_.layers); ++i)
    x_.push_back(static_cast<uint16_t*>(buffer(core::buffer_name(buf::kDecX, i))));
  const bool proj = core::has_embed_projection(d_);
  auto bf = [&](std::string_view n) { return static_cast<uint16_t*>(buffer(n)); };
  auto f32 = [&](std::string_view n) { return static_cast<float*>(buffer(n)); };
  auto i32 = [&](std::string_view n) { return static_cast<int32_t*>(buffer(n)); };
  if (proj) ein_ = bf(buf::kDecEin), zp_ = bf(buf::kDecZp), de_ = bf(buf::kDecDe);
  if (d_.pre_ln) z_ = bf(buf::kDecZ), z_stats_ = f32(buf::kDecZStats);
  logits_ = bf(buf::kDecLogits);
  dx_ = bf(buf::kDecDx), dh_ = bf(buf::kDecDh), df_ = bf(buf::kDecDf), dqkv_ = bf(buf::kDecDqkv);
  if (d_.tied_embeddings) de_head_ = f32(buf::kDecDeHead);
  if (core::decoder_layout::logits_split(d_.vocab)) dz32_ = f32(buf::kDecDz32);
  delta_ = f32(buf::kDecDelta), partials_ = f32(buf::kDecPartials);
  if (fp16()) dw32_ = f32(buf::kDecDw32);
  tokens_ = i32(buf::kDecTokens), targets_ = i32(buf::kDecTargets);
  token_starts_ = i32(buf::kDecTokenStarts), token_rows_ = i32(buf::kDecTokenRows);
  row_loss_ = f32(buf::kDecRowLoss), loss_sums_ = f32(buf::kDecLossSums);
  TF_CUDA_CHECK(cudaMemset(loss_sums_, 0, size_t(ctx_.grad_accum) * 4));
  loss_done_.assign(size_t(ctx_.grad_accum), 0);
  cublas_ = std::make_unique<CublasHandle>(buffer(buf::kCublasWorkspace), size_t(core::kCublasWorkspaceBytes));
}

void* DecoderWorkload::buffer(std::string_view name) const {
  for (const auto& [n, m] : device_)
    if (n == name) return m.get();
  throw core::RuntimeFailure("decoder workload: core::workload_buffers lists no buffer '" + std::string(name) + "'");
}

BlockSet DecoderWorkload::block_set(int block) const {
  const int k = ctx_.checkpointing ? 0 : block;
  auto bf = [&](std::string_view family) { return static_cast<uint16_t*>(buffer(core::buffer_name(family, k))); };
  BlockSet b;
  b.a = bf(buf::kDecA), b.qkv = bf(buf::kDecQkv), b.o = bf(buf::kDecO), b.x2 = bf(buf::kDecX2);
  b.c = bf(buf::kDecC), b.u = bf(buf::kDecU), b.g = bf(buf::kDecG);
  b.stats = static_cast<float*>(buffer(core::buffer_name(buf::kDecStats, k)));
  return b;
}

// ---- the step's data ---------------------------------------------------------------------------------

// Every micro-batch of the step sampled now (the previous step's copies have completed: the engine
// synchronises its streams between steps), into the pinned staging: per micro-batch tokens, targets,
// the token-row index's rows and starts.
void DecoderWorkload::begin_step(int step, double loss_scale) {
  if (!(loss_scale > 0) || !std::isfinite(loss_scale))
    throw core::InputError("decoder workload: loss_scale must be finite and > 0, got " + std::to_string(loss_scale));
  step_ = step;
  loss_scale_ = loss_scale;
  std::fill(loss_done_.begin(), loss_done_.end(), 0);
  order_.reset();
  const int64_t T = rows_, V = d_.vocab, slot = 3 * T + V + 1;
  int32_t* host = host_batch_.as<int32_t>();
  for (int mb = 0; mb < ctx_.grad_accum; ++mb) {
    int32_t* tok = host + mb * slot;
    int32_t* tgt = tok + T;
    const int64_t k = core::global_micro_shard(ctx_.rank, mb, ctx_.world);
    source_->micro_batch(ctx_.seed, step, k, ctx_.micro_batch, {tok, size_t(T)}, {tgt, size_t(T)});
    const TokenRowIndex index = sort_token_rows(tok, T, V, d_.pad_token);
    std::copy(index.rows.begin(), index.rows.end(), tgt + T);
    std::copy(index.starts.begin(), index.starts.end(), tgt + 2 * T);
  }
}

namespace {
// dst[i] = src[i] for i < n, src in page-locked host memory read by the SMs over PCIe (its device alias).
__global__ void copy_from_host_kernel(const int32_t* __restrict__ src, int32_t* __restrict__ dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}
}  // namespace

// The micro-batch's tokens, targets and token-row index, read from the pinned staging by a kernel, not by
// cudaMemcpyAsync: a copy would go to a copy engine, behind whatever H2D copies are queued there, and with a
// carried tail those are the previous step's parameter uploads (at ratio 1 every layer's, ~50 ms on OPT-1.3B
// on the H100: the forward of layer 0 waited for all of them, though it needs only its own;
// docs/ARCHITECTURE.md, "Carrying the optimizer tail into the next step").
void DecoderWorkload::upload_batch(int mb, cudaStream_t s) {
  const int64_t T = rows_, V = d_.vocab;
  const int32_t* tok = host_batch_device_ + mb * (3 * T + V + 1);
  auto copy = [&](const int32_t* src, int32_t* dst, int64_t n) {
    const int threads = 256;
    const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 1024));
    copy_from_host_kernel<<<blocks, threads, 0, s>>>(src, dst, n);
    TF_CUDA_CHECK(cudaGetLastError());
  };
  copy(tok, tokens_, T);
  copy(tok + T, targets_, T);
  copy(tok + 2 * T, token_rows_, T);
  copy(tok + 3 * T, token_starts_, V + 1);
}

// ---- calls and their order ---------------------------------------------------------------------------

void DecoderWorkload::check_call(const char* what, int layer, int mb, const LayerWeights& w) const {
  if (layer < 0 || layer > last_layer() || mb < 0 || mb >= ctx_.grad_accum)
    throw core::InputError(std::string("decoder workload: ") + what + "(layer " + std::to_string(layer) + ", mb " +
                           std::to_string(mb) + ") out of range; layers [0, " + std::to_string(last_layer() + 1) +
                           "), micro-batches [0, " + std::to_string(ctx_.grad_accum) + ")");
  if (!w.own) throw core::InputError(std::string("decoder workload: ") + what + " got no weights");
  if (layer == last_layer() && d_.tied_embeddings && !w.shared)
    throw core::InputError(std::string("decoder workload: ") + what +
                           " of the tied head got no shared weights (the embedding layer as gathered for it)");
}

void DecoderWorkload::forward(int layer, int mb, LayerWeights w, cudaStream_t s) {
  check_call("forward", layer, mb, w);
  order_.check_forward(layer, mb);
  DeviceGuard guard(ctx_.device);
  cublas_->set_stream(s);
  if (layer == 0) {
    upload_batch(mb, s);
    embedding_forward(w.own, w.own + t_.tokens.offset, s);
  } else if (layer <= d_.layers) {
    block_forward(layer - 1, w.own, s);
  } else {
    head_forward(mb, w.own, head_matrix(w), s);
  }
  order_.forward_done(layer, mb);
}

void DecoderWorkload::backward(int layer, int mb, LayerWeights w, uint16_t* grad, cudaStream_t s) {
  check_call("backward", layer, mb, w);
  if (!grad) throw core::InputError("decoder workload: backward(layer " + std::to_string(layer) + ") got no gradient");
  order_.check_backward(layer, mb);
  DeviceGuard guard(ctx_.device);
  cublas_->set_stream(s);
  if (layer == last_layer()) {
    head_backward(w.own, head_matrix(w), grad, s);
  } else if (layer >= 1) {
    if (ctx_.checkpointing) block_forward(layer - 1, w.own, s);  // the same computation: the same bits
    if (d_.pre_ln)
      block_backward_pre_ln(layer - 1, w.own, grad, s);
    else
      block_backward_post_ln(layer - 1, w.own, grad, s);
  } else {
    embedding_backward(w.own, grad, s);
  }
  zero_padding(layer, grad, s);
  order_.backward_done(layer, mb);
}

double DecoderWorkload::step_loss() {
  DeviceGuard guard(ctx_.device);
  return mean_micro_batch_loss(loss_sums_, loss_done_, double(rows_));
}

// ---- forward -----------------------------------------------------------------------------------------

// x0 = bf16(E'[tok] + Pos[t + off]); with project_in, E' = bf16(E[tok]·W_inᵀ).
void DecoderWorkload::embedding_forward(const uint16_t* w, const uint16_t* E, cudaStream_t s) {
  const uint16_t* pos = w + t_.positions.offset;
  if (!core::has_embed_projection(d_)) {
    cuda::embedding_forward(tokens_, E, pos, embedding_dims(d_.hidden), x_[0], s);
    return;
  }
  gather_rows(tokens_, E, rows_, d_.vocab, e(), ein_, s);
  linear_forward(*cublas_, dims(e(), d_.hidden), ein_, w + t_.project_in.offset, 0.0f, x_[0]);
  add_positions(x_[0], pos, embedding_dims(d_.hidden), s);
}

// Block `block` from x_block into x_{block+1}, keeping its set (docs/decoder.md's forward; post-LN keeps
// r1 in `a` and r2 in `c`).
void DecoderWorkload::block_forward(int block, const uint16_t* w, cudaStream_t s) {
  const DecoderTensors::Block& b = t_.blocks[size_t(block)];
  const BlockSet k = block_set(block);
  const int64_t T = rows_, h = d_.hidden, f = d_.ffn;
  const float eps = float(d_.ln_eps);
  const uint16_t* x = x_[size_t(block)];
  uint16_t* x3 = x_[size_t(block) + 1];
  float *mean1 = k.stats, *rstd1 = k.stats + T, *mean2 = k.stats + 2 * T, *rstd2 = k.stats + 3 * T;
  float* lse = k.stats + 4 * T;
  const Activation act = d_.activation == core::Activation::kRelu ? Activation::kRelu : Activation::kGeluTanh;
  const uint16_t* attn_in = x;
  if (d_.pre_ln) {
    layer_norm_forward(x, w + b.ln1_w.offset, w + b.ln1_b.offset, T, h, eps, k.a, mean1, rstd1, s);
    attn_in = k.a;
  }
  linear_forward(*cublas_, dims(h, 3 * h), attn_in, w + b.qkv_w.offset, 0.0f, k.qkv);
  bias_act_forward(k.qkv, w + b.qkv_b.offset, T, 3 * h, Activation::kNone, nullptr, s);
  attention_forward(k.qkv, attention_dims(), k.o, lse, s);
  uint16_t* r1 = d_.pre_ln ? k.x2 : k.a;  // pre-LN: x2 = x + attn; post-LN: r1, then x2 = LN1(r1)
  linear_forward(*cublas_, dims(h, h), k.o, w + b.out_w.offset, 0.0f, r1);
  bias_residual_forward(r1, w + b.out_b.offset, x, T, h, r1, s);
  if (!d_.pre_ln) layer_norm_forward(r1, w + b.ln1_w.offset, w + b.ln1_b.offset, T, h, eps, k.x2, mean1, rstd1, s);
  const uint16_t* mlp_in = k.x2;
  if (d_.pre_ln) {
    layer_norm_forward(k.x2, w + b.ln2_w.offset, w + b.ln2_b.offset, T, h, eps, k.c, mean2, rstd2, s);
    mlp_in = k.c;
  }
  linear_forward(*cublas_, dims(h, f), mlp_in, w + b.fc1_w.offset, 0.0f, k.u);
  bias_act_forward(k.u, w + b.fc1_b.offset, T, f, act, k.g, s);
  uint16_t* r2 = d_.pre_ln ? x3 : k.c;  // pre-LN: x3 = x2 + mlp; post-LN: r2, then x3 = LN2(r2)
  linear_forward(*cublas_, dims(f, h), k.g, w + b.fc2_w.offset, 0.0f, r2);
  bias_residual_forward(r2, w + b.fc2_b.offset, k.x2, T, h, r2, s);
  if (!d_.pre_ln) layer_norm_forward(r2, w + b.ln2_w.offset, w + b.ln2_b.offset, T, h, eps, x3, mean2, rstd2, s);
}

// z = LNf(x_L) (pre-LN), z' = bf16(z·W_outᵀ) (e != h), logits = bf16(z'·Eᵀ), then the fused cross-entropy:
// the micro-batch's loss sum and dlogits in place.
void DecoderWorkload::head_forward(int mb, const uint16_t* w, const uint16_t* E, cudaStream_t s) {
  const int64_t T = rows_, h = d_.hidden;
  const uint16_t* z = x_[size_t(d_.layers)];
  if (d_.pre_ln) {
    layer_norm_forward(z, w + t_.lnf_w.offset, w + t_.lnf_b.offset, T, h, float(d_.ln_eps), z_, z_stats_, z_stats_ + T,
                       s);
    z = z_;
  }
  if (core::has_embed_projection(d_)) {
    linear_forward(*cublas_, dims(h, e()), z, w + t_.project_out.offset, 0.0f, zp_);
    z = zp_;
  }
  logits_forward(*cublas_, logits_dims(), z, E, logits_);
  const double gscale = core::decoder_grad_scale(loss_scale_, T, ctx_.world, ctx_.grad_accum);
  cross_entropy_forward_backward(logits_, targets_, T, d_.vocab, logits_dims().out_stride, float(gscale), row_loss_,
                                 loss_sums_ + mb, s);
  loss_done_[size_t(mb)] = 1;
}

// ---- backward ----------------------------------------------------------------------------------------

void DecoderWorkload::weight_grad(const LinearDims& d, const uint16_t* x, const uint16_t* dy, uint16_t* dw,
                                  cudaStream_t s, WeightGemm gemm) {
  if (!fp16()) return gemm(*cublas_, d, x, dy, dw, CUDA_R_16BF);
  gemm(*cublas_, d, x, dy, dw32_, CUDA_R_32F);
  f32_to_grad(dw32_, int64_t(d.out) * d.in, ctx_.grad_dtype, dw, s);
}

// dz' = bf16(dlogit·E); dE_head = dlogitᵀ·z' in fp32 (tied; an untied head's is its own gradient);
// project_out's gradient and dz = bf16(dz'·W_out) (e != h); LNf backward into dx_L (pre-LN).
void DecoderWorkload::head_backward(const uint16_t* w, const uint16_t* E, uint16_t* grad, cudaStream_t s) {
  const int64_t T = rows_, h = d_.hidden;
  const bool proj = core::has_embed_projection(d_);
  const uint16_t* z = d_.pre_ln ? z_ : x_[size_t(d_.layers)];  // the projection's input, or z' itself
  const uint16_t* zh = proj ? zp_ : z;                         // the logits GEMM's input z'
  uint16_t* dzh = proj ? de_ : (d_.pre_ln ? dh_ : dx_);        // dz'
  logits_input_grad(*cublas_, logits_dims(), logits_, E, dzh, dz32_, s);
  if (d_.tied_embeddings)
    logits_weight_grad(*cublas_, logits_dims(), zh, logits_, de_head_, CUDA_R_32F);
  else
    weight_grad(logits_dims(), zh, logits_, grad + t_.head.offset, s, logits_weight_grad);
  if (proj) {
    weight_grad(dims(h, e()), z, de_, grad + t_.project_out.offset, s);
    linear_backward_data(*cublas_, dims(h, e()), de_, w + t_.project_out.offset, d_.pre_ln ? dh_ : dx_);
  }
  if (d_.pre_ln)
    layer_norm_backward(dh_, x_[size_t(d_.layers)], z_stats_, z_stats_ + T, w + t_.lnf_w.offset, nullptr, T, h, dx_,
                        partials_, ctx_.grad_dtype, grad + t_.lnf_w.offset, grad + t_.lnf_b.offset, s);
}

// From dr = dx_ (the MLP's output gradient): W2's, b2's, b1's and W1's gradients, dc = bf16(du·W1) into dh_.
void DecoderWorkload::mlp_backward(const DecoderTensors::Block& b, const BlockSet& k, const uint16_t* mlp_in,
                                   const uint16_t* w, uint16_t* grad, cudaStream_t s) {
  const int64_t T = rows_, h = d_.hidden, f = d_.ffn;
  const Activation act = d_.activation == core::Activation::kRelu ? Activation::kRelu : Activation::kGeluTanh;
  weight_grad(dims(f, h), k.g, dx_, grad + b.fc2_w.offset, s);
  bias_grad(dx_, T, h, partials_, ctx_.grad_dtype, grad + b.fc2_b.offset, s);
  linear_backward_data(*cublas_, dims(f, h), dx_, w + b.fc2_w.offset, df_);
  bias_act_backward(df_, k.u, T, f, act, df_, partials_, ctx_.grad_dtype, grad + b.fc1_b.offset, s);
  weight_grad(dims(h, f), mlp_in, df_, grad + b.fc1_w.offset, s);
  linear_backward_data(*cublas_, dims(h, f), df_, w + b.fc1_w.offset, dh_);
}

// From dr = dx_ (the attention branch's output gradient): Wo's and bo's gradients, the attention's
// backward, Wqkv's and bqkv's gradients, da = bf16(dqkv·Wqkv) into dh_.
void DecoderWorkload::attention_backward_of(const DecoderTensors::Block& b, const BlockSet& k, const uint16_t* attn_in,
                                            const uint16_t* w, uint16_t* grad, cudaStream_t s) {
  const int64_t T = rows_, h = d_.hidden;
  weight_grad(dims(h, h), k.o, dx_, grad + b.out_w.offset, s);
  bias_grad(dx_, T, h, partials_, ctx_.grad_dtype, grad + b.out_b.offset, s);
  linear_backward_data(*cublas_, dims(h, h), dx_, w + b.out_w.offset, dh_);
  attention_backward(k.qkv, k.o, dh_, k.stats + 4 * T, attention_dims(), delta_, dqkv_, s);
  weight_grad(dims(h, 3 * h), attn_in, dqkv_, grad + b.qkv_w.offset, s);
  bias_grad(dqkv_, T, 3 * h, partials_, ctx_.grad_dtype, grad + b.qkv_b.offset, s);
  linear_backward_data(*cublas_, dims(h, 3 * h), dqkv_, w + b.qkv_w.offset, dh_);
}

// dx_ holds dx3 on entry and dx on return: dx2 = bf16(dx3 + LN2'(dc)), dx = bf16(dx2 + LN1'(da)).
void DecoderWorkload::block_backward_pre_ln(int block, const uint16_t* w, uint16_t* grad, cudaStream_t s) {
  const DecoderTensors::Block& b = t_.blocks[size_t(block)];
  const BlockSet k = block_set(block);
  const int64_t T = rows_, h = d_.hidden;
  mlp_backward(b, k, k.c, w, grad, s);
  layer_norm_backward(dh_, k.x2, k.stats + 2 * T, k.stats + 3 * T, w + b.ln2_w.offset, dx_, T, h, dx_, partials_,
                      ctx_.grad_dtype, grad + b.ln2_w.offset, grad + b.ln2_b.offset, s);
  attention_backward_of(b, k, k.a, w, grad, s);
  layer_norm_backward(dh_, x_[size_t(block)], k.stats, k.stats + T, w + b.ln1_w.offset, dx_, T, h, dx_, partials_,
                      ctx_.grad_dtype, grad + b.ln1_w.offset, grad + b.ln1_b.offset, s);
}

// dr2 = bf16(LN2'(dx3)); dx2 = bf16(dr2 + dc); dr1 = bf16(LN1'(dx2)); dx = bf16(dr1 + da) (dx_ throughout).
void DecoderWorkload::block_backward_post_ln(int block, const uint16_t* w, uint16_t* grad, cudaStream_t s) {
  const DecoderTensors::Block& b = t_.blocks[size_t(block)];
  const BlockSet k = block_set(block);
  const int64_t T = rows_, h = d_.hidden;
  layer_norm_backward(dx_, k.c, k.stats + 2 * T, k.stats + 3 * T, w + b.ln2_w.offset, nullptr, T, h, dx_, partials_,
                      ctx_.grad_dtype, grad + b.ln2_w.offset, grad + b.ln2_b.offset, s);
  mlp_backward(b, k, k.x2, w, grad, s);
  add_bf16(dx_, dh_, T * h, dx_, s);
  layer_norm_backward(dx_, k.a, k.stats, k.stats + T, w + b.ln1_w.offset, nullptr, T, h, dx_, partials_,
                      ctx_.grad_dtype, grad + b.ln1_w.offset, grad + b.ln1_b.offset, s);
  attention_backward_of(b, k, x_[size_t(block)], w, grad, s);
  add_bf16(dx_, dh_, T * h, dx_, s);
}

// dPos from dx0; dE = bf16(dE_head + Σ_{rows of v} drows), drows = dx0 or, with project_in, bf16(dx0·W_in)
// (and W_in's gradient).
void DecoderWorkload::embedding_backward(const uint16_t* w, uint16_t* grad, cudaStream_t s) {
  position_grad(dx_, embedding_dims(d_.hidden), ctx_.grad_dtype, grad + t_.positions.offset, s);
  const uint16_t* drows = dx_;
  if (core::has_embed_projection(d_)) {
    weight_grad(dims(e(), d_.hidden), ein_, dx_, grad + t_.project_in.offset, s);
    linear_backward_data(*cublas_, dims(e(), d_.hidden), dx_, w + t_.project_in.offset, de_);
    drows = de_;
  }
  token_embedding_grad(drows, token_starts_, token_rows_, de_head_, rows_, d_.vocab, e(), ctx_.grad_dtype,
                       grad + t_.tokens.offset, s);
}

void DecoderWorkload::zero_padding(int layer, uint16_t* grad, cudaStream_t s) const {
  const int64_t params = ctx_.model->layers[size_t(layer)].params, padded = ctx_.layer_padded[size_t(layer)];
  if (padded > params) TF_CUDA_CHECK(cudaMemsetAsync(grad + params, 0, size_t(padded - params) * 2, s));
}

}  // namespace

std::unique_ptr<Workload> make_decoder_workload(const WorkloadContext& ctx) {
  return std::make_unique<DecoderWorkload>(ctx);
}

}  // namespace tf::backend::cuda
