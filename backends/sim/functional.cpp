// Functional simulation of the Twin-Flow optimizer data path on N in-process ranks, and the plain
// training loop it must match bit for bit.
#include "backends/sim/functional.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/reference/decoder_ref.h"
#include "core/error.h"
#include "core/init.h"
#include "core/local_kernels.h"
#include "core/optim/grad_stats.h"
#include "core/partition.h"
#include "core/step.h"
#include "core/step_decision.h"
#include "core/synthetic_workload.h"
#include "core/token_data.h"
#include "core/twinflow.h"

namespace tf::backend::sim {

namespace {

bool decoder_workload(const FunctionalConfig& c) { return c.workload == core::WorkloadType::kDecoder; }

// The fp32 weights every rank starts from, model order: the synthetic workload's, or a decoder's
// (GPT-2's initialisation, core/init.h).
std::vector<float> initial_weights(const core::ModelDesc& m, const FunctionalConfig& c) {
  std::vector<float> w(size_t(m.total_params));
  if (decoder_workload(c)) {
    core::init_weights(m, c.seed, 0, w);
    return w;
  }
  for (size_t i = 0; i < w.size(); ++i) w[i] = core::synthetic_initial_weight(c.seed, int64_t(i));
  return w;
}

uint16_t to_lp(core::DType t, float f) { return t == core::DType::kF16 ? core::f32_to_f16(f) : core::f32_to_bf16(f); }
float from_lp(core::DType t, uint16_t h) { return t == core::DType::kF16 ? core::f16_to_f32(h) : core::bf16_to_f32(h); }

// The decoder workload's gradient of one micro-shard: the CPU reference decoder (float, rounding like
// the GPU) on the bf16 weights as gathered, over micro-shard k's tokens (core::TokenSource, the
// engine's sampler), with gscale = loss_scale / (T x micro_shards) (world x grad_accum = micro_shards
// on every configuration), each element rounded to the grad dtype as a backward writes it.
class DecoderGradients {
 public:
  DecoderGradients(const core::ModelDesc& m, const FunctionalConfig& c)
      : m_(m), c_(c), src_(core::open_token_source(c.data, m.spec.decoder.vocab, m.spec.decoder.seq)) {}
  // Fills out (total_params) and returns the micro-shard's mean loss.
  double compute(int step, int k, std::span<const uint16_t> weights_bf16, double loss_scale,
                 std::vector<uint16_t>& out) const {
    const int64_t rows = c_.micro_batch * m_.spec.decoder.seq;
    std::vector<int32_t> tok(static_cast<size_t>(rows)), tgt(static_cast<size_t>(rows));  // (B, s) int32 each
    src_.micro_batch(c_.seed, step, k, c_.micro_batch, tok, tgt);
    std::vector<float> w(weights_bf16.size());  // (total_params) the bf16 weights' values
    for (size_t i = 0; i < w.size(); ++i) w[i] = core::bf16_to_f32(weights_bf16[i]);
    reference::DecoderOptions o;
    o.loss_scale = loss_scale;
    o.world = 1;
    o.grad_accum = c_.micro_shards;
    o.round_like_gpu = true;
    const reference::DecoderResult<float> r =
        reference::decoder_forward_backward<float>(m_, w, reference::DecoderBatch{tok, tgt}, o);
    out.resize(r.grad.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_lp(c_.grad_dtype, r.grad[i]);
    if (step == c_.overflow_at_step && k == 0) out[0] = to_lp(c_.grad_dtype, INFINITY);
    return r.loss;
  }

 private:
  const core::ModelDesc& m_;
  const FunctionalConfig& c_;
  core::TokenSource src_;
};

// One micro-shard's gradient of one element, as a backward writes it (the forced overflow included).
uint16_t micro_gradient(const FunctionalConfig& c, int64_t element, int step, int micro_shard, float weight_bf16,
                        double scale) {
  float g = workload_gradient(c.seed, element, step, micro_shard, weight_bf16, scale);
  if (step == c.overflow_at_step && element == 0 && micro_shard == 0) g = INFINITY;
  return to_lp(c.grad_dtype, g);
}

// The reduced gradient of one element: micro-shard gradients rounded to the grad dtype (what each
// backward produces), summed in fp32 in micro-shard order (the batch-invariant reduction), rounded
// to the grad dtype (the reduce-scatter's output).
uint16_t reduced_gradient(const FunctionalConfig& c, int64_t element, int step, float weight_bf16, double scale) {
  float acc = 0.f;
  for (int k = 0; k < c.micro_shards; ++k)
    acc = acc + from_lp(c.grad_dtype, micro_gradient(c, element, step, k, weight_bf16, scale));
  return to_lp(c.grad_dtype, acc);
}

// The decoder's reduced gradient (as reduced_gradient, for every element at once): the micro-shard
// gradients summed in fp32 in micro-shard order, rounded to the grad dtype. Returns the mean loss.
double decoder_reduced_gradients(const DecoderGradients& dec, const FunctionalConfig& c, int step,
                                 std::span<const uint16_t> w, double scale, std::vector<uint16_t>& g) {
  std::vector<float> acc(w.size(), 0.f);
  std::vector<uint16_t> gk;
  double loss = 0;
  for (int k = 0; k < c.micro_shards; ++k) {
    loss += dec.compute(step, k, w, scale, gk);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = acc[i] + from_lp(c.grad_dtype, gk[i]);
  }
  for (size_t i = 0; i < acc.size(); ++i) g[i] = to_lp(c.grad_dtype, acc[i]);
  return loss / c.micro_shards;
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
    throw core::InputError(
        "functional simulation: gradients must be bf16 or fp16 (training.precision fp32 runs in the cost-only "
        "simulator only)");
  if (c.steps < 1) throw core::InputError("functional simulation: steps must be >= 1");
  if (!(c.loss_scaler.scale > 0)) throw core::InputError("functional simulation: loss scale must be > 0");
  if (m.total_params < 1) throw core::InputError("functional simulation: the model has no parameters");
  if (decoder_workload(c) && m.spec.type != core::ModelType::kDecoder)
    throw core::InputError("functional simulation: the decoder workload needs a decoder model");
  if (decoder_workload(c) && c.micro_batch < 1)
    throw core::InputError("functional simulation: micro_batch must be >= 1");
  if (c.workload != core::WorkloadType::kSynthetic && !decoder_workload(c))
    throw core::InputError("functional simulation: the workload must be synthetic or decoder");
  core::validate(c.kind, c.hp);
}

core::StepPolicy policy(const FunctionalConfig& c) {
  return core::make_step_policy(c.kind, c.hp, c.clip, c.grad_dtype);
}

// One micro-batch per micro-shard a rank owns, the configuration's staging rings.
core::StepConfig step_config(const FunctionalConfig& c) {
  core::StepConfig s = core::make_step_config(policy(c), c.grad_dtype, 1, c.micro_shards / c.world, false);
  s.staging_slots = c.staging_slots;
  return s;
}

cpu::CpuBackend& kernels() {
  static cpu::CpuBackend be{cpu::CpuOptions{1, false, -1, 4, {}}};
  return be;
}

BufferView f32(std::vector<float>& v, size_t off, size_t n) { return {v.data() + off, n, core::DType::kF32}; }
BufferView lp(std::vector<uint16_t>& v, size_t off, size_t n, core::DType t) { return {v.data() + off, n, t}; }

// The N ranks of a functional run: their shards, plans and buffers, and the op-by-op execution of one
// step of the plan.
class FunctionalRun {
 public:
  FunctionalRun(const core::ModelDesc& model, const FunctionalConfig& c)
      : model_(model),
        c_(c),
        W_(c.world),
        part_(core::make_partition(model, {c.stage, c.world, int64_t(core::kStatsTile)})),
        step_cfg_(step_config(c)),
        two_(core::state_count(c.kind) == 2),
        initial_(initial_weights(model, c)),
        scaler_(c.loss_scaler) {
    if (decoder_workload(c)) {
      decoder_.emplace(model, c);
      decoder_grad_.resize(size_t(c.world));
    }
    const size_t L = model.layers.size();
    layer_first_.assign(L + 1, 0);
    for (size_t l = 0; l < L; ++l) layer_first_[l + 1] = layer_first_[l] + part_.layer_params[l];
    for (int r = 0; r < W_; ++r) ranks_.push_back(make_rank(r));
    for (const Rank& k : ranks_)
      if (k.plan.ops.size() != plan().ops.size())
        throw core::RuntimeFailure("functional simulation: ranks planned different steps");
    res_.queue_order.assign(size_t(W_), QueueOrder{});
    full_.assign(size_t(model.total_params), 0);  // the model every rank starts from
    for (const Rank& k : ranks_) gather_into_full(k, nullptr);
  }

