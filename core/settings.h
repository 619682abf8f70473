// Scenario -> the settings one training step runs with: the one mapping `run`, `simulate`, `validate`
// and the functional simulator share (the step's configuration and policy, the loss scaler, the
// memory options, the partition).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "core/alloc_plan.h"
#include "core/model.h"
#include "core/optim/dtype.h"
#include "core/partition.h"
#include "core/scenario.h"
#include "core/step.h"
#include "core/step_decision.h"

namespace tf::core {

// What a scenario or command asks of the speculated CPU passes' order (core::CpuPassOrder).
struct CpuOrderSetting {
  bool automatic = false;  // the cost model chooses (backends/sim cpu_order.h) before the plan is made
  CpuPassOrder order;      // otherwise this one (default: every pass in arrival order, the order before it)
  bool operator==(const CpuOrderSetting&) const = default;
};

// What a command changes of the scenario's settings.
struct SettingsOverrides {
  std::optional<int> world = {};              // ranks: as launched (run), simulated (simulate --world)
  std::optional<int> grad_accum = {};         // micro-batches per rank per step (run --grad-accum, a measured sweep)
  std::optional<WorkloadType> workload = {};  // what `run` trains (run --workload)
  // Slots per host staging ring (StepConfig::staging_slots; kUnboundedStaging: full-size staging;
  // kStagingAuto, the default: full-size where the host holds it, core::resolve_staging_slots):
  // `run`/`simulate --staging-slots`.
  std::optional<int> staging_slots = {};
  // What set world and grad_accum, as errors name it: "--world", "WORLD_SIZE", "run.json: grad_accum".
  std::string world_from = "the world override";
  std::string grad_accum_from = "the grad_accum override";
  // training.speculation (run/simulate --speculation): bytes, kSpeculationMax or kSpeculationAuto
  std::optional<int64_t> speculation_bytes = {};
  // How many CPU layers speculate at most (StepConfig::speculation_layers): the cost model's choice for
  // `speculation: auto`, once made (backends/sim speculation_budget.h); it clears RunSettings::speculation_auto
  std::optional<int> speculation_layers = {};
  // training.carry_tail (run/simulate --carry-tail on|off)
  std::optional<bool> carry_tail = {};
  // training.cpu_order (run/simulate --cpu-order): the cost model's choice (`auto`) or this order
  std::optional<CpuOrderSetting> cpu_order = {};
  // training.ring_order (run/simulate --ring-order forward|backward): StepConfig::ring_forward_order
  std::optional<bool> ring_forward_order = {};
  // CPU optimizer threads per rank (run --threads, a measured run's threads); default the scenario's
  // cluster.cpu_cores_per_gpu
  std::optional<int> cpu_threads = {};
  // Ranks that share one node (host): as launched (run: LOCAL_WORLD_SIZE); default core::ranks_per_node
  std::optional<int> ranks_per_node = {};
};

struct RunSettings {
  ModelDesc model;
  int world = 1;
  int ranks_per_node = 1;      // ranks sharing one node: the override (as launched), else core::ranks_per_node
  PartitionOptions partition;  // the scenario's ZeRO stage, `world`, 2048-element alignment (the statistics tile)
  StepPolicy policy;           // optimizer, hyper-parameters, lr schedule, clipping, overflow policy
  StepConfig step;             // micro-batch, accumulation, dtypes, what the optimizers wait for; its
                               // staging_slots may be kStagingAuto (core::plan_rank resolves it)
  // training.cpu_order auto: step.cpu_order (today's order meanwhile) is for the cost model to choose,
  // which `run` and the cost-only simulator do before planning (backends/sim cpu_order.h); an executor
  // that plans without choosing runs today's order
  bool cpu_order_auto = false;
  // training.speculation auto: step.speculation_layers (every eligible layer meanwhile, within
  // step.speculation_bytes = kSpeculationMax) is for the cost model to choose, which `run` and the cost-only
  // simulator do before planning (backends/sim speculation_budget.h); an executor that plans without
  // choosing speculates every eligible layer the host holds
  bool speculation_auto = false;
  LossScaler loss_scaler;  // fp16: the scenario's initial scale and dynamics; else 1 and fixed
  WorkloadType workload = WorkloadType::kSynthetic;  // what `run` trains: the scenario's, resolved against the model
  uint64_t seed = 1;                                 // data, initial weights, synthetic gradients
  std::filesystem::path data_train;                  // the decoder's token file (validated); empty: the built-in stream
  std::filesystem::path init_from;  // the decoder's Hugging Face weights; empty: GPT-2's init from `seed`
  int cpu_threads = 1;              // CPU optimizer threads per rank (cpu_cores_per_gpu, or the override)
  // GPU memory no buffer names, from the scenario's profile at `world` ranks (core::unnamed_gpu_memory)
  UnnamedGpuMemory unnamed_gpu;
  MemoryMargin gpu_headroom = kDefaultGpuHeadroom;  // training.gpu_headroom
  MemoryMargin host_reserve = kDefaultHostReserve;  // training.host_reserve
  // The allocation plan's options: `step`, `workload` (the simulator counts kAuto instead) and `unnamed_gpu`.
  MemoryOptions memory_options() const {
    MemoryOptions m;
    m.step = step;
    m.workload = workload;
    m.unnamed = unnamed_gpu;
    return m;
  }
};

// The ranks that share one node at `world` ranks: the scenario's GPUs per node at its own world, else
// its profile's (a command that changes the world fills nodes of the profile). A launched run knows better
// (SettingsOverrides::ranks_per_node).
int ranks_per_node(const Scenario& s, int world);

// Throws core::InputError for an override out of range (world outside [1, kMaxWorld], grad_accum
// outside [1, kMaxBatch], staging_slots outside [0, 1024], ranks_per_node outside [1, world]), naming what
// set it, and for an MLP workload for a decoder or a decoder workload for an MLP.
RunSettings resolve_settings(const Scenario& sc, const SettingsOverrides& overrides = {});

// Throws core::InputError when simulating every rank of `sc` with `overrides` is too large
// (core::simulation_size_issue), naming what set the sizes: the overrides (world_from, grad_accum_from)
// or the scenario's keys. The simulators call it; `run` plans one rank and does not.
void check_simulation_size(const Scenario& sc, const SettingsOverrides& overrides);

// The dtype of the gradients a precision trains with.
DType grad_dtype_of(Precision p);

}  // namespace tf::core
