// A DeepSpeed config read as DeepSpeed (kDeepSpeedCompatibility) reads it: its keys, defaults, "auto"
// values and type conversions, each checked against DeepSpeed's source (cited where used).
//
// How DeepSpeed reads a config, in short:
// - deepspeed/runtime/config.py: the file goes through hjson.load (duplicate keys refused); top-level
//   keys are read with get_scalar_param (a dict lookup: unknown keys are ignored, values are not
//   converted) or handed to a pydantic model.
// - deepspeed/runtime/config_utils.py DeepSpeedConfigModel (zero_optimization and its offload
//   sections, fp16, bf16): extra keys are forbidden (extra = "forbid"), "auto" values are dropped so
//   the field's default applies, and pydantic's lax mode converts "3" to 3 and "true" to true.
// - optimizer.params go to the optimizer's constructor as keyword arguments
//   (deepspeed/runtime/engine.py _configure_basic_optimizer), which refuses unknown ones.
// - "auto" is the Hugging Face Trainer's convention (transformers/integrations/deepspeed.py
//   HfTrainerDeepSpeedConfig.trainer_config_process): it fills each from its training arguments and
//   refuses a set value that differs from them. Twin-Flow does the same with the scenario.
//   Except zero_optimization.offload_optimizer.ratio: DeepSpeed's pydantic model would drop its "auto"
//   (ratio 1), and no training argument fills it; Twin-Flow reads it as its own `ratio: auto`.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/scenario_read.h"
#include "core/strings.h"

