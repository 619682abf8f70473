// Scenarios: model + cluster + training + optimizer + ZeRO, from YAML or a DeepSpeed ds_config, validated.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/hardware.h"
#include "core/model.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer.h"

namespace tf::core {

enum class Precision : uint8_t { kBF16, kFP16, kFP32 };
std::string_view precision_name(Precision p);

enum class OffloadDevice : uint8_t { kNone, kCpu };
// DeepSpeed's name of the device: "none", "cpu".
inline std::string_view offload_device_name(OffloadDevice d) { return d == OffloadDevice::kCpu ? "cpu" : "none"; }

// The DeepSpeed whose config semantics and defaults a ds_config is read with (README: "DeepSpeed
// compatibility"). Its one changed default that matters here: gradient_clipping is 1.0 since PR #8068.
inline constexpr std::string_view kDeepSpeedCompatibility =
    "DeepSpeed 0.19 as of June 2026 (master after v0.19.1, with PR #8068)";
// deepspeed/runtime/constants.py GRADIENT_CLIPPING_DEFAULT (1.0 since PR #8068; 0, no clipping, before).
inline constexpr double kDeepSpeedGradientClippingDefault = 1.0;

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

// Memory kept free (training.gpu_headroom, training.host_reserve): the larger of `bytes` and `fraction` of
// the memory it is kept from (core::margin_bytes). A scenario gives one of the two; the defaults give both.
struct MemoryMargin {
  int64_t bytes = 0;
  double fraction = 0;  // [0, 1)
  bool operator==(const MemoryMargin&) const = default;
};
// training.gpu_headroom's default, max(1 GiB, 1% of the GPU): what `ratio: auto` keeps free of the GPU beyond
// the allocation plan (docs/ARCHITECTURE.md, "Choosing the ratio").
inline constexpr MemoryMargin kDefaultGpuHeadroom{int64_t(1) << 30, 0.01};
// training.host_reserve's default, max(8 GiB, 10% of the host): what no rank of a host pins (ibid.).
inline constexpr MemoryMargin kDefaultHostReserve{int64_t(8) << 30, 0.10};

struct TrainingConfig {
  int64_t micro_batch = 1;  // samples per GPU per micro-step
  int64_t grad_accum = 1;
  int64_t steps = 1;
  Precision precision = Precision::kBF16;
  LossScaleConfig loss_scaling;  // used when precision is fp16
  double gradient_clipping = 0;  // max global L2 norm; 0: off (the native schema's default; a
                                 // ds_config's is kDeepSpeedGradientClippingDefault)
  bool activation_checkpointing = false;
  bool prescale_gradients = false;  // divide by world size before the reduction (DeepSpeed)
  // Twin-Flow's speculative CPU updates (docs/ARCHITECTURE.md, "Speculation"): host bytes per rank for the
  // speculated layers' second state slot; 0 off; kSpeculationMax `max` (what the host has beyond the plan);
  // nullopt `auto` (the cost model's choice of how many layers, within `max`).
  std::optional<int64_t> speculation_bytes;
  // GPU memory `ratio: auto` keeps free beyond the plan (a ratio fits when plan + headroom <= the GPU); an
  // explicit ratio is checked without it and warned about when it eats into it.
  MemoryMargin gpu_headroom = kDefaultGpuHeadroom;
  // Host memory no rank pins, of the whole host (the OS, the process's pageable memory, other processes);
  // the rest is shared equally by the host's ranks (core::pinnable_host_bytes_per_rank).
  MemoryMargin host_reserve = kDefaultHostReserve;
  // Carry each step's CPU-side optimizer tail into the next step (docs/ARCHITECTURE.md, "Carrying the
  // optimizer tail into the next step"; StepConfig::carry_tail). On by default: the CUDA engine and both
  // simulators carry wherever the plan has a tail (core::carries: a CPU segment), so `simulate` and
  // `ratio: auto` predict the schedule `run` runs. The bits do not depend on it.
  bool carry_tail = true;
  // The speculated CPU layers' pass order (docs/ARCHITECTURE.md, "Order after the norm";
  // StepConfig::cpu_order): `auto`, the default, the cost model's choice before anything runs (backends/sim
  // cpu_order.h: `run`, `simulate` and `ratio: auto` alike), or `arrival`, every pass in the order the
  // gradients land (the order before it). The bits do not depend on it.
  bool cpu_order_auto = true;
  // With host staging rings and clipping or loss scaling (docs/ARCHITECTURE.md, "Carrying the optimizer tail
  // into the next step"; StepConfig::ring_forward_order): `forward`, the default, runs the CPU passes after
  // the norm in forward order once the layers whose gradients landed before it have passed, so the next
  // forward pipelines with the pass; `backward` keeps the order the gradients land (the order before it).
  // The bits do not depend on it.
  bool ring_forward_order = true;
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  HyperParams hp = default_hyper_params(OptimizerKind::kAdamW);
  // The lr of each step (core::lr_at): the scenario's `scheduler` section or the ds_config's; constant
  // (hp.lr) without one. Its base_lr is hp.lr.
  LrSchedule schedule;
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  double ratio = 1.0;  // share of each rank's optimizer partition on the CPU (DeepSpeed default 1)
  // `ratio: auto`: the ratio with the shortest predicted step among those that fit in memory, chosen by
  // `run` and `simulate` before anything runs (backends/sim/auto_ratio.h); `ratio` is unused until then.
  bool ratio_auto = false;
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
  kAuto,       // the model trained for real: mlp for an MLP model, decoder for a decoder
  kSynthetic,  // counter-based gradients: bitwise comparable with the functional simulator
  kMlp,        // the toy MLP with cuBLAS, on generated data
  kDecoder,    // the GPT-2/OPT decoder of docs/decoder.md on token data (backends/cuda/workload_decoder.cu)
};
std::string_view workload_type_name(WorkloadType w);

struct WorkloadConfig {
  WorkloadType type = WorkloadType::kAuto;
  uint64_t seed = 1;  // data, initial weights and synthetic gradients
  // The workload `run` uses: kAuto resolved against the model type.
  WorkloadType resolved(ModelType m) const {
    return type != WorkloadType::kAuto ? type : (m == ModelType::kMlp ? WorkloadType::kMlp : WorkloadType::kDecoder);
  }
};

// A decoder's training tokens (docs/decoder.md, "Data"): `data: {train: PATH}`, a token file validated
// when the scenario is read (core::TokenFile: header, size, every id < vocab, at least seq + 1 tokens).
// Empty: the built-in token stream.
struct DataConfig {
  std::filesystem::path train;  // resolved against the scenario's directory
};

// A decoder's initial weights: `init: {from: FILE.safetensors}` (Hugging Face names, core/hf_names.h),
// or GPT-2's initialisation from the workload seed when empty (core/init.h).
struct InitConfig {
  std::filesystem::path from;  // resolved against the scenario's directory; its tensors are checked when loaded
};

// Checkpoints (docs/ARCHITECTURE.md, "Checkpoints"): `checkpoint: {dir, every_steps, keep}`. DeepSpeed's
// ds_config has no directory or interval (its save_checkpoint takes the directory as an argument), so
// they live in the scenario; the ds_config's `checkpoint` section is read for what maps (ds_config.cpp).
struct CheckpointConfig {
  std::filesystem::path dir;  // resolved against the scenario's directory; empty: no checkpoints
  int64_t every_steps = 0;    // save after every N steps (0: only after the last step, or on SIGTERM/SIGINT)
  int keep = 0;               // complete checkpoints kept, the newest included (0: every one)
};

// A default that decided something the files did not say: the commands print them and write them to
// --json, so a run's settings are never silently someone's default.
struct AppliedDefault {
  std::string key;    // the key path it stands for: "ds_config.gradient_clipping", "training.grad_accum"
  std::string value;  // as it would be written there: "1", "[0.9, 0.999]", "fp32"
  std::string why;    // whose default it is
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
  DataConfig data;  // decoders only
  InitConfig init;  // decoders only
  CheckpointConfig checkpoint;
  // Set when a ds_config supplied the training, optimizer and ZeRO settings.
  bool from_ds_config = false;
  std::filesystem::path ds_config_file;  // empty when embedded or absent
  // "FILE:LINE:COL: key.path: what", e.g. a DeepSpeed key Twin-Flow does not model, a string
  // converted to a number, a value that has no effect (the hardware profile's and the ds_config
  // file's included).
  std::vector<std::string> warnings;
  std::vector<AppliedDefault> applied_defaults;  // in the order they were applied

