// Internal to tf_scenario: what the scenario reader (scenario.cpp), its training/optimizer/ZeRO sections
// (scenario_sections.cpp) and the DeepSpeed config reader (ds_config.cpp) share.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/config_node.h"
#include "core/scenario.h"

namespace tf::core::detail {

using config::MapReader;
using config::Node;

// An "auto" value of a ds_config that the scenario does not give.
struct UnresolvedAuto {
  std::string where;  // FILE:LINE:COL of the value
  std::string path;   // its key path
  std::string hint;   // where to give it: "training.micro_batch in the scenario"
};

struct Ctx {
  Ctx(std::filesystem::path base, std::filesystem::path display, Scenario* scenario)
      : base_dir(std::move(base)), display_dir(std::move(display)), s(scenario) {}
  std::filesystem::path base_dir;     // absolute; empty: no relative files
  std::filesystem::path display_dir;  // the scenario's directory as the caller wrote it, for messages
  Scenario* s = nullptr;
  std::vector<UnresolvedAuto> unresolved;
  std::unordered_set<std::string> warned;  // each warning once
  std::vector<std::string>& warnings() { return s->warnings; }
  void add_default(std::string key, std::string value, std::string why) {
    s->applied_defaults.push_back({std::move(key), std::move(value), std::move(why)});
  }
  // A warning at n's key (or, value_position, at its value).
  void warn(const Node& n, const std::string& what, bool value_position = false) {
    std::string w = (value_position ? n.where() : n.key_where()) + ": " +
                    (n.path.empty() ? std::string("(document)") : n.path) + ": " + what;
    if (warned.insert(w).second) warnings().push_back(std::move(w));
  }
};

// The scenario's own settings that a ds_config may also set, as written (each may be absent): a
// ds_config's "auto" takes them, and they fill what the ds_config leaves out.
struct ClientSettings {
  const Node* training = nullptr;  // the training section
  const Node* micro_batch = nullptr;
  const Node* grad_accum = nullptr;
  const Node* precision = nullptr;
  const Node* loss_scaling = nullptr;  // a mapping (checked)
  const Node* gradient_clipping = nullptr;
  const Node* prescale_gradients = nullptr;
  const Node* optimizer = nullptr;  // the optimizer section
  const Node* scheduler = nullptr;  // the scheduler section {type, params}
};

// A stand-in node naming a key that is absent (for errors about values taken from elsewhere).
Node at_key(const Node& parent, std::string_view key);
// "a, b, c"
std::string join(const std::vector<std::string_view>& v);

// ---- one reader (and so one range) per setting, shared by the native schema and the ds_config ----
inline constexpr int64_t kMaxSteps = int64_t(1) << 40;  // training.steps, a schedule's step counts
inline constexpr double kMaxHyper = 1e6;                // lr, weight decay, lr decay, a schedule's lrs and ratios
int64_t read_micro_batch(const Node& n);
int64_t read_grad_accum(const Node& n);
double read_clipping(const Node& n);
Precision read_precision(const Node& n);  // bf16 | fp16 | fp32
// The keys of fp16 loss scaling (DeepSpeed's fp16 section and the scenario's training.loss_scaling).
inline constexpr std::string_view kLossScaleKeys[] = {"loss_scale", "initial_scale_power", "loss_scale_window",
                                                      "hysteresis", "min_loss_scale"};
void read_loss_scale_key(std::string_view key, const Node& n, LossScaleConfig& l);
std::string loss_scale_value(std::string_view key, const LossScaleConfig& l);
// Optimizer hyper-parameters: lr, weight_decay, eps, lr_decay, initial_accumulator_value, betas.
double read_lr(const Node& n);
double read_weight_decay(const Node& n);
double read_eps(const Node& n);
std::pair<double, double> read_betas(const Node& n);  // [beta1, beta2], each in [0, 1)
// The hyper-parameters `kind` has, besides lr and weight_decay.
bool has_betas(OptimizerKind kind);
bool has_eps(OptimizerKind kind);
// validate(kind, hp), its error placed at the key it names inside `params` (or at params).
void check_hyper_params(OptimizerKind kind, const HyperParams& hp, const Node& params);
std::string hyper_param_value(std::string_view key, const HyperParams& hp);

// ---- sections of the native schema (scenario_sections.cpp) ----
// Reads steps and activation_checkpointing, and collects the keys a ds_config may also set into
// `client`; without a ds_config (has_ds false) reads those too.
void read_training(const Node& n, Ctx& ctx, bool has_ds, ClientSettings& client, const Node*& precision_node);
// The training section is absent: the defaults that apply.
void default_training(Ctx& ctx);
OptimizerConfig read_native_optimizer(const Node& n, Ctx& ctx);
ZeroConfig read_native_zero(const Node& n, Ctx& ctx);
// The whole of `s` reads as a number (strtod), finite or not.
bool looks_numeric(std::string_view s);
// offload_optimizer.ratio in both schemas: a number in [0, 1] read by `read_num` (each schema's own
// conversions), or auto (ratio_auto; in a ds_config the string "auto" is Twin-Flow's choice of the
// ratio, not the Hugging Face Trainer's). Anything else: "expected a number in [0, 1] or auto".
template <class ReadNum>
void read_offload_ratio(const Node& n, OffloadOptimizerConfig& o, ReadNum read_num) {
  if (n.is_scalar() && n.scalar == "auto") {
    o.ratio_auto = true;
    return;
  }
  if (!n.is_scalar() || !looks_numeric(n.scalar))
    config::fail(n, "expected a number in [0, 1] or auto, got " + n.describe() + "; allowed [0, 1] or auto");
  o.ratio = read_num(n);
}
// Warnings shared by both schemas: a ratio with device none; partial offload below stage 3.
void check_offload(const ZeroConfig& z, const Node* ratio_node, const Node& zero_node, Ctx& ctx, bool ds);

// ---- lr schedules (lr_schedule_config.cpp): the scenario's `scheduler: {type, params}` and the
// ds_config's `scheduler`, each parameter one of DeepSpeed's keyword arguments ----
// The parameters a kind takes, DeepSpeed's keyword arguments (deepspeed/runtime/lr_schedules.py
// __init__), last_batch_iteration included (only -1 is accepted).
std::span<const std::string_view> lr_schedule_params(LrScheduleKind k);
// One parameter into s, with its range: lrs and ratios in [0, 1e6], warmup_num_steps and total_num_steps
// integers >= 1, warmup_type log | linear, last_batch_iteration -1.
void read_lr_schedule_param(std::string_view key, const Node& n, LrSchedule& s);
std::string lr_schedule_param_value(std::string_view key, const LrSchedule& s);
// Sets DeepSpeed's default of parameter `key` in s and says whose it is; nothing for a parameter
// without one (total_num_steps: the error names it; last_batch_iteration: not a setting).
std::optional<std::string> default_lr_schedule_param(std::string_view key, LrSchedule& s, double optimizer_lr);
// The scenario's `scheduler: {type, params}` for optimizer `o` (its lr is the base and WarmupLR's
// default warmup_max_lr): type constant, WarmupLR, WarmupDecayLR or WarmupCosineLR (case-insensitive).
// fill_only (beside a ds_config's scheduler, whose "auto" values it fills): its keys and values are
// checked, but what it leaves out is not an error and gets no default.
LrSchedule read_native_scheduler(const Node& n, Ctx& ctx, const OptimizerConfig& o, bool fill_only = false);
// A schedule read from `at` (the scheduler section) against its optimizer: base_lr = o.hp.lr, then
// check_lr_schedule and the peak lr against the optimizer's ranges (lr x weight_decay <= 1), errors at
// `at`; warns, as DeepSpeed does, when total_num_steps < warmup_num_steps.
void finish_lr_schedule(LrSchedule& s, const OptimizerConfig& o, const Node& at, Ctx& ctx);

// ---- the DeepSpeed config (ds_config.cpp) ----
// Reads a ds_config into ctx.s's training, optimizer and zero settings. Throws one InputError listing
// every "auto" value the scenario does not give.
void read_ds_config(const Node& root, Ctx& ctx, const ClientSettings& client, const Node*& precision_node);

}  // namespace tf::core::detail
