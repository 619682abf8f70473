// The synthetic workload on the GPU: no forward work; backward writes the counter-based gradient
// of core/synthetic_workload.h, the same bits as the functional simulator.
#include <algorithm>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/workload.cuh"
#include "core/synthetic_workload.h"

namespace tf::backend::cuda {
namespace {

__global__ void synthetic_backward(const uint16_t* w, uint16_t* g, int64_t padded, int64_t real, int64_t model_first,
                                   uint64_t seed, int step, int micro_shard, float scale, bool f16, bool overflow) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < padded; j += int64_t(gridDim.x) * blockDim.x) {
    if (j >= real) {
      g[j] = 0;
      continue;
    }
    const int64_t e = model_first + j;
    float v = core::synthetic_gradient(seed, e, step, micro_shard, core::bf16_to_f32(w[j]), scale);
    if (overflow && e == 0 && micro_shard == 0) v = __int_as_float(0x7f800000);  // +Inf
    g[j] = f16 ? core::f32_to_f16(v) : core::f32_to_bf16(v);
  }
}

class SyntheticWorkload final : public Workload {
 public:
  explicit SyntheticWorkload(const WorkloadContext& c) : c_(c) {
    const auto& layers = c_.model->layers;
    first_.assign(layers.size() + 1, 0);
    for (size_t l = 0; l < layers.size(); ++l) first_[l + 1] = first_[l] + layers[l].params;
  }
  const char* name() const override { return "synthetic"; }
  void begin_step(int step, double loss_scale) override {
    step_ = step;
    scale_ = float(loss_scale);
  }
  void forward(int, int, LayerWeights, cudaStream_t) override {}
  void backward(int layer, int mb, LayerWeights lw, uint16_t* grad, cudaStream_t s) override {
    const uint16_t* w = lw.own;
    const int64_t padded = c_.layer_padded[size_t(layer)];
    const unsigned blocks = unsigned(std::clamp<int64_t>((padded + 255) / 256, 1, 132 * 16));
    synthetic_backward<<<blocks, 256, 0, s>>>(w, grad, padded, c_.model->layers[size_t(layer)].params,
                                              first_[size_t(layer)], c_.seed, step_, mb * c_.world + c_.rank, scale_,
                                              c_.grad_dtype == core::DType::kF16, step_ == c_.overflow_at_step);
    TF_CUDA_CHECK_LAUNCH("synthetic_backward");
  }
  double step_loss() override { return __builtin_nan(""); }
  const std::vector<core::BufferSpec>& allocated() const override { return none_; }  // core::workload_buffers: none

 private:
  WorkloadContext c_;
  std::vector<core::BufferSpec> none_;
  std::vector<int64_t> first_;
  int step_ = 0;
  float scale_ = 1;
};

}  // namespace

std::unique_ptr<Workload> make_synthetic_workload(const WorkloadContext& ctx) {
  return std::make_unique<SyntheticWorkload>(ctx);
}

}  // namespace tf::backend::cuda