  FunctionalResult run() {
    for (int step = 1; step <= c_.steps; ++step) run_step(step);
    res_.master.assign(size_t(model_.total_params), 0.f);
    for (const Rank& k : ranks_)
      for (const core::ShardPiece& p : shard(k).pieces)
        for (int64_t j = 0; j < p.real_count; ++j) {
          const size_t o = size_t(p.shard_offset + j);
          res_.master[size_t(layer_first_[p.layer] + p.layer_offset + j)] =
              o < k.gp.size() ? k.gp[o] : k.cp[o - k.gp.size()];
        }
    return std::move(res_);
  }

 private:
  struct Rank {
    int rank = 0;
    core::TwinFlowSplit split;
    core::StepPlan plan;
    std::vector<float> gp, gm, gv, cp, cm, cv;  // GPU / CPU segments: master, state1, state2
    std::vector<uint16_t> bf16;                 // (shard) GPU-resident bf16 parameters
    std::vector<float> acc;                     // (shard) fp32 gradient accumulation (reduce-scatter output)
    std::vector<uint16_t> grad;                 // (shard) reduced gradient in the grad dtype, on the GPU
    // host: the staging rings (plan.staging's elements), gradient (after D2H) and bf16 copy
    std::vector<uint16_t> cgrad, ccopy;
    std::vector<std::vector<uint16_t>> local;   // (L) this micro-step's full-layer gradient from backward
  };

