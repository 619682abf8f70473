// Scenarios: model + cluster + training + optimizer + ZeRO, from YAML or a DeepSpeed ds_config, validated.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/hardware.h"
#include "core/model.h"
#include "core/optim/optimizer.h"

namespace tf::core {

enum class Precision : uint8_t { kBF16, kFP16, kFP32 };
std::string_view precision_name(Precision p);

enum class OffloadDevice : uint8_t { kNone, kCpu };

// fp16 loss scaling, DeepSpeed's fp16 section (defaults as in deepspeed/runtime/constants.py).
struct LossScaleConfig {
  double loss_scale = 0;             // 0: dynamic; > 0: this static scale
  int initial_scale_power = 16;      // dynamic: start at 2^power
  int64_t loss_scale_window = 1000;  // dynamic: steps without overflow before the scale doubles
  int hysteresis = 2;                // dynamic: overflows tolerated before the scale halves
  double min_loss_scale = 1;
  bool dynamic() const { return loss_scale == 0; }
  double initial_loss_scale() const { return dynamic() ? std::ldexp(1.0, initial_scale_power) : loss_scale; }
};

struct TrainingConfig {
  int64_t micro_batch = 1;  // samples per GPU per micro-step
  int64_t grad_accum = 1;
  int64_t steps = 1;
  Precision precision = Precision::kBF16;
  LossScaleConfig loss_scaling;  // used when precision is fp16
  double gradient_clipping = 0;  // max global L2 norm; 0: off
  bool activation_checkpointing = false;
  bool prescale_gradients = false;  // divide by world size before the reduction (DeepSpeed)
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  HyperParams hp = default_hyper_params(OptimizerKind::kAdamW);
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  double ratio = 1.0;       // share of each rank's optimizer partition on the CPU (DeepSpeed default 1)
  bool pin_memory = false;  // DeepSpeed's default
};

struct ZeroConfig {
  int stage = 3;
  OffloadOptimizerConfig offload_optimizer;
  int64_t sub_group_size = 1'000'000'000;  // DeepSpeed's default
};

struct ClusterConfig {
  std::string profile;                 // as written: a name or a path
  std::filesystem::path profile_file;  // resolved file; empty for a built-in profile
  HardwareProfile hardware;
  int nodes = 1;
  int gpus_per_node = 1;
  int cpu_cores_per_gpu = 1;
  int world_size() const { return nodes * gpus_per_node; }
};

// What `twinflow run` trains (the simulator needs only the model's shape).
enum class WorkloadType : uint8_t {
  kAuto,       // mlp for an MLP model, synthetic for a decoder (whose GPU workload is not written yet)
  kSynthetic,  // counter-based gradients: bitwise comparable with the functional simulator
  kMlp,        // the toy MLP with cuBLAS, on generated data
};
std::string_view workload_type_name(WorkloadType w);

struct WorkloadConfig {
  WorkloadType type = WorkloadType::kAuto;
  uint64_t seed = 1;  // data, initial weights and synthetic gradients
  // The workload `run` uses: kAuto resolved against the model type.
  WorkloadType resolved(ModelType m) const {
    return type != WorkloadType::kAuto ? type : (m == ModelType::kMlp ? WorkloadType::kMlp : WorkloadType::kSynthetic);
  }
};

// A published result the scenario reproduces.
struct ReferenceResult {
  double speedup_vs_full_offload = 0;
  std::string source;
};

struct Scenario {
  std::string name;
  std::string description;
  std::filesystem::path file;  // empty for a scenario parsed from text
  ModelSpec model;             // normalized and valid
  ClusterConfig cluster;
  TrainingConfig training;
  OptimizerConfig optimizer;
  ZeroConfig zero;
  std::optional<ReferenceResult> reference;
  WorkloadConfig workload;
  // Set when a ds_config supplied the training, optimizer and ZeRO settings.
  bool from_ds_config = false;
  std::filesystem::path ds_config_file;  // empty when embedded or absent
  // "FILE:LINE:COL: key.path: unknown key, ignored", one per unknown key (the hardware profile's
  // and the ds_config file's included).
  std::vector<std::string> warnings;

  // The share of the optimizer on the CPU: ratio when offloading to the CPU, else 0.
  double cpu_ratio() const {
    return zero.offload_optimizer.device == OffloadDevice::kCpu ? zero.offload_optimizer.ratio : 0.0;
  }
  int64_t global_batch() const { return training.micro_batch * training.grad_accum * cluster.world_size(); }
};

// Parse and validate. Errors throw InputError "FILE:LINE:COL: key.path: what was wrong; allowed ...".
// Relative paths inside (cluster.profile, ds_config) resolve against the scenario file's directory;
// for text, against base_dir (empty: only built-in profiles, no relative files).
Scenario load_scenario(const std::filesystem::path& file);
Scenario parse_scenario(std::string_view yaml_text, const std::filesystem::path& base_dir,
                        const std::string& display_name = "<scenario>");

// The default scenario (OPT-30B on a DGX-H100, scenarios/opt-30b-dgx-h100.yaml), compiled in.
std::string_view default_scenario_text();
Scenario load_default_scenario();

}  // namespace tf::core
