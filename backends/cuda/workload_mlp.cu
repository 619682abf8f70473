// The toy MLP workload: y_l = x_l·W_lᵀ + b_l with ReLU between layers, cuBLAS bf16 GEMMs with
// fp32 accumulation, an MSE loss against a fixed teacher (mlp_data.h), data generated on device.
//
// Numerics, per micro-batch of B samples (every rounding is round-to-nearest-even):
//   x_0                = input_value(row_key(seed, step, k, i), f), exact in bf16       (B × d_0)
//   y_l                = bf16(bf16(x_l·W_lᵀ) + b_l)  GEMM rounded to bf16, bias added in fp32 (bias_act_kernel)
//   x_{l+1}            = relu(y_l)                    l < L-1; the ReLU mask is x_{l+1} != 0
//   loss (per mb)      = sum over (i, j) of fp32 (y_{L-1} - t)², divided by B·d_L on the host
//   dY_{L-1}           = bf16(g · (y_{L-1} - t)),     g = 2·loss_scale / (B·d_L·world·grad_accum)
//   dW_l               = dY_lᵀ·x_l                    -> grad dtype (bf16: by cuBLAS; fp16: fp32 then
//                                                        one rounding here)
//   db_l               = sum over samples of dY_l     fp32, fixed order -> grad dtype
//   dY_{l-1}           = bf16(dY_l·W_l) masked by x_l != 0
// g makes the gradient that of this micro-batch's mean loss times loss_scale / (world·grad_accum):
// summed over ranks and micro-batches it is the loss-scaled gradient of the global-batch mean.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/cuda/cublas_gemm.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/mlp_data.h"
#include "backends/cuda/workload.cuh"
#include "core/alloc_plan.h"
#include "core/error.h"
#include "core/workload_layout.h"

namespace tf::backend::cuda {
namespace {

namespace ml = core::mlp_layout;  // the launch shapes the buffer sizes depend on

constexpr int kThreads = 256;
constexpr int kBiasCols = 32;  // bias gradient: block (32 columns, ml::kBiasLanes row lanes)
constexpr int kBiasLanes = int(ml::kBiasLanes);

unsigned grid_for(int64_t n, int64_t per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  return unsigned(std::clamp<int64_t>(b, 1, int64_t(1) << 20));  // grid-stride loops cover the rest
}

__device__ __forceinline__ uint16_t to_grad(float v, bool fp16) {
  return fp16 ? core::f32_to_f16(v) : core::f32_to_bf16(v);
}

// x_0 (B × in) bf16: one hash word gives 8 features. Blocks stride over rows, threads over words.
__global__ void input_kernel(uint16_t* __restrict__ x, int64_t batch, int64_t in, uint64_t seed, int64_t step,
                             int64_t shard) {
  const int64_t words = (in + 7) / 8;
  for (int64_t i = blockIdx.x; i < batch; i += gridDim.x) {
    const uint64_t row = mlp::row_key(seed, step, shard, i);
    for (int64_t w = threadIdx.x; w < words; w += blockDim.x) {
      const uint64_t h = mlp::input_word(row, w);
      uint16_t v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = core::f32_to_bf16(mlp::input_from_word(h, e));
      uint16_t* p = x + i * in + w * 8;
      if (in % 8 == 0) {  // p is then 16-byte aligned
        uint4 q;
        q.x = uint32_t(v[0]) | uint32_t(v[1]) << 16;
        q.y = uint32_t(v[2]) | uint32_t(v[3]) << 16;
        q.z = uint32_t(v[4]) | uint32_t(v[5]) << 16;
        q.w = uint32_t(v[6]) | uint32_t(v[7]) << 16;
        *reinterpret_cast<uint4*>(p) = q;
      } else {
        for (int e = 0; e < 8 && w * 8 + e < in; ++e) p[e] = v[e];
      }
    }
  }
}

// y (B × out) = bf16(y + b) per row, then the bf16 ReLU when `relu` (negative and -0 -> +0).
__global__ void bias_act_kernel(uint16_t* __restrict__ y, const uint16_t* __restrict__ b, int64_t batch, int64_t out,
                                bool relu) {
  for (int64_t i = blockIdx.x; i < batch; i += gridDim.x)
    for (int64_t j = threadIdx.x; j < out; j += blockDim.x) {
      uint16_t v = core::f32_to_bf16(__fadd_rn(core::bf16_to_f32(y[i * out + j]), core::bf16_to_f32(b[j])));
      if (relu && (v & 0x8000u)) v = 0;
      y[i * out + j] = v;
    }
}

// In place: bf16 ReLU (negative, -0 and negative NaN -> +0; positive values and NaN kept).
__device__ __forceinline__ uint32_t relu2(uint32_t p) {
  const uint32_t lo = (p & 0x8000u) ? 0u : (p & 0xFFFFu);
  const uint32_t hi = (p & 0x80000000u) ? 0u : (p & 0xFFFF0000u);
  return lo | hi;
}
__global__ void relu_kernel(uint16_t* __restrict__ x, int64_t n) {
  const int64_t n8 = n / 8;
  uint4* x8 = reinterpret_cast<uint4*>(x);  // buffer base: 256-byte aligned
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n8; t += int64_t(gridDim.x) * blockDim.x) {
    uint4 p = x8[t];
    p.x = relu2(p.x);
    p.y = relu2(p.y);
    p.z = relu2(p.z);
    p.w = relu2(p.w);
    x8[t] = p;
  }
  for (int64_t t = n8 * 8 + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x)
    x[t] = (x[t] & 0x8000u) ? uint16_t(0) : x[t];
}

// In place: dy = dx where the ReLU output x is nonzero, else +0.
__device__ __forceinline__ uint32_t mask2(uint32_t d, uint32_t x) {
  const uint32_t lo = (x & 0xFFFFu) ? (d & 0xFFFFu) : 0u;
  const uint32_t hi = (x & 0xFFFF0000u) ? (d & 0xFFFF0000u) : 0u;
  return lo | hi;
}
__global__ void relu_mask_kernel(uint16_t* __restrict__ d, const uint16_t* __restrict__ x, int64_t n) {
  const int64_t n8 = n / 8;
  uint4* d8 = reinterpret_cast<uint4*>(d);
  const uint4* x8 = reinterpret_cast<const uint4*>(x);
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n8; t += int64_t(gridDim.x) * blockDim.x) {
    uint4 p = d8[t];
    const uint4 m = x8[t];
    p.x = mask2(p.x, m.x);
    p.y = mask2(p.y, m.y);
    p.z = mask2(p.z, m.z);
    p.w = mask2(p.w, m.w);
    d8[t] = p;
  }
  for (int64_t t = n8 * 8 + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x)
    d[t] = x[t] ? d[t] : uint16_t(0);
}