namespace tf::core::detail {

namespace {

// ---- DeepSpeed's keys, by section ---------------------------------------------------------------

// Top-level keys DeepSpeed reads (deepspeed/runtime/config.py DeepSpeedConfig._initialize_params and
// the readers it calls: constants.py, monitor/config.py, comm/config.py, profiling/config.py,
// autotuning/config.py, elasticity/constants.py, compression, data_pipeline, checkpointing).
constexpr std::string_view kTopKeys[] = {"train_batch_size",
                                         "train_micro_batch_size_per_gpu",
                                         "gradient_accumulation_steps",
                                         "gradient_clipping",
                                         "prescale_gradients",
                                         "fp16",
                                         "bf16",
                                         "bfloat16",
                                         "optimizer",
                                         "zero_optimization",
                                         "steps_per_print",
                                         "dump_state",
                                         "disable_allgather",
                                         "communication_data_type",
                                         "seq_parallel_communication_data_type",
                                         "gradient_predivide_factor",
                                         "gradient_allreduce_op",
                                         "sparse_gradients",
                                         "activation_checkpointing",
                                         "comms_logger",
                                         "tensorboard",
                                         "wandb",
                                         "csv_monitor",
                                         "comet",
                                         "amp",
                                         "torch_autocast",
                                         "compression_training",
                                         "graph_harvesting",
                                         "zero_allow_untested_optimizer",
                                         "zero_force_ds_cpu_optimizer",
                                         "scheduler",
                                         "flops_profiler",
                                         "wall_clock_breakdown",
                                         "memory_breakdown",
                                         "autotuning",
                                         "quantize_training",
                                         "use_data_before_expert_parallelism",
                                         "hybrid_engine",
                                         "sparse_attention",
                                         "pipeline",
                                         "progressive_layer_drop",
                                         "curriculum_learning",
                                         "data_efficiency",
                                         "checkpoint",
                                         "data_types",
                                         "aio",
                                         "dataloader_drop_last",
                                         "log_level",
                                         "nebula",
                                         "datastates",
                                         "weight_quantization",
                                         "compile",
                                         "timers",
                                         "tensor_parallel",
                                         "expert_parallel",
                                         "elasticity",
                                         "vocabulary_size",
                                         "sequence_parallel_size",
                                         "managed_gradient_accumulation",
                                         "eigenvalue"};
// deepspeed/runtime/zero/config.py DeepSpeedZeroConfig: fields and their aliases (populate_by_name).
constexpr std::string_view kZeroKeys[] = {"stage",
                                          "contiguous_gradients",
                                          "reduce_scatter",
                                          "reduce_bucket_size",
                                          "use_multi_rank_bucket_allreduce",
                                          "allgather_partitions",
                                          "allgather_bucket_size",
                                          "overlap_comm",
                                          "load_from_fp32_weights",
                                          "elastic_checkpoint",
                                          "offload_param",
                                          "offload_optimizer",
                                          "zenflow",
                                          "sub_group_size",
                                          "cpu_offload_param",
                                          "cpu_offload_use_pin_memory",
                                          "cpu_offload",
                                          "prefetch_bucket_size",
                                          "stage3_prefetch_bucket_size",
                                          "param_persistence_threshold",
                                          "stage3_param_persistence_threshold",
                                          "model_persistence_threshold",
                                          "stage3_model_persistence_threshold",
                                          "max_live_parameters",
                                          "stage3_max_live_parameters",
                                          "max_reuse_distance",
                                          "stage3_max_reuse_distance",
                                          "gather_16bit_weights_on_model_save",
                                          "stage3_gather_16bit_weights_on_model_save",
                                          "module_granularity_threshold",
                                          "stage3_module_granularity_threshold",
                                          "use_all_reduce_for_fetch_params",
                                          "stage3_use_all_reduce_for_fetch_params",
                                          "allgather_sequential",
                                          "stage3_allgather_sequential",
                                          "partition_stream_chunk_size",
                                          "stage3_partition_stream_chunk_size",
                                          "stage3_gather_fp16_weights_on_model_save",
                                          "ignore_unused_parameters",
                                          "legacy_stage1",
                                          "round_robin_gradients",
                                          "zero_hpz_partition_size",
                                          "zero_quantized_weights",
                                          "zero_quantized_nontrainable_weights",
                                          "zero_quantized_gradients",
                                          "zeropp_loco_param",
                                          "mics_shard_size",
                                          "mics_hierarchical_params_gather",
                                          "memory_efficient_linear",
                                          "pipeline_loading_checkpoint",
                                          "override_module_apply",
                                          "log_trace_cache_warnings",
                                          "enable_sanity_checks",
                                          "save_muon_momentum_buffer_in_memory",
                                          "leaf_module"};
// deepspeed/runtime/zero/offload_config.py DeepSpeedZeroOffloadOptimizerConfig.
constexpr std::string_view kOffloadOptimizerKeys[] = {
    "device",    "nvme_path", "buffer_count",  "pin_memory",          "pipeline_read",     "pipeline_write",
    "fast_init", "ratio",     "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"};
// deepspeed/runtime/zero/offload_config.py DeepSpeedZeroOffloadParamConfig.
constexpr std::string_view kOffloadParamKeys[] = {"device",      "nvme_path",  "buffer_count",
                                                  "buffer_size", "max_in_cpu", "pin_memory"};
// deepspeed/runtime/precision_config.py DeepSpeedFP16Config and DeepSpeedBF16Config.
constexpr std::string_view kFp16Keys[] = {"enabled",
                                          "auto_cast",
                                          "loss_scale",
                                          "initial_scale_power",
                                          "loss_scale_window",
                                          "hysteresis",
                                          "consecutive_hysteresis",
                                          "min_loss_scale",
                                          "fp16_master_weights_and_grads"};
constexpr std::string_view kBf16Keys[] = {"enabled", "immediate_grad_update", "check_grad_overflow",
                                          "bf16_master_weights_and_grads", "bf16_optimizer_states"};
// deepspeed/runtime/config.py get_optimizer_name / get_optimizer_params / get_optimizer_legacy_fusion.
constexpr std::string_view kOptimizerKeys[] = {"type", "params", "legacy_fusion"};
// The keyword arguments of the optimizers DeepSpeed builds for each type (engine.py
// _configure_basic_optimizer, which first pops torch_adam and adam_w_mode): FusedAdam,
// DeepSpeedCPUAdam and torch.optim.AdamW; FusedLion and DeepSpeedCPULion; torch.optim.Adagrad and
// DeepSpeedCPUAdagrad. max_grad_norm is accepted with a warning (config.py _do_warning_check).
constexpr std::string_view kAdamParams[] = {"lr",
                                            "betas",
                                            "eps",
                                            "weight_decay",
                                            "bias_correction",
                                            "adam_w_mode",
                                            "torch_adam",
                                            "amsgrad",
                                            "set_grad_none",
                                            "fp32_optimizer_states",
                                            "max_grad_norm",
                                            "foreach",
                                            "maximize",
                                            "capturable",
                                            "differentiable",
                                            "fused"};
constexpr std::string_view kLionParams[] = {
    "lr", "betas", "weight_decay", "set_grad_none", "fp32_optimizer_states", "max_grad_norm"};
constexpr std::string_view kAdagradParams[] = {"lr",
                                               "eps",
                                               "weight_decay",
                                               "lr_decay",
                                               "initial_accumulator_value",
                                               "amsgrad",
                                               "fp32_optimizer_states",
                                               "foreach",
                                               "maximize",
                                               "differentiable",
                                               "fused",
                                               "max_grad_norm"};

constexpr std::string_view kPydanticNote =
    "DeepSpeed's config model forbids keys it does not define (deepspeed/runtime/config_utils.py: "
    "extra = \"forbid\"), so DeepSpeed refuses it too";

bool is_auto(const Node* n) { return n && n->is_scalar() && n->quoted && n->scalar == "auto"; }

std::span<const std::string_view> params_of(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam: return kAdamParams;
    case OptimizerKind::kLion: return kLionParams;
    case OptimizerKind::kAdagrad: return kAdagradParams;
  }
  return {};
}

bool listed(std::span<const std::string_view> keys, std::string_view k) {
  return std::find(keys.begin(), keys.end(), k) != keys.end();
}

// ---- values as DeepSpeed converts them ----------------------------------------------------------

enum class Conv {
  kPydantic,  // a field of a pydantic model: "3" -> 3 and "true" -> true, with a warning
  kAsIs,      // read with get_scalar_param or passed to a constructor: a quoted number is an error
};

// The node to read: n itself, or (pydantic, a quoted number or boolean) an unquoted copy, warned about.
Node as_converted(const Node& n, Conv conv, Ctx& ctx, bool boolean) {
  Node c = n;
  if (!n.is_scalar() || !n.quoted) return c;
  const std::string l = ascii_lower(n.scalar);
  // pydantic's lax bool strings (https://docs.pydantic.dev/latest/concepts/conversion_table/)
  const bool bool_text = l == "true" || l == "false" || l == "yes" || l == "no" || l == "on" || l == "off" ||
                         l == "t" || l == "f" || l == "y" || l == "n" || l == "1" || l == "0";
  double d = 0;
  Node probe = n;
  probe.quoted = false;
  bool number = false;
  try {
    d = config::read_number(probe, -1e308, 1e308);
    number = std::isfinite(d);
  } catch (const InputError&) {
  }
  if (boolean ? !bool_text : !number) return c;
  if (conv == Conv::kAsIs)
    config::fail(n, "the string \"" + config::excerpt(n.scalar) + "\" where a " + (boolean ? "boolean" : "number") +
                        " belongs; DeepSpeed reads this key without converting it, so it would fail there too; "
                        "write it without quotes");
  c.quoted = false;
  if (boolean)
    c.scalar = (l == "true" || l == "yes" || l == "on" || l == "t" || l == "y" || l == "1") ? "true" : "false";
  ctx.warn(n,
           "the string \"" + config::excerpt(n.scalar) + "\" read as " + c.scalar +
               ", as DeepSpeed's config model (pydantic) converts it; write it without quotes",
           true);
  return c;
}

int64_t ds_int(Ctx& ctx, const Node& n, Conv conv, int64_t lo, int64_t hi) {
  return config::read_int(as_converted(n, conv, ctx, false), lo, hi);
}
double ds_number(Ctx& ctx, const Node& n, Conv conv, double lo, double hi, bool lo_open = false) {
  return config::read_number(as_converted(n, conv, ctx, false), lo, hi, lo_open);
}
bool ds_bool(Ctx& ctx, const Node& n, Conv conv) {
  Node c = as_converted(n, conv, ctx, true);
  if (conv == Conv::kPydantic && c.is_scalar() && !c.quoted && (c.scalar == "0" || c.scalar == "1")) {
    ctx.warn(n,
             c.scalar + " read as " + (c.scalar == "1" ? "true" : "false") +
                 ", as DeepSpeed's config model (pydantic) converts it; write true or false",
             true);
    c.scalar = c.scalar == "1" ? "true" : "false";
  }
  return config::read_bool(c);
}

// ---- one setting from the ds_config or the scenario ---------------------------------------------

template <class T>
struct Picked {
  std::optional<T> value;  // empty: given by neither (or an "auto" the scenario does not give)
  const Node* node = nullptr;
};

enum class Both { kMustMatch, kDsWins };

// A setting a ds_config key and a scenario key (scen_key) may both give: "auto" takes the scenario's;
// both set and different is an error (kMustMatch, the Trainer's rule) or the ds_config's (kDsWins).
template <class T, class ReadDs, class ReadScen>
Picked<T> pick(Ctx& ctx, const Node* ds, const Node* scen, std::string_view scen_key, ReadDs read_ds,
               ReadScen read_scen, Both both = Both::kMustMatch) {
  if (is_auto(ds)) {
    if (scen) return {read_scen(*scen), scen};
    ctx.unresolved.push_back({ds->where(), ds->path, std::string(scen_key) + " in the scenario"});
    return {};
  }
  if (ds) {
    const T v = read_ds(*ds);
    if (scen && both == Both::kMustMatch && !(read_scen(*scen) == v))
      config::fail(*scen, scen->describe() + " differs from the ds_config's " + ds->path + " = " + ds->describe() +
                              " (" + ds->where() + "); set it in one place, or write \"auto\" there to take this one");
    return {v, ds};
  }
  if (scen) return {read_scen(*scen), scen};
  return {};
}

const Node* key_of(const Node* map, std::string_view key) {
  if (!map || !map->is_map()) return nullptr;
  for (size_t i = 0; i < map->keys.size(); ++i)
    if (map->keys[i] == key) return &map->children[i];
  return nullptr;
}

// ---- unknown keys -------------------------------------------------------------------------------

enum class Unknown { kRefuse, kWarn };

// Every key of m not read: a DeepSpeed key of this section warns (not modelled); another is an error
// in a pydantic section (kRefuse) and a warning at the top level (DeepSpeed ignores it too).
void finish_section(MapReader& m, Ctx& ctx, std::span<const std::string_view> ds_keys, Unknown policy) {
  const std::vector<std::string_view> candidates(ds_keys.begin(), ds_keys.end());
  size_t warned = 0, more = 0;
  for (size_t i : m.take_unread()) {
    const std::string& key = m.node().keys[i];
    const Node& c = m.node().children[i];
    const bool known = listed(ds_keys, key);
    if (known || policy == Unknown::kWarn) {
      if (warned == MapReader::kMaxKeyWarnings) {  // counted, not listed (and no suggestion computed)
        ++more;
        continue;
      }
      ++warned;
    }
    const std::string near = known ? "" : closest_match(key, candidates);
    const std::string hint = near.empty() ? "" : "; did you mean `" + near + "`?";
    if (!known && policy == Unknown::kRefuse)
      throw InputError(c.key_where() + ": " + c.path + ": unknown key `" + printable(key, 256) + "`" + hint + " " +
                       std::string(kPydanticNote));
    ctx.warn(c, known ? "a DeepSpeed key that Twin-Flow does not model, ignored"
                      : "not a key DeepSpeed reads (it ignores it too), ignored" + hint);
  }
  if (more > 0)
    ctx.warn(m.node(), std::to_string(more) + " more keys that Twin-Flow does not model, ignored (not listed)");
}

// ---- batch --------------------------------------------------------------------------------------

// DeepSpeed's batch rule (config.py _set_batch_related_parameters, _batch_assertion):
// train_batch_size = micro x accumulation x data-parallel world; any two give the third.
void read_batch(MapReader& m, const Node& root, Ctx& ctx, const ClientSettings& client) {
  TrainingConfig& t = ctx.s->training;
  const int world = ctx.s->cluster.world_size();
  const Node* tbs = m.find("train_batch_size");
  const size_t unresolved_before = ctx.unresolved.size();
  const auto int_of = [&](int64_t (*read)(const Node&)) {
    return [&ctx, read](const Node& n) { return read(as_converted(n, Conv::kAsIs, ctx, false)); };
  };
  const Picked<int64_t> mb = pick<int64_t>(ctx, m.find("train_micro_batch_size_per_gpu"), client.micro_batch,
                                           "training.micro_batch", int_of(read_micro_batch), read_micro_batch);
  const Picked<int64_t> ga = pick<int64_t>(ctx, m.find("gradient_accumulation_steps"), client.grad_accum,
                                           "training.grad_accum", int_of(read_grad_accum), read_grad_accum);
  if (ctx.unresolved.size() > unresolved_before) return;  // reported with the other "auto" values
  if (is_auto(tbs)) tbs = nullptr;                        // the Trainer derives it from the other two
  const int64_t tb = tbs ? ds_int(ctx, *tbs, Conv::kAsIs, 1, int64_t(1) << 40) : 0;
  if (mb.value) t.micro_batch = *mb.value;
  if (ga.value) t.grad_accum = *ga.value;
  if (!tbs && !mb.value)
    throw InputError(root.where() + ": " + at_key(root, "train_micro_batch_size_per_gpu").path +
                     ": missing required key; DeepSpeed needs train_micro_batch_size_per_gpu or train_batch_size "
                     "(or give training.micro_batch in the scenario)");
  const std::string rule = " (train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x " +
                           std::to_string(world) + " GPUs)";
  if (!tbs) {
    if (!ga.value)
      ctx.add_default("gradient_accumulation_steps", "1", "DeepSpeed's (config.py: no train_batch_size to derive it)");
    return;
  }
  if (mb.value && ga.value) {
    if (tb != t.micro_batch * t.grad_accum * world)
      config::fail(*tbs, std::to_string(tb) + " != " + std::to_string(t.micro_batch) + " x " +
                             std::to_string(t.grad_accum) + " x " + std::to_string(world) + rule);
    return;
  }
  const int64_t known = mb.value ? t.micro_batch : (ga.value ? t.grad_accum : 1);
  if (tb % (known * world) != 0)
    config::fail(*tbs, std::to_string(tb) + " is not divisible by " + std::to_string(known * world) + rule);
  const int64_t other = tb / (known * world);
  if (other > kMaxBatch) config::fail(*tbs, std::to_string(tb) + " is too large" + rule);
  if (mb.value) {
    t.grad_accum = other;
  } else if (ga.value) {
    t.micro_batch = other;
  } else {
    t.micro_batch = other, t.grad_accum = 1;
    ctx.add_default("gradient_accumulation_steps", "1",
                    "DeepSpeed's (config.py: with only train_batch_size, no accumulation)");
  }
}

// ---- precision and loss scaling -----------------------------------------------------------------

struct PrecisionSections {
  const Node* bf16 = nullptr;  // the section (bf16 or its old name bfloat16)
  const Node* fp16 = nullptr;
};

// bf16.enabled / fp16.enabled, each true, false, "auto" or absent, against training.precision.
void read_ds_precision(PrecisionSections sec, Ctx& ctx, const ClientSettings& client, const Node*& precision_node) {
  TrainingConfig& t = ctx.s->training;
  const Node* be = key_of(sec.bf16, "enabled");
  const Node* fe = key_of(sec.fp16, "enabled");
  const bool any_auto = is_auto(be) || is_auto(fe);
  std::optional<Precision> scen;
  if (client.precision) scen = read_precision(*client.precision);
  if (any_auto && !scen) {
    for (const Node* e : {be, fe})
      if (is_auto(e)) ctx.unresolved.push_back({e->where(), e->path, "training.precision in the scenario"});
    return;
  }
  const bool bf16 = is_auto(be) ? scen == Precision::kBF16 : (be && ds_bool(ctx, *be, Conv::kPydantic));
  const bool fp16 = is_auto(fe) ? scen == Precision::kFP16 : (fe && ds_bool(ctx, *fe, Conv::kPydantic));
  if (bf16 && fp16) config::fail(*fe, "fp16 and bf16 are both enabled; enable one");
  const Precision ds = bf16 ? Precision::kBF16 : fp16 ? Precision::kFP16 : Precision::kFP32;
  const bool ds_says = (be && !is_auto(be)) || (fe && !is_auto(fe));
  if (ds_says && !any_auto && scen && *scen != ds)
    config::fail(*client.precision, std::string(precision_name(*scen)) + " differs from the ds_config's " +
                                        std::string(precision_name(ds)) + " (" +
                                        (bf16 ? be
                                         : fe ? fe
                                              : be)
                                            ->where() +
                                        "); set it in one place, or write \"auto\" in the ds_config's enabled keys");
  if (ds_says || any_auto) {
    t.precision = ds;
    precision_node = bf16 ? be : fp16 ? fe : (be ? be : fe);
  } else if (scen) {
    t.precision = *scen;
    precision_node = client.precision;
  } else {
    t.precision = Precision::kFP32;
    ctx.add_default("bf16.enabled / fp16.enabled", "false (fp32)",
                    "DeepSpeed's (deepspeed/runtime/precision_config.py: enabled defaults to false)");
  }
}

void read_loss_scaling(const Node* fp16, Ctx& ctx, const ClientSettings& client) {
  TrainingConfig& t = ctx.s->training;
  for (std::string_view key : kLossScaleKeys) {
    const auto read_as = [&](Conv conv) {
      return [&ctx, key, conv](const Node& n) {
        LossScaleConfig l;
        read_loss_scale_key(key, conv == Conv::kPydantic ? as_converted(n, conv, ctx, false) : n, l);
        return loss_scale_value(key, l);
      };
    };
    const Picked<std::string> p =
        pick<std::string>(ctx, key_of(fp16, key), key_of(client.loss_scaling, key),
                          "training.loss_scaling." + std::string(key), read_as(Conv::kPydantic), read_as(Conv::kAsIs));
    if (p.node) {
      read_loss_scale_key(key,
                          p.node == key_of(fp16, key) ? as_converted(*p.node, Conv::kPydantic, ctx, false) : *p.node,
                          t.loss_scaling);
    } else if (!is_auto(key_of(fp16, key)) && t.precision == Precision::kFP16) {
      ctx.add_default("fp16." + std::string(key), loss_scale_value(key, t.loss_scaling),
                      "DeepSpeed's (deepspeed/runtime/precision_config.py DeepSpeedFP16Config)");
    }
  }
}

// The rest of the fp16/bf16 sections: keys that change memory are refused, the others warn.
void finish_precision_sections(PrecisionSections sec, Ctx& ctx) {
  if (sec.bf16) {
    MapReader b(*sec.bf16, ctx.warnings(), "the bf16 section {enabled, ...}");
    b.find("enabled");
    for (const char* k : {"bf16_master_weights_and_grads", "bf16_optimizer_states"})
      if (const Node* v = b.find(k); v && !is_auto(v) && ds_bool(ctx, *v, Conv::kPydantic))
        config::fail(*v,
                     "true is not modelled by Twin-Flow (it keeps master weights, gradients and optimizer states "
                     "in fp32, core/memory); it changes memory; remove it or set false");
    finish_section(b, ctx, kBf16Keys, Unknown::kRefuse);
  }
  if (sec.fp16) {
    MapReader f(*sec.fp16, ctx.warnings(), "the fp16 section {enabled, loss_scale, ...}");
    f.find("enabled");
    for (std::string_view k : kLossScaleKeys) f.find(k);
    if (const Node* v = f.find("fp16_master_weights_and_grads"); v && !is_auto(v) && ds_bool(ctx, *v, Conv::kPydantic))
      config::fail(*v,
                   "true is not modelled by Twin-Flow (it keeps fp32 master weights, core/memory); it changes "
                   "memory; remove it or set false");
    finish_section(f, ctx, kFp16Keys, Unknown::kRefuse);
  }
}

// ---- optimizer ----------------------------------------------------------------------------------

// The hyper-parameters DeepSpeed's optimizers start from: FusedAdam and DeepSpeedCPUAdam (lr 1e-3,
// betas (0.9, 0.999), eps 1e-8, weight_decay 0), FusedLion (lr 1e-3, betas (0.9, 0.999),
// weight_decay 0), torch.optim.Adagrad and DeepSpeedCPUAdagrad (lr 1e-2, eps 1e-10, weight_decay 0).
HyperParams ds_default_hyper_params(OptimizerKind k) {
  HyperParams hp = default_hyper_params(k);
  hp.weight_decay = 0;
  if (k == OptimizerKind::kLion) hp.lr = 1e-3, hp.beta2 = 0.999;
  return hp;
}

// Keyword arguments that change what the optimizer computes or stores, which Twin-Flow refuses.
void refuse_optimizer_flags(MapReader& p, Ctx& ctx, OptimizerKind kind) {
  auto flag = [&](const char* key) -> const Node* {
    const Node* v = p.find(key);
    return v && !is_auto(v) ? v : nullptr;
  };
  if (const Node* v = flag("amsgrad"); v && ds_bool(ctx, *v, Conv::kAsIs))
    config::fail(*v,
                 "true is not supported (Twin-Flow's kernels implement Adam/AdamW without AMSGrad); allowed: false");
  if (const Node* v = flag("maximize"); v && ds_bool(ctx, *v, Conv::kAsIs))
    config::fail(*v, "true is not supported (the optimizers minimise); allowed: false");
  if (const Node* v = flag("fp32_optimizer_states"); v && !ds_bool(ctx, *v, Conv::kAsIs))
    config::fail(*v,
                 "false is not modelled by Twin-Flow (optimizer states are fp32, core/memory); it changes "
                 "memory; allowed: true");
  if (kind == OptimizerKind::kAdam || kind == OptimizerKind::kAdamW)
    if (const Node* v = flag("bias_correction"); v && !ds_bool(ctx, *v, Conv::kAsIs))
      config::fail(*v, "false is not supported (the kernels always correct the bias); allowed: true");
  if (const Node* v = p.find("max_grad_norm"))
    ctx.warn(*v, "not a clipping setting in DeepSpeed (config.py warns and ignores it); set gradient_clipping");
}

// The params a ds_config's optimizer gives, "auto" ones from the scenario's optimizer params (`scen`).
void read_ds_optimizer_params(const Node& pn, const Node* scen, Ctx& ctx, OptimizerConfig& o) {
  MapReader p(pn, ctx.warnings(), "the optimizer's params");
  const auto as_is = [&ctx](double (*read)(const Node&)) {
    return [&ctx, read](const Node& n) { return read(as_converted(n, Conv::kAsIs, ctx, false)); };
  };
  const auto set = [&](const char* key, double (*read)(const Node&), double& dst) {
    const Picked<double> v = pick<double>(ctx, p.find(key), key_of(scen, key), "optimizer.params." + std::string(key),
                                          as_is(read), read, Both::kDsWins);
    if (v.value) dst = *v.value;
  };
  set("lr", read_lr, o.hp.lr);
  set("weight_decay", read_weight_decay, o.hp.weight_decay);
  if (has_eps(o.kind)) set("eps", read_eps, o.hp.eps);
  if (has_betas(o.kind)) {
    const Picked<std::pair<double, double>> b = pick<std::pair<double, double>>(
        ctx, p.find("betas"), key_of(scen, "betas"), "optimizer.params.betas", read_betas, read_betas, Both::kDsWins);
    if (b.value) std::tie(o.hp.beta1, o.hp.beta2) = *b.value;
  }
  if (o.kind == OptimizerKind::kAdagrad) {
    const auto big = [](const Node& n) { return config::read_number(n, 0, 1e30); };
    if (const Node* v = p.find("lr_decay"))
      o.hp.lr_decay = read_weight_decay(as_converted(*v, Conv::kAsIs, ctx, false));
    if (const Node* v = p.find("initial_accumulator_value"))
      o.hp.initial_accumulator_value = big(as_converted(*v, Conv::kAsIs, ctx, false));
  }
  if (o.kind == OptimizerKind::kAdam || o.kind == OptimizerKind::kAdamW)
    p.find("adam_w_mode");  // read by read_ds_optimizer ("AdamW" is decoupled whatever it says)
  refuse_optimizer_flags(p, ctx, o.kind);
  for (size_t i : p.take_unread()) {
    const std::string& key = pn.keys[i];
    const Node& c = pn.children[i];
    if (listed(params_of(o.kind), key)) {
      ctx.warn(c, "a DeepSpeed optimizer argument that Twin-Flow does not model, ignored");
      continue;
    }
    const std::vector<std::string_view> known(params_of(o.kind).begin(), params_of(o.kind).end());
    const std::string near = closest_match(key, known);
    throw InputError(c.key_where() + ": " + c.path + ": unknown key `" + printable(key, 256) + "`" +
                     (near.empty() ? "" : "; did you mean `" + near + "`?") + " not a parameter of DeepSpeed's " +
                     std::string(optimizer_name(o.kind)) +
                     " optimizers, whose constructor DeepSpeed passes optimizer.params to (so it fails there too)");
  }
}

OptimizerConfig read_ds_optimizer(const Node& n, const Node* scen_params, Ctx& ctx) {
  MapReader m(n, ctx.warnings(), "the optimizer {type, params}");
  const Node& tn = m.require("type", "Adam, AdamW, Adagrad or Lion (the optimizer DeepSpeed builds)");
  OptimizerConfig o;
  try {
    o.kind = parse_optimizer(ascii_lower(config::read_string(tn)));
  } catch (const InputError&) {
    config::fail(tn, "'" + config::excerpt(tn.scalar) +
                         "' is not supported by Twin-Flow; allowed: Adam, AdamW, Adagrad, Lion (case-insensitive)");
  }
  o.hp = ds_default_hyper_params(o.kind);
  const Node* pn = m.find("params");
  finish_section(m, ctx, kOptimizerKeys, Unknown::kWarn);
  // deepspeed/runtime/config.py: ADAM_W_MODE_DEFAULT = True ("default to adamw logic for adam/adamw
  // optimizers unless user explicitly opts out" with params.adam_w_mode: false).
  if (o.kind == OptimizerKind::kAdam) {
    const Node* w = key_of(pn, "adam_w_mode");
    if (w && !is_auto(w) && !ds_bool(ctx, *w, Conv::kAsIs)) {
      o.kind = OptimizerKind::kAdam;
    } else {
      o.kind = OptimizerKind::kAdamW;
      if (!w)
        ctx.add_default("optimizer.params.adam_w_mode", "true",
                        "DeepSpeed's (deepspeed/runtime/config.py ADAM_W_MODE_DEFAULT): \"Adam\" is AdamW");
    }
  }
  if (pn) read_ds_optimizer_params(*pn, scen_params, ctx, o);
  check_hyper_params(o.kind, o.hp, pn ? *pn : n);
  const std::string why = "the default of DeepSpeed's " + std::string(optimizer_name(o.kind)) +
                          " (FusedAdam/DeepSpeedCPUAdam, FusedLion, torch.optim.Adagrad/DeepSpeedCPUAdagrad)";
  std::vector<std::string_view> keys = {"lr", "weight_decay"};
  if (has_betas(o.kind)) keys.push_back("betas");
  if (has_eps(o.kind)) keys.push_back("eps");
  for (std::string_view k : keys)
    if (!key_of(pn, k)) ctx.add_default("optimizer.params." + std::string(k), hyper_param_value(k, o.hp), why);
  return o;
}

void read_optimizer_section(MapReader& m, Ctx& ctx, const ClientSettings& client) {
  Scenario& s = *ctx.s;
  const Node* ds_opt = m.find("optimizer");
  if (!ds_opt && !client.optimizer)
    throw InputError(m.node().where() + ": " + at_key(m.node(), "optimizer").path +
                     ": missing; the ds_config has no optimizer section (DeepSpeed then trains with the optimizer the "
                     "program passes to deepspeed.initialize) and the scenario has none either: add optimizer: {type: "
                     "adamw, params: {lr: ...}} to the scenario, or an optimizer section to the ds_config");
  if (!ds_opt) {  // DeepSpeed takes the client's optimizer: the scenario's
    s.optimizer = read_native_optimizer(*client.optimizer, ctx);
    return;
  }
  const Node* scen_params = nullptr;
  if (client.optimizer) {
    Scenario scratch;  // validates the scenario's section; its values only fill "auto"
    scratch.cluster = s.cluster;
    Ctx check{ctx.base_dir, ctx.display_dir, &scratch};
    read_native_optimizer(*client.optimizer, check);
    scen_params = key_of(client.optimizer, "params");
    ctx.warn(*client.optimizer, "the ds_config's optimizer section (" + ds_opt->where() +
                                    ") is used; this section only fills the values it gives as \"auto\"");
  }
  s.optimizer = read_ds_optimizer(*ds_opt, scen_params, ctx);
}

// ---- lr scheduler -------------------------------------------------------------------------------

// DeepSpeed builds the scheduler its `type` names with `params` as keyword arguments
// (deepspeed/runtime/engine.py _scheduler_from_config: getattr(lr_schedules, type), else
// torch.optim.lr_scheduler's class of that name), so the name is exact and an unknown param fails there;
// the section's other keys are never read (config.py get_scheduler_name / get_scheduler_params).
constexpr std::string_view kSchedulerKeys[] = {"type", "params"};
constexpr std::string_view kDsSchedulers =
    "WarmupLR, WarmupDecayLR, WarmupCosineLR, or no scheduler section (a constant lr)";

LrScheduleKind read_ds_scheduler_kind(const Node& tn) {
  const std::string t = config::read_string(tn);
  constexpr LrScheduleKind kinds[] = {LrScheduleKind::kWarmupLr, LrScheduleKind::kWarmupDecayLr,
                                      LrScheduleKind::kWarmupCosineLr};
  for (LrScheduleKind k : kinds)
    if (t == lr_schedule_name(k)) return k;
  for (LrScheduleKind k : kinds)
    if (ascii_lower(t) == ascii_lower(lr_schedule_name(k)))
      config::fail(tn, "'" + config::excerpt(t) +
                           "': DeepSpeed looks scheduler names up exactly (engine.py _scheduler_from_config), so it "
                           "refuses this spelling too; write " +
                           std::string(lr_schedule_name(k)));
  if (t == "LRRangeTest" || t == "OneCycle")
    config::fail(tn, "DeepSpeed's " + t + " is not supported by Twin-Flow; allowed: " + std::string(kDsSchedulers));
  config::fail(tn, "'" + config::excerpt(t) +
                       "' is not supported by Twin-Flow (DeepSpeed would also look it up among "
                       "torch.optim.lr_scheduler's classes); allowed: " +
                       std::string(kDsSchedulers));
}

// What the Hugging Face Trainer fills into an "auto" the scenario does not give
// (transformers/integrations/deepspeed.py trainer_config_process / trainer_config_finalize):
// warmup_min_lr 0 (no training argument), warmup_max_lr the learning rate (here the optimizer's, once
// resolved), total_num_steps the number of training steps (training.steps). Nothing for the others
// (warmup_num_steps: the Trainer's warmup_steps has no counterpart but the scenario's scheduler).
std::optional<std::pair<double, std::string>> trainer_fill(std::string_view key, const Ctx& ctx) {
  const bool lr_resolved = std::none_of(ctx.unresolved.begin(), ctx.unresolved.end(),
                                        [](const UnresolvedAuto& u) { return u.path == "optimizer.params.lr"; });
  if (key == "warmup_min_lr") return std::pair{0.0, std::string("the Hugging Face Trainer's fill for \"auto\"")};
  if (key == "warmup_max_lr" && lr_resolved)
    return std::pair{ctx.s->optimizer.hp.lr,
                     std::string("\"auto\": the optimizer's lr, as the Hugging Face Trainer fills learning_rate")};
  if (key == "total_num_steps")
    return std::pair{double(ctx.s->training.steps),
                     std::string("\"auto\": training.steps, as the Hugging Face Trainer fills the training steps")};
  return std::nullopt;
}

// The params of the ds_config's scheduler, "auto" ones from the scenario's scheduler params (`scen`)
// or the Trainer's fills. Returns false when some "auto" stays unresolved (reported with the others).
bool read_ds_scheduler_params(const Node* pn, const Node* scen, Ctx& ctx, LrSchedule& s, const Node& at) {
  std::optional<MapReader> p;
  if (pn) p.emplace(*pn, ctx.warnings(), "the scheduler's params");
  const size_t unresolved_before = ctx.unresolved.size();
  for (std::string_view key : lr_schedule_params(s.kind)) {
    const Node* ds = p ? p->find(key) : nullptr;
    const Node* sc = key_of(scen, key);
    const std::string path = "scheduler.params." + std::string(key);
    if (is_auto(ds) && !sc)
      if (const auto fill = trainer_fill(key, ctx)) {
        Node v = *ds;
        v.quoted = false;
        v.scalar = key == "total_num_steps" ? std::to_string(int64_t(fill->first)) : number_text(fill->first);
        read_lr_schedule_param(key, v, s);
        ctx.add_default(path, lr_schedule_param_value(key, s), fill->second);
        continue;
      }
    const auto read = [&ctx, key, kind = s.kind](const Node& n) {
      LrSchedule l;
      l.kind = kind;
      read_lr_schedule_param(key, as_converted(n, Conv::kAsIs, ctx, false), l);
      return lr_schedule_param_value(key, l);
    };
    // where the scenario gives it: warmup_max_lr's "auto" is the Trainer's learning_rate, the optimizer's lr
    const std::string scen_key = key == "warmup_max_lr" ? "optimizer.params.lr (or " + path + ")" : path;
    const Picked<std::string> v = pick<std::string>(ctx, ds, sc, scen_key, read, read, Both::kDsWins);
    if (v.node) {
      read_lr_schedule_param(key, *v.node, s);
    } else if (!is_auto(ds)) {
      if (key == "total_num_steps")
        config::fail(pn ? at_key(*pn, key) : at_key(at, "params"),
                     "missing; DeepSpeed's " + std::string(lr_schedule_name(s.kind)) +
                         " takes total_num_steps as a required argument (the step its decay ends at)");
      if (const std::optional<std::string> why = default_lr_schedule_param(key, s, ctx.s->optimizer.hp.lr))
        ctx.add_default(path, lr_schedule_param_value(key, s), *why);
    }
  }
  if (p)
    for (size_t i : p->take_unread()) {
      const Node& c = pn->children[i];
      const std::vector<std::string_view> known(lr_schedule_params(s.kind).begin(), lr_schedule_params(s.kind).end());
      const std::string near = closest_match(pn->keys[i], known);
      throw InputError(c.key_where() + ": " + c.path + ": unknown key `" + printable(pn->keys[i], 256) + "`" +
                       (near.empty() ? "" : "; did you mean `" + near + "`?") + " not a parameter of DeepSpeed's " +
                       std::string(lr_schedule_name(s.kind)) + " (" + join(known) +
                       "), whose constructor DeepSpeed passes scheduler.params to (so it fails there too)");
    }
  return ctx.unresolved.size() == unresolved_before;
}

// The ds_config's scheduler; without one, the scenario's (DeepSpeed takes the client's lr_scheduler
// then), else the constant lr.
void read_scheduler_section(MapReader& m, Ctx& ctx, const ClientSettings& client) {
  OptimizerConfig& o = ctx.s->optimizer;
  const Node* ds = m.find("scheduler");
  if (!ds) {
    if (client.scheduler)
      o.schedule = read_native_scheduler(*client.scheduler, ctx, o);
    else
      finish_lr_schedule(o.schedule, o, m.node(), ctx);
    return;
  }
  if (client.scheduler) {
    Scenario scratch;  // validates the scenario's section; its values only fill "auto"
    scratch.cluster = ctx.s->cluster;
    Ctx check{ctx.base_dir, ctx.display_dir, &scratch};
    read_native_scheduler(*client.scheduler, check, o, true);
    ctx.warn(*client.scheduler, "the ds_config's scheduler section (" + ds->where() +
                                    ") is used; this section only fills the values it gives as \"auto\"");
  }
  MapReader sm(*ds, ctx.warnings(), "the scheduler {type, params}");
  const Node* tn = sm.find("type");
  const Node* pn = sm.find("params");
  finish_section(sm, ctx, kSchedulerKeys, Unknown::kWarn);
  if (!tn) {  // config.py get_scheduler_name: no type, no scheduler
    ctx.warn(*ds, "no type: DeepSpeed builds no scheduler (config.py get_scheduler_name), so the lr is constant");
    finish_lr_schedule(o.schedule, o, *ds, ctx);
    return;
  }
  LrSchedule s;
  s.kind = read_ds_scheduler_kind(*tn);
  if (read_ds_scheduler_params(pn, key_of(client.scheduler, "params"), ctx, s, *ds)) {
    finish_lr_schedule(s, o, *ds, ctx);
    o.schedule = s;
  }
}

// ---- ZeRO ---------------------------------------------------------------------------------------

[[noreturn]] void fail_stage0(const Node& at, const std::string& why) {
  config::fail(at, why +
                       ", which is ZeRO stage 0 in DeepSpeed (no partitioning; deepspeed/runtime/zero/config.py: "
                       "stage defaults to 0). Twin-Flow splits each rank's ZeRO partition of the optimizer between "
                       "GPU and CPU, so it needs stage 1, 2 or 3 (core/partition.h); set \"zero_optimization\": "
                       "{\"stage\": 3} (or 1, 2)");
}

// Keys that change memory or communication in ways Twin-Flow does not model: refused when set.
void refuse_zero_features(MapReader& m, Ctx& ctx) {
  auto set = [&](const char* key) -> const Node* {
    const Node* v = m.find(key);
    return v && !is_auto(v) && !v->is_null() ? v : nullptr;
  };
  if (const Node* p = set("offload_param")) {
    MapReader pm(*p, ctx.warnings(), "offload_param {device, ...}");
    const Node* d = pm.find("device");
    const std::string dev = d && !is_auto(d) ? config::read_string(*d) : "none";  // "auto": the default
    finish_section(pm, ctx, kOffloadParamKeys, Unknown::kRefuse);
    if (dev != "none")
      config::fail(d ? *d : *p, "parameter offload ('" + config::excerpt(dev) +
                                    "') is not modelled: Twin-Flow keeps ZeRO-3's parameter shards on the GPU (its "
                                    "memory check would be wrong); remove offload_param or set device: none");
  }
  if (const Node* v = set("cpu_offload_param"); v && ds_bool(ctx, *v, Conv::kPydantic))
    config::fail(*v,
                 "true (parameter offload) is not modelled: Twin-Flow keeps ZeRO-3's parameter shards on the "
                 "GPU; remove it");
  for (const char* k : {"zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients"})
    if (const Node* v = set(k); v && ds_bool(ctx, *v, Conv::kPydantic))
      config::fail(*v,
                   "true (ZeRO++ quantized communication) is not modelled: it changes what the collectives carry; "
                   "remove it or set false");
  if (const Node* v = set("zero_hpz_partition_size"); v && ds_int(ctx, *v, Conv::kPydantic, 0, INT64_MAX) > 1)
    config::fail(*v, "a secondary partition (ZeRO++ hpZ) is not modelled: it changes GPU memory; allowed: 1");
  if (const Node* v = set("mics_shard_size"); v && ds_int(ctx, *v, Conv::kPydantic, INT64_MIN, INT64_MAX) > 0)
    config::fail(*v, "MiCS sharding is not modelled: it changes the partition; remove it");
}

// offload_optimizer: device (none | cpu | nvme, case-sensitive as DeepSpeed's enum), ratio, pin_memory.
// Returns the ratio's node, and whether ratio and pin_memory were given.
struct OffloadKeys {
  const Node* ratio = nullptr;
  bool ratio_given = false, pin_given = false;
};
OffloadKeys read_offload(const Node& off, Ctx& ctx, ZeroConfig& z) {
  MapReader o(off, ctx.warnings(), "offload_optimizer {device, ratio, pin_memory}");
  OffloadOptimizerConfig& c = z.offload_optimizer;
  OffloadKeys keys;
  const Node* d = o.find("device");
  if (is_auto(d)) {
    ctx.unresolved.push_back({d->where(), d->path, "none or cpu here (Twin-Flow has no scenario key for it)"});
  } else if (d && !d->is_null()) {
    const std::string v = config::read_string(*d);
    // deepspeed/runtime/zero/offload_config.py OffloadDeviceEnum: "none", "cpu", "nvme" (exact values).
    if (v == "nvme")
      config::fail(*d, "'nvme' is not supported by Twin-Flow (it offloads to CPU memory); allowed: none, cpu");
    if (v != "none" && v != "cpu")
      config::fail(*d, "'" + config::excerpt(v) +
                           "' is not one of DeepSpeed's offload devices (deepspeed/runtime/zero/offload_config.py "
                           "OffloadDeviceEnum: none, cpu, nvme; lower case), so DeepSpeed refuses it too; allowed: "
                           "none, cpu");
    c.device = v == "cpu" ? OffloadDevice::kCpu : OffloadDevice::kNone;
  }
  // "auto" here is Twin-Flow's (the fastest predicted ratio that fits: backends/sim/auto_ratio.h), not
  // the Trainer's: the scenario has no key it could come from.
  if (const Node* ratio = o.find("ratio")) {
    read_offload_ratio(*ratio, c, [&](const Node& r) { return ds_number(ctx, r, Conv::kPydantic, 0, 1); });
    keys.ratio = ratio;
    keys.ratio_given = true;
  }
  const Node* pin = o.find("pin_memory");
  if (pin && !is_auto(pin)) {
    c.pin_memory = ds_bool(ctx, *pin, Conv::kPydantic);
    keys.pin_given = true;
  }
  finish_section(o, ctx, kOffloadOptimizerKeys, Unknown::kRefuse);
  return keys;
}

void read_zero_section(MapReader& m, Ctx& ctx) {
  ZeroConfig& z = ctx.s->zero;
  const Node* zn = m.find("zero_optimization");
  if (!zn || zn->is_null())
    fail_stage0(zn ? *zn : at_key(m.node(), "zero_optimization"), "zero_optimization is absent");
  if (zn->is_scalar() && !zn->quoted) {  // the deprecated boolean form (zero/config.py read_zero_config_deprecated)
    if (!config::read_bool(*zn)) fail_stage0(*zn, "zero_optimization is false");
    z.stage = 1;
    ctx.warn(*zn, "the deprecated boolean form: DeepSpeed reads true as {\"stage\": 1}; write that instead");
    return;
  }
  MapReader zm(*zn, ctx.warnings(), "zero_optimization {stage, offload_optimizer, ...}");
  const Node* stage = zm.find("stage");
  if (is_auto(stage)) {
    ctx.unresolved.push_back({stage->where(), stage->path, "1, 2 or 3 here (Twin-Flow has no scenario key for it)"});
  } else {
    if (!stage) fail_stage0(*zn, "zero_optimization has no stage");
    const int64_t v = ds_int(ctx, *stage, Conv::kPydantic, 0, 3);
    if (v == 0) fail_stage0(*stage, "stage 0");
    z.stage = int(v);
  }
  const Node* off = zm.find("offload_optimizer");
  const OffloadKeys keys = off && !off->is_null() ? read_offload(*off, ctx, z) : OffloadKeys{};
  // The ZeRO-Offload tutorial's legacy switch: "cpu_offload": true == offload_optimizer {device: cpu}.
  if (const Node* legacy = zm.find("cpu_offload");
      legacy && !is_auto(legacy) && ds_bool(ctx, *legacy, Conv::kPydantic)) {
    if (off && !off->is_null()) config::fail(*legacy, "conflicts with offload_optimizer; set one of them");
    z.offload_optimizer.device = OffloadDevice::kCpu;
  }
  const std::string why = "DeepSpeed's (deepspeed/runtime/zero/offload_config.py)";
  if (z.offload_optimizer.device == OffloadDevice::kCpu && !keys.ratio_given)
    ctx.add_default("zero_optimization.offload_optimizer.ratio", number_text(z.offload_optimizer.ratio),
                    why + ": the whole optimizer on the CPU");
  if (z.offload_optimizer.device == OffloadDevice::kCpu && !keys.pin_given)
    ctx.add_default("zero_optimization.offload_optimizer.pin_memory", bool_text(z.offload_optimizer.pin_memory), why);
  if (const Node* s = zm.find("sub_group_size"); s && !is_auto(s))
    z.sub_group_size = ds_int(ctx, *s, Conv::kPydantic, 0, int64_t(1) << 62);
  refuse_zero_features(zm, ctx);
  finish_section(zm, ctx, kZeroKeys, Unknown::kRefuse);
  check_offload(z, keys.ratio, *zn, ctx, true);
}

// ---- other top-level sections that change memory or communication -------------------------------

void refuse_top_features(MapReader& m, Ctx& ctx) {
  const Precision p = ctx.s->training.precision;
  const Node& root = m.node();  // looked at, not read: the sections still warn as not modelled
  if (const Node* dt = key_of(&root, "data_types"); dt && dt->is_map()) {
    // Twin-Flow accumulates gradients in fp32 (core/memory: the fp32 accumulation buffer).
    if (const Node* g = key_of(dt, "grad_accum_dtype"); g && !g->is_null() && config::read_string(*g) != "fp32")
      config::fail(*g, "'" + config::excerpt(g->scalar) +
                           "' is not modelled: Twin-Flow accumulates gradients in fp32 (core/memory), and another "
                           "accumulation type changes memory; allowed: fp32");
  }
  if (const Node* c = key_of(&root, "communication_data_type"); c && !c->is_null()) {
    const std::string v = ascii_lower(config::read_string(*c));
    const std::string lp = p == Precision::kFP32 ? "fp32" : std::string(precision_name(p));
    if (v != lp)
      config::fail(*c, "'" + config::excerpt(c->scalar) +
                           "' is not modelled: Twin-Flow's collectives carry gradients " +
                           "in the training precision (" + lp +
                           "), and another type changes their bytes and buffers; " + "allowed: " + lp);
  }
  if (const Node* ac = key_of(&root, "activation_checkpointing"); ac && ac->is_map())
    if (const Node* v = key_of(ac, "cpu_checkpointing"); v && ds_bool(ctx, *v, Conv::kAsIs))
      config::fail(*v,
                   "true is not modelled: checkpoints kept in CPU memory change GPU memory and add copies; use "
                   "training.activation_checkpointing in the scenario for GPU checkpointing");
  for (const char* k : {"amp", "torch_autocast"})
    if (const Node* a = key_of(&root, k); a && a->is_map())
      if (const Node* v = key_of(a, "enabled"); v && ds_bool(ctx, *v, Conv::kAsIs))
        config::fail(*v,
                     "true is not modelled: Twin-Flow trains in bf16, fp16 or fp32 mixed precision as set by "
                     "bf16/fp16; remove it");
}

// ---- checkpoint ---------------------------------------------------------------------------------

// DeepSpeed's checkpoint section (deepspeed/runtime/config.py get_checkpoint_params, a plain dict: it
// ignores keys it does not know). It has no directory or interval (DeepSpeed's save_checkpoint takes
// the directory as an argument): those are the scenario's `checkpoint: {dir, every_steps, keep}`.
constexpr std::string_view kCheckpointKeys[] = {"tag_validation", "load_universal", "use_node_local_storage",
                                                "parallel_write", "writer"};

// tag_validation is accepted: DeepSpeed checks that every rank saves under the same tag, and Twin-Flow's
// rank 0 commits one manifest for every rank after all their files are durable, so ranks cannot
// disagree on it. load_universal is accepted: every Twin-Flow checkpoint is "universal" (stored by
// tensor name and element range, loadable at any world size, ratio and stage). use_node_local_storage:
// true is refused: the ranks write into one shared step-N.tmp/ and rank 0 reads every rank's index
// there, which directories local to each node would hide.
void read_checkpoint_section(MapReader& m, Ctx& ctx) {
  const Node* c = m.find("checkpoint");
  if (!c || c->is_null()) return;
  if (!c->is_map()) config::fail(*c, "expected a section {tag_validation, load_universal, ...}, got " + c->describe());
  MapReader cm(*c, ctx.warnings(), "checkpoint {tag_validation, load_universal, use_node_local_storage, ...}");
  if (const Node* t = cm.find("tag_validation")) {
    const std::string v = ascii_lower(config::read_string(*t));
    if (v != "ignore" && v != "warn" && v != "fail")
      config::fail(*t,
                   "'" + config::excerpt(t->scalar) + "' is not a tag validation mode; allowed: Ignore, Warn, Fail");
  }
  if (const Node* u = cm.find("load_universal")) (void)ds_bool(ctx, *u, Conv::kAsIs);
  if (const Node* l = cm.find("use_node_local_storage"); l && ds_bool(ctx, *l, Conv::kAsIs))
    config::fail(*l,
                 "true is not supported: every rank writes its shard into one shared step-N.tmp/ directory and "
                 "rank 0 reads every rank's index there before it commits the manifest; use a directory all ranks "
                 "share (the scenario's checkpoint.dir) and remove this key");
  finish_section(cm, ctx, kCheckpointKeys, Unknown::kWarn);
}

std::string unresolved_message(const Node& root, const std::vector<UnresolvedAuto>& autos) {
  std::string msg = root.where() + ": the ds_config has " + std::to_string(autos.size()) +
                    " \"auto\" value(s) that the scenario does not give (Hugging Face's Trainer fills \"auto\" from "
                    "its arguments; Twin-Flow from the scenario):";
  for (const UnresolvedAuto& a : autos) msg += "\n  " + a.where + ": " + a.path + ": set " + a.hint;
  return msg;
}

}  // namespace