  const core::StepPlan& plan() const { return ranks_[0].plan; }  // every rank issues the same op list
  const core::RankShard& shard(const Rank& k) const { return part_.ranks[size_t(k.rank)]; }

  Rank make_rank(int r) {
    const core::RankShard& s = part_.ranks[size_t(r)];
    const float init1 = c_.kind == core::OptimizerKind::kAdagrad ? float(c_.hp.initial_accumulator_value) : 0.f;
    Rank k;
    k.rank = r;
    k.split = core::split_shard(s, c_.ratio, part_.opt.align_elems);
    k.plan = core::plan_step(model_, part_, k.split, step_cfg_);
    const size_t g = size_t(k.split.gpu_elems), n = size_t(k.split.cpu_elems);
    k.gp.assign(g, 0.f), k.gm.assign(g, init1), k.gv.assign(two_ ? g : 0, 0.f);
    k.cp.assign(n, 0.f), k.cm.assign(n, init1), k.cv.assign(two_ ? n : 0, 0.f);
    k.bf16.assign(size_t(s.elems), 0), k.acc.assign(size_t(s.elems), 0.f), k.grad.assign(size_t(s.elems), 0);
    const size_t ring = size_t(k.plan.staging.elems());
    k.cgrad.assign(ring, 0), k.ccopy.assign(ring, 0), k.local.resize(model_.layers.size());
    for (const core::ShardPiece& p : s.pieces)
      for (int64_t j = 0; j < p.real_count; ++j) {
        const size_t o = size_t(p.shard_offset + j);
        const float w = initial_[size_t(layer_first_[p.layer] + p.layer_offset + j)];
        (o < g ? k.gp[o] : k.cp[o - g]) = w;
        k.bf16[o] = core::f32_to_bf16(w);
      }
    return k;
  }

  const core::ShardPiece* piece_of(const Rank& k, size_t l) const {
    for (const core::ShardPiece& p : shard(k).pieces)
      if (p.layer == l) return &p;
    return nullptr;
  }
  // the CPU part of layer l on rank k: [shard begin, end) within the CPU segment
  static void cpu_range(const Rank& k, size_t l, int64_t& b, int64_t& e) {
    b = e = 0;
    for (const core::ShardPiece& p : k.split.cpu)
      if (p.layer == l) b = p.shard_offset, e = p.shard_offset + p.count;
  }
  // Rank k's slices of every layer (or of `layer`) into the all-gathered model.
  void gather_into_full(const Rank& k, const size_t* layer) {
    for (const core::ShardPiece& p : shard(k).pieces) {
      if (layer && p.layer != *layer) continue;
      for (int64_t j = 0; j < p.real_count; ++j)
        full_[size_t(layer_first_[p.layer] + p.layer_offset + j)] = k.bf16[size_t(p.shard_offset + j)];
    }
  }

