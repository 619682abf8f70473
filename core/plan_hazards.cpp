// Buffer accesses of a step plan's ops and the check that dependencies order every conflict.
#include "core/plan_hazards.h"

#include <array>
#include <map>
#include <sstream>
#include <tuple>

#include "core/local_kernels.h"

namespace tf::core {

const char* plan_buffer_name(PlanBuffer b) {
  switch (b) {
    case PlanBuffer::kParams: return "params";
    case PlanBuffer::kGather: return "gather";
    case PlanBuffer::kGatherShared: return "gather_shared";
    case PlanBuffer::kLayerGrad: return "layer_grad";
    case PlanBuffer::kRecv: return "recv";
    case PlanBuffer::kGradAccum: return "grad_accum";
    case PlanBuffer::kGrads: return "grads";
    case PlanBuffer::kStatsTable: return "stats_table";
    case PlanBuffer::kNormResult: return "norm_result";
    case PlanBuffer::kGpuOptimizerState: return "gpu_optimizer_state";
    case PlanBuffer::kHostGrad: return "host_grad";
    case PlanBuffer::kHostOptimizerState: return "host_optimizer_state";
    case PlanBuffer::kHostOptimizerSpare: return "host_optimizer_spare";
    case PlanBuffer::kHostCopy: return "host_copy";
  }
  return "?";
}

namespace {

class Uses {
 public:
  void add(PlanBuffer b, int32_t index, Segment s, bool write) { out.push_back({b, index, s, write}); }
  // Both segments of a layer of a per-layer shard buffer.
  void layer(PlanBuffer b, int32_t l, bool write) {
    add(b, l, Segment::kGpu, write);
    add(b, l, Segment::kCpu, write);
  }
  // One segment of every layer.
  void all_layers(PlanBuffer b, int layers, Segment s, bool write) {
    for (int32_t l = 0; l < layers; ++l) add(b, l, s, write);
  }
  std::vector<BufferUse> out;
};

void compute_uses(const StepPlan& plan, const Op& op, Uses& u) {
  u.layer(PlanBuffer::kParams, op.layer, false);  // ZeRO-3 at world 1 and stages 1/2 read parameters in place
  if (op.shared_layer >= 0) u.layer(PlanBuffer::kParams, op.shared_layer, false);
  if (op.gather_slot >= 0) u.add(PlanBuffer::kGather, op.gather_slot, Segment::kWhole, false);
  if (op.gather_slot >= 0 && op.shared_layer >= 0) u.add(PlanBuffer::kGatherShared, -1, Segment::kWhole, false);
  if (op.kind == OpKind::kBackward) u.add(PlanBuffer::kLayerGrad, op.grad_slot, Segment::kWhole, true);
  (void)plan;
}

void reduction_uses(const StepPlan& plan, const Op& op, Uses& u) {
  u.add(PlanBuffer::kLayerGrad, op.grad_slot, Segment::kWhole, false);
  u.add(PlanBuffer::kRecv, op.grad_slot, Segment::kWhole, true);
  const SliceSumIo io = slice_sum_io(plan.config.grad_accum, op.micro_batch);
  // every stage accumulates the shard's sums in fp32 across micro-batches (core/alloc_plan.h)
  if (io.read_acc) u.layer(PlanBuffer::kGradAccum, op.layer, false);
  if (io.write_acc) u.layer(PlanBuffer::kGradAccum, op.layer, true);
  if (io.write_out) u.layer(PlanBuffer::kGrads, op.layer, true);
}

// The optimizers (and the H2D, which skips on an fp16 overflow) read the step decision when it waits
// for the norm.
void decision_use(const StepPlan& plan, Uses& u) {
  if (plan.config.clip_gradients || plan.config.loss_scaling)
    u.add(PlanBuffer::kNormResult, -1, Segment::kWhole, false);
}

void optimizer_side_uses(const StepPlan& plan, const Op& op, Uses& u) {
  const int L = plan.layers;
  switch (op.kind) {
    case OpKind::kD2HGrad:
      u.add(PlanBuffer::kGrads, op.layer, Segment::kCpu, false);
      u.add(PlanBuffer::kHostGrad, op.staging_slot, Segment::kWhole, true);
      return;
    case OpKind::kGradStats:
      u.all_layers(PlanBuffer::kGrads, L, Segment::kGpu, false);
      u.all_layers(PlanBuffer::kGrads, L, Segment::kCpu, false);
      u.add(PlanBuffer::kStatsTable, -1, Segment::kWhole, true);
      return;
    case OpKind::kNormAllReduce:
      u.add(PlanBuffer::kStatsTable, -1, Segment::kWhole, true);
      u.add(PlanBuffer::kNormResult, -1, Segment::kWhole, true);
      return;
    case OpKind::kGpuOptimizer:
      decision_use(plan, u);
      u.all_layers(PlanBuffer::kGrads, L, Segment::kGpu, false);
      u.add(PlanBuffer::kGpuOptimizerState, -1, Segment::kWhole, true);
      u.all_layers(PlanBuffer::kParams, L, Segment::kGpu, true);
      return;
    case OpKind::kCpuOptimizer:
      u.add(PlanBuffer::kHostGrad, op.staging_slot, Segment::kWhole, false);
      u.add(PlanBuffer::kHostCopy, op.staging_slot, Segment::kWhole, true);
      if (op.state_slot == 1) {  // speculative: the current slot read, the spare written, no decision
        u.add(PlanBuffer::kHostOptimizerState, op.layer, Segment::kWhole, false);
        u.add(PlanBuffer::kHostOptimizerSpare, op.layer, Segment::kWhole, true);
        return;
      }
      decision_use(plan, u);
      u.add(PlanBuffer::kHostOptimizerState, op.layer, Segment::kWhole, true);
      return;
    case OpKind::kCpuCommit:  // adopts the spare slot (both slots change roles) or redoes the update in place
      decision_use(plan, u);
      u.add(PlanBuffer::kHostGrad, op.staging_slot, Segment::kWhole, false);
      u.add(PlanBuffer::kHostOptimizerSpare, op.layer, Segment::kWhole, true);
      u.add(PlanBuffer::kHostOptimizerState, op.layer, Segment::kWhole, true);
      u.add(PlanBuffer::kHostCopy, op.staging_slot, Segment::kWhole, true);
      return;
    case OpKind::kH2DParam:
      decision_use(plan, u);
      u.add(PlanBuffer::kHostCopy, op.staging_slot, Segment::kWhole, false);
      u.add(PlanBuffer::kParams, op.layer, Segment::kCpu, true);
      return;
    default: return;
  }
}

// The ops a check runs over, in the order they stand for: one step, or (a plan that carries its tail)
// two consecutive steps and the boundary between them: step t + 1 begins once step t's ops that are
// not carried are done (a node that waits for all of them), its ops wait for their dependencies, their
// carried dependencies on step t's ops and, across steps too, their queue's previous op.
struct Node {
  const Op* op = nullptr;  // null: the boundary between the steps
  bool next_step = false;  // the op of step t + 1
  std::vector<uint32_t> preds;
};

std::vector<Node> unroll(const StepPlan& plan, bool two_steps) {
  const auto n = uint32_t(plan.ops.size());
  std::vector<Node> nodes;
  std::array<int64_t, kQueueCount> last_on_queue;
  last_on_queue.fill(-1);
  const auto add_op = [&](const Op& op, uint32_t base, bool next) {
    Node node{&op, next, {}};
    for (uint32_t d : op.deps) node.preds.push_back(base + d);
    if (next) {
      for (uint32_t d : op.carried_deps) node.preds.push_back(d);
      node.preds.push_back(n);  // the boundary
    }
    if (last_on_queue[size_t(op.queue)] >= 0) node.preds.push_back(uint32_t(last_on_queue[size_t(op.queue)]));
    last_on_queue[size_t(op.queue)] = int64_t(nodes.size());
    nodes.push_back(std::move(node));
  };
  for (const Op& op : plan.ops) add_op(op, 0, false);
  if (!two_steps) return nodes;
  Node boundary;
  for (const Op& op : plan.ops)
    if (!op.carried) boundary.preds.push_back(op.id);
  nodes.push_back(std::move(boundary));
  for (const Op& op : plan.ops) add_op(op, n + 1, true);
  Node next_boundary;  // step t + 2 begins: step t + 1's ops that are not carried are done
  for (const Op& op : plan.ops)
    if (!op.carried) next_boundary.preds.push_back(n + 1 + op.id);
  nodes.push_back(std::move(next_boundary));
  return nodes;
}

// Whether node j (earlier) reaches node i through its predecessors: reach[i] holds a bit per earlier
// node. Edges only point backwards, so one pass in order closes them transitively.
class Reachability {
 public:
  explicit Reachability(const std::vector<Node>& nodes)
      : words_((nodes.size() + 63) / 64), bits_(nodes.size() * words_) {
    for (size_t i = 0; i < nodes.size(); ++i)
      for (uint32_t p : nodes[i].preds) {
        set(i, p);
        for (size_t w = 0; w < words_; ++w) bits_[i * words_ + w] |= bits_[p * words_ + w];
      }
  }
  bool reaches(size_t later, size_t earlier) const {
    return (bits_[later * words_ + earlier / 64] >> (earlier % 64)) & 1u;
  }

