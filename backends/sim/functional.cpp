// Functional simulation of the Twin-Flow optimizer data path on N in-process ranks, and the plain
// training loop it must match bit for bit.
#include "backends/sim/functional.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/reference/decoder_ref.h"
#include "core/alloc_plan.h"
#include "core/and_barrier.h"
#include "core/error.h"
#include "core/init.h"
#include "core/local_kernels.h"
#include "core/optim/grad_stats.h"
#include "core/partition.h"
#include "core/speculation.h"
#include "core/step.h"
#include "core/step_decision.h"
#include "core/synthetic_workload.h"
#include "core/token_data.h"
#include "core/training_checkpoint.h"
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
  if (c.checkpoints.every_steps < 0)
    throw core::InputError("functional simulation: checkpoint.every_steps must be >= 0");
  core::validate(c.kind, c.hp);
}

// The initial value of the optimizer's first state (Adagrad's sum starts at initial_accumulator_value).
float initial_state1(const FunctionalConfig& c) {
  return c.kind == core::OptimizerKind::kAdagrad ? float(c.hp.initial_accumulator_value) : 0.f;
}

// What every checkpoint of this run records besides its position.
core::CheckpointRecord checkpoint_record(const FunctionalConfig& c) {
  return {
      c.seed, c.micro_shards, {c.world, c.stage, c.ratio}, c.checkpoints.scenario_text, c.checkpoints.ds_config_text};
}

// The first error of the ranks' saves, preferring a rank's own over "another rank failed".
void rethrow_first(const std::vector<std::exception_ptr>& errors) {
  std::exception_ptr first;
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      if (std::string(x.what()).find("another rank failed") == std::string::npos) std::rethrow_exception(e);
    }
    if (!first) first = e;
  }
  if (first) std::rethrow_exception(first);
}

core::StepPolicy policy(const FunctionalConfig& c) {
  return core::make_step_policy(c.kind, c.hp, c.clip, c.grad_dtype, c.schedule);
}