  // `ratio: auto` with the optimizer offloaded to the CPU: the ratio is still to be chosen.
  bool ratio_auto() const {
    return zero.offload_optimizer.device == OffloadDevice::kCpu && zero.offload_optimizer.ratio_auto;
  }
  // The share of the optimizer on the CPU: ratio when offloading to the CPU, else 0. Throws InputError
  // while the ratio is `auto` (only `run` and `simulate` choose it: backends/sim/auto_ratio.h).
  double cpu_ratio() const {
    if (ratio_auto())
      throw InputError(
          "zero.offload_optimizer.ratio is auto: `twinflow run` and `twinflow simulate` choose it; "
          "give a number in [0, 1] (or --ratio) here");
    return zero.offload_optimizer.device == OffloadDevice::kCpu ? zero.offload_optimizer.ratio : 0.0;
  }
  int64_t global_batch() const { return training.micro_batch * training.grad_accum * cluster.world_size(); }
};

// Bounds on what a scenario may ask for: each names the key it bounds in its error. The simulator
// holds every rank's step plan, whose ops grow with ranks x micro-batches x layers (about 3 KB of
// memory per unit, measured: 2^20 units take ~3 GB and ~20 s), so their product is bounded too; a
// model's parameter count is bounded so that its bytes fit in 64 bits many times over.
inline constexpr int64_t kMaxNodes = int64_t(1) << 12;
inline constexpr int64_t kMaxWorld = int64_t(1) << 16;
inline constexpr int64_t kMaxBatch = int64_t(1) << 20;                // micro_batch and grad_accum each
inline constexpr int64_t kMaxRankLayerMicroSteps = int64_t(1) << 20;  // world x grad_accum x layers
inline constexpr int64_t kMaxParameters = int64_t(1) << 50;

// Why simulating `s` with `world` ranks and `grad_accum` micro-batches (default: the scenario's) is too
// large (world out of [1, kMaxWorld], or world x grad_accum x layers over kMaxRankLayerMicroSteps),
// without the key to change; nothing when it is not. The scenario's own sizes are checked when it is
// parsed; commands that override them go through core::check_simulation_size (core/settings.h).
std::optional<std::string> simulation_size_issue(const Scenario& s, int64_t world,
                                                 std::optional<int64_t> grad_accum = std::nullopt);

// Parse and validate. Errors throw InputError "FILE:LINE:COL: key.path: what was wrong; allowed ...";
// an unknown key in the scenario is an error that suggests the nearest known key. A ds_config
// (a file, read as hjson, or embedded) is read as DeepSpeed (kDeepSpeedCompatibility) reads it:
// its "auto" values come from the scenario's training and optimizer sections, keys it does not
// set from the scenario or from DeepSpeed's defaults (listed in applied_defaults).
// Relative paths inside (cluster.profile, ds_config) resolve against the scenario file's directory;
// for text, against base_dir (empty: only built-in profiles, no relative files). A file that is a
// bare ds_config rather than a scenario gets bare_ds_config_message() as its error.
Scenario load_scenario(const std::filesystem::path& file);
Scenario parse_scenario(std::string_view yaml_text, const std::filesystem::path& base_dir,
                        const std::string& display_name = "<scenario>");
// The same with the ds_config given as text (hjson or JSON, as in a file) instead of the scenario's
// `ds_config` key, which must then be absent: for callers that hold the ds_config in memory.
Scenario parse_scenario_with_ds_config(std::string_view yaml_text, std::string_view ds_config_text,
                                       const std::filesystem::path& base_dir, const std::string& display_name,
                                       const std::string& ds_display_name);

// When `text` is a DeepSpeed config (a mapping with DeepSpeed's top-level keys and none of a
// scenario's), the message that says so and how to reference it from a scenario; else nothing.
std::optional<std::string> bare_ds_config_message(std::string_view text, const std::string& file);

// What a scenario resolved to, for people and --json (printing, not running: core::resolve_settings in
// core/settings.h maps a scenario to what a step runs with): stage, precision, batch, clipping, loss
// scaling, optimizer and its hyper-parameters, ratio and offload device, in a fixed order.
struct ReportedSetting {
  std::string key;    // "zero.stage", "optimizer.lr", ...
  std::string value;  // as text; numbers in their shortest round-trip form
  bool number = false;
};
std::vector<ReportedSetting> settings_report(const Scenario& s);

// The default scenario (OPT-30B on a DGX-H100, scenarios/opt-30b-dgx-h100.yaml), compiled in.
std::string_view default_scenario_text();
Scenario load_default_scenario();

}  // namespace tf::core
