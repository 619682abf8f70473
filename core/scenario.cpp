// Scenario parsing: the native YAML schema and DeepSpeed ds_config (file or embedded), with key-path errors.
#include "core/scenario.h"

#include <algorithm>
#include <cctype>

#include "core/config_node.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/scenario_builtin.h"
#include "core/scenario_read.h"
#include "core/strings.h"
#include "core/token_data.h"

namespace tf::core {

using config::MapReader;
using config::Node;
using detail::at_key;
using detail::ClientSettings;
using detail::Ctx;
using detail::join;

namespace {

// Appends where an included document was named, to its errors.
[[noreturn]] void rethrow_included(const InputError& e, const Node& named_at, std::string_view what) {
  throw InputError(std::string(e.what()) + " (in the " + std::string(what) + " named at " + named_at.where() + " " +
                   named_at.path + ")");
}

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
  m.fail_unknown();
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
  const ProfileRef ref = classify_profile_ref(name);
  if (ref == ProfileRef::kInvalid)
    config::fail(pn, "'" + config::excerpt(name) +
                         "' is neither a profile name nor a .yaml path; a name has only "
                         "letters, digits, '-', '_' and '.' (no '/' or '..'), a path ends in .yaml; allowed: " +
                         builtins + ", or a path to a .yaml file");
  if (ref == ProfileRef::kPath) {
    file = resolve(ctx, pn, name);
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
      config::fail(pn, "hardware profile file '" + config::excerpt(file.string(), 4096) +
                           "' does not exist; allowed: a profile name (" + builtins + ") or a path to a .yaml file");
  } else {
    std::error_code ec;
    if (!ctx.base_dir.empty()) {
      const auto candidate = ctx.base_dir / "hardware" / (name + ".yaml");
      if (std::filesystem::exists(candidate, ec)) file = candidate;
    }
    if (file.empty()) {
      auto text = builtin_hardware_profile_text(name);
      if (!text) {
        std::string looked =
            ctx.base_dir.empty()
                ? ""
                : "looked for " + config::excerpt((ctx.base_dir / "hardware" / (name + ".yaml")).string(), 4096) + "; ";
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
        text, ref == ProfileRef::kPath ? display(ctx, name) : display(ctx, "hardware/" + name + ".yaml"));
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
  const std::string from_profile = "the profile's (" + hw.name + ")";

  const Node* nodes = m.find("nodes");
  if (nodes)
    c.nodes = int(config::read_int(*nodes, 1, kMaxNodes));
  else
    ctx.add_default("cluster.nodes", "1", "the scenario schema's default");
  c.gpus_per_node = hw.gpus_per_node;
  if (const Node* g = m.find("gpus_per_node")) {
    c.gpus_per_node = int(config::read_int(*g, 1, 1 << 16));
    if (c.gpus_per_node > hw.gpus_per_node)
      config::fail(*g, std::to_string(c.gpus_per_node) + " exceeds the " + std::to_string(hw.gpus_per_node) +
                           " GPUs per node of profile '" + hw.name + "'; allowed [1, " +
                           std::to_string(hw.gpus_per_node) + "]");
  } else {
    ctx.add_default("cluster.gpus_per_node", std::to_string(c.gpus_per_node), from_profile);
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
  } else {
    ctx.add_default("cluster.cpu_cores_per_gpu", std::to_string(max_cores),
                    "the node's cores shared by its GPUs (" + from_profile + ")");
  }
  if (c.nodes > 1 && hw.inter_node.gbps <= 0)
    config::fail(*nodes, std::to_string(c.nodes) + " nodes need a network, but profile '" + hw.name +
                             "' has inter_node.gbps 0; allowed: 1");
  m.fail_unknown();
  return c;
}

// ---- workload, reference ------------------------------------------------------------------------

void read_workload(const Node& w, Ctx& ctx) {
  Scenario& s = *ctx.s;
  MapReader wm(w, s.warnings, "the workload {type: auto|synthetic|mlp|decoder, seed}");
  const bool mlp = s.model.type == ModelType::kMlp;
  const std::string allowed = mlp ? "auto, synthetic, mlp" : "auto, synthetic, decoder";
  if (const Node* t = wm.find("type")) {
    const std::string v = ascii_lower(config::read_string(*t));
    if (v == "auto")
      s.workload.type = WorkloadType::kAuto;
    else if (v == "synthetic")
      s.workload.type = WorkloadType::kSynthetic;
    else if (v == "mlp" && mlp)
      s.workload.type = WorkloadType::kMlp;
    else if (v == "decoder" && !mlp)
      s.workload.type = WorkloadType::kDecoder;
    else if (v == "mlp" || v == "decoder")
      config::fail(*t, "the " + v + " workload needs " +
                           (v == "mlp" ? "an MLP model (model: {type: mlp, dims: [...]})"
                                       : "a decoder model (a GPT-2/OPT preset or {type: decoder, ...})") +
                           "; allowed here: " + allowed);
    else
      config::fail(*t, "'" + config::excerpt(t->scalar) + "' is not a workload; allowed: " + allowed);
  }
  if (const Node* sd = wm.find("seed")) s.workload.seed = uint64_t(config::read_int(*sd, 0, INT64_MAX));
  wm.fail_unknown();
}

// `data` and `init` describe a decoder's tokens and weights; an MLP trains on generated data.
void require_decoder(const Node& n, const Ctx& ctx, std::string_view what) {
  if (ctx.s->model.type != ModelType::kDecoder)
    config::fail(n, std::string(what) + " needs a decoder model (a GPT-2/OPT preset or {type: decoder, ...}); model '" +
                        ctx.s->model.name + "' is an MLP, which trains on generated data: remove this section");
}

// A decoder's section of one path ({train: PATH}, {from: PATH}): the key's node and the path resolved
// against the scenario's directory.
std::pair<const Node*, std::filesystem::path> read_path_section(const Node& n, Ctx& ctx, std::string_view section,
                                                                std::string_view key, const std::string& hint) {
  std::string what = "{";  // appended, not "{" + ...: GCC 12 warns falsely (-Wrestrict) on that form
  what.append(key).append(": ").append(hint).append("}");
  MapReader m(n, ctx.warnings(), what);
  const Node& p = m.require(key, hint);
  m.fail_unknown();
  require_decoder(n, ctx, section);
  return {&p, resolve(ctx, p, config::read_string(p))};
}

// data: {train: PATH}: the token file, validated now (before any GPU work) against the model's
// vocabulary and sequence length; its errors name the file and the byte offset.
void read_data(const Node& n, Ctx& ctx) {
  const auto [train, path] =
      read_path_section(n, ctx, "data", "train", "a path to a token file (llm.c/nanoGPT .bin of uint16 GPT-2 ids)");
  const DecoderShape& d = ctx.s->model.decoder;
  try {
    const TokenFile file(path, d.vocab, d.seq, "token file");
  } catch (const InputError& e) {
    config::fail(*train, e.what());
  }
  ctx.s->data.train = path;
}

// init: {from: FILE.safetensors}: Hugging Face weights. The file must exist here; its tensors' names and
// shapes are checked when the run loads it, before it allocates GPU memory (core::load_hf_weights).
void read_init(const Node& n, Ctx& ctx) {
  const auto [from, path] =
      read_path_section(n, ctx, "init", "from", "a path to a Hugging Face .safetensors file (GPT-2 or OPT names)");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    config::fail(*from, "'" + config::excerpt(path.string(), 4096) +
                            "' is not a regular file; allowed: a .safetensors file that save_pretrained wrote");
  ctx.s->init.from = path;
}

// checkpoint: {dir, every_steps, keep}: where and how often a run saves (docs/ARCHITECTURE.md,
// "Checkpoints"). The directory need not exist yet: the first save creates it.
void read_checkpoint(const Node& n, Ctx& ctx) {
  MapReader m(n, ctx.warnings(), "{dir, every_steps, keep}");
  CheckpointConfig& c = ctx.s->checkpoint;
  const Node& dir = m.require("dir", "the directory that holds the checkpoints (step-N/)");
  const std::string text = config::read_string(dir);
  if (text.empty()) config::fail(dir, "empty; allowed: a directory path (relative to the scenario's directory)");
  c.dir = resolve(ctx, dir, text);
  if (const Node* e = m.find("every_steps"))
    c.every_steps = config::read_int(*e, 0, int64_t(1) << 40);
  else
    ctx.add_default("checkpoint.every_steps", "0", "Twin-Flow's: save after the last step and on SIGTERM/SIGINT only");
  if (const Node* k = m.find("keep"))
    c.keep = int(config::read_int(*k, 0, int64_t(1) << 20));
  else
    ctx.add_default("checkpoint.keep", "0", "Twin-Flow's: every checkpoint is kept");
  m.fail_unknown();
}

ReferenceResult read_reference(const Node& r, Ctx& ctx) {
  MapReader rm(r, ctx.warnings(), "a published result {speedup_vs_full_offload, source}");
  ReferenceResult ref;
  ref.speedup_vs_full_offload = config::read_number(
      rm.require("speedup_vs_full_offload", "the reported speedup over ratio 1 (a number > 0)"), 0, 1e6, true);
  ref.source = config::read_string(rm.require("source", "a source: where the figure was published"));
  rm.fail_unknown();
  return ref;
}

// ---- the ds_config --------------------------------------------------------------------------------

// Where a scenario's ds_config comes from: a mapping in the scenario, a file it names, or text.
struct DsSource {
  const Node* key = nullptr;        // the scenario's ds_config key (absent with text)
  std::optional<std::string> text;  // parse_scenario_with_ds_config
  std::string text_name;            // its display name
};

void read_ds(const DsSource& src, Ctx& ctx, const ClientSettings& client, const Node*& precision_node) {
  Scenario& s = *ctx.s;
  s.from_ds_config = true;
  if (src.text) {
    const Node root = config::parse_hjson(*src.text, src.text_name);
    detail::read_ds_config(root, ctx, client, precision_node);
    return;
  }
  const Node& ds = *src.key;
  if (ds.is_map()) return detail::read_ds_config(ds, ctx, client, precision_node);
  if (!ds.is_scalar())
    config::fail(ds, "expected a path to a DeepSpeed .json file or an embedded mapping, got " + ds.describe());
  const std::string p = config::read_string(ds);
  s.ds_config_file = resolve(ctx, ds, p);
  try {
    const std::string text = config::read_document(s.ds_config_file, "ds_config");
    const std::string label = display(ctx, p);
    // DeepSpeed loads a config file with hjson (deepspeed/runtime/config.py); .yaml is Twin-Flow's own.
    const Node root = (s.ds_config_file.extension() == ".yaml" || s.ds_config_file.extension() == ".yml")
                          ? config::parse_yaml(text, label)
                          : config::parse_hjson(text, label);
    detail::read_ds_config(root, ctx, client, precision_node);
  } catch (const InputError& e) {
    rethrow_included(e, ds, "ds_config");
  }
}

// ---- the scenario -------------------------------------------------------------------------------

// Bounds that no single key's range gives: the simulated step's size and the model's parameters.
void check_size(const Node& root, const Ctx& ctx) {
  const Scenario& s = *ctx.s;
  const ModelDesc md = describe_model(s.model);
  if (md.total_params > kMaxParameters)
    config::fail(at_key(root, "model"),
                 std::to_string(md.total_params) + " parameters exceed " + std::to_string(kMaxParameters) +
                     " (2^50: byte counts must fit in 64 bits); reduce model.layers, hidden, ffn or vocab (or dims)");
  if (auto issue = simulation_size_issue(s, s.cluster.world_size()))
    config::fail(at_key(root, s.training.grad_accum > 1 ? "training.grad_accum" : "cluster.nodes"),
                 *issue + "; reduce cluster.nodes, gpus_per_node or training.grad_accum");
}

void check_hardware_and_activations(const Node* precision_node, const Node& training, Ctx& ctx) {
  const Scenario& s = *ctx.s;
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

void parse(const Node& root, Ctx& ctx, const DsSource& ds_text) {
  Scenario& s = *ctx.s;
  MapReader top(root, s.warnings, "a scenario");
  if (const Node* v = top.find("name")) s.name = config::read_string(*v);
  if (const Node* v = top.find("description")) s.description = config::read_string(*v);

  s.model = read_model(
      top.require("model", "a preset (" + join(model_preset_names()) + ") or {type: decoder|mlp, ...}"), ctx);
  s.cluster = read_cluster(top.require("cluster", "{profile, nodes, gpus_per_node, cpu_cores_per_gpu}"), ctx);

  DsSource ds = ds_text;
  ds.key = top.find("ds_config");
  if (ds.key && ds.text) config::fail(*ds.key, "the ds_config is given as text as well; remove this key");
  const bool has_ds = ds.key || ds.text;
  const Node* precision_node = nullptr;
  ClientSettings client;
  const Node* training_node =
      has_ds ? top.find("training") : &top.require("training", "{micro_batch, grad_accum, steps, precision, ...}");
  const Node training = training_node ? *training_node : at_key(root, "training");
  if (training_node)
    detail::read_training(*training_node, ctx, has_ds, client, precision_node);
  else
    detail::default_training(ctx);
  client.optimizer = top.find("optimizer");
  client.scheduler = top.find("scheduler");

  if (has_ds) {
    if (const Node* v = top.find("zero"))
      config::fail(*v,
                   "the scenario takes its ZeRO settings from ds_config (zero_optimization); remove this "
                   "section or ds_config");
    read_ds(ds, ctx, client, precision_node);
  } else {
    s.optimizer = detail::read_native_optimizer(
        client.optimizer ? *client.optimizer
                         : top.require("optimizer", "{type: adamw|adam|adagrad|lion, params: {...}}"),
        ctx);
    if (client.scheduler)
      s.optimizer.schedule = detail::read_native_scheduler(*client.scheduler, ctx, s.optimizer);
    else
      detail::finish_lr_schedule(s.optimizer.schedule, s.optimizer, root, ctx);
    s.zero = detail::read_native_zero(
        top.require("zero", "{stage: 1|2|3, offload_optimizer: {device, ratio, pin_memory}}"), ctx);
  }

  if (const Node* w = top.find("workload")) read_workload(*w, ctx);
  if (const Node* d = top.find("data")) read_data(*d, ctx);
  if (const Node* i = top.find("init")) read_init(*i, ctx);
  if (const Node* c = top.find("checkpoint")) read_checkpoint(*c, ctx);
  if (const Node* r = top.find("reference")) s.reference = read_reference(*r, ctx);
  top.fail_unknown();
  check_hardware_and_activations(precision_node, training, ctx);
  check_size(root, ctx);
}

Scenario parse_root(const Node& root, const std::filesystem::path& base_dir, const std::filesystem::path& file,
                    const DsSource& ds = {}) {
  Scenario s;
  s.file = file;
  Ctx ctx{base_dir, file.parent_path(), &s};
  parse(root, ctx, ds);
  if (s.name.empty()) s.name = file.empty() ? "scenario" : file.stem().string();
  return s;
}

// A bare ds_config given where a scenario belongs: say so instead of a puzzling YAML error.
void refuse_bare_ds_config(std::string_view text, const std::string& file) {
  if (auto msg = bare_ds_config_message(text, file)) throw InputError(*msg);
}

}  // namespace

std::string_view workload_type_name(WorkloadType w) {
  switch (w) {
    case WorkloadType::kAuto: return "auto";
    case WorkloadType::kSynthetic: return "synthetic";
    case WorkloadType::kMlp: return "mlp";
    case WorkloadType::kDecoder: return "decoder";
  }
  return "?";
}

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
  refuse_bare_ds_config(text, file.string());
  const std::filesystem::path abs = std::filesystem::absolute(file).lexically_normal();
  const Node root = config::parse_yaml(text, file.string());
  return parse_root(root, abs.parent_path(), file);
}

Scenario parse_scenario(std::string_view yaml_text, const std::filesystem::path& base_dir,
                        const std::string& display_name) {
  refuse_bare_ds_config(yaml_text, display_name);
  const Node root = config::parse_yaml(yaml_text, display_name);
  return parse_root(root, base_dir, {});
}

Scenario parse_scenario_with_ds_config(std::string_view yaml_text, std::string_view ds_config_text,
                                       const std::filesystem::path& base_dir, const std::string& display_name,
                                       const std::string& ds_display_name) {
  const Node root = config::parse_yaml(yaml_text, display_name);
  DsSource ds;
  ds.text = std::string(ds_config_text);
  ds.text_name = ds_display_name;
  return parse_root(root, base_dir, {}, ds);
}

std::string_view default_scenario_text() { return builtin::default_scenario(); }

Scenario load_default_scenario() {
  return parse_scenario(default_scenario_text(), {},
                        "<built-in>/scenarios/" + std::string(builtin::default_scenario_name()));
}

std::optional<std::string> simulation_size_issue(const Scenario& s, int64_t world, std::optional<int64_t> grad_accum) {
  if (world < 1 || world > kMaxWorld)
    return std::to_string(world) + " ranks is out of range; allowed [1, " + std::to_string(kMaxWorld) + "]";
  const int64_t accum = grad_accum.value_or(s.training.grad_accum);
  if (accum < 1 || accum > kMaxBatch)
    return "grad_accum " + std::to_string(accum) + " is out of range; allowed [1, " + std::to_string(kMaxBatch) + "]";
  const int64_t layers = int64_t(describe_model(s.model).layers.size());
  const int64_t units = world * accum * layers;  // <= 2^16 x 2^20 x 2^17: fits
  if (units <= kMaxRankLayerMicroSteps) return std::nullopt;
  return "ranks (" + std::to_string(world) + ") x grad_accum (" + std::to_string(accum) + ") x layers (" +
         std::to_string(layers) + ") = " + std::to_string(units) + " layer micro-steps to simulate; allowed at most " +
         std::to_string(kMaxRankLayerMicroSteps) + " (the simulator holds every rank's step plan: about 3 KB per unit)";
}

std::vector<ReportedSetting> settings_report(const Scenario& s) {
  std::vector<ReportedSetting> out;
  auto num = [&](std::string key, double v) { out.push_back({std::move(key), number_text(v), true}); };
  auto text = [&](std::string key, std::string v) { out.push_back({std::move(key), std::move(v), false}); };
  const TrainingConfig& t = s.training;
  num("cluster.world_size", s.cluster.world_size());
  num("zero.stage", s.zero.stage);
  text("training.precision", std::string(precision_name(t.precision)));
  num("training.micro_batch", double(t.micro_batch));
  num("training.grad_accum", double(t.grad_accum));
  num("training.global_batch", double(s.global_batch()));
  num("training.gradient_clipping", t.gradient_clipping);
  text("training.prescale_gradients", bool_text(t.prescale_gradients));
  text("training.activation_checkpointing", bool_text(t.activation_checkpointing));
  if (!t.speculation_bytes)
    text("training.speculation", "auto");
  else if (*t.speculation_bytes == kSpeculationMax)
    text("training.speculation", "max");
  else
    num("training.speculation", double(*t.speculation_bytes));
  text("training.gpu_headroom", margin_text(t.gpu_headroom));
  text("training.host_reserve", margin_text(t.host_reserve));
  text("training.carry_tail", bool_text(t.carry_tail));
  text("training.cpu_order", t.cpu_order_auto ? "auto" : "arrival");
  text("training.ring_order", t.ring_forward_order ? "forward" : "backward");
  num("training.steps", double(t.steps));
  const bool fp16 = t.precision == Precision::kFP16;
  text("training.loss_scaling", !fp16 ? "off" : t.loss_scaling.dynamic() ? "dynamic" : "static");
  if (fp16) {
    num("training.loss_scaling.initial_loss_scale", t.loss_scaling.initial_loss_scale());
    if (t.loss_scaling.dynamic()) {
      num("training.loss_scaling.loss_scale_window", double(t.loss_scaling.loss_scale_window));
      num("training.loss_scaling.hysteresis", t.loss_scaling.hysteresis);
      num("training.loss_scaling.min_loss_scale", t.loss_scaling.min_loss_scale);
    }
  }
  const OptimizerConfig& o = s.optimizer;
  text("optimizer.type", std::string(optimizer_name(o.kind)));
  num("optimizer.lr", o.hp.lr);
  num("optimizer.weight_decay", o.hp.weight_decay);
  if (detail::has_betas(o.kind)) num("optimizer.beta1", o.hp.beta1), num("optimizer.beta2", o.hp.beta2);
  if (detail::has_eps(o.kind)) num("optimizer.eps", o.hp.eps);
  if (o.kind == OptimizerKind::kAdagrad) {
    num("optimizer.lr_decay", o.hp.lr_decay);
    num("optimizer.initial_accumulator_value", o.hp.initial_accumulator_value);
  }
  text("scheduler.type", std::string(lr_schedule_name(o.schedule.kind)));
  for (std::string_view key : detail::lr_schedule_params(o.schedule.kind))
    if (key != "last_batch_iteration")  // numbers but warmup_type, as lr_schedule_param_value writes them
      out.push_back(
          {"scheduler." + std::string(key), detail::lr_schedule_param_value(key, o.schedule), key != "warmup_type"});
  const OffloadOptimizerConfig& off = s.zero.offload_optimizer;
  text("zero.offload_optimizer.device", std::string(offload_device_name(off.device)));
  if (off.ratio_auto)
    text("zero.offload_optimizer.ratio", "auto");
  else
    num("zero.offload_optimizer.ratio", off.ratio);
  text("zero.offload_optimizer.pin_memory", bool_text(off.pin_memory));
  if (s.ratio_auto())
    text("cpu_ratio", "auto");
  else
    num("cpu_ratio", s.cpu_ratio());
  return out;
}

}  // namespace tf::core
