// Functional simulation: the ZeRO + Twin-Flow optimizer data path run for real on N simulated ranks
// in one process (in-process collectives, CPU kernels for both segments), and a plain single-process
// training loop to hold it to. Same workload, same bits, whatever the world size, stage or ratio.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/checkpoint.h"
#include "core/model.h"
#include "core/optim/dtype.h"
#include "core/optim/optimizer.h"
#include "core/settings.h"
#include "core/step.h"
#include "core/step_decision.h"

namespace tf::backend::sim {

// Checkpoints of a functional run (docs/ARCHITECTURE.md, "Checkpoints"): one core::CheckpointWriter per
// simulated rank, each saving its whole shard on its own thread, the ranks joined by an AND barrier.
struct FunctionalCheckpoints {
  std::filesystem::path dir;     // where saves go (step-N/); empty: none
  int64_t every_steps = 0;       // save after every N steps (core::checkpoint_due) and after the last one
  int keep = 0;                  // complete checkpoints kept (0: every one)
  std::filesystem::path resume;  // a checkpoint (core::resolve_checkpoint's) to continue from; empty: from step 1
  std::string scenario_text, ds_config_text;  // recorded in every manifest
  // Asked after every step but the last: true ends the run there, after a synchronous save when `dir`
  // is set (what SIGTERM/SIGINT ask for).
  std::function<bool()> stop_requested;
};

struct FunctionalConfig {
  int world = 1;
  int stage = 3;
  double ratio = 0;  // CPU share of every rank's shard
  int steps = 3;
  int micro_shards = 8;                         // the global batch is always cut into this many micro-shards;
                                                // world must divide it (batch-invariant reduction)
  core::DType grad_dtype = core::DType::kBF16;  // bf16 (bf16 training) or fp16 (fp16 training)
  core::OptimizerKind kind = core::OptimizerKind::kAdamW;
  core::HyperParams hp = core::default_hyper_params(core::OptimizerKind::kAdamW);
  // The lr of each optimizer step (core::lr_at); its base_lr is hp.lr (core::make_step_policy copies it).
  core::LrSchedule schedule;
  double clip = 1.0;  // max global L2 norm; 0: off
  // fp16: the dynamic loss scale, run exactly as the engine runs it (halved on an overflow, not below
  // min_scale; doubled after `window` clean steps). bf16: 1, never updated (an overflow stops).
  core::LossScaler loss_scaler{1.0, 0, 1.0, 0};
  int overflow_at_step = -1;  // fp16: this step's gradient holds an Inf (1-based), -1: none
  // Speculative CPU updates (core/speculation.h; StepConfig::speculation_bytes): 0 off; kSpeculationMax
  // every eligible layer (no host memory limit here). The bits do not depend on it.
  int64_t speculation_bytes = core::kSpeculationMax;
  // Carry each step's CPU-side tail into the next step (core::StepConfig::carry_tail): the carried ops run
  // as late as the plan allows (when a later op waits for them, or at a drain: a checkpoint, the end).
  // The bits do not depend on it.
  bool carry_tail = true;
  // The speculated CPU passes' order (core::StepConfig::cpu_order; default: arrival order). The bits do
  // not depend on it.
  core::CpuPassOrder cpu_order;
  // The CPU passes after the norm with staging rings (core::StepConfig::ring_forward_order). The bits do not
  // depend on it.
  bool ring_forward_order = true;
  uint64_t seed = 1;
  // Where the per-micro-shard gradients come from:
  //   kSynthetic: workload_gradient below (initial weights core::synthetic_initial_weight);
  //   kDecoder:   the CPU reference decoder (backends/reference/decoder_ref.h, float, round_like_gpu) on
  //               the gathered bf16 weights and the tokens of micro-shard k (core::TokenSource, `micro_batch`
  //               samples of the model's seq), rounded to the grad dtype; initial weights core::init_weights.
  core::WorkloadType workload = core::WorkloadType::kSynthetic;
  int64_t micro_batch = 1;     // kDecoder: samples per micro-shard
  std::filesystem::path data;  // kDecoder: the token file; empty: the built-in stream
  // Slots per host staging ring (core::StepConfig::staging_slots); core::kUnboundedStaging: one per CPU
  // layer (full-size staging, the schedule without ring-reuse dependencies); core::kStagingAuto: the
  // functional run knows no host memory, so full-size (core::resolve_staging_slots).
  int staging_slots = core::kStagingSlots;
  // run_functional only: saves, and a resume (then `steps` is still the total: the run trains steps
  // checkpoint + 1 .. steps). The checkpoint must be of this model and optimizer, with this seed and
  // micro_shards (core::check_resume); any world, stage and ratio can load it.
  FunctionalCheckpoints checkpoints;
};

// The functional configuration of a run's settings (core::resolve_settings): its world, stage,
// optimizer, clipping, gradient dtype, loss scaler and seed, at `ratio`, for `steps` steps, with the
// global batch cut into `micro_shards` (world must divide it); a decoder workload (kDecoder, or kAuto
// on a decoder) brings its micro-batch and token file, anything else runs the synthetic workload.
FunctionalConfig functional_config(const core::RunSettings& s, double ratio, int steps, int micro_shards);

struct FunctionalResult {
  std::vector<float> master;  // final fp32 master weights, model order, real parameters only
  // The optimizer's final states (core::checkpoint_arrays' order after "master"), model order.
  std::vector<std::vector<float>> states;
  core::LossScaler loss_scaler;        // after the last step
  int64_t optimizer_step = 0;          // updates applied (skipped steps excluded)
  int first_step = 1;                  // the first step trained (after a resume: the checkpoint's step + 1)
  int last_step = 0;                   // the last (cfg.steps, or where a stop request ended the run)
  bool stopped = false;                // a stop request ended the run before cfg.steps
  std::vector<core::SaveStats> saves;  // rank 0's figures of every checkpoint written, in order
  // Per step trained (first_step .. last_step):
  std::vector<double> grad_norms;        // before clipping, unscaled; inf on overflow
  std::vector<int> skipped_steps;        // 1-based steps skipped on overflow
  std::vector<double> loss_scales;       // loss scale used at each step
  std::vector<double> lrs;               // the lr of each step (core::StepDecision::lr; a skipped step's too)
  std::vector<double> losses;            // kDecoder: per step, the mean loss over the micro-shards (unscaled)
  std::vector<int> speculated_steps;     // 1-based steps that ran their speculative CPU updates
  std::vector<int> failed_speculations;  // ... of those, the steps whose speculation did not hold (redone or skipped)
  int64_t d2h_bytes = 0, h2d_bytes = 0;  // what crossed the simulated PCIe (whole run, all ranks)
  // Carried ops (FunctionalConfig::carry_tail) that ran after the next step's first op had run (whole run).
  int64_t carried_ops_run_late = 0;
  // The ops each queue executed in the last step, per rank (run_functional only): the same
  // vocabulary as the cost-only simulator's executed_queue_order().
  std::vector<QueueOrder> queue_order;
};

// The gradient every implementation computes: a counter-based function of (seed, element, step,
// micro-shard) mixed with the current bf16 weight, times the loss scale, rounded to the grad dtype.
float workload_gradient(uint64_t seed, int64_t element, int step, int micro_shard, float weight_bf16,
                        double loss_scale);

// The sharded run, driven op by op by the core's step plan (core::plan_step, one micro-batch per
// micro-shard a rank owns): all-gather, backward (the workload's per-micro-shard gradients),
// reduce-scatter (fp32 accumulation in micro-shard order k = micro_step * world + rank), D2H of the
// CPU segment's gradients, canonical statistics folded over the global tile order, clipping, fp16
// overflow skip, the fused optimizer on both segments (a speculated layer's speculative update into its
// spare state slot and its commit: adopt or redo, core/speculation.h), and H2D of the updated bf16
// copies.
FunctionalResult run_functional(const core::ModelDesc& model, const FunctionalConfig& cfg);

// The same training written as one loop over whole layers: no ranks, no split, no copies. It always
// trains steps 1..cfg.steps and ignores cfg.checkpoints (it is what a resumed run must equal).
FunctionalResult run_reference_loop(const core::ModelDesc& model, const FunctionalConfig& cfg);

}  // namespace tf::backend::sim