  void run_step(int step) {
    step_ = step;
    res_.loss_scales.push_back(scaler_.scale);
    for (auto& q : res_.queue_order) q = QueueOrder{};
    tiles_.clear();
    nonfinite_ = 0;
    decided_ = false;
    loss_sum_ = 0;
    decoder_mb_.assign(size_t(W_), -1);
    if (!step_cfg_.clip_gradients && !step_cfg_.loss_scaling) decide(0.0, 0);  // known up front
    for (Rank& k : ranks_) std::fill(k.acc.begin(), k.acc.end(), 0.f);
    for (const core::Op& op : plan().ops) {
      for (int r = 0; r < W_; ++r) res_.queue_order[size_t(r)][size_t(op.queue)].push_back(op.id);
      execute(op);
    }
    // the norm is reported even when nothing waited for it
    if (!step_cfg_.clip_gradients && !step_cfg_.loss_scaling)
      decision_.norm = std::sqrt(global_sumsq()) / scaler_.scale;
    res_.grad_norms.push_back(decision_.norm);
    if (decoder_) res_.losses.push_back(loss_sum_ / c_.micro_shards);
    if (decision_.skip) res_.skipped_steps.push_back(step);
    if (!decision_.skip) ++opt_step_;
    scaler_.update(decision_.skip);  // as the engine runs it
  }

  void decide(double sumsq, uint64_t nonfinite) {
    decision_ = core::decide_step(policy(c_), step_, sumsq, nonfinite, scaler_.scale, opt_step_ + 1);
    decided_ = true;
  }
  const core::StepDecision& decision(const char* who) const {
    if (!decided_)
      throw core::RuntimeFailure(std::string("functional simulation: ") + who + " before the step decision");
    return decision_;
  }

  void execute(const core::Op& op) {
    const size_t l = op.layer >= 0 ? size_t(op.layer) : 0;
    switch (op.kind) {
      case core::OpKind::kAllGather:
        for (const Rank& k : ranks_) gather_into_full(k, &l);
        return;
      case core::OpKind::kForward: return;  // the workload keeps no activations
      case core::OpKind::kBackward: return backward(l, op.micro_batch);
      case core::OpKind::kReduceScatter:
      case core::OpKind::kAllReduce: return reduce(l, op.micro_batch);
      case core::OpKind::kD2HGrad: return d2h(l, op.staging_slot);
      case core::OpKind::kGradStats: return grad_stats();
      case core::OpKind::kNormAllReduce: return decide(global_sumsq_of_tiles(), nonfinite_);
      case core::OpKind::kCpuOptimizer: return cpu_optimizer(l, op.staging_slot);
      case core::OpKind::kGpuOptimizer: return gpu_optimizer();
      case core::OpKind::kH2DParam: return h2d(l, op.staging_slot);
    }
  }

  void backward(size_t l, int mb) {
    for (Rank& k : ranks_) {
      auto& g = k.local[l];
      g.assign(size_t(part_.layer_params[l]), 0);
      const int micro_shard = mb * W_ + k.rank;
      if (decoder_) {
        decoder_layer_gradient(k.rank, mb, micro_shard, l, g);
        continue;
      }
      for (int64_t j = 0; j < part_.layer_params[l]; ++j) {
        const int64_t e = layer_first_[l] + j;
        g[size_t(j)] = micro_gradient(c_, e, step_, micro_shard, core::bf16_to_f32(full_[size_t(e)]), scaler_.scale);
      }
    }
  }

  // The decoder's gradient of micro-shard k is one forward and backward over the whole model: run at
  // the micro-batch's first backward (the last layer) on the gathered weights, which no update has
  // touched yet in this step; each layer's backward then takes its slice.
  void decoder_layer_gradient(int rank, int mb, int micro_shard, size_t l, std::vector<uint16_t>& g) {
    std::vector<uint16_t>& whole = decoder_grad_[size_t(rank)];
    if (decoder_mb_[size_t(rank)] != mb) {
      loss_sum_ += decoder_->compute(step_, micro_shard, full_, scaler_.scale, whole);
      decoder_mb_[size_t(rank)] = mb;
    }
    std::copy_n(whole.begin() + layer_first_[l], part_.layer_params[l], g.begin());
  }