// Sum of a block's values in a fixed tree order; the result is valid in thread 0.
__device__ float block_sum(float v, float* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h /= 2) {
    if (int(threadIdx.x) < h) smem[threadIdx.x] = smem[threadIdx.x] + smem[threadIdx.x + h];
    __syncthreads();
  }
  return smem[0];
}

// The last layer's output y (B × out) bf16 becomes dY in place; partials[block] = this block's fp32
// sum of (y - t)². x0 (B × in) is the micro-batch's input, taps (out × 4) the teacher. Blocks stride
// over rows, threads over columns: the order of every sum depends on (B, out) only.
__global__ void __launch_bounds__(kThreads)
    loss_grad_kernel(uint16_t* __restrict__ y, const uint16_t* __restrict__ x0, const uint32_t* __restrict__ taps,
                     int64_t batch, int64_t out, int64_t in, float g, float* __restrict__ partials) {
  static_assert(mlp::kTeacherTaps == 4, "one uint4 of taps per output");
  __shared__ float smem[kThreads];
  float acc = 0.0f;
  for (int64_t i = blockIdx.x; i < batch; i += gridDim.x) {
    const uint16_t* xr = x0 + i * in;
    for (int64_t j = threadIdx.x; j < out; j += blockDim.x) {
      const uint4 tp = reinterpret_cast<const uint4*>(taps)[j];
      float target = 0.0f;
      target = mlp::teacher_combine(target, core::bf16_to_f32(xr[tp.x & mlp::kTapFeatureMask]), tp.x);
      target = mlp::teacher_combine(target, core::bf16_to_f32(xr[tp.y & mlp::kTapFeatureMask]), tp.y);
      target = mlp::teacher_combine(target, core::bf16_to_f32(xr[tp.z & mlp::kTapFeatureMask]), tp.z);
      target = mlp::teacher_combine(target, core::bf16_to_f32(xr[tp.w & mlp::kTapFeatureMask]), tp.w);
      target = 0.5f * target;
      const float d = core::bf16_to_f32(y[i * out + j]) - target;
      acc = acc + d * d;  // -fmad=false: a rounded multiply, then a rounded add
      y[i * out + j] = core::f32_to_bf16(g * d);
    }
  }
  const float s = block_sum(acc, smem);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// *sum = the partials summed in a fixed order (one block).
__global__ void __launch_bounds__(kThreads)
    loss_finish_kernel(const float* __restrict__ partials, int count, float* __restrict__ sum) {
  __shared__ float smem[kThreads];
  float acc = 0.0f;
  for (int k = int(threadIdx.x); k < count; k += kThreads) acc = acc + partials[k];
  const float s = block_sum(acc, smem);
  if (threadIdx.x == 0) *sum = s;
}

// Bias gradient, first pass: partials[chunk][j] = fp32 sum of dY[i][j] over the chunk's rows, in
// row order per lane, lanes summed in order. Block (32, 8), grid (column blocks, chunks).
__global__ void __launch_bounds__(kBiasCols* kBiasLanes)
    bias_grad_partial_kernel(const uint16_t* __restrict__ dy, int64_t batch, int64_t out, int64_t chunk_rows,
                             float* __restrict__ partials) {
  __shared__ float smem[kBiasLanes][kBiasCols + 1];
  const int64_t j = int64_t(blockIdx.x) * kBiasCols + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < batch ? r0 + chunk_rows : batch;
  float acc = 0.0f;
  if (j < out)
    for (int64_t i = r0 + threadIdx.y; i < r1; i += kBiasLanes) acc = acc + core::bf16_to_f32(dy[i * out + j]);
  smem[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < out) {
    float s = smem[0][threadIdx.x];
    for (int l = 1; l < kBiasLanes; ++l) s = s + smem[l][threadIdx.x];
    partials[int64_t(blockIdx.y) * out + j] = s;
  }
}

// Bias gradient, second pass: the chunks summed in order, rounded to the grad dtype.
__global__ void bias_grad_finish_kernel(const float* __restrict__ partials, int chunks, int64_t out,
                                        uint16_t* __restrict__ grad, bool fp16) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < out; j += int64_t(gridDim.x) * blockDim.x) {
    float s = partials[j];
    for (int c = 1; c < chunks; ++c) s = s + partials[int64_t(c) * out + j];
    grad[j] = to_grad(s, fp16);
  }
}

