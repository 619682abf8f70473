// Builds the per-rank op list of a ZeRO + Twin-Flow training step.
#include "core/step.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/optim/grad_stats.h"

namespace tf::core {

const char* queue_name(Queue q) {
  switch (q) {
    case Queue::kCompute: return "compute";
    case Queue::kComm: return "comm";
    case Queue::kD2H: return "d2h";
    case Queue::kH2D: return "h2d";
    case Queue::kCpu: return "cpu";
  }
  return "?";
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kAllGather: return "allgather";
    case OpKind::kForward: return "forward";
    case OpKind::kBackward: return "backward";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllReduce: return "allreduce";
    case OpKind::kD2HGrad: return "d2h";
    case OpKind::kGradStats: return "grad_stats";
    case OpKind::kNormAllReduce: return "norm_allreduce";
    case OpKind::kGpuOptimizer: return "gpu_optimizer";
    case OpKind::kCpuOptimizer: return "cpu_optimizer";
    case OpKind::kH2DParam: return "h2d";
  }
  return "?";
}

std::string Op::label() const {
  std::ostringstream os;
  os << op_kind_name(kind);
  if (layer >= 0) os << " L" << layer;
  if (micro_batch >= 0) os << " mb" << micro_batch;
  return os.str();
}

namespace {
class Builder {
 public:
  uint32_t add(OpKind k, Queue q, int32_t layer, int32_t mb, std::vector<uint32_t> deps) {
    Op op;
    op.id = uint32_t(plan.ops.size());
    op.kind = k;
    op.queue = q;
    op.layer = layer;
    op.micro_batch = mb;
    op.deps = std::move(deps);
    plan.ops.push_back(std::move(op));
    return plan.ops.back().id;
  }
  Op& last() { return plan.ops.back(); }
  StepPlan plan;
};
}  // namespace

