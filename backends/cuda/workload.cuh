// What a training step computes in forward and backward, one layer at a time, on the compute
// stream. The engine (backends/cuda/engine.cpp) owns the weights: ZeRO-3 gathers each layer's bf16
// parameters into a device buffer and hands it in; the workload owns activations and workspaces, and
// allocates exactly core::workload_buffers' list for its kind, by name.
//   synthetic: the functional simulator's counter-based gradient (bitwise parity with it)
//   mlp:       the toy MLP of core/model.h (make_mlp), cuBLAS bf16 GEMMs with fp32 accumulation
//   decoder:   the GPT-2/OPT decoder of docs/decoder.md (workload_decoder.cu) on token data
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.cuh"
#include "core/alloc_plan.h"
#include "core/error.h"
#include "core/model.h"
#include "core/optim/dtype.h"

namespace tf::backend::cuda {

struct WorkloadContext {
  const core::ModelDesc* model = nullptr;  // the layers; flat layout of layer l = its tensors in order
  int rank = 0, world = 1;
  int device = 0;
  uint64_t seed = 1;
  core::DType grad_dtype = core::DType::kBF16;  // bf16 or fp16 gradients
  int grad_accum = 1;                           // micro-batches per rank per step
  int64_t micro_batch = 1;                      // samples per micro-batch
  // (L) elements of layer l's gathered buffer: its real parameters, then zero padding up to a
  // multiple of world * alignment. Weights and gradients use this layout.
  std::vector<int64_t> layer_padded;
  int overflow_at_step = -1;   // synthetic only: element 0 of micro-shard 0 is +Inf at this step (tests)
  bool checkpointing = false;  // decoder: keep block inputs only and recompute each block in backward
  std::filesystem::path data;  // decoder: the validated token file (core::TokenFile); empty: the built-in stream
};

// The bf16 parameters a layer's forward and backward read: its own gathered layer and, for a layer that
// reads another's tensor (core::ModelDesc::shared_owner: the tied LM head reads the token embedding),
// that layer as gathered for it (core::Op::shared_layer). Implicit from one pointer: a layer without a
// shared tensor passes its own weights alone.
struct LayerWeights {
  LayerWeights(const uint16_t* own_weights, const uint16_t* shared_weights = nullptr)  // NOLINT: implicit
      : own(own_weights), shared(shared_weights) {}
  const uint16_t* own = nullptr;     // (layer_padded[layer]) bf16, device
  const uint16_t* shared = nullptr;  // (layer_padded[owner]) bf16, device; null when the layer shares nothing
};

// Micro-batch `mb` of rank `rank` is global micro-shard k = mb * world + rank: the data a sample
// sees depends on (seed, step, k) only, never on the world size.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual const char* name() const = 0;
  // Before the step's first forward: the 1-based step and the loss scale its gradients carry.
  virtual void begin_step(int step, double loss_scale) = 0;
  // Forward of `layer` for micro-batch `mb` with the layer's weights.
  virtual void forward(int layer, int mb, LayerWeights weights, cudaStream_t s) = 0;
  // Backward of `layer` for micro-batch `mb`: writes this rank's gradient of the layer's
  // parameters for this micro-batch, multiplied by the loss scale, rounded to grad_dtype, into
  // grad: (layer_padded[layer]) device, padding written as zero. Layers arrive last to first. (A
  // shared tensor's gradient belongs to its owner layer: the reader's contribution is kept by the
  // workload until the owner's backward adds it.)
  virtual void backward(int layer, int mb, LayerWeights weights, uint16_t* grad, cudaStream_t s) = 0;
  // After the step's compute work has completed (the caller synchronised): the mean loss of this
  // rank's micro-batches of the step, unscaled; NaN when the workload has no loss (synthetic).
  virtual double step_loss() = 0;
  // The buffers the workload allocated (activations, data, workspaces; a decoder's pinned host
  // staging), in order: core::workload_buffers' list.
  virtual const std::vector<core::BufferSpec>& allocated() const = 0;
  int64_t device_bytes() const {
    int64_t n = 0;
    for (const core::BufferSpec& b : allocated()) n += b.place == core::MemPlace::kGpu ? b.bytes : 0;
    return n;
  }
  // Initial weights: element e of model tensor t starts at core::synthetic_initial_weight(seed, e)
  // (uniform in [-0.1, 0.1)) times this scale (e.g. a fan-in scaling; 0 for biases).
  virtual float init_scale(size_t tensor) const {
    (void)tensor;
    return 1.f;
  }
};