// grad[i] = fp16(w[i]): the fp32 weight gradient rounded once.
__global__ void to_f16_kernel(const float* __restrict__ w, int64_t n, uint16_t* __restrict__ grad) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x)
    grad[t] = core::f32_to_f16(w[t]);
}

// A non-owning view of one of the workload's named buffers.
struct View {
  void* p = nullptr;
  void* get() const { return p; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// One linear layer's shape and where its tensors sit in the gathered flat buffer.
struct Layer {
  int64_t in = 0, out = 0;
  int64_t params = 0;  // out·in (+ out with a bias)
  int64_t padded = 0;  // layer_padded
  bool bias = false;
};

class MlpWorkload final : public Workload {
 public:
  explicit MlpWorkload(const WorkloadContext& ctx) : ctx_(ctx) {
    validate_and_describe();
    order_ = CallOrder("mlp", int(layers_.size()) - 1);
    DeviceGuard guard(ctx_.device);
    allocate();
  }

  const char* name() const override { return "mlp"; }

  void begin_step(int step, double loss_scale) override {
    if (!(loss_scale > 0) || !std::isfinite(loss_scale))
      throw core::InputError("mlp workload: loss_scale must be finite and > 0, got " + std::to_string(loss_scale));
    step_ = step;
    loss_scale_ = loss_scale;
    std::fill(loss_done_.begin(), loss_done_.end(), 0);
    order_.reset();
  }

  void forward(int layer, int mb, LayerWeights lw, cudaStream_t s) override {
    const uint16_t* weights = lw.own;
    check_call("forward", layer, mb, weights);
    // forward(0) starts a micro-batch (and abandons an unfinished one); the rest follow in order.
    order_.check_forward(layer, mb);
    DeviceGuard guard(ctx_.device);
    const Layer& L = layers_[size_t(layer)];
    const int64_t B = ctx_.micro_batch;
    const int last = int(layers_.size()) - 1;
    if (layer == 0) {
      const int64_t shard = int64_t(mb) * ctx_.world + ctx_.rank;
      input_kernel<<<row_blocks(), kThreads, 0, s>>>(act_[0].as<uint16_t>(), B, L.in, ctx_.seed, step_, shard);
      TF_CUDA_CHECK_LAUNCH("input_kernel");
    }
    uint16_t* y = layer < last ? act_[size_t(layer) + 1].as<uint16_t>() : grad_buf_[0].as<uint16_t>();
    cublas_->set_stream(s);
    linear_forward(*cublas_, dims(L), act_[size_t(layer)].as<uint16_t>(), weights, 0.0f, y);
    if (L.bias) {
      // y = bf16(bf16(x·Wᵀ) + b), then the ReLU: the bias is added by this kernel rather than by the
      // GEMM's beta epilogue, whose rounding with a bf16 C is not documented.
      bias_act_kernel<<<row_blocks(), kThreads, 0, s>>>(y, weights + L.out * L.in, B, L.out, layer < last);
      TF_CUDA_CHECK_LAUNCH("bias_act_kernel");
    } else if (layer < last) {
      relu_kernel<<<grid_for((B * L.out + 7) / 8, kThreads), kThreads, 0, s>>>(y, B * L.out);
      TF_CUDA_CHECK_LAUNCH("relu_kernel");
    }
    if (layer < last) {
      order_.forward_done(layer, mb);
      return;
    }
    // Loss and dY of the last layer, in place of y (the backward of this micro-batch comes next).
    const double g = 2.0 * loss_scale_ / (double(B) * double(L.out) * double(ctx_.world) * double(ctx_.grad_accum));
    const unsigned blocks = row_blocks();
    loss_grad_kernel<<<blocks, kThreads, 0, s>>>(y, act_[0].as<uint16_t>(), taps_.as<uint32_t>(), B, L.out,
                                                 layers_[0].in, float(g), loss_partials_.as<float>());
    TF_CUDA_CHECK_LAUNCH("loss_grad_kernel");
    loss_finish_kernel<<<1, kThreads, 0, s>>>(loss_partials_.as<float>(), int(blocks), loss_sums_.as<float>() + mb);
    TF_CUDA_CHECK_LAUNCH("loss_finish_kernel");
    loss_done_[size_t(mb)] = 1;
    order_.forward_done(layer, mb);
  }

  void backward(int layer, int mb, LayerWeights lw, uint16_t* grad, cudaStream_t s) override {
    const uint16_t* weights = lw.own;
    check_call("backward", layer, mb, weights);
    if (!grad) throw core::InputError("mlp workload: backward(layer " + std::to_string(layer) + ") got no gradient");
    order_.check_backward(layer, mb);
    DeviceGuard guard(ctx_.device);
    const Layer& L = layers_[size_t(layer)];
    const int64_t B = ctx_.micro_batch;
    const int last = int(layers_.size()) - 1;
    const size_t cur = size_t((last - layer) % 2);  // dY_l lives in grad_buf_[cur]
    const uint16_t* dy = grad_buf_[cur].as<uint16_t>();
    const uint16_t* x = act_[size_t(layer)].as<uint16_t>();
    const bool fp16 = ctx_.grad_dtype == core::DType::kF16;
    cublas_->set_stream(s);

    // dW = dYᵀ·x, then db, then zero padding.
    if (fp16) {
      linear_backward_weight(*cublas_, dims(L), x, dy, dw32_.get(), CUDA_R_32F);
      to_f16_kernel<<<grid_for(L.out * L.in, kThreads), kThreads, 0, s>>>(dw32_.as<float>(), L.out * L.in, grad);
      TF_CUDA_CHECK_LAUNCH("to_f16_kernel");
    } else {
      linear_backward_weight(*cublas_, dims(L), x, dy, grad, CUDA_R_16BF);
    }
    if (L.bias) {
      const int64_t rows = chunk_rows();
      const dim3 grid(unsigned((L.out + kBiasCols - 1) / kBiasCols), unsigned((B + rows - 1) / rows));
      bias_grad_partial_kernel<<<grid, dim3(kBiasCols, kBiasLanes), 0, s>>>(dy, B, L.out, rows,
                                                                            bias_partials_.as<float>());
      TF_CUDA_CHECK_LAUNCH("bias_grad_partial_kernel");
      bias_grad_finish_kernel<<<grid_for(L.out, kThreads), kThreads, 0, s>>>(bias_partials_.as<float>(), int(grid.y),
                                                                             L.out, grad + L.out * L.in, fp16);
      TF_CUDA_CHECK_LAUNCH("bias_grad_finish_kernel");
    }
    if (L.padded > L.params)
      TF_CUDA_CHECK(cudaMemsetAsync(grad + L.params, 0, size_t(L.padded - L.params) * sizeof(uint16_t), s));

    // dY_{l-1} = (dY_l·W_l) masked by the ReLU of layer l-1 (x_l != 0).
    if (layer > 0) {
      uint16_t* dx = grad_buf_[1 - cur].as<uint16_t>();
      linear_backward_data(*cublas_, dims(L), dy, weights, dx);
      relu_mask_kernel<<<grid_for((B * L.in + 7) / 8, kThreads), kThreads, 0, s>>>(dx, x, B * L.in);
      TF_CUDA_CHECK_LAUNCH("relu_mask_kernel");
    }
    order_.backward_done(layer, mb);
  }

  double step_loss() override {
    DeviceGuard guard(ctx_.device);
    return mean_micro_batch_loss(loss_sums_.as<float>(), loss_done_,
                                 double(ctx_.micro_batch) * double(layers_.back().out));
  }

  const std::vector<core::BufferSpec>& allocated() const override { return allocated_; }

  // He (Kaiming) uniform for the ReLU net: a weight of fan-in `in` starts uniform in
  // [-sqrt(6 / in), sqrt(6 / in)) (the engine's base draw is uniform in [-0.1, 0.1)); biases at 0.
  float init_scale(size_t tensor) const override {
    const auto& shape = ctx_.model->tensors.at(tensor).shape;
    return shape.size() == 2 ? float(std::sqrt(6.0 / double(shape[1])) / 0.1) : 0.0f;
  }

 private:
  LinearDims dims(const Layer& L) const { return LinearDims{int(ctx_.micro_batch), int(L.in), int(L.out)}; }

  int64_t chunk_rows() const { return ml::bias_chunk_rows(ctx_.micro_batch); }
  unsigned row_blocks() const { return unsigned(ml::row_blocks(ctx_.micro_batch)); }

  void check_call(const char* what, int layer, int mb, const uint16_t* weights) const {
    if (layer < 0 || size_t(layer) >= layers_.size() || mb < 0 || mb >= ctx_.grad_accum)
      throw core::InputError(std::string("mlp workload: ") + what + "(layer " + std::to_string(layer) + ", mb " +
                             std::to_string(mb) + ") out of range; layers [0, " + std::to_string(layers_.size()) +
                             "), micro-batches [0, " + std::to_string(ctx_.grad_accum) + ")");
    if (!weights)
      throw core::InputError(std::string("mlp workload: ") + what + "(layer " + std::to_string(layer) +
                             ") got no weights");
  }

  void validate_and_describe() {
    const core::ModelDesc* m = ctx_.model;
    if (!m) throw core::InputError("mlp workload: no model");
    if (m->spec.type != core::ModelType::kMlp)
      throw core::InputError("mlp workload: model '" + m->spec.name + "' is not an MLP (model type mlp required)");
    if (ctx_.world < 1 || ctx_.rank < 0 || ctx_.rank >= ctx_.world)
      throw core::InputError("mlp workload: rank " + std::to_string(ctx_.rank) + " outside world " +
                             std::to_string(ctx_.world));
    if (ctx_.grad_accum < 1)
      throw core::InputError("mlp workload: grad_accum must be >= 1, got " + std::to_string(ctx_.grad_accum));
    if (ctx_.micro_batch < 1 || ctx_.micro_batch > INT_MAX)
      throw core::InputError("mlp workload: micro_batch must be in [1, " + std::to_string(INT_MAX) + "], got " +
                             std::to_string(ctx_.micro_batch));
    if (ctx_.grad_dtype != core::DType::kBF16 && ctx_.grad_dtype != core::DType::kF16)
      throw core::InputError("mlp workload: grad dtype must be bf16 or fp16, got " +
                             std::string(core::dtype_name(ctx_.grad_dtype)));
    if (ctx_.layer_padded.size() != m->layers.size())
      throw core::InputError("mlp workload: layer_padded has " + std::to_string(ctx_.layer_padded.size()) +
                             " entries for " + std::to_string(m->layers.size()) + " layers");
    const auto& dims = m->spec.mlp_dims;
    if (dims.size() != m->layers.size() + 1) throw core::InputError("mlp workload: model layers do not match mlp_dims");
    for (size_t l = 0; l < m->layers.size(); ++l) {
      Layer L;
      L.in = dims[l];
      L.out = dims[l + 1];
      L.bias = m->spec.mlp_bias;
      L.params = L.out * L.in + (L.bias ? L.out : 0);
      L.padded = ctx_.layer_padded[l];
      if (m->layers[l].params != L.params)
        throw core::InputError("mlp workload: layer " + std::to_string(l) + " has " +
                               std::to_string(m->layers[l].params) + " parameters, expected " +
                               std::to_string(L.params));
      if (L.padded < L.params)
        throw core::InputError("mlp workload: layer_padded[" + std::to_string(l) + "] = " + std::to_string(L.padded) +
                               " is below the layer's " + std::to_string(L.params) + " parameters");
      layers_.push_back(L);
    }
  }

  // core::workload_buffers' list for this shape, allocated by name; each named buffer must be there.
  void allocate() {
    core::StepConfig shape;
    shape.micro_batch = ctx_.micro_batch;
    shape.grad_accum = ctx_.grad_accum;
    shape.grad_dtype = ctx_.grad_dtype;
    for (const core::BufferSpec& b : core::workload_buffers(*ctx_.model, core::WorkloadType::kMlp, shape)) {
      buffers_.emplace_back(b.name, DeviceMemory(size_t(b.bytes)));
      allocated_.push_back(b);
    }
    // act_[l]: (B x d_l) bf16 + GEMM slack, the input of layer l (x_0 = data, x_l = relu(y_{l-1})).
    for (size_t l = 0; l < layers_.size(); ++l) act_.push_back(named(core::buffer_name(core::buf::kMlpAct, int(l))));
    // grad_buf_[c]: (B x d_{l+1}) bf16 + slack for the layers with (last - l) % 2 == c: dY_l. grad_buf_[0]
    // first holds y_{L-1}, which the loss kernel turns into dY_{L-1}.
    for (int c = 0; c < 2; ++c) grad_buf_[c] = named(core::buffer_name(core::buf::kMlpDy, c));
    // dw32_: (out x in) fp32, the weight gradient before its one rounding to fp16.
    if (ctx_.grad_dtype == core::DType::kF16) dw32_ = named(core::buf::kMlpDw32);
    if (ctx_.model->spec.mlp_bias) bias_partials_ = named(core::buf::kMlpBiasPartials);  // (chunks x out) fp32
    loss_partials_ = named(core::buf::kMlpLossPartials);                                 // (row blocks) fp32
    loss_sums_ = named(core::buf::kMlpLossSums);                                         // (grad_accum) fp32
    TF_CUDA_CHECK(cudaMemset(loss_sums_.get(), 0, size_t(ctx_.grad_accum) * 4));
    loss_done_.assign(size_t(ctx_.grad_accum), 0);
    // taps_: (d_L x 4) u32, the teacher, fixed by the seed.
    const Layer& out_layer = layers_.back();
    std::vector<uint32_t> taps(size_t(out_layer.out * mlp::kTeacherTaps));
    for (int64_t j = 0; j < out_layer.out; ++j)
      for (int r = 0; r < mlp::kTeacherTaps; ++r)
        taps[size_t(j * mlp::kTeacherTaps + r)] = mlp::teacher_tap(ctx_.seed, j, r, layers_[0].in);
    taps_ = named(core::buf::kMlpTaps);
    TF_CUDA_CHECK(cudaMemcpy(taps_.get(), taps.data(), taps.size() * 4, cudaMemcpyHostToDevice));
    const DeviceMemory& ws = buffer(core::buf::kCublasWorkspace);
    cublas_ = std::make_unique<CublasHandle>(ws.get(), ws.bytes());
  }

  const DeviceMemory& buffer(std::string_view name) const {
    for (const auto& [n, m] : buffers_)
      if (n == name) return m;
    throw core::RuntimeFailure("mlp workload: core::workload_buffers lists no buffer '" + std::string(name) + "'");
  }
  View named(std::string_view name) const { return {buffer(name).get()}; }

  WorkloadContext ctx_;
  std::vector<Layer> layers_;
  std::vector<std::pair<std::string, DeviceMemory>> buffers_;  // by core::workload_buffers' names
  std::vector<core::BufferSpec> allocated_;
  std::unique_ptr<CublasHandle> cublas_;
  // views of buffers_
  std::vector<View> act_;
  View grad_buf_[2];
  View dw32_, bias_partials_, loss_partials_, loss_sums_, taps_;
  int step_ = 0;
  double loss_scale_ = 1.0;
  std::vector<char> loss_done_;  // (grad_accum): micro-batches whose loss this step has
  CallOrder order_{"mlp", -1};   // the layers' calls in turn (last layer set by validate_and_describe)
};

}  // namespace

std::unique_ptr<Workload> make_mlp_workload(const WorkloadContext& ctx) { return std::make_unique<MlpWorkload>(ctx); }

}  // namespace tf::backend::cuda