// One micro-batch per micro-shard a rank owns, the configuration's staging rings.
core::StepConfig step_config(const FunctionalConfig& c) {
  core::StepConfig s =
      core::make_step_config(policy(c), c.grad_dtype, 1, c.micro_shards / c.world, false, c.speculation_bytes);
  s.staging_slots = c.staging_slots;
  s.carry_tail = c.carry_tail;
  s.cpu_order = c.cpu_order;
  s.ring_forward_order = c.ring_forward_order;
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
    if (!c.checkpoints.resume.empty()) resume(c.checkpoints.resume);
    if (!c.checkpoints.dir.empty()) make_writers();
    res_.queue_order.assign(size_t(W_), QueueOrder{});
    full_.assign(size_t(model.total_params), 0);  // the model every rank starts from
    for (const Rank& k : ranks_) gather_into_full(k, nullptr);
  }

  FunctionalResult run() {
    res_.first_step = int(first_step_);
    for (int step = int(first_step_); step <= c_.steps; ++step) {
      run_step(step);
      res_.last_step = step;
      const FunctionalCheckpoints& ck = c_.checkpoints;
      const bool stop = step < c_.steps && ck.stop_requested && ck.stop_requested();
      if (!writers_.empty() && (stop || core::checkpoint_due(ck.every_steps, step, c_.steps))) {
        drain();  // a checkpoint reads the state the carried tail writes
        save(step);
      }
      if (stop) {
        res_.stopped = true;
        break;
      }
    }
    drain();          // the end of training: the last step's tail
    collect_saves();  // the last save is synchronous
    res_.master = model_order(0);
    for (size_t a = 1; a < gpu_segments(ranks_[0]).size(); ++a) res_.states.push_back(model_order(a));
    res_.loss_scaler = scaler_;
    res_.optimizer_step = opt_step_;
    return std::move(res_);
  }

 private:
  struct Rank {
    int rank = 0;
    core::TwinFlowSplit split;
    core::StepPlan plan;
    std::vector<float> gp, gm, gv, cp, cm, cv;  // GPU / CPU segments: master, state1, state2
    // the speculated layers' spare slot (core::spare_range of the CPU segment): master, state1, state2
    std::vector<float> sp, sm, sv;
    core::SpareRange spare;
    std::optional<core::Speculation> spec;  // the per-step rule and each layer's current slot
    std::vector<uint16_t> bf16;             // (shard) GPU-resident bf16 parameters
    std::vector<float> acc;                 // (shard) fp32 gradient accumulation (reduce-scatter output)
    std::vector<uint16_t> grad;             // (shard) reduced gradient in the grad dtype, on the GPU
    // host: the staging rings (plan.staging's elements), gradient (after D2H) and bf16 copy
    std::vector<uint16_t> cgrad, ccopy;
    std::vector<std::vector<uint16_t>> local;  // (L) this micro-step's full-layer gradient from backward
  };

  // What a step's ops read of the step itself: a carried op runs in its own step's context.
  struct StepContext {
    int step = 0;
    core::StepDecision decision;
    bool decided = false;
  };

  // A layer's CPU part in one state slot.
  struct SlotPtrs {
    float* master;  // (layer's CPU elems) fp32
    float* state1;  // (layer's CPU elems) fp32
    float* state2;  // (layer's CPU elems) fp32; null for one-state optimizers
  };

  const core::StepPlan& plan() const { return ranks_[0].plan; }  // every rank issues the same op list
  const core::RankShard& shard(const Rank& k) const { return part_.ranks[size_t(k.rank)]; }

  Rank make_rank(int r) {
    const core::RankShard& s = part_.ranks[size_t(r)];
    const float init1 = initial_state1(c_);
    Rank k;
    k.rank = r;
    k.split = core::split_shard(s, c_.ratio, part_.opt.align_elems);
    core::MemoryOptions mo;  // no host memory known: kStagingAuto is full-size staging
    mo.step = step_cfg_;
    mo.step.staging_slots = core::resolve_staging_slots(model_, part_, s, k.split, mo);
    k.plan = core::plan_step(model_, part_, k.split, mo.step);
    const size_t g = size_t(k.split.gpu_elems), n = size_t(k.split.cpu_elems);
    k.gp.assign(g, 0.f), k.gm.assign(g, init1), k.gv.assign(two_ ? g : 0, 0.f);
    k.cp.assign(n, 0.f), k.cm.assign(n, init1), k.cv.assign(two_ ? n : 0, 0.f);
    k.bf16.assign(size_t(s.elems), 0), k.acc.assign(size_t(s.elems), 0.f), k.grad.assign(size_t(s.elems), 0);
    const size_t ring = size_t(k.plan.staging.elems());
    k.cgrad.assign(ring, 0), k.ccopy.assign(ring, 0), k.local.resize(model_.layers.size());
    k.spec.emplace(k.plan);
    k.spare = core::spare_range(k.split, k.spec->layers());
    const size_t sn = size_t(k.spare.elems);
    k.sp.assign(sn, 0.f), k.sm.assign(sn, 0.f), k.sv.assign(two_ ? sn : 0, 0.f);
    for (const core::ShardPiece& p : s.pieces)
      for (int64_t j = 0; j < p.real_count; ++j) {
        const size_t o = size_t(p.shard_offset + j);
        const float w = initial_[size_t(layer_first_[p.layer] + p.layer_offset + j)];
        (o < g ? k.gp[o] : k.cp[o - g]) = w;
        k.bf16[o] = core::f32_to_bf16(w);
      }
    return k;
  }

  // Optimizer array `a` (core::checkpoint_arrays' order: master, then the states) of every rank in
  // model order, real parameters only.
  std::vector<float> model_order(size_t a) {
    std::vector<float> out(size_t(model_.total_params), 0.f);
    for (Rank& k : ranks_) {
      const std::vector<float> whole = shard_array(k, a);
      for (const core::ShardPiece& p : shard(k).pieces)
        for (int64_t j = 0; j < p.real_count; ++j)
          out[size_t(layer_first_[p.layer] + p.layer_offset + j)] = whole[size_t(p.shard_offset + j)];
    }
    return out;
  }

  // ---- checkpoints (docs/ARCHITECTURE.md, "Checkpoints") ------------------------------------------------

  // A rank's GPU segment of each optimizer array as a checkpoint holds them (core::checkpoint_arrays'
  // order); the CPU segment's follow each layer's current state slot (cpu_segment_to / _from).
  std::vector<std::vector<float>*> gpu_segments(Rank& k) const {
    std::vector<std::vector<float>*> out = {&k.gp, &k.gm};
    if (two_) out.push_back(&k.gv);
    return out;
  }
  // Array `a` of a layer's state slot.
  static float* array_of(const SlotPtrs& st, size_t a) { return a == 0 ? st.master : a == 1 ? st.state1 : st.state2; }
  // The CPU segment of array `a` (cpu_elems fp32), each layer from its current slot, into `dst` / from
  // `src`: the only places a checkpoint touches the host state (as the engine's).
  void cpu_segment_to(Rank& k, size_t a, float* dst) {
    for (const core::ShardPiece& p : k.split.cpu)
      if (p.count)
        std::copy_n(array_of(current_state(k, p.layer), a), p.count, dst + (p.shard_offset - k.split.gpu_elems));
  }
  void cpu_segment_from(Rank& k, size_t a, const float* src) {
    for (const core::ShardPiece& p : k.split.cpu)
      if (p.count)
        std::copy_n(src + (p.shard_offset - k.split.gpu_elems), p.count, array_of(current_state(k, p.layer), a));
  }
  // Rank k's array `a` in shard order (shard elems fp32): its GPU segment, then its CPU segment.
  std::vector<float> shard_array(Rank& k, size_t a) {
    const std::vector<float>& g = *gpu_segments(k)[a];
    std::vector<float> out(g.size() + k.cp.size());
    std::copy(g.begin(), g.end(), out.begin());
    cpu_segment_to(k, a, out.data() + g.size());
    return out;
  }

  // Every rank's shard from the checkpoint (any layout wrote it), its bf16 copy rounded from master,
  // and the position, scaler and optimizer step to continue from.
  void resume(const std::filesystem::path& dir) {
    const core::CheckpointReader reader(dir);
    const core::TrainingPosition pos =
        core::check_resume(reader, {&model_, c_.kind, c_.seed, c_.micro_shards, c_.steps, c_.loss_scaler});
    for (Rank& k : ranks_) {
      const core::RankShard& s = shard(k);
      std::vector<std::vector<float>> arrays =
          reader.read(core::shard_spans(part_, s.pieces), s.elems, reader.arrays());
      for (const core::ShardPiece& p : s.pieces)  // padding: the state's initial value, as at step 0
        std::fill(arrays[1].begin() + p.shard_offset + p.real_count, arrays[1].begin() + p.shard_offset + p.count,
                  initial_state1(c_));
      const core::SegmentArrays seg = core::split_segments(arrays, k.split.gpu_elems);
      k.spec->reset_slots();  // every layer's state in its primary slot, as at step 0
      const auto gpu = gpu_segments(k);
      for (size_t a = 0; a < gpu.size(); ++a) {
        gpu[a]->assign(seg.gpu[a].begin(), seg.gpu[a].end());
        cpu_segment_from(k, a, seg.cpu[a].data());
      }
      for (size_t o = 0; o < k.bf16.size(); ++o) k.bf16[o] = core::f32_to_bf16(arrays[0][o]);
    }
    first_step_ = pos.step + 1;
    opt_step_ = pos.optimizer_step;
    scaler_ = pos.loss_scaler;
  }

  void make_writers() {
    const FunctionalCheckpoints& ck = c_.checkpoints;
    barrier_ = std::make_unique<core::AndBarrier>(W_);
    for (const Rank& k : ranks_) {
      core::CheckpointWriterOptions o;
      o.root = ck.dir;
      o.keep = ck.keep;
      o.rank = k.rank;
      o.world = W_;
      if (W_ > 1) o.barrier = barrier_->callback();
      o.io_threads = 1;  // small shards, many ranks in one process
      const core::RankShard& s = shard(k);
      writers_.push_back(std::make_unique<core::CheckpointWriter>(model_, c_.kind, core::shard_spans(part_, s.pieces),
                                                                  s.elems, std::move(o)));
    }
  }

  // Every rank snapshots its arrays and starts writing on its writer's thread; the run goes on.
  void save(int step) {
    collect_saves();
    const core::CheckpointMeta meta = core::checkpoint_meta({step, opt_step_, scaler_}, checkpoint_record(c_));
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const std::vector<std::span<float>> staging = writers_[r]->begin_snapshot();
      Rank& k = ranks_[r];
      const auto gpu = gpu_segments(k);
      for (size_t a = 0; a < gpu.size(); ++a) {
        std::copy(gpu[a]->begin(), gpu[a]->end(), staging[a].begin());
        cpu_segment_to(k, a, staging[a].data() + gpu[a]->size());
      }
      writers_[r]->save_async(meta);
    }
    saving_ = true;
  }

  // Waits for every rank's save in flight; records rank 0's figures, or rethrows a rank's error.
  void collect_saves() {
    if (!saving_) return;
    saving_ = false;
    std::vector<std::exception_ptr> errors(writers_.size());
    core::SaveStats first;
    for (size_t r = 0; r < writers_.size(); ++r) try {
        const core::SaveStats st = writers_[r]->wait();
        if (r == 0) first = st;
      } catch (...) {
        errors[r] = std::current_exception();
      }
    rethrow_first(errors);
    res_.saves.push_back(first);
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
  // The CPU part of layer l in state slot `slot` (0: the segment's own buffers, 1: the spare slot).
  SlotPtrs layer_state(Rank& k, size_t l, int slot) {
    int64_t b, e;
    cpu_range(k, l, b, e);
    const size_t o = size_t(b - k.split.gpu_elems);
    if (slot == 0) return {k.cp.data() + o, k.cm.data() + o, two_ ? k.cv.data() + o : nullptr};
    const size_t so = o - size_t(k.spare.begin);
    return {k.sp.data() + so, k.sm.data() + so, two_ ? k.sv.data() + so : nullptr};
  }
  // The layer's state as it stands (what a checkpoint saves): the slot the speculation made current.
  SlotPtrs current_state(Rank& k, size_t l) { return layer_state(k, l, k.spec->slot(int32_t(l))); }
  // Rank k's slices of every layer (or of `layer`) into the all-gathered model.
  void gather_into_full(const Rank& k, const size_t* layer) {
    for (const core::ShardPiece& p : shard(k).pieces) {
      if (layer && p.layer != *layer) continue;
      for (int64_t j = 0; j < p.real_count; ++j)
        full_[size_t(layer_first_[p.layer] + p.layer_offset + j)] = k.bf16[size_t(p.shard_offset + j)];
    }
  }

  // One step: the plan's ops in plan order, except the carried ones (Op::carried), which wait until an
  // op of a later step needs them (Op::carried_deps, or their queue's next op: ops on one queue run in
  // plan order across steps) or a drain: the latest order the plan allows, so a dependency the plan
  // left out shows in the bits.
  void run_step(int step) {
    step_ = step;
    StepContext& ctx = context(step);
    ctx = StepContext{step, {}, false};
    res_.loss_scales.push_back(scaler_.scale);
    for (auto& q : res_.queue_order) q = QueueOrder{};
    tiles_.clear();
    nonfinite_ = 0;
    loss_sum_ = 0;
    decoder_mb_.assign(size_t(W_), -1);
    if (!step_cfg_.clip_gradients && !step_cfg_.loss_scaling) decide(ctx, 0.0, 0);  // known up front
    for (Rank& k : ranks_) std::fill(k.acc.begin(), k.acc.end(), 0.f);
    for (Rank& k : ranks_) k.spec->begin_step(policy(c_), step, scaler_.scale, opt_step_);
    std::vector<uint32_t> carried;  // this step's carried ops, not run yet
    for (const core::Op& op : plan().ops) {
      for (int r = 0; r < W_; ++r) res_.queue_order[size_t(r)][size_t(op.queue)].push_back(op.id);
      if (op.id == 1) late_ = true;  // the previous step's carried ops run from here on run late
      for (uint32_t d : op.carried_deps) run_carried(d);
      run_queue_before(op.queue, uint32_t(plan().ops.size()));  // the previous step's ops on this queue
      if (op.carried) {
        carried.push_back(op.id);
        continue;
      }
      execute(op, ctx);
    }
    drain();  // what is left of the previous step's tail (core::check_plan_hazards: nothing, for a valid plan)
    late_ = false;
    pending_ = std::move(carried);
    pending_step_ = step;
    // the norm is reported even when nothing waited for it
    if (!step_cfg_.clip_gradients && !step_cfg_.loss_scaling)
      ctx.decision.norm = std::sqrt(global_sumsq()) / scaler_.scale;
    const core::StepDecision& d = ctx.decision;
    res_.grad_norms.push_back(d.norm);
    res_.lrs.push_back(d.lr);
    if (decoder_) res_.losses.push_back(loss_sum_ / c_.micro_shards);
    if (d.skip) res_.skipped_steps.push_back(step);
    core::Speculation::Outcome spec;
    for (Rank& k : ranks_) spec = k.spec->end_step(d);  // every rank's is the same
    if (spec.speculated) res_.speculated_steps.push_back(step);
    if (spec.speculated && !spec.held) res_.failed_speculations.push_back(step);
    if (!d.skip) ++opt_step_;
    scaler_.update(d.skip);  // as the engine runs it
  }

  // A carried op of step pending_step_ (if not run yet): after the ops it waits for, and its queue's
  // earlier ops, in the context of its own step.
  void run_carried(uint32_t id) {
    const auto it = std::find(pending_.begin(), pending_.end(), id);
    if (it == pending_.end()) return;
    pending_.erase(it);
    const core::Op& op = plan().ops[id];
    for (uint32_t d : op.deps) run_carried(d);
    run_queue_before(op.queue, id);
    execute(op, context(pending_step_));
    res_.carried_ops_run_late += late_;
  }
  // The pending carried ops on queue q before op `id` (FIFO).
  void run_queue_before(core::Queue q, uint32_t id) {
    while (true) {
      const auto it = std::find_if(pending_.begin(), pending_.end(),
                                   [&](uint32_t p) { return p < id && plan().ops[p].queue == q; });
      if (it == pending_.end()) return;
      run_carried(*it);
    }
  }
  // The drain point: every carried op still pending runs (before a checkpoint, and at the end).
  void drain() {
    while (!pending_.empty()) run_carried(pending_.front());
  }

  void decide(StepContext& ctx, double sumsq, uint64_t nonfinite) {
    ctx.decision = core::decide_step(policy(c_), ctx.step, sumsq, nonfinite, scaler_.scale, opt_step_ + 1);
    ctx.decided = true;
  }
  static const core::StepDecision& decision(const StepContext& ctx, const char* who) {
    if (!ctx.decided)
      throw core::RuntimeFailure(std::string("functional simulation: ") + who + " before the step decision");
    return ctx.decision;
  }

  void execute(const core::Op& op, StepContext& ctx) {
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
      case core::OpKind::kNormAllReduce: return decide(ctx, global_sumsq_of_tiles(), nonfinite_);
      case core::OpKind::kCpuOptimizer:
        return op.state_slot == 1 ? speculate(ctx, l, op.staging_slot) : cpu_optimizer(ctx, l, op.staging_slot);
      case core::OpKind::kCpuCommit: return commit(ctx, l, op.staging_slot);
      case core::OpKind::kGpuOptimizer: return gpu_optimizer(ctx);
      case core::OpKind::kH2DParam: return h2d(ctx, l, op.staging_slot);
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

  void cpu_optimizer(const StepContext& ctx, size_t l, int32_t slot) {
    const core::StepDecision& d = decision(ctx, "CPU optimizer");
    if (d.skip) return;
    for (Rank& k : ranks_) cpu_pass(k, l, d.scalars, current_state(k, l), nullptr, slot);
  }

  // The fused pass over layer l's CPU part of rank k, on the master and states at `to`, read from `from`
  // when given (out of place), its gradient and copy in staging slot `slot`.
  void cpu_pass(Rank& k, size_t l, const core::StepScalars& sc, const SlotPtrs& to, const SlotPtrs* from,
                int32_t slot) {
    int64_t b, e;
    cpu_range(k, l, b, e);
    const size_t n = size_t(e - b), so = slot_offset(k, slot);
    const auto view = [n](float* p) { return p ? BufferView{p, n, core::DType::kF32} : BufferView{}; };
    OptimChunk ch{view(to.master),
                  view(to.state1),
                  view(to.state2),
                  lp(k.cgrad, so, n, c_.grad_dtype),
                  lp(k.ccopy, so, n, core::DType::kBF16),
                  {}};
    if (from) ch.from = {from->master, from->state1, from->state2};
    kernels().step(c_.kind, std::span<const OptimChunk>(&ch, 1), sc);
  }

  // A speculated layer as soon as its gradient landed: out of place from its current slot into the
  // other one, with the step's speculative scalars (nothing when the step does not speculate).
  void speculate(const StepContext& ctx, size_t l, int32_t slot) {
    for (Rank& k : ranks_) {
      const core::Speculation::Bet& bet = k.spec->bet(ctx.step);
      if (!bet.active) continue;
      const int cur = k.spec->slot(int32_t(l));
      const SlotPtrs from = layer_state(k, l, cur);
      cpu_pass(k, l, bet.scalars, layer_state(k, l, 1 - cur), &from, slot);
    }
  }

  // Once the step is decided: adopt the speculative slot, or update the current one in place.
  void commit(const StepContext& ctx, size_t l, int32_t slot) {
    const core::StepDecision& d = decision(ctx, "CPU commit");
    for (Rank& k : ranks_)
      if (k.spec->commit(int32_t(l), d, ctx.step) == core::Speculation::Commit::kUpdate)
        cpu_pass(k, l, d.scalars, current_state(k, l), nullptr, slot);
  }

  void gpu_optimizer(const StepContext& ctx) {
    const core::StepDecision& d = decision(ctx, "GPU optimizer");
    if (d.skip) return;
    for (Rank& k : ranks_) {
      const size_t g = size_t(k.split.gpu_elems);
      const OptimChunk ch{f32(k.gp, 0, g),
                          f32(k.gm, 0, g),
                          two_ ? f32(k.gv, 0, g) : BufferView{},
                          lp(k.grad, 0, g, c_.grad_dtype),
                          lp(k.bf16, 0, g, core::DType::kBF16),
                          {}};
      kernels().step(c_.kind, std::span<const OptimChunk>(&ch, 1), d.scalars);
    }
  }

  void h2d(const StepContext& ctx, size_t l, int32_t slot) {
    if (decision(ctx, "H2D").skip) return;
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
  int64_t first_step_ = 1;                                        // 1, or a resumed checkpoint's step + 1
  std::unique_ptr<core::AndBarrier> barrier_;                     // the ranks' writers' phases
  std::vector<std::unique_ptr<core::CheckpointWriter>> writers_;  // (world) when checkpoint.dir is set
  bool saving_ = false;                                           // a save is in flight
  // per step
  int step_ = 0;
  std::map<int64_t, double> tiles_;  // table index (layer, tile) -> canonical tile sum
  uint64_t nonfinite_ = 0;
  std::array<StepContext, 2> contexts_;  // by step parity: this step's and the previous one's (its tail)
  StepContext& context(int step) { return contexts_[size_t(step) & 1]; }
  std::vector<uint32_t> pending_;  // the carried ops of step pending_step_ not run yet, in plan order
  int pending_step_ = 0;
  bool late_ = false;  // the step after pending_step_ has run an op
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
  c.schedule = s.policy.schedule;
  c.clip = s.policy.clip;
  c.loss_scaler = s.loss_scaler;
  c.seed = s.seed;
  c.staging_slots = s.step.staging_slots;
  c.speculation_bytes = s.step.speculation_bytes;
  c.carry_tail = s.step.carry_tail;
  c.cpu_order = s.step.cpu_order;
  c.ring_forward_order = s.step.ring_forward_order;
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
  std::vector<float> p(n), m(n, initial_state1(c)), v(two ? n : 0, 0.f);
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
    res.lrs.push_back(d.lr);
    scaler.update(d.skip);
    if (d.skip) {
      res.skipped_steps.push_back(step);
      continue;
    }
    ++opt_step;
    const OptimChunk all{f32(p, 0, n),
                         f32(m, 0, n),
                         two ? f32(v, 0, n) : BufferView{},
                         lp(g, 0, n, c.grad_dtype),
                         lp(w, 0, n, core::DType::kBF16),
                         {}};
    kernels().step(c.kind, std::span<const OptimChunk>(&all, 1), d.scalars);
  }
  res.master = p;
  res.states.push_back(m);
  if (two) res.states.push_back(v);
  res.loss_scaler = scaler;
  res.optimizer_step = opt_step;
  res.last_step = c.steps;
  return res;
}

}  // namespace tf::backend::sim
