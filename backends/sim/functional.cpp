// Functional simulation of the Twin-Flow optimizer data path on N in-process ranks, and the plain
// training loop it must match bit for bit.
#include "backends/sim/functional.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/optim/grad_stats.h"
#include "core/partition.h"
#include "core/step_decision.h"
#include "core/synthetic_workload.h"
#include "core/step.h"
#include "core/twinflow.h"

namespace tf::backend::sim {

namespace {

float initial_weight(uint64_t seed, int64_t element) { return core::synthetic_initial_weight(seed, element); }

uint16_t to_lp(core::DType t, float f) { return t == core::DType::kF16 ? core::f32_to_f16(f) : core::f32_to_bf16(f); }
float from_lp(core::DType t, uint16_t h) { return t == core::DType::kF16 ? core::f16_to_f32(h) : core::bf16_to_f32(h); }

// The reduced gradient of one element: micro-shard gradients rounded to the grad dtype (what each
// backward produces), summed in fp32 in micro-shard order (the batch-invariant reduction), rounded
// to the grad dtype (the reduce-scatter's output).
uint16_t reduced_gradient(const FunctionalConfig& c, int64_t element, int step, float weight_bf16, double scale) {
  float acc = 0.f;
  for (int k = 0; k < c.micro_shards; ++k) {
    float g = workload_gradient(c.seed, element, step, k, weight_bf16, scale);
    if (step == c.overflow_at_step && element == 0 && k == 0) g = INFINITY;
    acc = acc + from_lp(c.grad_dtype, to_lp(c.grad_dtype, g));
  }
  return to_lp(c.grad_dtype, acc);
}

// Canonical sum of squares of one tile of low-precision gradients (grad_stats.h).
double tile_sum(core::DType t, const uint16_t* g, size_t n) {
  float f[core::kStatsTile];
  for (size_t i = 0; i < n; ++i) f[i] = from_lp(t, g[i]);
  return core::canonical_sumsq(f, n);
}

void check_config(const core::ModelDesc& m, const FunctionalConfig& c) {
  if (c.world < 1 || c.micro_shards < 1 || c.micro_shards % c.world != 0)
    throw core::InputError("functional simulation: world " + std::to_string(c.world) + " must divide micro_shards " +
                           std::to_string(c.micro_shards));
  if (c.grad_dtype != core::DType::kBF16 && c.grad_dtype != core::DType::kF16)
    throw core::InputError("functional simulation: grad dtype must be bf16 or fp16");
  if (c.steps < 1) throw core::InputError("functional simulation: steps must be >= 1");
  if (!(c.loss_scale > 0)) throw core::InputError("functional simulation: loss scale must be > 0");
  if (m.total_params < 1) throw core::InputError("functional simulation: the model has no parameters");
  core::validate(c.kind, c.hp);
}

core::StepPolicy policy(const FunctionalConfig& c) {
  return {c.kind, c.hp, c.clip, c.grad_dtype == core::DType::kF16};
}
using StepDecision = core::StepDecision;
StepDecision decide(const FunctionalConfig& c, int step, double sumsq, uint64_t nonfinite, double scale,
                    int64_t opt_step) {
  return core::decide_step(policy(c), step, sumsq, nonfinite, scale, opt_step);
}

cpu::CpuBackend& kernels() {
  static cpu::CpuBackend be{cpu::CpuOptions{1, false, -1, 4, {}}};
  return be;
}

BufferView f32(std::vector<float>& v, size_t off, size_t n) { return {v.data() + off, n, core::DType::kF32}; }
BufferView lp(std::vector<uint16_t>& v, size_t off, size_t n, core::DType t) { return {v.data() + off, n, t}; }

}  // namespace

float workload_gradient(uint64_t seed, int64_t element, int step, int micro_shard, float weight_bf16,
                        double loss_scale) {
  return core::synthetic_gradient(seed, element, step, micro_shard, weight_bf16, float(loss_scale));
}

FunctionalResult run_functional(const core::ModelDesc& model, const FunctionalConfig& c) {
  check_config(model, c);
  const int W = c.world;
  const core::Partition part = core::make_partition(model, {c.stage, W, int64_t(core::kStatsTile)});
  const bool two = core::state_count(c.kind) == 2;
  const float init1 = c.kind == core::OptimizerKind::kAdagrad ? float(c.hp.initial_accumulator_value) : 0.f;
  const size_t L = model.layers.size();
  std::vector<int64_t> layer_first(L + 1, 0);  // model-order index of each layer's element 0
  for (size_t l = 0; l < L; ++l) layer_first[l + 1] = layer_first[l] + part.layer_params[l];
  const int64_t tile = int64_t(core::kStatsTile);

  core::StepConfig sc;
  sc.micro_batch = 1;
  sc.grad_accum = c.micro_shards / W;  // each rank owns micro-shards k = mb * W + rank
  sc.lp_bytes = 2;
  sc.optimizer_states = core::state_count(c.kind);
  sc.clip_gradients = c.clip > 0;
  sc.loss_scaling = c.grad_dtype == core::DType::kF16;

  struct Rank {
    core::TwinFlowSplit split;
    core::StepPlan plan;
    std::vector<float> gp, gm, gv, cp, cm, cv;  // GPU / CPU segments: master, state1, state2
    std::vector<uint16_t> bf16;                 // (shard) GPU-resident bf16 parameters
    std::vector<float> acc;                     // (shard) fp32 gradient accumulation (reduce-scatter output)
    std::vector<uint16_t> grad;                 // (shard) reduced gradient in the grad dtype, on the GPU
    std::vector<uint16_t> cgrad, ccopy;         // host: the CPU segment's gradient (after D2H), bf16 staging
    std::vector<std::vector<uint16_t>> local;   // (L) this micro-step's full-layer gradient from backward
  };
  std::vector<Rank> ranks(static_cast<size_t>(W));
  for (int r = 0; r < W; ++r) {
    const core::RankShard& s = part.ranks[size_t(r)];
    Rank& k = ranks[size_t(r)];
    k.split = core::split_shard(s, c.ratio, tile);
    k.plan = core::plan_step(model, part, k.split, sc);
    const size_t g = size_t(k.split.gpu_elems), n = size_t(k.split.cpu_elems);
    k.gp.assign(g, 0.f), k.gm.assign(g, init1), k.gv.assign(two ? g : 0, 0.f);
    k.cp.assign(n, 0.f), k.cm.assign(n, init1), k.cv.assign(two ? n : 0, 0.f);
    k.bf16.assign(size_t(s.elems), 0), k.acc.assign(size_t(s.elems), 0.f), k.grad.assign(size_t(s.elems), 0);
    k.cgrad.assign(n, 0), k.ccopy.assign(n, 0), k.local.resize(L);
    for (const core::ShardPiece& p : s.pieces)
      for (int64_t j = 0; j < p.real_count; ++j) {
        const size_t o = size_t(p.shard_offset + j);
        const float w = initial_weight(c.seed, layer_first[p.layer] + p.layer_offset + j);
        (o < g ? k.gp[o] : k.cp[o - g]) = w;
        k.bf16[o] = core::f32_to_bf16(w);
      }
  }
  const core::StepPlan& plan = ranks[0].plan;  // every rank issues the same op list
  for (const Rank& k : ranks)
    if (k.plan.ops.size() != plan.ops.size())
      throw core::RuntimeFailure("functional simulation: ranks planned different steps");

  FunctionalResult res;
  res.queue_order.assign(size_t(W), QueueOrder{});
  double scale = c.loss_scale;
  int64_t opt_step = 0;
  std::vector<uint16_t> full(size_t(model.total_params));  // all-gathered bf16 parameters
  for (int r = 0; r < W; ++r)                              // the model every rank starts from
    for (const core::ShardPiece& p : part.ranks[size_t(r)].pieces)
      for (int64_t j = 0; j < p.real_count; ++j)
        full[size_t(layer_first[p.layer] + p.layer_offset + j)] = ranks[size_t(r)].bf16[size_t(p.shard_offset + j)];
  auto piece_of = [&](const Rank& k, size_t l) -> const core::ShardPiece* {
    for (const core::ShardPiece& p : part.ranks[size_t(&k - ranks.data())].pieces)
      if (p.layer == l) return &p;
    return nullptr;
  };
  // the CPU part of layer l on rank k: [shard begin, end) within the CPU segment
  auto cpu_range = [&](const Rank& k, size_t l, int64_t& b, int64_t& e) {
    b = e = 0;
    for (const core::ShardPiece& p : k.split.cpu)
      if (p.layer == l) b = p.shard_offset, e = p.shard_offset + p.count;
  };
  for (int step = 1; step <= c.steps; ++step) {
    res.loss_scales.push_back(scale);
    for (auto& q : res.queue_order) q = QueueOrder{};
    std::map<std::pair<size_t, int64_t>, double> tiles;  // (layer, tile) -> canonical tile sum
    uint64_t nonfinite = 0;
    StepDecision d;
    bool decided = false;
    auto decide_now = [&] {  // without a norm wait the step's scalars are known up front
      d = decide(c, step, 0.0, 0, scale, opt_step + 1);
      decided = true;
    };
    if (!sc.clip_gradients && !sc.loss_scaling) decide_now();
    for (Rank& k : ranks) std::fill(k.acc.begin(), k.acc.end(), 0.f);
    for (const core::Op& op : plan.ops) {
      const size_t l = op.layer >= 0 ? size_t(op.layer) : 0;
      for (int r = 0; r < W; ++r) res.queue_order[size_t(r)][size_t(op.queue)].push_back(op.id);
      switch (op.kind) {
        case core::OpKind::kAllGather:
          for (Rank& k : ranks) {
            const core::ShardPiece* p = piece_of(k, l);
            if (p)
              for (int64_t j = 0; j < p->real_count; ++j)
                full[size_t(layer_first[l] + p->layer_offset + j)] = k.bf16[size_t(p->shard_offset + j)];
          }
          break;
        case core::OpKind::kForward: break;  // the workload keeps no activations
        case core::OpKind::kBackward:
          for (int r = 0; r < W; ++r) {
            auto& g = ranks[size_t(r)].local[l];
            g.assign(size_t(part.layer_params[l]), 0);
            const int k = op.micro_batch * W + r;
            for (int64_t j = 0; j < part.layer_params[l]; ++j) {
              const int64_t e = layer_first[l] + j;
              float v = workload_gradient(c.seed, e, step, k, core::bf16_to_f32(full[size_t(e)]), scale);
              if (step == c.overflow_at_step && e == 0 && k == 0) v = INFINITY;
              g[size_t(j)] = to_lp(c.grad_dtype, v);
            }
          }
          break;
        case core::OpKind::kReduceScatter:
        case core::OpKind::kAllReduce: {
          const bool last = op.micro_batch == sc.grad_accum - 1;
          for (Rank& k : ranks) {
            const core::ShardPiece* p = piece_of(k, l);
            if (!p) continue;
            for (int64_t j = 0; j < p->real_count; ++j) {
              const size_t o = size_t(p->shard_offset + j), in_layer = size_t(p->layer_offset + j);
              float a = k.acc[o];
              for (int r = 0; r < W; ++r) a = a + from_lp(c.grad_dtype, ranks[size_t(r)].local[l][in_layer]);
              k.acc[o] = a;
              if (last) k.grad[o] = to_lp(c.grad_dtype, a);
            }
          }
          break;
        }
        case core::OpKind::kD2HGrad:
          for (Rank& k : ranks) {
            int64_t b, e;
            cpu_range(k, l, b, e);
            std::memcpy(k.cgrad.data() + (b - k.split.gpu_elems), k.grad.data() + b, size_t(e - b) * 2);
            res.d2h_bytes += (e - b) * 2;
          }
          break;
        case core::OpKind::kGradStats:
          for (Rank& k : ranks) {
            // the whole shard's reduced gradients, where they are after the reduce-scatter (GPU)
            for (const auto* pieces : {&k.split.gpu, &k.split.cpu})
              for (const core::ShardPiece& p : *pieces) {
                const int64_t real_tiles = int64_t(core::stats_tiles(size_t(part.layer_params[p.layer])));
                for (int64_t t = 0; t < p.count / tile; ++t) {
                  const int64_t layer_tile = p.layer_offset / tile + t;
                  if (layer_tile >= real_tiles) break;
                  const uint16_t* src = k.grad.data() + p.shard_offset + t * tile;
                  tiles[{p.layer, layer_tile}] = tile_sum(c.grad_dtype, src, core::kStatsTile);
                  for (int64_t j = 0; j < tile; ++j) nonfinite += !std::isfinite(from_lp(c.grad_dtype, src[j]));
                }
              }
          }
          break;
        case core::OpKind::kNormAllReduce: {
          std::vector<double> ordered;  // (layer, tile) order across ranks
          for (const auto& [key, v] : tiles) ordered.push_back(v);
          const double sumsq = core::canonical_nan(core::fold_tile_sums(ordered.data(), ordered.size()));
          d = decide(c, step, sumsq, nonfinite, scale, opt_step + 1);
          decided = true;
          break;
        }
        case core::OpKind::kCpuOptimizer:
          if (!decided) throw core::RuntimeFailure("functional simulation: CPU optimizer before the step decision");
          if (d.skip) break;
          for (Rank& k : ranks) {
            int64_t b, e;
            cpu_range(k, l, b, e);
            const size_t o = size_t(b - k.split.gpu_elems), n = size_t(e - b);
            const OptimChunk ch{f32(k.cp, o, n), f32(k.cm, o, n), two ? f32(k.cv, o, n) : BufferView{},
                                lp(k.cgrad, o, n, c.grad_dtype), lp(k.ccopy, o, n, core::DType::kBF16)};
            kernels().step(c.kind, std::span<const OptimChunk>(&ch, 1), d.scalars);
          }
          break;
        case core::OpKind::kGpuOptimizer:
          if (!decided) throw core::RuntimeFailure("functional simulation: GPU optimizer before the step decision");
          if (d.skip) break;
          for (Rank& k : ranks) {
            const size_t g = size_t(k.split.gpu_elems);
            const OptimChunk ch{f32(k.gp, 0, g), f32(k.gm, 0, g), two ? f32(k.gv, 0, g) : BufferView{},
                                lp(k.grad, 0, g, c.grad_dtype), lp(k.bf16, 0, g, core::DType::kBF16)};
            kernels().step(c.kind, std::span<const OptimChunk>(&ch, 1), d.scalars);
          }
          break;
        case core::OpKind::kH2DParam:
          if (d.skip) break;
          for (Rank& k : ranks) {
            int64_t b, e;
            cpu_range(k, l, b, e);
            std::memcpy(k.bf16.data() + b, k.ccopy.data() + (b - k.split.gpu_elems), size_t(e - b) * 2);
            res.h2d_bytes += (e - b) * 2;
          }
          break;
      }
    }
    // the norm is reported even when nothing waited for it
    if (!sc.clip_gradients && !sc.loss_scaling) {
      std::vector<double> ordered;
      for (size_t l = 0; l < L; ++l)
        for (int r = 0; r < W; ++r) {
          const Rank& k = ranks[size_t(r)];
          const core::ShardPiece* p = piece_of(k, l);
          if (!p) continue;
          const int64_t real_tiles = int64_t(core::stats_tiles(size_t(part.layer_params[l])));
          for (int64_t t = 0; t < p->count / tile && p->layer_offset / tile + t < real_tiles; ++t)
            ordered.push_back(tile_sum(c.grad_dtype, k.grad.data() + p->shard_offset + t * tile, core::kStatsTile));
        }
      d.norm = std::sqrt(core::canonical_nan(core::fold_tile_sums(ordered.data(), ordered.size()))) / scale;
    }
    res.grad_norms.push_back(d.norm);
    if (d.skip) {
      res.skipped_steps.push_back(step);
      scale /= 2;
    } else {
      ++opt_step;
    }
  }
  res.master.assign(size_t(model.total_params), 0.f);
  for (int r = 0; r < W; ++r) {
    const Rank& k = ranks[size_t(r)];
    for (const core::ShardPiece& p : part.ranks[size_t(r)].pieces)
      for (int64_t j = 0; j < p.real_count; ++j) {
        const size_t o = size_t(p.shard_offset + j);
        res.master[size_t(layer_first[p.layer] + p.layer_offset + j)] =
            o < k.gp.size() ? k.gp[o] : k.cp[o - k.gp.size()];
      }
  }
  return res;
}

FunctionalResult run_reference_loop(const core::ModelDesc& model, const FunctionalConfig& c) {
  check_config(model, c);
  const bool two = core::state_count(c.kind) == 2;
  const size_t n = size_t(model.total_params);
  std::vector<float> p(n), m(n, c.kind == core::OptimizerKind::kAdagrad ? float(c.hp.initial_accumulator_value) : 0.f),
      v(two ? n : 0, 0.f);
  std::vector<uint16_t> w(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = initial_weight(c.seed, int64_t(i));
    w[i] = core::f32_to_bf16(p[i]);
  }
  FunctionalResult res;
  double scale = c.loss_scale;
  int64_t opt_step = 0;
  for (int step = 1; step <= c.steps; ++step) {
    res.loss_scales.push_back(scale);
    uint64_t nonfinite = 0;
    for (size_t i = 0; i < n; ++i) {
      g[i] = reduced_gradient(c, int64_t(i), step, core::bf16_to_f32(w[i]), scale);
      if (!std::isfinite(from_lp(c.grad_dtype, g[i]))) ++nonfinite;
    }
    std::vector<double> tiles;
    size_t first = 0;
    for (const core::LayerDesc& l : model.layers) {
      for (size_t t = 0; t < size_t(l.params); t += core::kStatsTile)
        tiles.push_back(tile_sum(c.grad_dtype, g.data() + first + t, std::min(core::kStatsTile, size_t(l.params) - t)));
      first += size_t(l.params);
    }
    const double sumsq = core::canonical_nan(core::fold_tile_sums(tiles.data(), tiles.size()));
    const StepDecision d = decide(c, step, sumsq, nonfinite, scale, opt_step + 1);
    res.grad_norms.push_back(d.norm);
    if (d.skip) {
      res.skipped_steps.push_back(step);
      scale /= 2;
      continue;
    }
    ++opt_step;
    const OptimChunk all{f32(p, 0, n), f32(m, 0, n), two ? f32(v, 0, n) : BufferView{}, lp(g, 0, n, c.grad_dtype),
                         lp(w, 0, n, core::DType::kBF16)};
    kernels().step(c.kind, std::span<const OptimChunk>(&all, 1), d.scalars);
  }
  res.master = p;
  return res;
}

}  // namespace tf::backend::sim