  // fp32 sums in micro-shard order: the accumulation, then every rank's slice in rank order.
  void reduce(size_t l, int mb) {
    const bool last = core::slice_sum_io(step_cfg_.grad_accum, mb).write_out;
    for (Rank& k : ranks_) {
      const core::ShardPiece* p = piece_of(k, l);
      if (!p) continue;
      for (int64_t j = 0; j < p->real_count; ++j) {
        const size_t o = size_t(p->shard_offset + j), in_layer = size_t(p->layer_offset + j);
        float a = k.acc[o];
        for (const Rank& src : ranks_) a = a + from_lp(c_.grad_dtype, src.local[l][in_layer]);
        k.acc[o] = a;
        if (last) k.grad[o] = to_lp(c_.grad_dtype, a);
      }
    }
  }

  // Element 0 of staging slot `slot` in rank k's rings.
  static size_t slot_offset(const Rank& k, int32_t slot) { return size_t(k.plan.staging.offsets.at(size_t(slot))); }

  void d2h(size_t l, int32_t slot) {
    for (Rank& k : ranks_) {
      int64_t b, e;
      cpu_range(k, l, b, e);
      std::memcpy(k.cgrad.data() + slot_offset(k, slot), k.grad.data() + b, size_t(e - b) * 2);
      res_.d2h_bytes += (e - b) * 2;
    }
  }

  // The whole shard's reduced gradients, where they are after the reduce-scatter (GPU), at their
  // canonical (layer, tile) slots.
  void grad_stats() {
    const auto tile = int64_t(core::kStatsTile);
    for (const Rank& k : ranks_)
      for (const core::StatsRange& sr : core::shard_stats_ranges(part_, shard(k)))
        for (int64_t t = 0; t < sr.tiles; ++t) {
          const uint16_t* src = k.grad.data() + sr.shard_offset + t * tile;
          tiles_[sr.table_index + t] = tile_sum(c_.grad_dtype, src, core::kStatsTile);
          for (int64_t j = 0; j < tile; ++j) nonfinite_ += !std::isfinite(from_lp(c_.grad_dtype, src[j]));
        }
  }

  // The table folded in canonical order (every tile is written by exactly one rank).
  double global_sumsq_of_tiles() const {
    std::vector<double> ordered;
    for (const auto& [index, v] : tiles_) ordered.push_back(v);
    return core::canonical_nan(core::fold_tile_sums(ordered.data(), ordered.size()));
  }
  double global_sumsq() {
    tiles_.clear();
    const uint64_t keep = nonfinite_;
    grad_stats();
    nonfinite_ = keep;
    return global_sumsq_of_tiles();
  }

  void cpu_optimizer(size_t l, int32_t slot) {
    if (decision("CPU optimizer").skip) return;
    for (Rank& k : ranks_) {
      int64_t b, e;
      cpu_range(k, l, b, e);
      const size_t o = size_t(b - k.split.gpu_elems), n = size_t(e - b), so = slot_offset(k, slot);
      const OptimChunk ch{f32(k.cp, o, n), f32(k.cm, o, n), two_ ? f32(k.cv, o, n) : BufferView{},
                          lp(k.cgrad, so, n, c_.grad_dtype), lp(k.ccopy, so, n, core::DType::kBF16)};
      kernels().step(c_.kind, std::span<const OptimChunk>(&ch, 1), decision_.scalars);
    }
  }

  void gpu_optimizer() {
    if (decision("GPU optimizer").skip) return;
    for (Rank& k : ranks_) {
      const size_t g = size_t(k.split.gpu_elems);
      const OptimChunk ch{f32(k.gp, 0, g), f32(k.gm, 0, g), two_ ? f32(k.gv, 0, g) : BufferView{},
                          lp(k.grad, 0, g, c_.grad_dtype), lp(k.bf16, 0, g, core::DType::kBF16)};
      kernels().step(c_.kind, std::span<const OptimChunk>(&ch, 1), decision_.scalars);
    }
  }

  void h2d(size_t l, int32_t slot) {
    if (decision("H2D").skip) return;
    for (Rank& k : ranks_) {
      int64_t b, e;
      cpu_range(k, l, b, e);
      std::memcpy(k.bf16.data() + b, k.ccopy.data() + slot_offset(k, slot), size_t(e - b) * 2);
      res_.h2d_bytes += (e - b) * 2;
    }
  }

