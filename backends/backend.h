// THE seam between the core and its implementations (reference, cpu, cuda, sim).
// The core talks to a backend only through these types. Capabilities are data: callers branch on
// them, never on a backend's concrete type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/optim/dtype.h"
#include "core/optim/grad_stats.h"
#include "core/optim/optimizer.h"
#include "core/step.h"

namespace tf::backend {

using core::DType;
using core::GradStats;
using core::OptimizerKind;
using core::StepScalars;

// What a backend can do. Optional slots say their default.
struct Capabilities {
  std::string name;              // e.g. "cpu-avx512", "cuda:0 NVIDIA H100"
  bool functional_math = true;   // runs the math (false: cost-only simulation)
  bool device_memory = false;    // buffers live outside host memory (upload/download needed)
  bool bitwise_contract = true;  // follows core/optim/update_rules.h bit for bit
  size_t buffer_alignment = 4;   // required alignment of every buffer pointer, in bytes
};

// A typed, sized view of memory the backend can access (host memory for cpu, device for cuda).
struct BufferView {
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kNone;
  size_t bytes() const { return count * core::dtype_bytes(dtype); }
};

// Where an out-of-place update reads the fp32 master and states it writes to the chunk's param/state1/
// state2 (a speculative update into a layer's spare state slot, core/speculation.h). Null: in place.
struct StateSource {
  const float* param = nullptr;   // (n) fp32
  const float* state1 = nullptr;  // (n) fp32
  const float* state2 = nullptr;  // (n) fp32; null for one-state optimizers
};

// One contiguous piece of a rank's optimizer shard.
struct OptimChunk {
  BufferView param;       // (n) fp32 master weights, updated in place (written from `from` when it is set)
  BufferView state1;      // (n) fp32: exp_avg (AdamW/Adam/Lion) or sum (Adagrad)
  BufferView state2;      // (n) fp32: exp_avg_sq (AdamW/Adam); empty for one-state optimizers
  BufferView grad;        // (n) fp32 | bf16 | fp16 gradient, read only
  BufferView param_copy;  // (n) bf16 | fp16 copy of the updated weight, or empty (dtype none)
  StateSource from;       // out of place: the master and states read (the same bits as in place); null: in place
};

// Throws core::InputError if a chunk does not fit the optimizer: wrong dtypes, mismatched counts,
// null or misaligned pointers, overlapping buffers, or an out-of-place source that is incomplete or
// overlaps a buffer the pass writes. `where` prefixes the message.
void validate_chunk(OptimizerKind k, const OptimChunk& c, size_t alignment, const std::string& where);

// Memory owned by a backend (RAII). Host backends hand out host memory.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
};

// The optimizer part of the seam. The engine's queues, events and collectives join it later.
class OptimizerBackend {
 public:
  virtual ~OptimizerBackend() = default;
  virtual const Capabilities& caps() const = 0;

  virtual std::unique_ptr<Buffer> allocate(size_t bytes) = 0;
  virtual void upload(Buffer& dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, Buffer& src, size_t bytes) = 0;

  // One fused pass per chunk: convert the gradient, multiply by grad_scale, update master and
  // states, write the low-precision copy, count non-finite gradients and sum the squares of the raw
  // gradient (grad_stats.h order). An element whose scaled gradient is not finite keeps its old
  // master, states and copy. Returns the stats combined over chunks in order. Synchronous.
  virtual GradStats step(OptimizerKind k, std::span<const OptimChunk> chunks, const StepScalars& s) = 0;

  // The same statistics without updating anything (for clipping / overflow checks before a step).
  virtual GradStats grad_stats(std::span<const BufferView> grads) = 0;
};

// --- The engine part: what executing one rank's step plan reports ---------------------------------
// Every executor of a core::StepPlan runs the ops of one queue in core::plan_queue_order, each after
// the ops it depends on, and nothing else: the plan (what, where, after what, in which buffer) is the
// core's; what an op does and how long it takes is the executor's. The executors are the CUDA engine
// (backends/cuda/engine.h: streams, events, NCCL, pinned memory, CPU optimizer threads; one rank per
// process) and the simulators (backends/sim/: every rank at once, on simulated resources or in
// process). They share no virtual interface, because no caller chooses between them at run time; they
// share these types: each reports a StepTimeline.

// One op's execution: ns from the step's start (measured or simulated).
struct OpInterval {
  uint32_t op = 0;  // index into StepPlan::ops
  int64_t start_ns = 0, end_ns = 0;
};

struct StepTimeline {
  std::vector<OpInterval> ops;                        // ops[i].op == i
  int64_t step_ns = 0;                                // end of the last op
  std::array<int64_t, core::kQueueCount> busy_ns{};   // summed op durations per queue
  std::array<int64_t, core::kOpKindCount> kind_ns{};  // summed op durations per op kind
  int64_t optimizer_phase_ns = 0;                     // from the end of the last backward op to the end of the step
  int64_t exposed_ns = 0;                             // the part of the step when the compute queue is idle
  // the part of the step when a PCIe copy or the CPU optimizer runs while compute and comm are idle
  int64_t exposed_transfer_ns = 0;
  // ... split: the CPU optimizer runs while compute and comm are idle; a PCIe copy runs while compute,
  // comm and the CPU optimizer are idle (the two add up to exposed_transfer_ns)
  int64_t exposed_cpu_optimizer_ns = 0;
  int64_t exposed_copies_ns = 0;
  // the CPU queue's busy time (the CPU optimizer: its updates and commits) during which the compute
  // queue is busy too: the part of the CPU pass that forward/backward and the GPU optimizer hide
  int64_t cpu_overlapped_ns = 0;
  // cpu_overlapped_ns / the CPU queue's busy time; 0 without CPU work
  double cpu_overlap_fraction() const {
    const int64_t cpu = busy_ns[size_t(core::Queue::kCpu)];
    return cpu > 0 ? double(cpu_overlapped_ns) / double(cpu) : 0.0;
  }
};

// A step whose tail is carried into the next one (core::StepConfig::carry_tail; docs/ARCHITECTURE.md,
// "Carrying the optimizer tail into the next step"): the next step begins `period_ns` after this one
// (the step's time, what tokens/s counts) while this step's carried ops may still run, and `ops` holds
// the next step's intervals from this step's start (its forward is what hides this step's tail).
struct NextStep {
  int64_t period_ns = 0;
  std::vector<OpInterval> ops;  // ops[i].op == i, one per plan op
};

// Derives the totals of a timeline from its per-op intervals (ops[i].op == i, one per plan op). With
// `next` (a carried tail): step_ns is the period, exposed_ns the period's time without compute (the
// next step's included), and the tail's overlap and exposure count the next step's GPU work as hiding
// it. Throws core::InputError when the intervals do not match the plan.
StepTimeline summarize_timeline(const core::StepPlan& plan, std::vector<OpInterval> ops,
                                const NextStep* next = nullptr);

}  // namespace tf::backend