// The order a workload with one set of activations takes its calls in: each micro-batch runs forward
// over all layers, then backward over all layers; forward(layer 0) starts a micro-batch (and abandons
// an unfinished one). check_* throws core::InputError naming the call and what may come instead;
// *_done records a call that has run.
class CallOrder {
 public:
  CallOrder(std::string workload, int last_layer) : workload_(std::move(workload)), last_(last_layer) {}
  void reset() { fwd_next_ = bwd_next_ = {-1, -1}; }  // a step begins
  void check_forward(int layer, int mb) {
    if (layer == 0)
      bwd_next_ = {-1, -1};
    else if (!(fwd_next_.layer == layer && fwd_next_.mb == mb))
      throw core::InputError(error("forward", layer, mb));
  }
  void forward_done(int layer, int mb) {
    fwd_next_ = layer < last_ ? Position{layer + 1, mb} : Position{-1, -1};
    if (layer == last_) bwd_next_ = {last_, mb};
  }
  void check_backward(int layer, int mb) const {
    if (!(bwd_next_.layer == layer && bwd_next_.mb == mb)) throw core::InputError(error("backward", layer, mb));
  }
  void backward_done(int layer, int mb) { bwd_next_ = layer > 0 ? Position{layer - 1, mb} : Position{-1, -1}; }

 private:
  struct Position {
    int layer, mb;
  };
  std::string error(const char* what, int layer, int mb) const {
    auto next = [](const char* call, Position p) {
      return p.layer < 0
                 ? std::string()
                 : std::string(call) + "(layer " + std::to_string(p.layer) + ", mb " + std::to_string(p.mb) + ") or ";
    };
    return workload_ + " workload: " + what + "(layer " + std::to_string(layer) + ", mb " + std::to_string(mb) +
           ") out of order; expected " + next("forward", fwd_next_) + next("backward", bwd_next_) +
           "forward(layer 0): each micro-batch runs forward over all layers, then backward over all layers";
  }
  std::string workload_;
  int last_;
  Position fwd_next_{-1, -1};  // the call that may come next besides forward(layer 0); layer -1: none
  Position bwd_next_{-1, -1};
};

// A step's mean loss: over the micro-batches that ran (done[mb] != 0) of their loss sums (device_sums:
// (done.size()) fp32, device) each over `terms` terms; NaN when none ran. Synchronous.
inline double mean_micro_batch_loss(const float* device_sums, const std::vector<char>& done, double terms) {
  int count = 0;
  for (char d : done) count += d;
  if (count == 0) return std::numeric_limits<double>::quiet_NaN();
  std::vector<float> sums(done.size());
  TF_CUDA_CHECK(cudaMemcpy(sums.data(), device_sums, sums.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double total = 0;
  for (size_t mb = 0; mb < sums.size(); ++mb)
    if (done[mb]) total += double(sums[mb]) / terms;
  return total / count;
}

std::unique_ptr<Workload> make_synthetic_workload(const WorkloadContext& ctx);
// Throws core::InputError unless the model is an MLP (core::ModelType::kMlp).
std::unique_ptr<Workload> make_mlp_workload(const WorkloadContext& ctx);
// Throws core::InputError unless the model is a decoder the kernels take (head dimension in
// core::decoder_layout::kAttentionHeadDims, bf16 or fp16 gradients), and for a bad token file.
std::unique_ptr<Workload> make_decoder_workload(const WorkloadContext& ctx);

}  // namespace tf::backend::cuda