  const core::ModelDesc& model_;
  const FunctionalConfig& c_;
  const int W_;
  const core::Partition part_;
  const core::StepConfig step_cfg_;  // one micro-batch per micro-shard a rank owns: k = mb * world + rank
  const bool two_;
  std::vector<int64_t> layer_first_;  // (L + 1) model-order index of each layer's element 0
  const std::vector<float> initial_;  // (total_params) fp32 initial weights, model order
  std::optional<DecoderGradients> decoder_;
  std::vector<std::vector<uint16_t>> decoder_grad_;  // (world) x (total_params) grad dtype: the current micro-batch's
  std::vector<int> decoder_mb_;                      // (world) the micro-batch decoder_grad_ holds, -1: none
  double loss_sum_ = 0;                              // the step's micro-shard losses
  std::vector<Rank> ranks_;
  std::vector<uint16_t> full_;  // all-gathered bf16 parameters
  FunctionalResult res_;
  core::LossScaler scaler_;
  int64_t opt_step_ = 0;
  // per step
  int step_ = 0;
  std::map<int64_t, double> tiles_;  // table index (layer, tile) -> canonical tile sum
  uint64_t nonfinite_ = 0;
  core::StepDecision decision_;
  bool decided_ = false;
};

}  // namespace

float workload_gradient(uint64_t seed, int64_t element, int step, int micro_shard, float weight_bf16,
                        double loss_scale) {
  return core::synthetic_gradient(seed, element, step, micro_shard, weight_bf16, float(loss_scale));
}

FunctionalConfig functional_config(const core::RunSettings& s, double ratio, int steps, int micro_shards) {
  FunctionalConfig c;
  c.world = s.world;
  c.stage = s.partition.stage;
  c.ratio = ratio;
  c.steps = steps;
  c.micro_shards = micro_shards;
  c.grad_dtype = s.step.grad_dtype;
  c.kind = s.policy.kind;
  c.hp = s.policy.hp;
  c.clip = s.policy.clip;
  c.loss_scaler = s.loss_scaler;
  c.seed = s.seed;
  c.staging_slots = s.step.staging_slots;
  if (s.workload == core::WorkloadType::kDecoder ||
      (s.workload == core::WorkloadType::kAuto && s.model.spec.type == core::ModelType::kDecoder)) {
    c.workload = core::WorkloadType::kDecoder;
    c.micro_batch = s.step.micro_batch;
    c.data = s.data_train;
  }
  return c;
}

FunctionalResult run_functional(const core::ModelDesc& model, const FunctionalConfig& c) {
  check_config(model, c);
  return FunctionalRun(model, c).run();
}

FunctionalResult run_reference_loop(const core::ModelDesc& model, const FunctionalConfig& c) {
  check_config(model, c);
  const bool two = core::state_count(c.kind) == 2;
  const size_t n = size_t(model.total_params);
  std::vector<float> p(n), m(n, c.kind == core::OptimizerKind::kAdagrad ? float(c.hp.initial_accumulator_value) : 0.f),
      v(two ? n : 0, 0.f);
  std::vector<uint16_t> w(n), g(n);
  p = initial_weights(model, c);
  for (size_t i = 0; i < n; ++i) w[i] = core::f32_to_bf16(p[i]);
  std::optional<DecoderGradients> decoder;
  if (decoder_workload(c)) decoder.emplace(model, c);
  FunctionalResult res;
  core::LossScaler scaler = c.loss_scaler;
  int64_t opt_step = 0;
  for (int step = 1; step <= c.steps; ++step) {
    res.loss_scales.push_back(scaler.scale);
    uint64_t nonfinite = 0;
    if (decoder)
      res.losses.push_back(decoder_reduced_gradients(*decoder, c, step, w, scaler.scale, g));
    else
      for (size_t i = 0; i < n; ++i)
        g[i] = reduced_gradient(c, int64_t(i), step, core::bf16_to_f32(w[i]), scaler.scale);
    for (size_t i = 0; i < n; ++i) nonfinite += !std::isfinite(from_lp(c.grad_dtype, g[i]));
    std::vector<double> tiles;
    size_t first = 0;
    for (const core::LayerDesc& l : model.layers) {
      for (size_t t = 0; t < size_t(l.params); t += core::kStatsTile)
        tiles.push_back(tile_sum(c.grad_dtype, g.data() + first + t, std::min(core::kStatsTile, size_t(l.params) - t)));
      first += size_t(l.params);
    }
    const double sumsq = core::canonical_nan(core::fold_tile_sums(tiles.data(), tiles.size()));
    const core::StepDecision d = core::decide_step(policy(c), step, sumsq, nonfinite, scaler.scale, opt_step + 1);
    res.grad_norms.push_back(d.norm);
    scaler.update(d.skip);
    if (d.skip) {
      res.skipped_steps.push_back(step);
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
