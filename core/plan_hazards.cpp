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
      u.add(PlanBuffer::kHostGrad, op.layer, Segment::kWhole, true);
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
      u.add(PlanBuffer::kHostGrad, op.layer, Segment::kWhole, false);
      u.add(PlanBuffer::kHostCopy, op.layer, Segment::kWhole, true);
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
      u.add(PlanBuffer::kHostGrad, op.layer, Segment::kWhole, false);
      u.add(PlanBuffer::kHostOptimizerSpare, op.layer, Segment::kWhole, true);
      u.add(PlanBuffer::kHostOptimizerState, op.layer, Segment::kWhole, true);
      u.add(PlanBuffer::kHostCopy, op.layer, Segment::kWhole, true);
      return;
    case OpKind::kH2DParam:
      decision_use(plan, u);
      u.add(PlanBuffer::kHostCopy, op.layer, Segment::kWhole, false);
      u.add(PlanBuffer::kParams, op.layer, Segment::kCpu, true);
      return;
    default: return;
  }
}

// Whether op j (earlier) reaches op i through dependencies and queue order: reach[i] holds a bit per
// earlier op. Edges only point backwards (deps to earlier ops, a queue's previous op), so one pass in
// issue order closes them transitively.
class Reachability {
 public:
  explicit Reachability(const StepPlan& plan) : words_((plan.ops.size() + 63) / 64), bits_(plan.ops.size() * words_) {
    std::array<int64_t, kQueueCount> last_on_queue;
    last_on_queue.fill(-1);
    for (const Op& op : plan.ops) {
      std::vector<uint32_t> preds = op.deps;
      if (last_on_queue[size_t(op.queue)] >= 0) preds.push_back(uint32_t(last_on_queue[size_t(op.queue)]));
      last_on_queue[size_t(op.queue)] = op.id;
      for (uint32_t p : preds) {
        set(op.id, p);
        for (size_t w = 0; w < words_; ++w) bits_[op.id * words_ + w] |= bits_[p * words_ + w];
      }
    }
  }
  bool reaches(uint32_t later, uint32_t earlier) const {
    return (bits_[later * words_ + earlier / 64] >> (earlier % 64)) & 1u;
  }

 private:
  void set(uint32_t i, uint32_t j) { bits_[i * words_ + j / 64] |= uint64_t(1) << (j % 64); }
  size_t words_;
  std::vector<uint64_t> bits_;
};

std::string describe(const StepPlan& plan, const BufferUse& u, uint32_t a, bool a_writes, uint32_t b) {
  std::ostringstream os;
  os << (a_writes ? "write" : "read") << " of " << plan_buffer_name(u.buffer);
  if (u.index >= 0) os << '[' << u.index << ']';
  if (u.segment != Segment::kWhole) os << (u.segment == Segment::kGpu ? " (gpu segment)" : " (cpu segment)");
  os << " by " << plan.ops[a].label() << " and " << (u.write ? "write" : "read") << " by " << plan.ops[b].label()
     << " are not ordered";
  return os.str();
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
  const Reachability reach(plan);
  // Per buffer piece: the last write and the reads since it, in issue order.
  struct State {
    int64_t last_write = -1;
    std::vector<uint32_t> reads;
  };
  std::map<std::tuple<PlanBuffer, int32_t, Segment>, State> pieces;
  std::vector<std::string> hazards;
  for (const Op& op : plan.ops)
    for (const BufferUse& u : op_buffers(plan, op)) {
      State& s = pieces[{u.buffer, u.index, u.segment}];
      if (s.last_write >= 0 && s.last_write != op.id && !reach.reaches(op.id, uint32_t(s.last_write)))
        hazards.push_back(describe(plan, u, uint32_t(s.last_write), true, op.id));
      if (!u.write) {
        s.reads.push_back(op.id);
        continue;
      }
      for (uint32_t r : s.reads)
        if (r != op.id && !reach.reaches(op.id, r)) hazards.push_back(describe(plan, u, r, false, op.id));
      s.last_write = op.id;
      s.reads.clear();
    }
  return hazards;
}

}  // namespace tf::core
