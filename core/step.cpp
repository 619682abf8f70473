// Builds the per-rank op list of a ZeRO + Twin-Flow training step.
#include "core/step.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/local_kernels.h"
#include "core/speculation.h"

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
    case OpKind::kCpuCommit: return "cpu_commit";
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

std::optional<OpLabel> parse_op_label(std::string_view label) {
  std::istringstream is{std::string(label)};
  std::string name, word;
  if (!(is >> name)) return std::nullopt;
  OpLabel out;
  bool known = false;
  for (int k = 0; k < kOpKindCount; ++k)
    if (op_kind_name(OpKind(k)) == name) out.kind = OpKind(k), known = true;
  if (!known) return std::nullopt;
  while (is >> word) {
    const bool layer = word.size() > 1 && word[0] == 'L';
    const bool mb = word.size() > 2 && word.compare(0, 2, "mb") == 0;
    const std::string digits = word.substr(layer ? 1 : mb ? 2 : word.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    (layer ? out.layer : out.micro_batch) = std::stoi(digits);
  }
  return out;
}

StepConfig make_step_config(const StepPolicy& policy, DType grad_dtype, int64_t micro_batch, int grad_accum,
                            bool checkpointing, int64_t speculation_bytes) {
  StepConfig c;
  c.micro_batch = micro_batch;
  c.grad_accum = grad_accum;
  c.optimizer = policy.kind;
  c.grad_dtype = grad_dtype;
  c.param_dtype = grad_dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
  c.checkpointing = checkpointing;
  c.clip_gradients = policy.clip > 0;
  c.loss_scaling = policy.skip_nonfinite;
  c.speculation_bytes = speculation_bytes;
  return c;
}

void check_cpu_pass_order(const CpuPassOrder& o, const std::string& where) {
  if (o.arrival < kAllPasses || o.before_norm < kAllPasses)
    throw InputError(where + ": the CPU pass order's counts must be >= 0 (or all), not " + std::to_string(o.arrival) +
                     " and " + std::to_string(o.before_norm));
}

void check_staging_slots(int slots) {
  if (slots < 0 || slots > kMaxStagingSlots)
    throw InputError("staging_slots must be in [0, " + std::to_string(kMaxStagingSlots) +
                     "] (0: one slot per CPU layer), not " + std::to_string(slots));
}

std::vector<int> ring_use_order(int cpu_layers, int slots, const StepConfig& cfg) {
  std::vector<int> order(size_t(std::max(cpu_layers, 0)));
  std::iota(order.begin(), order.end(), 0);
  if (!(cfg.clip_gradients || cfg.loss_scaling) || !cfg.carry_tail || slots <= 0) return order;
  if (slots >= cpu_layers)  // full-size staging: every D2H landed before the norm, no slot is reused
    std::reverse(order.begin(), order.end());
  else if (cfg.ring_forward_order)  // the first `slots` hold every slot: they pass first
    std::reverse(order.begin() + slots, order.end());
  return order;
}

StagingRing staging_ring(const TwinFlowSplit& split, const StepConfig& cfg) {
  check_staging_slots(cfg.staging_slots);
  std::vector<int64_t> pieces;  // the CPU pieces' sizes in backward order
  for (auto p = split.cpu.rbegin(); p != split.cpu.rend(); ++p)
    if (p->count > 0) pieces.push_back(p->count);
  StagingRing r;
  const auto layers = int(pieces.size());
  r.slots = cfg.staging_slots == kUnboundedStaging ? layers : std::min(cfg.staging_slots, layers);
  std::vector<int64_t> size(size_t(r.slots), 0);
  const std::vector<int> order = ring_use_order(layers, r.slots, cfg);
  r.slot_of.assign(size_t(layers), 0);
  for (int j = 0; j < layers; ++j) {
    const int i = order[size_t(j)], slot = j % r.slots;
    r.slot_of[size_t(i)] = slot;
    size[size_t(slot)] = std::max(size[size_t(slot)], pieces[size_t(i)]);
  }
  r.offsets.assign(size_t(r.slots) + 1, 0);
  for (int s = 0; s < r.slots; ++s) r.offsets[size_t(s) + 1] = r.offsets[size_t(s)] + size[size_t(s)];
  return r;
}

namespace {

// StepConfig::cpu_order applies where a carried tail runs every pass after the norm in forward order
// (core::ring_use_order at full-size staging), the order the next forward needs them in. With rings only
// the first `slots` CPU layers speculate (the later D2Hs wait for a pass that frees their slot, after the
// norm: core::speculated_layers), and those hold every slot, so they pass first in either ring order.
bool orders_passes(const StepConfig& c, int staging_slots, int cpu_layers) {
  return (c.clip_gradients || c.loss_scaling) && c.carry_tail && staging_slots >= cpu_layers;
}

}  // namespace

int ordered_cpu_passes(const StepPlan& plan) {
  int cpu_layers = 0, speculated = 0;
  for (const Op& op : plan.ops) {
    cpu_layers += op.kind == OpKind::kH2DParam;
    speculated += op.kind == OpKind::kCpuCommit;
  }
  return orders_passes(plan.config, plan.staging.slots, cpu_layers) ? speculated : 0;
}

bool carries(const StepPlan& plan) {
  return std::any_of(plan.ops.begin(), plan.ops.end(), [](const Op& o) { return o.carried; });
}

QueueOrder plan_queue_order(const StepPlan& plan) {
  QueueOrder order;
  for (const Op& op : plan.ops) order[size_t(op.queue)].push_back(op.id);
  return order;
}

namespace {

// ---- carrying the tail into the next step (docs/ARCHITECTURE.md, "Carrying the optimizer tail into
// the next step") ----

// The carried ops: every op of the cpu and h2d queues (the CPU passes and their copies) and every op that
// waits for one (a D2H into a ring slot a CPU pass frees, a stage 1/2 refresh of a layer with a CPU
// part). Deps point backwards, so one pass closes the set; nothing else depends on them.
void mark_carried(StepPlan& plan) {
  for (Op& op : plan.ops) {
    op.carried = op.queue == Queue::kCpu || op.queue == Queue::kH2D;
    for (uint32_t d : op.deps) op.carried = op.carried || plan.ops[d].carried;
  }
}

// The previous step's carried ops this step's ops wait for: what writes a layer's parameters as the
// next step reads them (ZeRO-3: the H2D; stages 1/2: the replica refresh, after the H2D). Every other
// pair across the steps is ordered through them: the next step's forward reads every layer before its
// backward, reductions, D2Hs and CPU passes begin (compute, comm and the CPU side in that order), and
// each carried op is done before the H2D or refresh it leads to (a CPU pass before its H2D and, on the
// cpu queue, every earlier pass; a deferred D2H before its pass), so the next step's D2H into a gradient
// slot, its pass writing a copy slot, its reductions writing the gradients a carried D2H reads and its
// norm overwriting the decision the carried ops read all come after them. core::check_plan_hazards
// checks that on two steps unrolled.
void add_carried_deps(StepPlan& plan) {
  std::map<int, uint32_t> writer;  // layer -> the carried op writing its parameters as the next step reads them
  for (const Op& op : plan.ops)
    if (op.carried && ((plan.stage == 3 && op.kind == OpKind::kH2DParam) ||
                       (plan.stage < 3 && op.kind == OpKind::kAllGather && op.micro_batch < 0)))
      writer[op.layer] = op.id;
  std::map<int, bool> read;  // layer -> a parameter reader already waits
  for (Op& op : plan.ops) {
    const bool reader = plan.stage == 3 ? op.kind == OpKind::kAllGather && op.micro_batch >= 0  // ZeRO-3 gather
                                        : op.kind == OpKind::kForward;  // stages 1/2: the replica
    if (!reader) continue;
    for (int l : {op.layer, op.shared_layer})
      if (l >= 0 && !std::exchange(read[l], true))
        if (auto it = writer.find(l); it != writer.end()) op.carried_deps.push_back(it->second);
    std::sort(op.carried_deps.begin(), op.carried_deps.end());
    op.carried_deps.erase(std::unique(op.carried_deps.begin(), op.carried_deps.end()), op.carried_deps.end());
  }
}

void carry_tail(StepPlan& plan) {
  mark_carried(plan);
  if (carries(plan)) add_carried_deps(plan);
}

// Adds ops in issue order and keeps the state the dependencies are read from.
class Planner {
 public:
  Planner(const ModelDesc& model, const Partition& part, const TwinFlowSplit& split, const StepConfig& cfg)
      : model_(model), part_(part), split_(split), cfg_(cfg), L_(int(model.layers.size())) {
    if (cfg.micro_batch < 1 || cfg.grad_accum < 1) throw InputError("micro_batch and grad_accum must be >= 1");
    if (cfg.prefetch_layers < 1 || cfg.prefetch_layers > 127) throw InputError("prefetch_layers must be in [1, 127]");
    cpu_elems_.assign(size_t(L_), 0);  // the CPU segment is the shard's tail: the last layers
    for (const ShardPiece& p : split.cpu) cpu_elems_[p.layer] += p.count;
    cpu_index_.assign(size_t(L_), -1);
    for (int l = L_ - 1; l >= 0; --l)  // backward order: the order the CPU parts' gradients land
      if (cpu_elems_[size_t(l)] > 0) {
        cpu_index_[size_t(l)] = int(cpu_layers_.size());
        cpu_layers_.push_back(l);
      }
    cpu_op_.assign(cpu_layers_.size(), 0);
    h2d_op_.assign(cpu_layers_.size(), 0);
    plan_.staging = staging_ring(split, cfg);
    ring_order_ = ring_use_order(int(cpu_layers_.size()), slots(), cfg);
    ring_position_.assign(ring_order_.size(), 0);
    for (size_t j = 0; j < ring_order_.size(); ++j) ring_position_[size_t(ring_order_[j])] = int(j);
    speculated_.assign(size_t(L_), false);
    const std::vector<int32_t> speculated = speculated_layers(split, cfg);
    for (int32_t l : speculated) speculated_[size_t(l)] = true;
    order_passes(speculated);
    fwd_.assign(size_t(L_), 0);
    bwd_.assign(size_t(L_), 0);
    red_.assign(size_t(L_), 0);
    plan_.config = cfg;
    plan_.stage = part.opt.stage;
    plan_.layers = L_;
  }

  // StepConfig::cpu_order's m and k over the speculated layers (in arrival order); where it does not
  // apply, every pass in arrival order before the commits (today's order).
  void order_passes(const std::vector<int32_t>& speculated) {
    check_cpu_pass_order(cfg_.cpu_order, "the step configuration");
    const auto n = int(speculated.size());
    const auto count = [n](int c) { return c == kAllPasses ? n : std::min(c, n); };
    const int k = reorders() ? count(cfg_.cpu_order.before_norm) : n;
    const int m = reorders() ? std::min(count(cfg_.cpu_order.arrival), k) : n;
    passed_.assign(size_t(L_), false);
    arrival_pass_.assign(size_t(L_), false);
    for (int i = 0; i < m; ++i) arrival_pass_[size_t(speculated[size_t(i)])] = true;
    // the others in forward order (speculated is in backward order), the first k - m before the norm
    for (int i = n - 1; i >= m && int(early_.size()) < k - m; --i) early_.push_back(speculated[size_t(i)]);
    lowest_speculated_ = n > 0 ? speculated.back() : -1;
  }

  StepPlan build() {
    for (int mb = 0; mb < cfg_.grad_accum; ++mb) {
      forward(mb);
      backward(mb);
    }
    const std::vector<uint32_t> opt_deps = wait_for_norm() ? norm_then_cpu_updates() : std::vector{red_[0]};
    const int64_t gpu_opt = gpu_optimizer(opt_deps);
    if (stage() < 3) refresh_replicas(gpu_opt);
    if (cfg_.carry_tail) carry_tail(plan_);
    return std::move(plan_);
  }

 private:
  int stage() const { return part_.opt.stage; }
  bool wait_for_norm() const { return cfg_.clip_gradients || cfg_.loss_scaling; }
  int64_t layer_bytes(int l, DType t) const {
    return part_.layer_slice[size_t(l)] * part_.opt.world * int64_t(dtype_bytes(t));
  }
  int8_t gather_slot(int l) const { return int8_t(l % cfg_.prefetch_layers); }

  uint32_t add(OpKind k, Queue q, int32_t layer, int32_t mb, std::vector<uint32_t> deps) {
    Op op;
    op.id = uint32_t(plan_.ops.size());
    op.kind = k;
    op.queue = q;
    op.layer = layer;
    op.micro_batch = mb;
    op.deps = std::move(deps);
    plan_.ops.push_back(std::move(op));
    return plan_.ops.back().id;
  }
  Op& last() { return plan_.ops.back(); }

  // A ZeRO-3 gather of layer l into its prefetch buffer, after the last op that read that buffer; a
  // layer that reads another's tensor gets that layer gathered too, into the shared buffer, after its
  // last reader.
  uint32_t gather(int l, int mb) {
    const int8_t slot = gather_slot(l);
    const int32_t owner = model_.shared_owner(size_t(l));
    std::vector<uint32_t> deps;
    if (auto it = gather_reader_.find(slot); it != gather_reader_.end()) deps.push_back(it->second);
    if (owner >= 0 && shared_reader_ >= 0 &&
        std::find(deps.begin(), deps.end(), uint32_t(shared_reader_)) == deps.end())
      deps.push_back(uint32_t(shared_reader_));
    const uint32_t id = add(OpKind::kAllGather, Queue::kComm, l, mb, std::move(deps));
    last().bytes = layer_bytes(l, cfg_.param_dtype) + (owner >= 0 ? layer_bytes(owner, cfg_.param_dtype) : 0);
    last().gather_slot = slot;
    last().shared_layer = owner;
    return id;
  }
  // A forward/backward reads layer l's gathered parameters (ZeRO-3), and the layer it shares a tensor with.
  void reads_gather(int l) {
    last().shared_layer = model_.shared_owner(size_t(l));
    if (stage() != 3) return;
    last().gather_slot = gather_slot(l);
    gather_reader_[gather_slot(l)] = last().id;
    if (last().shared_layer >= 0) shared_reader_ = last().id;
  }

  void forward(int mb) {
    const double tokens = double(cfg_.micro_batch) * double(model_.tokens_per_sample());
    for (int l = 0; l < L_; ++l) {
      std::vector<uint32_t> deps;
      if (stage() == 3) deps.push_back(gather(l, mb));
      fwd_[size_t(l)] = add(OpKind::kForward, Queue::kCompute, l, mb, std::move(deps));
      last().flops = model_.layers[size_t(l)].fwd_flops_per_token * tokens;
      reads_gather(l);
    }
  }

  // Backward gathers go on the comm queue ahead of the reduce-scatters that are ready at the same
  // time: the gather of layer l - P (its buffer frees when backward l ends) is issued before
  // reduce-scatter l, so the next backward never waits behind a reduction in the FIFO.
  void backward(int mb) {
    const int P = cfg_.prefetch_layers;
    std::vector<uint32_t> bag(static_cast<size_t>(L_));  // backward all-gather per layer
    if (stage() == 3)
      for (int j = L_ - 1; j >= std::max(0, L_ - P); --j) bag[size_t(j)] = gather(j, mb);
    for (int l = L_ - 1; l >= 0; --l) {
      std::vector<uint32_t> deps;
      if (stage() == 3) deps.push_back(bag[size_t(l)]);
      const auto slot = int8_t(backward_count_++ % kGradSlots);
      if (auto it = grad_reader_.find(slot); it != grad_reader_.end()) deps.push_back(it->second);  // buffer reuse
      bwd_[size_t(l)] = add(OpKind::kBackward, Queue::kCompute, l, mb, std::move(deps));
      const LayerDesc& ld = model_.layers[size_t(l)];
      const bool recompute = cfg_.checkpointing && ld.kind == LayerKind::kBlock;
      const double tokens = double(cfg_.micro_batch) * double(model_.tokens_per_sample());
      last().flops = (ld.bwd_flops_per_token + (recompute ? ld.fwd_flops_per_token : 0.0)) * tokens;
      last().grad_slot = slot;
      reads_gather(l);
      if (stage() == 3 && l - P >= 0) bag[size_t(l - P)] = gather(l - P, mb);
      reduce(l, mb, slot);
    }
  }

  // The layer's reduction, then (last micro-batch) the D2H of its CPU part and, without a norm wait or
  // when the layer speculates, its CPU update, which starts while backward runs on earlier layers.
  void reduce(int l, int mb, int8_t slot) {
    red_[size_t(l)] =
        add(stage() == 1 ? OpKind::kAllReduce : OpKind::kReduceScatter, Queue::kComm, l, mb, {bwd_[size_t(l)]});
    last().bytes = layer_bytes(l, cfg_.grad_dtype);
    last().grad_slot = slot;
    grad_reader_[slot] = red_[size_t(l)];
    if (mb != cfg_.grad_accum - 1 || cpu_elems_[size_t(l)] == 0) return;
    // With a norm wait the CPU updates run after the norm: a D2H whose slot an earlier layer's update
    // still has to read is issued after that update (norm_then_cpu_updates).
    if (wait_for_norm() && ring_position(l) >= slots()) return;
    const uint32_t id = d2h(l);
    if (!wait_for_norm()) cpu_update(l, {id});
  }

  int slots() const { return plan_.staging.slots; }
  // Layer l's CPU part's place in core::ring_use_order, its staging slot, and the CPU layer (its position in
  // backward order) that used the slot before it (-1: none).
  int ring_position(int l) const { return ring_position_[size_t(cpu_index_[size_t(l)])]; }
  int32_t staging_slot(int l) const { return plan_.staging.slot_of[size_t(cpu_index_[size_t(l)])]; }
  int previous_user(int l) const {
    const int j = ring_position(l) - slots();
    return j >= 0 ? ring_order_[size_t(j)] : -1;
  }

  // The CPU part of layer l's reduced gradient into its gradient slot, after the CPU pass that last read
  // the slot (a speculated layer's commit, which may redo the update from it); then, when the layer
  // speculates, its speculative update.
  uint32_t d2h(int l) {
    std::vector<uint32_t> deps{red_[size_t(l)]};
    if (previous_user(l) >= 0) deps.push_back(cpu_op_[size_t(previous_user(l))]);  // ring reuse
    const uint32_t id = add(OpKind::kD2HGrad, Queue::kD2H, l, -1, std::move(deps));
    last().bytes = cpu_elems_[size_t(l)] * int64_t(dtype_bytes(cfg_.grad_dtype));
    last().staging_slot = staging_slot(l);
    plan_.pcie_d2h_bytes += last().bytes;
    d2h_[l] = id;
    if (wait_for_norm() && speculated_[size_t(l)]) {
      if (arrival_pass_[size_t(l)]) speculative_update(l, id);
      // the last speculated gradient has landed: the passes in forward order that run before the norm
      if (l == lowest_speculated_)
        for (int e : early_) speculative_update(e, d2h_.at(e));
    }
    return id;
  }

  // The layer's fused CPU pass (in place, or the commit of a speculated layer) writes its copy slot after
  // the H2D that last read it; then the H2D of that slot.
  void cpu_update(int l, std::vector<uint32_t> deps, OpKind kind = OpKind::kCpuOptimizer) {
    reuses_copy_slot(l, deps);
    const uint32_t id = add(kind, Queue::kCpu, l, -1, std::move(deps));
    cpu_pass(l);
    if (kind == OpKind::kCpuCommit) last().state_slot = 1;
    cpu_op_[size_t(cpu_index_[size_t(l)])] = id;
    h2d_op_[size_t(cpu_index_[size_t(l)])] = add(OpKind::kH2DParam, Queue::kH2D, l, -1, {id});
    last().bytes = cpu_elems_[size_t(l)] * int64_t(dtype_bytes(cfg_.param_dtype));
    last().staging_slot = staging_slot(l);
    plan_.pcie_h2d_bytes += last().bytes;
  }

  // A speculated layer's update as soon as its gradient landed, into its spare state slot (the commit's
  // redo, when the speculation fails, is the same pass: its elems and bytes are the commit's too).
  // It writes the layer's copy slot too, so it also waits for the H2D that last read that slot.
  void speculative_update(int l, uint32_t d2h) {
    passed_[size_t(l)] = true;
    std::vector<uint32_t> deps{d2h};
    reuses_copy_slot(l, deps);
    add(OpKind::kCpuOptimizer, Queue::kCpu, l, -1, std::move(deps));
    cpu_pass(l);
    last().state_slot = 1;
  }
  void reuses_copy_slot(int l, std::vector<uint32_t>& deps) const {
    if (previous_user(l) >= 0) deps.push_back(h2d_op_[size_t(previous_user(l))]);  // ring reuse
  }
  void cpu_pass(int l) {
    last().elems = cpu_elems_[size_t(l)];
    last().bytes = last().elems * optimizer_bytes_per_element();
    last().staging_slot = staging_slot(l);
  }

  int64_t optimizer_bytes_per_element() const {
    return int64_t(bytes_per_element(cfg_.optimizer, cfg_.grad_dtype, cfg_.param_dtype).total());
  }

  // One statistics pass over the whole shard's reduced gradients, on the GPU: the CPU segment's part
  // is still there before (and while) its D2H runs, so the CPU never reads its gradients twice and the
  // norm does not wait for the copies. Then the norm all-reduce, and the CPU updates after it in
  // core::ring_use_order (backward order, the layers whose gradients landed first updated first; a carried
  // tail: forward order, at full-size staging, or after the layers that landed first, with rings); a
  // speculated layer's is its commit. Returns the GPU optimizer's dependencies.
  std::vector<uint32_t> norm_then_cpu_updates() {
    const uint32_t last_reduce = red_[0];
    const uint32_t stats = add(OpKind::kGradStats, Queue::kCompute, -1, -1, {last_reduce});
    last().elems = split_.gpu_elems + split_.cpu_elems;
    last().bytes = last().elems * int64_t(dtype_bytes(cfg_.grad_dtype));
    const uint32_t norm = add(OpKind::kNormAllReduce, Queue::kComm, -1, -1, {stats, last_reduce});
    // the all-reduced table: a sum of squares per 2048-element tile of every layer (canonical indexes,
    // whatever the world size) + the non-finite count; then folded on the device to one number
    last().elems = stats_table_tiles(part_);
    last().bytes = norm_table_bytes(last().elems);
    // The j-th pass in ring order (a speculated layer's commit) frees its gradient slot for the D2H of the
    // layer `slots` later in that order, deferred until then.
    const auto n = int(cpu_layers_.size());
    for (int j = 0; j < n; ++j) {
      const int i = ring_order_[size_t(j)];
      const int l = cpu_layers_[size_t(i)];
      if (speculated_[size_t(l)] && !passed_[size_t(l)]) speculative_update(l, d2h_.at(l));  // cpu_order's k
      cpu_update(l, {norm, d2h_.at(l)}, speculated_[size_t(l)] ? OpKind::kCpuCommit : OpKind::kCpuOptimizer);
      if (j + slots() < n) d2h(cpu_layers_[size_t(ring_order_[size_t(j + slots())])]);
    }
    return {norm};
  }

  bool reorders() const { return orders_passes(cfg_, slots(), int(cpu_layers_.size())); }

  int64_t gpu_optimizer(const std::vector<uint32_t>& deps) {
    if (split_.gpu_elems <= 0) return -1;
    const uint32_t id = add(OpKind::kGpuOptimizer, Queue::kCompute, -1, -1, deps);
    last().elems = split_.gpu_elems;
    last().bytes = split_.gpu_elems * optimizer_bytes_per_element();
    return id;
  }

  // Stages 1/2 keep the whole bf16 model on every GPU: each rank's updated slice of every layer is
  // all-gathered once the updates have landed (ZeRO-3 gathers on demand in the next step instead).
  void refresh_replicas(int64_t gpu_opt) {
    std::map<int, uint32_t> h2d;
    for (const Op& o : plan_.ops)
      if (o.kind == OpKind::kH2DParam) h2d[o.layer] = o.id;
    for (int l = 0; l < L_; ++l) {
      std::vector<uint32_t> deps;
      if (gpu_opt >= 0) deps.push_back(uint32_t(gpu_opt));
      if (auto it = h2d.find(l); it != h2d.end()) deps.push_back(it->second);
      add(OpKind::kAllGather, Queue::kComm, l, -1, std::move(deps));
      last().bytes = layer_bytes(l, cfg_.param_dtype);
    }
  }

  const ModelDesc& model_;
  const Partition& part_;
  const TwinFlowSplit& split_;
  const StepConfig& cfg_;
  const int L_;
  std::vector<int64_t> cpu_elems_;            // (L) CPU-segment elements of each layer
  std::vector<bool> speculated_;              // (L) core::speculated_layers
  std::vector<bool> arrival_pass_;            // (L) a speculated layer passing right after its D2H (cpu_order's m)
  std::vector<bool> passed_;                  // (L) its speculative pass has been issued
  std::vector<int> early_;                    // cpu_order's k - m passes in forward order before the norm
  int lowest_speculated_ = -1;                // the last speculated layer whose gradient lands
  std::vector<uint32_t> fwd_, bwd_, red_;     // (L) the latest forward / backward / reduction of each layer
  std::map<int, uint32_t> d2h_;               // layer -> D2H op (last micro-batch)
  std::vector<int> cpu_index_;                // (L) position of the layer's CPU part in backward order, -1: none
  std::vector<int> cpu_layers_;               // the layers with a CPU part, in backward order
  std::vector<int> ring_order_;               // core::ring_use_order: positions in cpu_layers_
  std::vector<int> ring_position_;            // (CPU layers) the inverse: each one's place in ring_order_
  std::vector<uint32_t> cpu_op_, h2d_op_;     // (CPU layers) the CPU update / H2D of the i-th
  std::map<int8_t, uint32_t> gather_reader_;  // prefetch buffer -> the last op that read it
  int64_t shared_reader_ = -1;                // the last op that read the shared buffer
  std::map<int8_t, uint32_t> grad_reader_;    // layer-gradient buffer -> the last reduction that read it
  int backward_count_ = 0;
  StepPlan plan_;
};

}  // namespace

StepPlan plan_step(const ModelDesc& model, const Partition& part, const TwinFlowSplit& split, const StepConfig& cfg) {
  return Planner(model, part, split, cfg).build();
}

}  // namespace tf::core