void read_ds_config(const Node& root, Ctx& ctx, const ClientSettings& client, const Node*& precision_node) {
  Scenario& s = *ctx.s;
  MapReader m(root, ctx.warnings(), "a DeepSpeed config");
  read_batch(m, root, ctx, client);

  PrecisionSections sec;
  sec.bf16 = m.find("bf16");
  const Node* bf16_alias = m.find("bfloat16");  // DeepSpeed's other spelling
  if (sec.bf16 && bf16_alias) config::fail(*bf16_alias, "conflicts with bf16; set one of them");
  if (!sec.bf16) sec.bf16 = bf16_alias;
  sec.fp16 = m.find("fp16");
  for (const Node* p : {sec.bf16, sec.fp16})
    if (p && !p->is_map()) config::fail(*p, "expected a section {enabled, ...} (a mapping), got " + p->describe());
  read_ds_precision(sec, ctx, client, precision_node);
  read_loss_scaling(sec.fp16, ctx, client);
  finish_precision_sections(sec, ctx);

  const auto num_as_is = [&ctx](const Node& n) { return read_clipping(as_converted(n, Conv::kAsIs, ctx, false)); };
  const Picked<double> clip = pick<double>(ctx, m.find("gradient_clipping"), client.gradient_clipping,
                                           "training.gradient_clipping", num_as_is, read_clipping);
  if (clip.value) {
    s.training.gradient_clipping = *clip.value;
  } else if (!is_auto(key_of(&root, "gradient_clipping"))) {
    s.training.gradient_clipping = kDeepSpeedGradientClippingDefault;
    ctx.add_default("gradient_clipping", number_text(kDeepSpeedGradientClippingDefault),
                    "DeepSpeed's since PR #8068 (deepspeed/runtime/constants.py GRADIENT_CLIPPING_DEFAULT; 0, no "
                    "clipping, before); write \"gradient_clipping\": 0 to train without clipping");
  }
  const auto bool_as_is = [&ctx](const Node& n) { return ds_bool(ctx, n, Conv::kAsIs); };
  const Picked<bool> pre =
      pick<bool>(ctx, m.find("prescale_gradients"), client.prescale_gradients, "training.prescale_gradients",
                 bool_as_is, [](const Node& n) { return config::read_bool(n); });
  if (pre.value)
    s.training.prescale_gradients = *pre.value;
  else if (!is_auto(key_of(&root, "prescale_gradients")))
    ctx.add_default("prescale_gradients", "false", "DeepSpeed's (deepspeed/runtime/constants.py)");

  read_optimizer_section(m, ctx, client);
  read_scheduler_section(m, ctx, client);
  read_zero_section(m, ctx);
  read_checkpoint_section(m, ctx);
  refuse_top_features(m, ctx);
  finish_section(m, ctx, kTopKeys, Unknown::kWarn);
  if (!ctx.unresolved.empty()) throw InputError(unresolved_message(root, ctx.unresolved));
}

}  // namespace tf::core::detail

