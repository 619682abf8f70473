// Functional simulation of the Twin-Flow optimizer data path on N in-process ranks, and the plain
// training loop it must match bit for bit.
#include "backends/sim/functional.h"

#include <cmath>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/optim/grad_stats.h"
#include "core/partition.h"
#include "core/twinflow.h"

namespace tf::backend::sim {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float initial_weight(uint64_t seed, int64_t element) {
  const uint64_t r = splitmix(seed * 0x632BE59BD9B4E019ull + uint64_t(element));
  return (float(r >> 40) * 0x1.0p-24f - 0.5f) * 0.2f;
}

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

// Step bookkeeping shared by both implementations: overflow policy, clipping, the scalars.
struct StepDecision {
  bool skip = false;
  double norm = 0;
  core::StepScalars scalars;
};
StepDecision decide(const FunctionalConfig& c, int step, double sumsq, uint64_t nonfinite, double scale,
                    int64_t opt_step) {
  StepDecision d;
  d.norm = std::sqrt(sumsq) / scale;
  if (nonfinite > 0) {
    if (c.grad_dtype != core::DType::kF16)
      throw core::RuntimeFailure("step " + std::to_string(step) + ": " + std::to_string(nonfinite) +
                                 " non-finite gradients in bf16 training; stopping with the state unchanged");
    d.skip = true;
    d.norm = INFINITY;
    return d;
  }
  const double coef = c.clip > 0 && d.norm > c.clip ? c.clip / (d.norm + 1e-6) : 1.0;
  d.scalars = core::make_step_scalars(c.kind, c.hp, opt_step, coef / scale);
  return d;
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
  const uint64_t r = splitmix(seed ^ (uint64_t(element) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(step) << 40) ^
                              (uint64_t(micro_shard) << 56));
  const float u = float(r >> 40) * 0x1.0p-24f;  // [0, 1)
  const float g = (u - 0.5f) * 0.0625f + weight_bf16 * 0.015625f;
  return g * float(loss_scale);
}

FunctionalResult run_functional(const core::ModelDesc& model, const FunctionalConfig& c) {
  check_config(model, c);
  const core::Partition part = core::make_partition(model, {c.stage, c.world, int64_t(core::kStatsTile)});
  const bool two = core::state_count(c.kind) == 2;
  const float init1 = c.kind == core::OptimizerKind::kAdagrad ? float(c.hp.initial_accumulator_value) : 0.f;
  std::vector<int64_t> layer_first(model.layers.size() + 1, 0);  // model-order index of each layer's element 0
  for (size_t l = 0; l < model.layers.size(); ++l) layer_first[l + 1] = layer_first[l] + part.layer_params[l];

  struct Rank {
    core::TwinFlowSplit split;
    std::vector<float> gp, gm, gv, cp, cm, cv;  // GPU / CPU segments: master, state1, state2
    std::vector<uint16_t> bf16;                 // (shard) the GPU-resident bf16 parameter shard
    std::vector<uint16_t> ggrad, cgrad;         // GPU segment grads; CPU segment grads (host, after D2H)
    std::vector<uint16_t> ccopy;                // host staging of the CPU segment's updated bf16 copy
  };
  std::vector<Rank> ranks(size_t(c.world));
  // model-order element of shard offset o of rank r (-1 for padding)
  auto element_of = [&](const core::RankShard& s, int64_t o) -> int64_t {
    for (const core::ShardPiece& p : s.pieces)
      if (o >= p.shard_offset && o < p.shard_offset + p.count) {
        const int64_t in_layer = p.layer_offset + (o - p.shard_offset);
        return in_layer < part.layer_params[p.layer] ? layer_first[p.layer] + in_layer : -1;
      }
    return -1;
  };
  std::vector<std::vector<int64_t>> elem_of(size_t(c.world));
  for (int r = 0; r < c.world; ++r) {
    const core::RankShard& s = part.ranks[size_t(r)];
    Rank& k = ranks[size_t(r)];
    k.split = core::split_shard(s, c.ratio, int64_t(core::kStatsTile));
    const size_t g = size_t(k.split.gpu_elems), n = size_t(k.split.cpu_elems);
    auto& e = elem_of[size_t(r)];
    e.resize(size_t(s.elems));
    for (int64_t o = 0; o < s.elems; ++o) e[size_t(o)] = element_of(s, o);
    k.gp.assign(g, 0.f), k.gm.assign(g, init1), k.gv.assign(two ? g : 0, 0.f);
    k.cp.assign(n, 0.f), k.cm.assign(n, init1), k.cv.assign(two ? n : 0, 0.f);
    k.bf16.assign(size_t(s.elems), 0), k.ggrad.assign(g, 0), k.cgrad.assign(n, 0), k.ccopy.assign(n, 0);
    for (size_t o = 0; o < size_t(s.elems); ++o) {
      const float w = e[o] >= 0 ? initial_weight(c.seed, e[o]) : 0.f;
      (o < g ? k.gp[o] : k.cp[o - g]) = w;
      k.bf16[o] = core::f32_to_bf16(w);
    }
  }

  FunctionalResult res;
  double scale = c.loss_scale;
  int64_t opt_step = 0;
  std::vector<uint16_t> full(size_t(model.total_params));  // the all-gathered bf16 parameters
  for (int step = 1; step <= c.steps; ++step) {
    res.loss_scales.push_back(scale);
    for (int r = 0; r < c.world; ++r)  // all-gather
      for (size_t o = 0; o < elem_of[size_t(r)].size(); ++o)
        if (elem_of[size_t(r)][o] >= 0) full[size_t(elem_of[size_t(r)][o])] = ranks[size_t(r)].bf16[o];
    // reduce-scatter (micro-shard order), then the CPU segment's gradients go D2H
    uint64_t nonfinite = 0;
    for (int r = 0; r < c.world; ++r) {
      Rank& k = ranks[size_t(r)];
      const size_t g = size_t(k.split.gpu_elems);
      for (size_t o = 0; o < elem_of[size_t(r)].size(); ++o) {
        const int64_t e = elem_of[size_t(r)][o];
        const uint16_t v = e >= 0 ? reduced_gradient(c, e, step, core::bf16_to_f32(full[size_t(e)]), scale) : 0;
        (o < g ? k.ggrad[o] : k.cgrad[o - g]) = v;
        if (!std::isfinite(from_lp(c.grad_dtype, v))) ++nonfinite;
      }
      res.d2h_bytes += int64_t(k.cgrad.size()) * 2;
    }
    // canonical statistics: tiles that hold real elements, in (layer, tile) order across ranks
    std::vector<double> tiles;
    for (size_t l = 0; l < model.layers.size(); ++l) {
      const int64_t real_tiles = int64_t(core::stats_tiles(size_t(part.layer_params[l])));
      for (int r = 0; r < c.world; ++r)
        for (const core::ShardPiece& p : part.ranks[size_t(r)].pieces) {
          if (p.layer != l) continue;
          Rank& k = ranks[size_t(r)];
          for (int64_t t = 0; t < p.count / int64_t(core::kStatsTile); ++t) {
            if (p.layer_offset / int64_t(core::kStatsTile) + t >= real_tiles) break;
            const int64_t o = p.shard_offset + t * int64_t(core::kStatsTile);
            const uint16_t* src =
                o < k.split.gpu_elems ? k.ggrad.data() + o : k.cgrad.data() + (o - k.split.gpu_elems);
            tiles.push_back(tile_sum(c.grad_dtype, src, core::kStatsTile));
          }
        }
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
    for (int r = 0; r < c.world; ++r) {
      Rank& k = ranks[size_t(r)];
      const size_t g = size_t(k.split.gpu_elems), n = size_t(k.split.cpu_elems);
      std::vector<OptimChunk> chunks;
      if (g) chunks.push_back({f32(k.gp, 0, g), f32(k.gm, 0, g), two ? f32(k.gv, 0, g) : BufferView{},
                               lp(k.ggrad, 0, g, c.grad_dtype), lp(k.bf16, 0, g, core::DType::kBF16)});
      if (n) chunks.push_back({f32(k.cp, 0, n), f32(k.cm, 0, n), two ? f32(k.cv, 0, n) : BufferView{},
                               lp(k.cgrad, 0, n, c.grad_dtype), lp(k.ccopy, 0, n, core::DType::kBF16)});
      for (const OptimChunk& ch : chunks) kernels().step(c.kind, std::span<const OptimChunk>(&ch, 1), d.scalars);
      if (n) std::memcpy(k.bf16.data() + g, k.ccopy.data(), n * 2);  // H2D of the updated bf16 copy
      res.h2d_bytes += int64_t(n) * 2;
    }
  }
  res.master.assign(size_t(model.total_params), 0.f);
  for (int r = 0; r < c.world; ++r) {
    const Rank& k = ranks[size_t(r)];
    for (size_t o = 0; o < elem_of[size_t(r)].size(); ++o)
      if (elem_of[size_t(r)][o] >= 0)
        res.master[size_t(elem_of[size_t(r)][o])] = o < k.gp.size() ? k.gp[o] : k.cp[o - k.gp.size()];
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
