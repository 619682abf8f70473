// What each op of a step plan reads and writes, and a check that the plan orders every conflicting
// pair: the proof that a backend executing the plan's dependencies (and nothing else) is race-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/step.h"

namespace tf::core {

// The buffers a step touches, as a backend holds them (backends/cuda/engine.cpp, backends/sim).
enum class PlanBuffer : uint8_t {
  kParams,              // the bf16 parameters: the rank's shard (ZeRO-3; one rank computes on it directly) and,
                        // stages 1/2, the replicated model compute reads and the all-gathers after the
                        // optimizers refresh from the shard (one piece: a superset); per (layer, segment)
  kGather,              // ZeRO-3 prefetch buffers, per slot
  kGatherShared,        // ZeRO-3: the shared layer gathered for the layer that reads it (Op::shared_layer)
  kLayerGrad,           // the layer-gradient (send) buffers backward writes, per slot
  kRecv,                // the reduce-scatter's receive buffers, per slot
  kGradAccum,           // fp32 gradient accumulation across micro-batches, per (layer, segment)
  kGrads,               // the reduced gradient shard, per (layer, segment)
  kStatsTable,          // the gradient-statistics tile table (and the step's device counters)
  kNormResult,          // the folded norm and non-finite count the step decision reads
  kGpuOptimizerState,   // fp32 master and states of the GPU segment
  kHostGrad,            // the CPU segment's gradient landing ring, per staging slot (Op::staging_slot)
  kHostOptimizerState,  // fp32 master and states of the CPU segment, per layer: the slot current at the step's start
  kHostOptimizerSpare,  // a speculated layer's other slot (core/speculation.h), per layer
  kHostCopy,            // the CPU segment's updated bf16 copy ring before its H2D, per staging slot
};
const char* plan_buffer_name(PlanBuffer b);

enum class Segment : uint8_t { kWhole, kGpu, kCpu };

struct BufferUse {
  PlanBuffer buffer = PlanBuffer::kParams;
  int32_t index = -1;  // slot (kGather, kLayerGrad, kRecv, kHostGrad, kHostCopy) or layer; -1: one piece
  Segment segment = Segment::kWhole;
  bool write = false;
  bool operator==(const BufferUse&) const = default;
};

// What `op` reads and writes. A superset of every backend's accesses: e.g. ZeRO-3 compute reads both
// its prefetch buffer and the shard (one rank computes on the shard directly).
std::vector<BufferUse> op_buffers(const StepPlan& plan, const Op& op);

// Every pair of ops that touch the same buffer piece, at least one of them writing, must be ordered:
// one reaches the other through dependencies and the FIFO order of each queue. Returns one line per
// unordered pair ("write of layer_grad[0] by backward L3 mb0 and read by reduce_scatter L1 mb0 are not
// ordered"); empty when the plan is race-free. A plan that carries its tail into the next step
// (StepConfig::carry_tail) is checked on two consecutive steps, the pairs across them included (an op of
// the second is labelled "(next step)"), and for the shape of its carried ops (core::plan_step).
std::vector<std::string> check_plan_hazards(const StepPlan& plan);

}  // namespace tf::core