namespace tf::core {

std::optional<std::string> bare_ds_config_message(std::string_view text, const std::string& file) {
  using detail::join;
  using detail::kTopKeys;
  using detail::listed;
  config::Node root;
  try {
    root = config::parse_hjson(text, file);
  } catch (const InputError&) {
    return std::nullopt;
  }
  if (!root.is_map()) return std::nullopt;
  std::vector<std::string_view> found;
  for (const std::string& k : root.keys) {
    if (k == "model" || k == "cluster") return std::nullopt;  // a scenario's
    if (listed(kTopKeys, k) && found.size() < 4) found.push_back(k);
  }
  if (found.empty()) return std::nullopt;
  const std::string name = std::filesystem::path(file).filename().string();
  return printable(file) + ": this is a DeepSpeed config (it has " + join(found) +
         "), not a Twin-Flow scenario. A scenario names the model and the machine and refers to the ds_config; "
         "for example, a file run.yaml next to it:\n"
         "  model: " +
         std::string(model_preset_names().front()) + "   # a preset (" + join(model_preset_names()) +
         ") or {type: decoder, layers: ..., hidden: ..., heads: ..., vocab: ..., seq: ...}\n"
         "  cluster: {profile: " +
         std::string(builtin_hardware_profile_names().front()) +
         "}   # built in: " + join(builtin_hardware_profile_names()) +
         "\n"
         "  ds_config: " +
         printable(name) +
         "\n"
         "then run `twinflow simulate run.yaml`";
}

}  // namespace tf::core