StepPlan plan_step(const ModelDesc& model, const Partition& part, const TwinFlowSplit& split, const StepConfig& cfg) {
  if (cfg.micro_batch < 1 || cfg.grad_accum < 1) throw InputError("micro_batch and grad_accum must be >= 1");
  if (cfg.prefetch_layers < 1) throw InputError("prefetch_layers must be >= 1");
  const int L = int(model.layers.size());
  const int stage = part.opt.stage;
  const int64_t W = part.opt.world;
  const double tokens = double(cfg.micro_batch) * double(model.tokens_per_sample());
  // CPU elements of each layer (the CPU segment is the shard's tail: the last layers)
  std::vector<int64_t> cpu_elems(static_cast<size_t>(L), 0);
  for (const ShardPiece& p : split.cpu) cpu_elems[p.layer] += p.count;

  Builder b;
  std::vector<uint32_t> fwd(static_cast<size_t>(L)), bwd(static_cast<size_t>(L)), red(static_cast<size_t>(L));
  std::map<int, uint32_t> d2h;  // layer -> D2H op (last micro-batch)
  const bool wait_for_norm = cfg.clip_gradients || cfg.loss_scaling;
  std::vector<uint32_t> cpu_opt_ids;

  auto cpu_update = [&](int l, std::vector<uint32_t> deps) {
    const uint32_t id = b.add(OpKind::kCpuOptimizer, Queue::kCpu, l, -1, std::move(deps));
    b.last().elems = cpu_elems[size_t(l)];
    b.last().bytes = cpu_elems[size_t(l)] * (2 * 4 * (1 + cfg.optimizer_states) + 2 * cfg.lp_bytes);
    cpu_opt_ids.push_back(id);
    b.add(OpKind::kH2DParam, Queue::kH2D, l, -1, {id});
    b.last().bytes = cpu_elems[size_t(l)] * cfg.lp_bytes;
    b.plan.pcie_h2d_bytes += b.last().bytes;
  };

  for (int mb = 0; mb < cfg.grad_accum; ++mb) {
    const bool last_mb = mb == cfg.grad_accum - 1;
    for (int l = 0; l < L; ++l) {
      const LayerDesc& ld = model.layers[size_t(l)];
      std::vector<uint32_t> deps;
      if (stage == 3) {
        std::vector<uint32_t> ag_deps;
        if (l >= cfg.prefetch_layers) ag_deps.push_back(fwd[size_t(l - cfg.prefetch_layers)]);  // buffer reuse
        deps.push_back(b.add(OpKind::kAllGather, Queue::kComm, l, mb, std::move(ag_deps)));
        b.last().bytes = part.layer_slice[size_t(l)] * W * cfg.lp_bytes;
      }
      fwd[size_t(l)] = b.add(OpKind::kForward, Queue::kCompute, l, mb, std::move(deps));
      b.last().flops = ld.fwd_flops_per_token * tokens;
    }
    // Backward gathers go on the comm queue ahead of the reduce-scatters that are ready at the same
    // time: the gather of layer l - P (its buffer frees when backward l ends) is issued before
    // reduce-scatter l, so the next backward never waits behind a reduction in the FIFO.
    std::vector<uint32_t> bag(static_cast<size_t>(L));  // backward all-gather per layer
    auto gather_for_backward = [&](int j) {
      std::vector<uint32_t> ag_deps;
      if (j + cfg.prefetch_layers < L) ag_deps.push_back(bwd[size_t(j + cfg.prefetch_layers)]);  // buffer reuse
      bag[size_t(j)] = b.add(OpKind::kAllGather, Queue::kComm, j, mb, std::move(ag_deps));
      b.last().bytes = part.layer_slice[size_t(j)] * W * cfg.lp_bytes;
    };
    if (stage == 3)
      for (int j = L - 1; j >= std::max(0, L - cfg.prefetch_layers); --j) gather_for_backward(j);
    for (int l = L - 1; l >= 0; --l) {
      const LayerDesc& ld = model.layers[size_t(l)];
      std::vector<uint32_t> deps;
      if (stage == 3) deps.push_back(bag[size_t(l)]);
      bwd[size_t(l)] = b.add(OpKind::kBackward, Queue::kCompute, l, mb, std::move(deps));
      if (stage == 3 && l - cfg.prefetch_layers >= 0) gather_for_backward(l - cfg.prefetch_layers);
      const bool recompute = cfg.checkpointing && ld.kind == LayerKind::kBlock;
      b.last().flops = (ld.bwd_flops_per_token + (recompute ? ld.fwd_flops_per_token : 0.0)) * tokens;
      red[size_t(l)] =
          b.add(stage == 1 ? OpKind::kAllReduce : OpKind::kReduceScatter, Queue::kComm, l, mb, {bwd[size_t(l)]});
      b.last().bytes = part.layer_slice[size_t(l)] * W * cfg.lp_bytes;
      if (last_mb && cpu_elems[size_t(l)] > 0) {
        const uint32_t id = b.add(OpKind::kD2HGrad, Queue::kD2H, l, -1, {red[size_t(l)]});
        b.last().bytes = cpu_elems[size_t(l)] * cfg.lp_bytes;
        b.plan.pcie_d2h_bytes += b.last().bytes;
        d2h[l] = id;
        if (!wait_for_norm) cpu_update(l, {id});  // starts while backward runs on earlier layers
      }
    }
  }

  const uint32_t last_reduce = red[0];
  std::vector<uint32_t> gpu_deps = {last_reduce};
  if (wait_for_norm) {
    // One statistics pass over the whole shard's reduced gradients, on the GPU: the CPU segment's
    // part is still there before (and while) its D2H runs, so the CPU never reads its gradients twice
    // and the norm does not wait for the copies.
    std::vector<uint32_t> norm_deps;
    norm_deps.push_back(b.add(OpKind::kGradStats, Queue::kCompute, -1, -1, {last_reduce}));
    b.last().elems = split.gpu_elems + split.cpu_elems;
    b.last().bytes = (split.gpu_elems + split.cpu_elems) * cfg.lp_bytes;
    norm_deps.push_back(last_reduce);
    const uint32_t norm = b.add(OpKind::kNormAllReduce, Queue::kComm, -1, -1, std::move(norm_deps));
    // the all-reduced table: a sum of squares per 2048-element tile of every layer (canonical indexes,
    // whatever the world size) + the non-finite count; then folded on the device to one number
    int64_t tiles = 0;
    for (int64_t n : part.layer_params) tiles += int64_t(stats_tiles(size_t(n)));
    b.last().elems = tiles;
    b.last().bytes = 8 * (tiles + 1);
    gpu_deps = {norm};
    // backward order: the layers whose gradients landed first are updated first
    for (auto it = d2h.rbegin(); it != d2h.rend(); ++it) cpu_update(it->first, {norm, it->second});
  }
  int64_t gpu_opt = -1;
  if (split.gpu_elems > 0) {
    gpu_opt = b.add(OpKind::kGpuOptimizer, Queue::kCompute, -1, -1, gpu_deps);
    b.last().elems = split.gpu_elems;
    b.last().bytes = split.gpu_elems * (2 * 4 * (1 + cfg.optimizer_states) + 2 * cfg.lp_bytes);
  }
  if (stage < 3) {
    // Stages 1/2 keep the whole bf16 model on every GPU: each rank's updated slice of every layer is
    // all-gathered once the updates have landed (ZeRO-3 gathers on demand in the next step instead).
    std::map<int, uint32_t> h2d;
    for (const Op& o : b.plan.ops)
      if (o.kind == OpKind::kH2DParam) h2d[o.layer] = o.id;
    for (int l = 0; l < L; ++l) {
      std::vector<uint32_t> deps;
      if (gpu_opt >= 0) deps.push_back(uint32_t(gpu_opt));
      if (auto it = h2d.find(l); it != h2d.end()) deps.push_back(it->second);
      b.add(OpKind::kAllGather, Queue::kComm, l, -1, std::move(deps));
      b.last().bytes = part.layer_slice[size_t(l)] * W * cfg.lp_bytes;
    }
  }
  return std::move(b.plan);
}

}  // namespace tf::core