 private:
  void set(size_t i, size_t j) { bits_[i * words_ + j / 64] |= uint64_t(1) << (j % 64); }
  size_t words_;
  std::vector<uint64_t> bits_;
};

std::string label(const Node& n) { return n.op->label() + (n.next_step ? " (next step)" : ""); }

std::string describe(const BufferUse& u, const Node& a, bool a_writes, const Node& b) {
  std::ostringstream os;
  os << (a_writes ? "write" : "read") << " of " << plan_buffer_name(u.buffer);
  if (u.index >= 0) os << '[' << u.index << ']';
  if (u.segment != Segment::kWhole) os << (u.segment == Segment::kGpu ? " (gpu segment)" : " (cpu segment)");
  os << " by " << label(a) << " and " << (u.write ? "write" : "read") << " by " << label(b) << " are not ordered";
  return os.str();
}

// What a carried tail must be (core::plan_step): carried ops are a suffix of each queue, nothing that
// is not carried waits for one, a carried dependency names a carried op, and only a plan with
// StepConfig::carry_tail has any.
void check_carry_shape(const StepPlan& plan, std::vector<std::string>& out) {
  std::array<int64_t, kQueueCount> carried_on_queue;
  carried_on_queue.fill(-1);
  for (const Op& op : plan.ops) {
    const int64_t c = carried_on_queue[size_t(op.queue)];
    if (op.carried) carried_on_queue[size_t(op.queue)] = op.id;
    if (!op.carried && c >= 0)
      out.push_back(op.label() + " is not carried but follows the carried " + plan.ops[size_t(c)].label() + " on the " +
                    queue_name(op.queue) + " queue");
    for (uint32_t d : op.deps)
      if (!op.carried && plan.ops[d].carried)
        out.push_back(op.label() + " is not carried but waits for the carried " + plan.ops[d].label());
    for (uint32_t d : op.carried_deps)
      if (d >= plan.ops.size() || !plan.ops[d].carried)
        out.push_back(op.label() + " has a carried dependency on an op that is not carried");
    if (!plan.config.carry_tail && (op.carried || !op.carried_deps.empty()))
      out.push_back(op.label() + " is carried or waits for carried ops though the plan does not carry its tail");
  }
}

}  // namespace

std::vector<BufferUse> op_buffers(const StepPlan& plan, const Op& op) {
  Uses u;
  switch (op.kind) {
    case OpKind::kAllGather:
      if (op.micro_batch >= 0) {  // ZeRO-3: the layer's slices into a prefetch buffer
        u.layer(PlanBuffer::kParams, op.layer, false);
        u.add(PlanBuffer::kGather, op.gather_slot, Segment::kWhole, true);
        if (op.shared_layer >= 0) {  // and the layer it shares a tensor with into the shared buffer
          u.layer(PlanBuffer::kParams, op.shared_layer, false);
          u.add(PlanBuffer::kGatherShared, -1, Segment::kWhole, true);
        }
      } else {  // stages 1/2: every rank's updated slice into the replicated model
        u.layer(PlanBuffer::kParams, op.layer, true);
      }
      break;
    case OpKind::kForward:
    case OpKind::kBackward: compute_uses(plan, op, u); break;
    case OpKind::kReduceScatter:
    case OpKind::kAllReduce: reduction_uses(plan, op, u); break;
    default: optimizer_side_uses(plan, op, u); break;
  }
  return std::move(u.out);
}

std::vector<std::string> check_plan_hazards(const StepPlan& plan) {
  std::vector<std::string> hazards;
  check_carry_shape(plan, hazards);
  // Without a carried op the step's end orders everything before the next step: one step is the check.
  const std::vector<Node> nodes = unroll(plan, carries(plan));
  const Reachability reach(nodes);
  // Two steps are the whole check only if a step's tail is done before the step after next begins.
  if (nodes.size() > plan.ops.size())
    for (const Op& op : plan.ops)
      if (op.carried && !reach.reaches(nodes.size() - 1, op.id))
        hazards.push_back(op.label() + " is carried past the next step (nothing the next step awaits waits for it)");
  // Per buffer piece: the last write and the reads since it, in the order the nodes stand for.
  struct State {
    int64_t last_write = -1;
    std::vector<uint32_t> reads;
  };
  std::map<std::tuple<PlanBuffer, int32_t, Segment>, State> pieces;
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].op) continue;
    for (const BufferUse& u : op_buffers(plan, *nodes[i].op)) {
      State& s = pieces[{u.buffer, u.index, u.segment}];
      if (s.last_write >= 0 && s.last_write != i && !reach.reaches(i, size_t(s.last_write)))
        hazards.push_back(describe(u, nodes[size_t(s.last_write)], true, nodes[i]));
      if (!u.write) {
        s.reads.push_back(i);
        continue;
      }
      for (uint32_t r : s.reads)
        if (r != i && !reach.reaches(i, r)) hazards.push_back(describe(u, nodes[r], false, nodes[i]));
      s.last_write = i;
      s.reads.clear();
    }
  }
  return hazards;
}

}  // namespace tf::core
