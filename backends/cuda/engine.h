// The real backend's engine: one rank of ZeRO (stage 1, 2 or 3) + Twin-Flow training on one GPU, executing the
// core's step plan on CUDA streams (compute, comm, d2h, h2d) and the CPU optimizer's threads (cpu),
// with NCCL collectives and pinned host memory for the CPU segment. Public header: no CUDA include.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_segment.h"
#include "core/alloc_plan.h"
#include "core/checkpoint.h"
#include "core/memory.h"
#include "core/model.h"
#include "core/partition.h"
#include "core/settings.h"
#include "core/step.h"
#include "core/step_decision.h"
#include "core/training_checkpoint.h"
#include "core/twinflow.h"

namespace tf::backend::cuda {

// The NCCL unique id (128 bytes), exchanged by the launcher's rendezvous.
using NcclId = std::array<char, 128>;
// A fresh id (rank 0 calls this and shares it). Throws core::RuntimeFailure if NCCL fails.
NcclId make_nccl_id();

// Page-locked host memory (cudaHostAlloc) for a checkpoint's staging arrays, so the snapshot's
// device-to-host copies run at PCIe speed; where pinning fails, page-aligned heap memory (slower
// copies, nothing else changes).
core::HostAllocator pinned_host_allocator();

// How the rank's threads wait for the GPU (cudaEventSynchronize, cudaStreamSynchronize): the device's
// scheduling flag. kAuto is CUDA's heuristic (one context per process on a host of more CPUs than
// contexts: spin), which makes each waiting thread take a whole core from the CPU optimizer's workers:
// they run below the issuing threads (backends/cpu/cpu_tuning.h pool_nice, pool_idle), so a spinning
// waiter is never preempted. kBlock, the default, sleeps (docs/ARCHITECTURE.md, "CPU path").
enum class CudaSync { kAuto, kSpin, kYield, kBlock };
// "auto", "spin", "yield", "block"; parse_cuda_sync throws core::InputError naming `option` and the values.
const char* cuda_sync_name(CudaSync s);
CudaSync parse_cuda_sync(const std::string& text, const std::string& option);

struct EngineConfig {
  // What to train, as core::resolve_settings maps a scenario: the model, world, partition (ZeRO stage),
  // step configuration and policy, loss scaler, workload (synthetic, mlp or decoder), seed, and a
  // decoder's token file and initial weights.
  core::RunSettings settings;
  int rank = 0;
  int device = 0;           // CUDA device index (the rank's LOCAL_RANK)
  NcclId nccl_id{};         // the same on every rank (ignored for world 1)
  double ratio = 0;         // CPU share of the rank's shard
  size_t cpu_threads = 0;   // CPU optimizer threads; 0: one per CPU of cpu_cpus
  bool pin_threads = true;  // bind CPU optimizer threads to CPUs
  // The CPU optimizer's tuning over backends/cpu/cpu_tuning.h's defaults (cpu::apply_tuning_spec's spec;
  // its huge= key does not reach the engine's host buffers, which follow cpu_tuning.h).
  std::string cpu_tuning = "default";
  CudaSync cuda_sync = CudaSync::kBlock;  // how its threads wait for the GPU (set on the device at start)
  std::vector<int> cpu_cpus;              // the rank's CPUs (cpu::rank_cpu_share's worker_cpus); empty: this process's
  bool pin_memory = true;                 // page-lock the CPU segment (else pageable, with a warning)
  int overflow_at_step = -1;              // synthetic workload: element 0 of micro-shard 0 is +Inf at this step (tests)
  // Memory the rank may use: the plan is checked against these before anything is allocated.
  int64_t gpu_bytes_limit = 0;                   // 0: the device's total memory
  int64_t host_bytes_limit = 0;                  // what this rank may pin; 0: the machine's memory less
                                                 // training.host_reserve, as one rank
  std::function<void(const std::string&)> warn;  // one-line warnings (pageable fallback, ...); default stderr
  // Before the optimizer's state is written (every host buffer of the CPU segment still zero): one warm-up
  // and this many timed CPU passes over the rank's own segment (cpu::CpuSegment::probe_pass on the
  // measurements' values, then every byte zeroed again: nothing of the run changes),
  // each between two calls of cpu_probe_barrier (every rank of the run at once), so that the run knows the CPU
  // rate of the pages it got before its first step (run --pages-probe; docs/ARCHITECTURE.md, "Validation").
  int cpu_probe_passes = 0;
  std::function<void()> cpu_probe_barrier;  // empty: no other rank to wait for
};

// EngineConfig::cpu_probe_passes' measurement: the CPU segment's elements and, per timed pass, this rank's
// own pass and the time from the barrier before it to the barrier after it (every rank done: where the ranks
// share a host, the node's pass).
struct CpuPassProbe {
  int64_t elems = 0;
  std::vector<double> own_s, all_s;
};

// Wall seconds of the engine's set-up (Engine::create), by phase (`run` prints them): on OPT-13B on one H200 the
// initial weights took 72 of 77 s, the host memory's first touch and page-locking 2.5 s each.
struct SetupTimes {
  double plan_s = 0;            // the plan, the memory checks, a decoder's init.from read
  double gpu_s = 0;             // the GPU buffers, the descriptors and the optimizer's initial state on the GPU
  double host_touch_s = 0;      // the CPU segment's host memory first touched by the CPU optimizer's threads
  double host_pin_s = 0;        // ... page-locked (cudaHostRegister)
  double weights_s = 0;         // the initial weights (both segments) and the replica, of which
  double weights_host_s = 0;    // ... a decoder's values drawn (or read) on the host, the CPU segment's written
  double weights_upload_s = 0;  // ... a decoder's values and bf16 copies uploaded (pageable cudaMemcpy)
  double total_s = 0;           // everything, the rest included (queues, the workload, NCCL, --pages-probe)
};

struct StepReport {
  int step = 0;                          // 1-based
  double loss = 0;                       // mean over this rank's micro-batches (NaN: the workload has no loss)
  double grad_norm = 0;                  // global L2 norm of the unscaled gradient (inf on an fp16 overflow)
  double loss_scale = 1;                 // the scale this step used
  double lr = 0;                         // the lr of this step's update (core::StepDecision::lr)
  bool skipped = false;                  // fp16 overflow: nothing updated
  bool clipped = false;                  // the clip coefficient was below 1 (core::StepDecision::clipped)
  bool speculated = false;               // the CPU optimizer's speculative updates ran (core/speculation.h)
  bool speculation_held = false;         // ... and the decided scalars were the speculated ones
  StepTimeline timeline;                 // per-op intervals (ns from the step's start) and totals
  int64_t d2h_bytes = 0, h2d_bytes = 0;  // PCIe traffic of the step
  core::QueueOrder issued;               // op ids in the order each queue's issuer issued them
  // The host's side of the step boundary, ns (-1: not known): the main thread's begin of the step (its
  // workload's batch sampled, the start event queued and completed: the previous body's GPU work drained), the
  // part of it spent waiting for that event, and the host time from the step's body completing to the next
  // step's start (the report, the caller's work between steps, the next begin).
  struct HostTimes {
    int64_t begin_ns = -1, begin_wait_ns = -1, body_done_to_next_start_ns = -1;
    // The step's start event seen complete, on the host's steady clock (ns since its epoch): where a sample taken
    // on that clock (GPU telemetry) falls on the step's timeline, to within the event wait's wake-up.
    int64_t t0_steady_ns = -1;
  } host;
};

struct EngineMemory {
  core::AllocPlan plan;                     // every buffer of this rank (core::plan_allocations)
  core::RankMemory planned;                 // the plan summed by kind (checked against the limits before allocating)
  core::StagingChoice staging;              // how the host staging was chosen (core::choose_staging)
  std::vector<core::BufferSpec> allocated;  // what the engine and its workload allocated, by name, in order
  int64_t gpu_allocated = 0;                // their GPU bytes
  int64_t host_pinned = 0;                  // page-locked host bytes (0 when pinning failed)
  int64_t host_pageable = 0;                // host bytes left pageable
  int64_t gpu_used_by_process = 0;          // device total - free after set-up (context and libraries included)
};

// One rank's engine. It executes core::plan_step's plan as it is: every dependency it honours is in the
// plan (buffer reuse included), every queue issues in core::plan_queue_order, and it allocates exactly
// core::plan_allocations' buffers.
class Engine {
 public:
  virtual ~Engine() = default;
  // Checks the plan's memory against the limits (InputError naming the smallest ratio that fits) and
  // reads a decoder's init.from (InputError naming a missing or misshapen tensor), then allocates,
  // initialises the weights (the synthetic workload's, the MLP's scaled ones, a decoder's GPT-2 init
  // or its file) and joins the NCCL communicator. Throws core::InputError for bad input, core::RuntimeFailure for CUDA
  // / NCCL failures (out of memory named as such).
  static std::unique_ptr<Engine> create(EngineConfig cfg);

