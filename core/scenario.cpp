// Scenario parsing: the native YAML schema and DeepSpeed ds_config (file or embedded), with key-path errors.
#include "core/scenario.h"

#include <algorithm>
#include <cctype>

#include "core/config_node.h"
#include "core/error.h"
#include "core/scenario_builtin.h"
#include "core/strings.h"

namespace tf::core {

using config::MapReader;
using config::Node;

namespace {

constexpr int64_t kMaxBatch = int64_t(1) << 20;
constexpr int64_t kMaxWorld = int64_t(1) << 20;  // with kMaxBatch: a global batch fits in int64
constexpr int64_t kMaxSteps = int64_t(1) << 40;
constexpr double kMaxClip = 1e30;

std::string join(const std::vector<std::string_view>& v) {
  std::string out;
  for (auto s : v) out += (out.empty() ? "" : ", ") + std::string(s);
  return out;
}

// A stand-in node naming a key that is absent (for errors about defaults taken from elsewhere).
Node at_key(const Node& parent, std::string_view key) {
  Node n;
  n.file = parent.file;
  n.line = parent.line;
  n.col = parent.col;
  n.path = parent.path.empty() ? std::string(key) : parent.path + "." + std::string(key);
  return n;
}

// Appends where an included document was named, to its errors.
[[noreturn]] void rethrow_included(const InputError& e, const Node& named_at, std::string_view what) {
  throw InputError(std::string(e.what()) + " (in the " + std::string(what) + " named at " + named_at.where() + " " +
                   named_at.path + ")");
}

bool looks_like_path(std::string_view s) {
  return s.find('/') != std::string_view::npos || s.ends_with(".yaml") || s.ends_with(".yml") || s.ends_with(".json");
}

struct Ctx {
  std::filesystem::path base_dir;     // absolute; empty: no relative files
  std::filesystem::path display_dir;  // the scenario's directory as the caller wrote it, for messages
  Scenario* s = nullptr;
  std::vector<std::string>& warnings() { return s->warnings; }
};

std::filesystem::path resolve(const Ctx& ctx, const Node& n, const std::string& p) {
  std::filesystem::path path(p);
  if (path.is_absolute()) return path.lexically_normal();
  if (ctx.base_dir.empty())
    config::fail(n, "relative path '" + config::excerpt(p, 4096) +
                        "' needs a scenario file to resolve against (this scenario is text)");
  return (ctx.base_dir / path).lexically_normal();
}

// How to name a resolved file in messages: relative to the scenario as the caller named it.
std::string display(const Ctx& ctx, const std::string& p) {
  std::filesystem::path path(p);
  if (path.is_absolute()) return path.lexically_normal().string();
  if (ctx.s->file.empty()) return (ctx.base_dir / path).lexically_normal().string();  // text
  return (ctx.display_dir / path).lexically_normal().string();
}

// ---- model --------------------------------------------------------------------------------------

ModelSpec read_model(const Node& n, Ctx& ctx) {
  const std::string presets = join(model_preset_names());
  if (n.is_scalar()) {
    auto spec = find_model_preset(n.scalar);
    if (!spec) config::fail(n, "unknown model preset '" + config::excerpt(n.scalar) + "'; allowed: " + presets);
    normalize_model(*spec);
    return *spec;
  }
  MapReader m(n, ctx.warnings(), "a model preset name or a mapping {preset | type, ...}");
  ModelSpec spec;
  const Node* preset = m.find("preset");
  if (preset) {
    const std::string name = config::read_string(*preset);
    auto p = find_model_preset(name);
    if (!p) config::fail(*preset, "unknown model preset '" + config::excerpt(name) + "'; allowed: " + presets);
    spec = *p;
    if (const Node* t = m.find("type")) {
      const std::string type = config::read_choice(*t, {"decoder", "mlp"});
      if ((type == "mlp") != (spec.type == ModelType::kMlp))
        config::fail(*t, "preset '" + name + "' is a " + (spec.type == ModelType::kMlp ? "mlp" : "decoder"));
    }
  } else {
    const std::string type = config::read_choice(
        m.require("type", "decoder or mlp (or give preset: one of " + presets + ")"), {"decoder", "mlp"});
    spec.type = type == "mlp" ? ModelType::kMlp : ModelType::kDecoder;
    spec.name = type;
  }
  if (const Node* nm = m.find("name")) spec.name = config::read_string(*nm);

  std::vector<std::pair<std::string, const Node*>> read;  // field -> node, to place check_model's issue
  if (spec.type == ModelType::kMlp) {
    const Node* dims = preset ? m.find("dims") : &m.require("dims", "the layer sizes [in, hidden..., out]");
    if (dims) {
      if (!dims->is_seq())
        config::fail(*dims, "expected a list of layer sizes [in, hidden..., out], got " + dims->describe());
      if (dims->children.size() < 2 || dims->children.size() > kMaxMlpLayers + 1)
        config::fail(*dims, "needs 2 to " + std::to_string(kMaxMlpLayers + 1) + " sizes [in, hidden..., out], got " +
                                std::to_string(dims->children.size()));
      spec.mlp_dims.clear();
      for (const Node& d : dims->children) spec.mlp_dims.push_back(config::read_int(d, 1, kMaxMlpDim));
      for (size_t i = 0; i < dims->children.size(); ++i)
        read.emplace_back("dims[" + std::to_string(i) + "]", &dims->children[i]);
    }
    if (const Node* b = m.find("bias")) spec.mlp_bias = config::read_bool(*b);
  } else {
    DecoderShape& d = spec.decoder;
    struct Field {
      const char* key;
      int64_t* dst;
      int64_t hi;
      bool required;
    };
    const Field fields[] = {{"layers", &d.layers, kMaxLayers, true},
                            {"hidden", &d.hidden, kMaxHidden, true},
                            {"heads", &d.heads, kMaxHidden, true},
                            {"ffn", &d.ffn, kMaxFfn, false},
                            {"vocab", &d.vocab, kMaxVocab, true},
                            {"seq", &d.seq, kMaxSeq, true},
                            {"max_positions", &d.max_positions, kMaxSeq, false}};
    for (const Field& f : fields) {
      const Node* v = (f.required && !preset) ? &m.require(f.key, "a positive integer") : m.find(f.key);
      if (!v) continue;
      *f.dst = config::read_int(*v, 1, f.hi);
      read.emplace_back(f.key, v);
    }
    if (const Node* t = m.find("tied_embeddings")) d.tied_embeddings = config::read_bool(*t);
  }
  m.warn_unknown();
  normalize_model(spec);
  if (auto issue = check_model(spec)) {
    for (const auto& [field, node] : read)
      if (field == issue->field) config::fail(*node, issue->what);
    config::fail(at_key(n, issue->field), issue->what);
  }
  return spec;
}

// ---- cluster ------------------------------------------------------------------------------------

HardwareProfile resolve_profile(const Node& pn, Ctx& ctx, std::filesystem::path& file_out) {
  const std::string name = config::read_string(pn);
  const std::string builtins = join(builtin_hardware_profile_names());
  std::filesystem::path file;
  if (looks_like_path(name)) {
    file = resolve(ctx, pn, name);
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
      config::fail(pn, "hardware profile file '" + config::excerpt(file.string(), 4096) +
                           "' does not exist; allowed: a profile name (" + builtins + ") or a path to a .yaml file");
  } else {
    const bool plain = std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (!plain)
      config::fail(pn, "'" + config::excerpt(name) + "' is neither a profile name nor a path; allowed: " + builtins);
    std::error_code ec;
    if (!ctx.base_dir.empty()) {
      const auto candidate = ctx.base_dir / "hardware" / (name + ".yaml");
      if (std::filesystem::exists(candidate, ec)) file = candidate;
    }
    if (file.empty()) {
      auto text = builtin_hardware_profile_text(name);
      if (!text) {
        std::string looked =
            ctx.base_dir.empty() ? "" : "looked for " + (ctx.base_dir / "hardware" / (name + ".yaml")).string() + "; ";
        config::fail(pn, "unknown hardware profile '" + name + "'; " + looked + "allowed: " + builtins +
                             ", or a path to a .yaml file");
      }
      try {
        return parse_hardware_profile(*text, "<built-in>/scenarios/hardware/" + name + ".yaml");
      } catch (const InputError& e) {
        rethrow_included(e, pn, "hardware profile");
      }
    }
  }
  try {
    const std::string text = config::read_document(file, "hardware profile");
    HardwareProfile p = parse_hardware_profile(
        text, looks_like_path(name) ? display(ctx, name) : display(ctx, "hardware/" + name + ".yaml"));
    p.file = file;
    file_out = file;
    return p;
  } catch (const InputError& e) {
    rethrow_included(e, pn, "hardware profile");
  }
}

ClusterConfig read_cluster(const Node& n, Ctx& ctx) {
  MapReader m(n, ctx.warnings(), "the cluster {profile, nodes, gpus_per_node, cpu_cores_per_gpu}");
  ClusterConfig c;
  const Node& pn = m.require(
      "profile", "a hardware profile name (" + join(builtin_hardware_profile_names()) + ") or a path to a .yaml file");
  c.profile = config::read_string(pn);
  c.hardware = resolve_profile(pn, ctx, c.profile_file);
  for (const auto& w : c.hardware.warnings) ctx.warnings().push_back(w);
  const HardwareProfile& hw = c.hardware;

  const Node* nodes = m.find("nodes");
  if (nodes) c.nodes = int(config::read_int(*nodes, 1, 1 << 16));
  c.gpus_per_node = hw.gpus_per_node;
  if (const Node* g = m.find("gpus_per_node")) {
    c.gpus_per_node = int(config::read_int(*g, 1, 1 << 16));
    if (c.gpus_per_node > hw.gpus_per_node)
      config::fail(*g, std::to_string(c.gpus_per_node) + " exceeds the " + std::to_string(hw.gpus_per_node) +
                           " GPUs per node of profile '" + hw.name + "'; allowed [1, " +
                           std::to_string(hw.gpus_per_node) + "]");
  }
  if (int64_t(c.nodes) * c.gpus_per_node > kMaxWorld)
    config::fail(*nodes, std::to_string(c.nodes) + " nodes x " + std::to_string(c.gpus_per_node) + " GPUs exceed " +
                             std::to_string(kMaxWorld) + " ranks; allowed [1, " +
                             std::to_string(kMaxWorld / c.gpus_per_node) + "]");
  const int max_cores = std::max(1, hw.cpu.cores / c.gpus_per_node);
  c.cpu_cores_per_gpu = max_cores;
  if (const Node* cc = m.find("cpu_cores_per_gpu")) {
    c.cpu_cores_per_gpu = int(config::read_int(*cc, 1, 1 << 16));
    if (c.cpu_cores_per_gpu > max_cores)
      config::fail(*cc, std::to_string(c.cpu_cores_per_gpu) + " cores per GPU exceed the node's " +
                            std::to_string(hw.cpu.cores) + " cores / " + std::to_string(c.gpus_per_node) +
                            " GPUs; allowed [1, " + std::to_string(max_cores) + "]");
  }
  if (c.nodes > 1 && hw.inter_node.gbps <= 0)
    config::fail(*nodes, std::to_string(c.nodes) + " nodes need a network, but profile '" + hw.name +
                             "' has inter_node.gbps 0; allowed: 1");
  m.warn_unknown();
  return c;
}

// ---- optimizer ----------------------------------------------------------------------------------

double read_beta(const Node& n) {
  const double v = config::read_number(n, 0, 1);
  if (v == 1) config::fail(n, n.scalar + " is out of range; allowed [0, 1)");
  return v;
}

// `ds`: DeepSpeed semantics (type "Adam" is AdamW unless adam_w_mode is false; DeepSpeed's defaults).
OptimizerConfig read_optimizer(const Node& n, Ctx& ctx, bool ds) {
  MapReader m(n, ctx.warnings(), "the optimizer {type, params}");
  const Node& tn = m.require("type", "adamw, adam, adagrad or lion");
  const std::string type = ascii_lower(config::read_string(tn));
  OptimizerConfig o;
  try {
    o.kind = parse_optimizer(type);
  } catch (const InputError&) {
    config::fail(tn, "'" + config::excerpt(tn.scalar) +
                         "' is not supported; allowed: adamw, adam, adagrad, lion (case-insensitive)");
  }
  o.hp = default_hyper_params(o.kind);
  if (ds) {
    // DeepSpeed's FusedAdam/DeepSpeedCPUAdam, DeepSpeedCPUAdagrad and FusedLion default weight_decay
    // to 0; FusedLion's lr is 1e-3 and betas (0.9, 0.999).
    o.hp.weight_decay = 0;
    if (o.kind == OptimizerKind::kLion) o.hp.lr = 1e-3, o.hp.beta2 = 0.999;
  }
  const Node* pn = m.find("params");
  m.warn_unknown();
  // deepspeed/runtime/config.py: ADAM_W_MODE_DEFAULT = True ("default to adamw logic for adam/adamw
  // optimizers unless user explicitly opts out" with params.adam_w_mode: false).
  const bool ds_adam = ds && o.kind == OptimizerKind::kAdam;
  if (ds_adam) o.kind = OptimizerKind::kAdamW;
  if (!pn) return o;
  MapReader p(*pn, ctx.warnings(), "the optimizer's params");
  if (ds_adam) {
    if (const Node* w = p.find("adam_w_mode"); w && !config::read_bool(*w)) o.kind = OptimizerKind::kAdam;
  } else if (ds && o.kind == OptimizerKind::kAdamW) {
    p.find("adam_w_mode");  // AdamW is decoupled whatever this says
  }
  if (ds && (o.kind == OptimizerKind::kAdam || o.kind == OptimizerKind::kAdamW))
    if (const Node* bc = p.find("bias_correction"); bc && !config::read_bool(*bc))
      config::fail(*bc, "false is not supported (the kernels always correct the bias); allowed: true");
  if (const Node* v = p.find("lr")) o.hp.lr = config::read_number(*v, 0, 1e6);
  if (const Node* v = p.find("weight_decay")) o.hp.weight_decay = config::read_number(*v, 0, 1e6);
  if (o.kind != OptimizerKind::kAdagrad) {
    if (const Node* b = p.find("betas")) {
      if (!b->is_seq() || b->children.size() != 2)
        config::fail(*b, "expected a list [beta1, beta2], got " + b->describe() + "; each in [0, 1)");
      o.hp.beta1 = read_beta(b->children[0]);
      o.hp.beta2 = read_beta(b->children[1]);
    }
  } else {
    if (const Node* v = p.find("lr_decay")) o.hp.lr_decay = config::read_number(*v, 0, 1e6);
    if (const Node* v = p.find("initial_accumulator_value"))
      o.hp.initial_accumulator_value = config::read_number(*v, 0, 1e30);
  }
  if (o.kind != OptimizerKind::kLion)
    if (const Node* v = p.find("eps")) o.hp.eps = config::read_number(*v, 0, 1, true);
  try {
    validate(o.kind, o.hp);
  } catch (const InputError& e) {
    config::fail(*pn, e.what());
  }
  p.warn_unknown(std::string("unknown key (not a parameter of ") + std::string(optimizer_name(o.kind)) + "), ignored");
  return o;
}

// ---- ZeRO ---------------------------------------------------------------------------------------

OffloadOptimizerConfig read_offload(const Node& n, Ctx& ctx) {
  MapReader m(n, ctx.warnings(), "offload_optimizer {device, ratio, pin_memory}");
  OffloadOptimizerConfig o;
  if (const Node* d = m.find("device")) {
    if (d->is_scalar() && ascii_lower(d->scalar) == "nvme")
      config::fail(*d, "'nvme' is not supported; allowed: none, cpu");
    o.device = config::read_choice(*d, {"none", "cpu"}) == "cpu" ? OffloadDevice::kCpu : OffloadDevice::kNone;
  }
  if (const Node* r = m.find("ratio")) o.ratio = config::read_number(*r, 0, 1);
  if (const Node* p = m.find("pin_memory")) o.pin_memory = config::read_bool(*p);
  m.warn_unknown("unknown key (not modelled by Twin-Flow), ignored");
  return o;
}

ZeroConfig read_zero(const Node& n, Ctx& ctx, bool ds) {
  MapReader m(n, ctx.warnings(),
              ds ? "zero_optimization {stage, offload_optimizer, sub_group_size}"
                 : "zero {stage, offload_optimizer, sub_group_size}");
  ZeroConfig z;
  z.stage = int(config::read_int(m.require("stage", "1, 2 or 3"), 1, 3));
  const Node* off = m.find("offload_optimizer");
  if (off) z.offload_optimizer = read_offload(*off, ctx);
  if (ds) {
    // The ZeRO-Offload tutorial's legacy switch: "cpu_offload": true == offload_optimizer {device: cpu}.
    if (const Node* legacy = m.find("cpu_offload"); legacy && config::read_bool(*legacy)) {
      if (off) config::fail(*legacy, "conflicts with offload_optimizer; set one of them");
      z.offload_optimizer.device = OffloadDevice::kCpu;
    }
  }
  if (const Node* s = m.find("sub_group_size")) z.sub_group_size = config::read_int(*s, 1, int64_t(1) << 62);
  m.warn_unknown(ds ? "unknown key (not modelled by Twin-Flow), ignored" : "unknown key, ignored");
  return z;
}

// ---- training -----------------------------------------------------------------------------------

LossScaleConfig read_loss_scaling(MapReader& m) {
  LossScaleConfig l;
  if (const Node* v = m.find("loss_scale")) l.loss_scale = config::read_number(*v, 0, 1e38);
  if (const Node* v = m.find("initial_scale_power")) l.initial_scale_power = int(config::read_int(*v, 0, 127));
  if (const Node* v = m.find("loss_scale_window")) l.loss_scale_window = config::read_int(*v, 1, int64_t(1) << 31);
  if (const Node* v = m.find("hysteresis")) l.hysteresis = int(config::read_int(*v, 1, int64_t(1) << 30));
  if (const Node* v = m.find("min_loss_scale")) l.min_loss_scale = config::read_number(*v, 0, 1e38, true);
  return l;
}

// Keys a ds_config owns; the training section must not repeat them.
constexpr std::string_view kDsOwned[][2] = {{"micro_batch", "train_micro_batch_size_per_gpu"},
                                            {"grad_accum", "gradient_accumulation_steps"},
                                            {"precision", "bf16/fp16"},
                                            {"loss_scaling", "fp16"},
                                            {"gradient_clipping", "gradient_clipping"},
                                            {"prescale_gradients", "prescale_gradients"}};

void read_training(const Node& n, Ctx& ctx, bool ds, TrainingConfig& t, const Node*& precision_node) {
  MapReader m(n, ctx.warnings(), "the training setup {micro_batch, grad_accum, steps, precision, ...}");
  if (ds)
    for (const auto& [key, ds_key] : kDsOwned)
      if (const Node* v = m.find(key))
        config::fail(*v, "also set by ds_config (" + std::string(ds_key) + "); set it in one place");
  if (!ds) {
    t.micro_batch =
        config::read_int(m.require("micro_batch", "a positive integer: samples per GPU per micro-step"), 1, kMaxBatch);
    if (const Node* v = m.find("grad_accum")) t.grad_accum = config::read_int(*v, 1, kMaxBatch);
    if (const Node* v = m.find("precision")) {
      const std::string p = config::read_choice(*v, {"bf16", "fp16", "fp32"});
      t.precision = p == "bf16" ? Precision::kBF16 : p == "fp16" ? Precision::kFP16 : Precision::kFP32;
      precision_node = v;
    }
    if (const Node* v = m.find("loss_scaling")) {
      MapReader l(*v, ctx.warnings(), "fp16 loss scaling {loss_scale, initial_scale_power, ...}");
      t.loss_scaling = read_loss_scaling(l);
      l.warn_unknown();
      if (t.precision != Precision::kFP16)
        ctx.warnings().push_back(v->key_where() + ": " + v->path + ": ignored unless precision is fp16");
    }
    if (const Node* v = m.find("gradient_clipping")) t.gradient_clipping = config::read_number(*v, 0, kMaxClip);
    if (const Node* v = m.find("prescale_gradients")) t.prescale_gradients = config::read_bool(*v);
  }
  if (const Node* v = m.find("steps")) t.steps = config::read_int(*v, 1, kMaxSteps);
  if (const Node* v = m.find("activation_checkpointing")) t.activation_checkpointing = config::read_bool(*v);
  m.warn_unknown();
}

// ---- ds_config ----------------------------------------------------------------------------------

// DeepSpeed's batch rule: train_batch_size = micro x accumulation x data-parallel world; any two give the third.
void read_ds_batch(MapReader& m, const Node& root, int world, TrainingConfig& t) {
  const Node* tbs = m.find("train_batch_size");
  const Node* mb = m.find("train_micro_batch_size_per_gpu");
  const Node* ga = m.find("gradient_accumulation_steps");
  const int64_t tb = tbs ? config::read_int(*tbs, 1, int64_t(1) << 40) : 0;
  if (mb) t.micro_batch = config::read_int(*mb, 1, kMaxBatch);
  if (ga) t.grad_accum = config::read_int(*ga, 1, kMaxBatch);
  if (!tbs && !mb)
    throw InputError(root.where() + ": " + at_key(root, "train_micro_batch_size_per_gpu").path +
                     ": missing required key; DeepSpeed needs train_micro_batch_size_per_gpu or train_batch_size");
  if (!tbs) return;
  const std::string rule = " (train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x " +
                           std::to_string(world) + " GPUs)";
  if (mb && ga) {
    if (tb != t.micro_batch * t.grad_accum * world)
      config::fail(*tbs, std::to_string(tb) + " != " + std::to_string(t.micro_batch) + " x " +
                             std::to_string(t.grad_accum) + " x " + std::to_string(world) + rule);
  } else {
    const int64_t known = mb ? t.micro_batch : (ga ? t.grad_accum : 1);
    if (tb % (known * world) != 0)
      config::fail(*tbs, std::to_string(tb) + " is not divisible by " + std::to_string(known * world) + rule);
    const int64_t other = tb / (known * world);
    if (other > kMaxBatch) config::fail(*tbs, std::to_string(tb) + " is too large" + rule);
    if (mb)
      t.grad_accum = other;
    else if (ga)
      t.micro_batch = other;
    else
      t.micro_batch = other, t.grad_accum = 1;
  }
}

void read_ds_config(const Node& root, Ctx& ctx, const Node*& precision_node) {
  Scenario& s = *ctx.s;
  MapReader m(root, ctx.warnings(), "a DeepSpeed config");
  TrainingConfig& t = s.training;
  read_ds_batch(m, root, s.cluster.world_size(), t);

  bool bf16 = false, fp16 = false;
  const Node* bf16_node = m.find("bf16");
  const Node* bf16_alias = m.find("bfloat16");  // DeepSpeed's other spelling
  if (bf16_node && bf16_alias) config::fail(*bf16_alias, "conflicts with bf16; set one of them");
  if (!bf16_node) bf16_node = bf16_alias;
  if (bf16_node) {
    MapReader b(*bf16_node, ctx.warnings(), "the bf16 section {enabled}");
    if (const Node* e = b.find("enabled")) bf16 = config::read_bool(*e), precision_node = e;
    b.warn_unknown("unknown key (not modelled by Twin-Flow), ignored");
  }
  if (const Node* f = m.find("fp16")) {
    MapReader fm(*f, ctx.warnings(), "the fp16 section {enabled, loss_scale, ...}");
    if (const Node* e = fm.find("enabled")) {
      fp16 = config::read_bool(*e);
      if (fp16 && bf16) config::fail(*e, "fp16 and bf16 are both enabled; enable one");
      if (fp16) precision_node = e;
    }
    t.loss_scaling = read_loss_scaling(fm);
    fm.warn_unknown("unknown key (not modelled by Twin-Flow), ignored");
  }
  t.precision = bf16 ? Precision::kBF16 : fp16 ? Precision::kFP16 : Precision::kFP32;
  if (const Node* v = m.find("gradient_clipping")) t.gradient_clipping = config::read_number(*v, 0, kMaxClip);
  if (const Node* v = m.find("prescale_gradients")) t.prescale_gradients = config::read_bool(*v);
  s.optimizer = read_optimizer(m.require("optimizer", "{type, params}: the optimizer DeepSpeed builds"), ctx, true);
  s.zero = read_zero(m.require("zero_optimization", "{stage: 1|2|3, offload_optimizer: {...}}"), ctx, true);
  m.warn_unknown("unknown key (not modelled by Twin-Flow), ignored");
}

// ---- the scenario -------------------------------------------------------------------------------

}  // namespace

std::string_view workload_type_name(WorkloadType w) {
  switch (w) {
    case WorkloadType::kAuto: return "auto";
    case WorkloadType::kSynthetic: return "synthetic";
    case WorkloadType::kMlp: return "mlp";
  }
  return "?";
}

namespace {

void parse(const Node& root, Ctx& ctx) {
  Scenario& s = *ctx.s;
  MapReader top(root, s.warnings, "a scenario");
  if (const Node* v = top.find("name")) s.name = config::read_string(*v);
  if (const Node* v = top.find("description")) s.description = config::read_string(*v);

  s.model = read_model(
      top.require("model", "a preset (" + join(model_preset_names()) + ") or {type: decoder|mlp, ...}"), ctx);
  s.cluster = read_cluster(top.require("cluster", "{profile, nodes, gpus_per_node, cpu_cores_per_gpu}"), ctx);

  const Node* ds = top.find("ds_config");
  const Node* precision_node = nullptr;
  const Node* training_node =
      ds ? top.find("training") : &top.require("training", "{micro_batch, grad_accum, steps, precision, ...}");
  const Node training = training_node ? *training_node : at_key(root, "training");
  if (training_node) read_training(training, ctx, ds != nullptr, s.training, precision_node);

  Node ds_file_root;  // keeps a ds_config file's tree alive while its nodes are referenced
  if (ds) {
    s.from_ds_config = true;
    for (const char* owned : {"optimizer", "zero"})
      if (const Node* v = top.find(owned))
        config::fail(*v, "the scenario takes its " + std::string(owned) +
                             " settings from ds_config; remove this section or ds_config");
    if (ds->is_map()) {
      read_ds_config(*ds, ctx, precision_node);
    } else if (!ds->is_scalar()) {
      config::fail(*ds, "expected a path to a DeepSpeed .json file or an embedded mapping, got " + ds->describe());
    } else {
      const std::string p = config::read_string(*ds);
      s.ds_config_file = resolve(ctx, *ds, p);
      try {
        const std::string text = config::read_document(s.ds_config_file, "ds_config");
        const std::string label = display(ctx, p);
        ds_file_root = (s.ds_config_file.extension() == ".yaml" || s.ds_config_file.extension() == ".yml")
                           ? config::parse_yaml(text, label)
                           : config::parse_json(text, label);
        read_ds_config(ds_file_root, ctx, precision_node);
      } catch (const InputError& e) {
        rethrow_included(e, *ds, "ds_config");
      }
    }
  } else {
    s.optimizer =
        read_optimizer(top.require("optimizer", "{type: adamw|adam|adagrad|lion, params: {...}}"), ctx, false);
    s.zero =
        read_zero(top.require("zero", "{stage: 1|2|3, offload_optimizer: {device, ratio, pin_memory}}"), ctx, false);
  }

  if (const Node* w = top.find("workload")) {
    MapReader wm(*w, s.warnings, "the workload {type: auto|synthetic|mlp, seed}");
    if (const Node* t = wm.find("type")) {
      const std::string v = ascii_lower(config::read_string(*t));
      if (v == "auto")
        s.workload.type = WorkloadType::kAuto;
      else if (v == "synthetic")
        s.workload.type = WorkloadType::kSynthetic;
      else if (v == "mlp" && s.model.type == ModelType::kMlp)
        s.workload.type = WorkloadType::kMlp;
      else if (v == "mlp")
        config::fail(*t, "the mlp workload needs an MLP model (model: {type: mlp, dims: [...]}); the GPT/OPT "
                         "decoder's GPU workload is not written yet; allowed here: auto, synthetic");
      else
        config::fail(*t, "'" + config::excerpt(t->scalar) + "' is not a workload; allowed: auto, synthetic, mlp");
    }
    if (const Node* sd = wm.find("seed")) s.workload.seed = uint64_t(config::read_int(*sd, 0, INT64_MAX));
    wm.warn_unknown();
  }
  if (const Node* r = top.find("reference")) {
    MapReader rm(*r, s.warnings, "a published result {speedup_vs_full_offload, source}");
    ReferenceResult ref;
    ref.speedup_vs_full_offload = config::read_number(
        rm.require("speedup_vs_full_offload", "the reported speedup over ratio 1 (a number > 0)"), 0, 1e6, true);
    ref.source = config::read_string(rm.require("source", "a source: where the figure was published"));
    rm.warn_unknown();
    s.reference = ref;
  }
  top.warn_unknown();

  // Cross-checks.
  const GpuProfile& gpu = s.cluster.hardware.gpu;
  if (s.training.precision == Precision::kBF16 && gpu.bf16_tflops <= 0) {
    const Node where = precision_node ? *precision_node : at_key(training, "precision");
    config::fail(where, "bf16 is not supported by " + gpu.name + " (profile '" + s.cluster.hardware.name +
                            "' has bf16_tflops 0); allowed: fp16, fp32");
  }
  const int e = s.training.precision == Precision::kFP32 ? 4 : 2;
  try {
    if (s.model.type == ModelType::kMlp) {
      for (size_t i = 0; i + 1 < s.model.mlp_dims.size(); ++i)
        activation_bytes(s.model, LayerKind::kLinear, i, s.training.micro_batch, e);
    } else {
      for (LayerKind k : {LayerKind::kEmbedding, LayerKind::kBlock, LayerKind::kHead})
        activation_bytes(s.model, k, 0, s.training.micro_batch, e);
    }
  } catch (const InputError& err) {
    const Node* mb = nullptr;
    for (size_t i = 0; i < training.keys.size(); ++i)
      if (training.keys[i] == "micro_batch") mb = &training.children[i];
    config::fail(mb ? *mb : at_key(training, "micro_batch"),
                 std::string(err.what()) + " at micro_batch " + std::to_string(s.training.micro_batch));
  }
}

Scenario parse_root(const Node& root, const std::filesystem::path& base_dir, const std::filesystem::path& file) {
  Scenario s;
  s.file = file;
  Ctx ctx{base_dir, file.parent_path(), &s};
  parse(root, ctx);
  if (s.name.empty()) s.name = file.empty() ? "scenario" : file.stem().string();
  return s;
}

}  // namespace

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kBF16: return "bf16";
    case Precision::kFP16: return "fp16";
    case Precision::kFP32: return "fp32";
  }
  return "?";
}

Scenario load_scenario(const std::filesystem::path& file) {
  const std::string text = config::read_document(file, "scenario");
  const std::filesystem::path abs = std::filesystem::absolute(file).lexically_normal();
  const Node root = config::parse_yaml(text, file.string());
  return parse_root(root, abs.parent_path(), file);
}

Scenario parse_scenario(std::string_view yaml_text, const std::filesystem::path& base_dir,
                        const std::string& display_name) {
  const Node root = config::parse_yaml(yaml_text, display_name);
  return parse_root(root, base_dir, {});
}

std::string_view default_scenario_text() { return builtin::default_scenario(); }

Scenario load_default_scenario() {
  return parse_scenario(default_scenario_text(), {},
                        "<built-in>/scenarios/" + std::string(builtin::default_scenario_name()));
}

}  // namespace tf::core