  virtual const Capabilities& caps() const = 0;
  virtual const core::StepPlan& plan() const = 0;
  virtual const core::Partition& partition() const = 0;
  virtual const core::TwinFlowSplit& split() const = 0;
  virtual const EngineMemory& memory() const = 0;
  // Empty (no passes) unless EngineConfig::cpu_probe_passes asked for them.
  virtual const CpuPassProbe& cpu_pass_probe() const = 0;
  virtual const SetupTimes& setup_times() const = 0;
  // One training step: the plan's ops on the queues, the step decision, the timeline. Without a carried
  // tail (core::carries(plan()) false) it returns once every op is done, with its own report. With one
  // (docs/ARCHITECTURE.md, "Carrying the optimizer tail into the next step") step t returns once its ops
  // that are not carried are done and step t - 1's carried ops too, while step t's carried ops run on; a
  // step's report is complete only then, so it returns step t - 1's (its step_ns is the period from
  // t - 1's start to t's; the tail's overlap counts t's GPU work): empty after the first step and after
  // a drain point whose report drain() has not returned yet. Every step's report comes out exactly
  // once, in step order, from step() or drain(). A failure of a carried op of step t - 1 is thrown here
  // (or by drain()), naming step t - 1 and the op.
  virtual std::optional<StepReport> step() = 0;
  // The drain point: runs the pending carried tail to its end and returns its step's report (the tail
  // timed standalone, its step_ns the end of its last op), or a report an internal drain point (below)
  // kept; empty when there is none (always without a carried tail). Every reader of the state between
  // steps drains first: master_weights, cpu_layer_state, last_gradients, snapshot_optimizer,
  // restore_optimizer, and the destructor.
  virtual std::optional<StepReport> drain() = 0;
  // This rank's fp32 master weights: (model-order element index, value) for every real element the
  // rank owns, in shard order.
  virtual std::vector<std::pair<int64_t, float>> master_weights() = 0;
  // The CPU segment's fp32 master and states of `layer` in the state slot that holds them now (a
  // speculated layer has two and flips between them: docs/ARCHITECTURE.md, "Speculation"), pointers to
  // the layer's first CPU element in pinned host memory (split().cpu gives its count): what a checkpoint
  // reads, or restores into, between steps. Null pointers for a layer without a CPU part.
  virtual cpu::LayerState cpu_layer_state(size_t layer) = 0;
  // Steps that ran their speculative CPU updates, and those of them whose speculation did not hold.
  virtual int64_t speculated_steps() const = 0;
  virtual int64_t failed_speculations() const = 0;
  // This rank's reduced gradients of the last step as the optimizers read them (the grad dtype's
  // values), divided by the loss scale they carried: the same (element, value) pairs. Valid after
  // step() until the next step overwrites them (a drain point: the carried D2Hs read them).
  virtual std::vector<std::pair<int64_t, float>> last_gradients() = 0;
  // ---- checkpoints (docs/ARCHITECTURE.md, "Checkpoints"); between steps only ---------------------
  // Where training stands: steps done, updates applied, the loss scaler. Final when step() returns (the
  // step's decision is made before it returns), so it needs no drain.
  virtual core::TrainingPosition position() const = 0;
  // Copies this rank's optimizer arrays (core::checkpoint_arrays' order: master, then the states) into
  // `arrays`, each (shard elems) fp32 in shard order: the GPU segment's device-to-host copy into
  // [0, gpu_elems), the CPU segment's memcpy into [gpu_elems, elems). Returns when all are copied.
  virtual void snapshot_optimizer(std::span<const std::span<float>> arrays) = 0;
  // The reverse, from a checkpoint read at this rank's layout: both segments' arrays (padding takes the
  // optimizer's initial state), the bf16 copy rounded from master (as every update writes it), and the
  // position: the next step() is position.step + 1.
  virtual void restore_optimizer(std::span<const std::vector<float>> arrays, const core::TrainingPosition& pos) = 0;
  // GPU memory in use on this rank's device now (cudaMemGetInfo: total - free), the CUDA context,
  // NCCL's and cuBLAS's own allocations included: what the plan's total (with its context estimate)
  // predicts once a step has run.
  virtual int64_t gpu_bytes_in_use() = 0;
};

}  // namespace tf::backend::cuda
