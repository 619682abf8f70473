// The native schema's training, optimizer and ZeRO sections, and the one reader (one range) per setting
// that the native schema and the DeepSpeed config reader share.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/scenario_read.h"
#include "core/step.h"
#include "core/strings.h"

namespace tf::core::detail {

namespace {

constexpr double kMaxClip = 1e30;

std::string why_native(std::string_view what) { return "the scenario schema's default" + std::string(what); }

// The hyper-parameters a kind reads, for defaults and unknown keys.
void record_hyper_defaults(Ctx& ctx, OptimizerKind kind, const HyperParams& hp, MapReader* params,
                           const std::string& why) {
  std::vector<std::string_view> keys = {"lr", "weight_decay"};
  if (has_betas(kind)) keys.push_back("betas");
  if (has_eps(kind)) keys.push_back("eps");
  if (kind == OptimizerKind::kAdagrad) keys.insert(keys.end(), {"lr_decay", "initial_accumulator_value"});
  for (std::string_view k : keys)
    if (!params || !params->node().is_map() || !params->has(k))
      ctx.add_default("optimizer.params." + std::string(k), hyper_param_value(k, hp), why);
}

}  // namespace

Node at_key(const Node& parent, std::string_view key) {
  Node n;
  n.file = parent.file;
  n.line = parent.line;
  n.col = parent.col;
  n.path = config::child_path(parent.path, key);
  return n;
}

std::string join(const std::vector<std::string_view>& v) {
  std::string out;
  for (auto s : v) out += (out.empty() ? "" : ", ") + std::string(s);
  return out;
}

// ---- one reader per setting ---------------------------------------------------------------------

int64_t read_micro_batch(const Node& n) { return config::read_int(n, 1, kMaxBatch); }
int64_t read_grad_accum(const Node& n) { return config::read_int(n, 1, kMaxBatch); }
double read_clipping(const Node& n) { return config::read_number(n, 0, kMaxClip); }

Precision read_precision(const Node& n) {
  const std::string p = config::read_choice(n, {"bf16", "fp16", "fp32"});
  return p == "bf16" ? Precision::kBF16 : p == "fp16" ? Precision::kFP16 : Precision::kFP32;
}

void read_loss_scale_key(std::string_view key, const Node& n, LossScaleConfig& l) {
  if (key == "loss_scale") l.loss_scale = config::read_number(n, 0, 1e38);
  if (key == "initial_scale_power") l.initial_scale_power = int(config::read_int(n, 0, 127));
  if (key == "loss_scale_window") l.loss_scale_window = config::read_int(n, 1, int64_t(1) << 31);
  if (key == "hysteresis") l.hysteresis = int(config::read_int(n, 1, int64_t(1) << 30));
  if (key == "min_loss_scale") l.min_loss_scale = config::read_number(n, 0, 1e38, true);
}

std::string loss_scale_value(std::string_view key, const LossScaleConfig& l) {
  if (key == "loss_scale") return number_text(l.loss_scale);
  if (key == "initial_scale_power") return std::to_string(l.initial_scale_power);
  if (key == "loss_scale_window") return std::to_string(l.loss_scale_window);
  if (key == "hysteresis") return std::to_string(l.hysteresis);
  return number_text(l.min_loss_scale);
}

double read_lr(const Node& n) { return config::read_number(n, 0, kMaxHyper); }
double read_weight_decay(const Node& n) { return config::read_number(n, 0, kMaxHyper); }
double read_eps(const Node& n) { return config::read_number(n, 0, 1, true); }

std::pair<double, double> read_betas(const Node& n) {
  const std::string rule = "allowed: a list [beta1, beta2], each in [0, 1)";
  if (!n.is_seq()) config::fail(n, "expected a list [beta1, beta2], got " + n.describe() + "; " + rule);
  if (n.children.size() != 2)
    config::fail(n,
                 "expected 2 values [beta1, beta2], got a list of " + std::to_string(n.children.size()) + "; " + rule);
  double b[2];
  for (int i = 0; i < 2; ++i) {
    const Node& c = n.children[size_t(i)];
    b[i] = config::read_number(c, 0, 1);
    if (b[i] == 1)
      config::fail(
          c, "beta" + std::to_string(i + 1) + " = " + config::excerpt(c.scalar) + " is out of range; allowed [0, 1)");
  }
  return {b[0], b[1]};
}

bool has_betas(OptimizerKind kind) { return kind != OptimizerKind::kAdagrad; }
bool has_eps(OptimizerKind kind) { return kind != OptimizerKind::kLion; }

std::string hyper_param_value(std::string_view key, const HyperParams& hp) {
  if (key == "lr") return number_text(hp.lr);
  if (key == "weight_decay") return number_text(hp.weight_decay);
  if (key == "eps") return number_text(hp.eps);
  if (key == "betas") {
    std::string out = "[";  // appended, not "[" + ...: GCC 12 warns falsely (-Wrestrict) on that form
    out += number_text(hp.beta1);
    out += ", ";
    out += number_text(hp.beta2);
    return out += "]";
  }
  if (key == "lr_decay") return number_text(hp.lr_decay);
  return number_text(hp.initial_accumulator_value);
}

void check_hyper_params(OptimizerKind kind, const HyperParams& hp, const Node& params) {
  try {
    validate(kind, hp);
  } catch (const InputError& e) {
    // validate() names the field: "...: hyper-parameter 'beta1' = ..."; place the error at its key.
    const std::string msg = e.what();
    const size_t q = msg.find("hyper-parameter '");
    std::string field = q == std::string::npos ? "" : msg.substr(q + 17, msg.find('\'', q + 17) - q - 17);
    const Node* at = &params;
    std::string key = field == "beta1" || field == "beta2" ? "betas" : field;
    if (params.is_map())
      for (size_t i = 0; i < params.keys.size(); ++i)
        if (params.keys[i] == key) {
          at = &params.children[i];
          if (key == "betas" && at->is_seq() && at->children.size() == 2) at = &at->children[field == "beta1" ? 0 : 1];
        }
    config::fail(*at, msg);
  }
}

// ---- the native schema --------------------------------------------------------------------------

void default_training(Ctx& ctx) {
  const TrainingConfig t;
  ctx.add_default("training.steps", std::to_string(t.steps), why_native(""));
  ctx.add_default("training.activation_checkpointing", bool_text(t.activation_checkpointing), why_native(""));
}

namespace {

void read_native_loss_scaling(const Node& v, Ctx& ctx, TrainingConfig& t) {
  MapReader l(v, ctx.warnings(), "fp16 loss scaling {loss_scale, initial_scale_power, ...}");
  for (std::string_view key : kLossScaleKeys)
    if (const Node* n = l.find(key)) read_loss_scale_key(key, *n, t.loss_scaling);
  l.fail_unknown();
}

void record_loss_scale_defaults(Ctx& ctx, const Node* given, const LossScaleConfig& l, const std::string& prefix,
                                const std::string& why) {
  for (std::string_view key : kLossScaleKeys) {
    bool set = false;
    if (given && given->is_map())
      for (const std::string& k : given->keys) set = set || k == key;
    if (!set) ctx.add_default(prefix + std::string(key), loss_scale_value(key, l), why);
  }
}

// training.speculation: `auto` (nullopt), `max` (kSpeculationMax), or the host bytes per rank for the
// speculated layers' second state slot (0: off).
std::optional<int64_t> read_speculation(const Node& v) {
  if (v.is_scalar() && ascii_lower(v.scalar) == "auto") return std::nullopt;
  if (v.is_scalar() && ascii_lower(v.scalar) == "max") return kSpeculationMax;
  const bool number = v.is_scalar() && !v.quoted && !v.scalar.empty() &&
                      v.scalar.find_first_not_of("0123456789+-.eE") == std::string::npos;
  if (!number)
    config::fail(v,
                 "expected `auto` (the cost model's choice), `max` (every eligible layer the host holds) or a "
                 "number of bytes (0 turns speculation off), got " +
                     v.describe());
  return config::read_int(v, 0, int64_t(1) << 50);
}

// training.cpu_order: `auto` (true) or `arrival` (false).
bool read_cpu_order(const Node& v) {
  const std::string t = v.is_scalar() ? ascii_lower(v.scalar) : std::string();
  if (t != "auto" && t != "arrival")
    config::fail(v,
                 "expected `auto` (the cost model's pass order) or `arrival` (every CPU pass in the order its "
                 "gradient lands), got " +
                     v.describe());
  return t == "auto";
}

bool read_ring_order(const Node& v) {
  const std::string t = v.is_scalar() ? ascii_lower(v.scalar) : std::string();
  if (t != "forward" && t != "backward")
    config::fail(v,
                 "expected `forward` (after the norm, the CPU passes in the order the next forward needs them) or "
                 "`backward` (in the order their gradients land), got " +
                     v.describe());
  return t == "forward";
}

// The number at the start of `t` and the rest, trimmed; nullopt when `t` does not start with a finite number.
std::optional<std::pair<double, std::string>> leading_number(std::string_view t) {
  double v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (r.ec != std::errc() || !std::isfinite(v)) return std::nullopt;
  std::string rest(r.ptr, t.data() + t.size());
  rest.erase(0, rest.find_first_not_of(" \t"));
  return std::pair{v, rest};
}

// training.gpu_headroom / training.host_reserve: bytes (a whole number, or with a unit: "8 GiB", "1.5 GB"), or
// a fraction of the memory it is kept from (a number below 1, or a percentage: "2%"). `of` names that memory.
MemoryMargin read_memory_margin(const Node& v, const std::string& of) {
  const std::string forms =
      "allowed: bytes (a whole number such as 2147483648, or with a unit: \"8 GiB\", "
      "\"1.5 GB\", \"512 MiB\") or a fraction of " +
      of +
      " (a number below 1 such as 0.02, "
      "or a percentage: \"2%\")";
  if (!v.is_scalar()) config::fail(v, "expected bytes or a fraction, got " + v.describe() + "; " + forms);
  const auto num = leading_number(v.scalar);
  if (!num) config::fail(v, "'" + config::excerpt(v.scalar) + "' is not a size; " + forms);
  const auto [x, unit] = *num;
  if (x < 0) config::fail(v, "'" + config::excerpt(v.scalar) + "' is negative; " + forms);
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"b", 1.0},         {"kb", 1e3},           {"mb", 1e6},
      {"gb", 1e9},        {"tb", 1e12},          {"kib", 1024.0},
      {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  const double max_bytes = double(int64_t(1) << 50);
  if (unit == "%") {
    if (x >= 100) config::fail(v, "'" + config::excerpt(v.scalar) + "' is not below 100%; " + forms);
    return {0, x / 100};
  }
  if (unit.empty() && x < 1) return {0, x};
  double scale = unit.empty() ? 1.0 : 0.0;
  for (const auto& [name, bytes] : kUnits)
    if (ascii_lower(unit) == name) scale = bytes;
  if (scale == 0) config::fail(v, "unknown unit '" + config::excerpt(unit) + "'; " + forms);
  if (unit.empty() && x != std::floor(x))
    config::fail(
        v, "'" + config::excerpt(v.scalar) + "' is neither a whole number of bytes nor a fraction below 1; " + forms);
  if (x * scale > max_bytes) config::fail(v, "'" + config::excerpt(v.scalar) + "' is over 2^50 bytes; " + forms);
  return {int64_t(std::llround(x * scale)), 0};
}

}  // namespace

void read_training(const Node& n, Ctx& ctx, bool has_ds, ClientSettings& client, const Node*& precision_node) {
  MapReader m(n, ctx.warnings(), "the training setup {micro_batch, grad_accum, steps, precision, ...}");
  TrainingConfig& t = ctx.s->training;
  client.training = &n;
  client.micro_batch =
      has_ds ? m.find("micro_batch") : &m.require("micro_batch", "a positive integer: samples per GPU per micro-step");
  client.grad_accum = m.find("grad_accum");
  client.precision = m.find("precision");
  client.loss_scaling = m.find("loss_scaling");
  client.gradient_clipping = m.find("gradient_clipping");
  client.prescale_gradients = m.find("prescale_gradients");
  if (client.loss_scaling) {  // its values are read with the ds_config's, its keys checked here
    MapReader l(*client.loss_scaling, ctx.warnings(), "fp16 loss scaling {loss_scale, initial_scale_power, ...}");
    for (std::string_view key : kLossScaleKeys) l.expect(key), l.find(key);
    l.fail_unknown();
  }
  if (const Node* v = m.find("steps"))
    t.steps = config::read_int(*v, 1, kMaxSteps);
  else
    ctx.add_default("training.steps", std::to_string(t.steps), why_native(""));
  if (const Node* v = m.find("activation_checkpointing"))
    t.activation_checkpointing = config::read_bool(*v);
  else
    ctx.add_default("training.activation_checkpointing", bool_text(t.activation_checkpointing), why_native(""));
  // Twin-Flow's own optimisation, not a training setting: its default (auto) is in settings_report, not
  // among the recorded defaults
  if (const Node* v = m.find("speculation")) t.speculation_bytes = read_speculation(*v);
  // Twin-Flow's memory margins (docs/ARCHITECTURE.md, "Choosing the ratio"), read with a ds_config too
  if (const Node* v = m.find("gpu_headroom")) t.gpu_headroom = read_memory_margin(*v, "the GPU's memory");
  if (const Node* v = m.find("host_reserve")) t.host_reserve = read_memory_margin(*v, "the host's memory");
  if (const Node* v = m.find("carry_tail")) t.carry_tail = config::read_bool(*v);
  if (const Node* v = m.find("cpu_order")) t.cpu_order_auto = read_cpu_order(*v);
  if (const Node* v = m.find("ring_order")) t.ring_forward_order = read_ring_order(*v);
  m.fail_unknown();
  if (has_ds) return;  // read_ds_config takes the rest

  t.micro_batch = read_micro_batch(*client.micro_batch);
  if (client.grad_accum)
    t.grad_accum = read_grad_accum(*client.grad_accum);
  else
    ctx.add_default("training.grad_accum", std::to_string(t.grad_accum), why_native(""));
  if (client.precision) {
    t.precision = read_precision(*client.precision);
    precision_node = client.precision;
  } else {
    ctx.add_default("training.precision", std::string(precision_name(t.precision)), why_native(""));
  }
  if (client.loss_scaling) {
    read_native_loss_scaling(*client.loss_scaling, ctx, t);
    if (t.precision != Precision::kFP16) ctx.warn(*client.loss_scaling, "ignored unless precision is fp16");
  }
  if (t.precision == Precision::kFP16)
    record_loss_scale_defaults(ctx, client.loss_scaling, t.loss_scaling, "training.loss_scaling.",
                               "DeepSpeed's fp16 default (deepspeed/runtime/precision_config.py), which the scenario "
                               "schema follows");
  if (client.gradient_clipping)
    t.gradient_clipping = read_clipping(*client.gradient_clipping);
  else
    ctx.add_default("training.gradient_clipping", number_text(t.gradient_clipping),
                    why_native(" (0: no clipping); a ds_config's is DeepSpeed's " +
                               number_text(kDeepSpeedGradientClippingDefault)));
  if (client.prescale_gradients)
    t.prescale_gradients = config::read_bool(*client.prescale_gradients);
  else
    ctx.add_default("training.prescale_gradients", bool_text(t.prescale_gradients), why_native(""));
}

OptimizerConfig read_native_optimizer(const Node& n, Ctx& ctx) {
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
  const Node* pn = m.find("params");
  m.fail_unknown();
  const std::string why = why_native(" for " + std::string(optimizer_name(o.kind)) +
                                     " (torch.optim's defaults; the Lion paper's for Lion)");
  if (!pn) {
    record_hyper_defaults(ctx, o.kind, o.hp, nullptr, why);
    return o;
  }
  MapReader p(*pn, ctx.warnings(), "the optimizer's params");
  if (const Node* v = p.find("lr")) o.hp.lr = read_lr(*v);
  if (const Node* v = p.find("weight_decay")) o.hp.weight_decay = read_weight_decay(*v);
  if (has_betas(o.kind))
    if (const Node* b = p.find("betas")) std::tie(o.hp.beta1, o.hp.beta2) = read_betas(*b);
  if (has_eps(o.kind))
    if (const Node* v = p.find("eps")) o.hp.eps = read_eps(*v);
  if (o.kind == OptimizerKind::kAdagrad) {
    if (const Node* v = p.find("lr_decay")) o.hp.lr_decay = config::read_number(*v, 0, kMaxHyper);
    if (const Node* v = p.find("initial_accumulator_value"))
      o.hp.initial_accumulator_value = config::read_number(*v, 0, 1e30);
  }
  p.fail_unknown();
  check_hyper_params(o.kind, o.hp, *pn);
  record_hyper_defaults(ctx, o.kind, o.hp, &p, why);
  return o;
}

ZeroConfig read_native_zero(const Node& n, Ctx& ctx) {
  MapReader m(n, ctx.warnings(), "zero {stage, offload_optimizer, sub_group_size}");
  ZeroConfig z;
  z.stage = int(config::read_int(m.require("stage", "1, 2 or 3"), 1, 3));
  const Node* ratio = nullptr;
  if (const Node* off = m.find("offload_optimizer")) {
    MapReader o(*off, ctx.warnings(), "offload_optimizer {device, ratio, pin_memory}");
    if (const Node* d = o.find("device")) {
      if (d->is_scalar() && ascii_lower(d->scalar) == "nvme")
        config::fail(*d, "'nvme' is not supported; allowed: none, cpu");
      z.offload_optimizer.device =
          config::read_choice(*d, {"none", "cpu"}) == "cpu" ? OffloadDevice::kCpu : OffloadDevice::kNone;
    } else {
      ctx.add_default("zero.offload_optimizer.device", "none", why_native(" (nothing offloaded)"));
    }
    if ((ratio = o.find("ratio")))
      read_offload_ratio(*ratio, z.offload_optimizer, [](const Node& r) { return config::read_number(r, 0, 1); });
    const Node* pin = o.find("pin_memory");
    if (pin) z.offload_optimizer.pin_memory = config::read_bool(*pin);
    o.fail_unknown();
    if (z.offload_optimizer.device == OffloadDevice::kCpu) {
      if (!ratio)
        ctx.add_default("zero.offload_optimizer.ratio", number_text(z.offload_optimizer.ratio),
                        why_native(" (DeepSpeed's: the whole optimizer on the CPU)"));
      if (!pin)
        ctx.add_default("zero.offload_optimizer.pin_memory", bool_text(z.offload_optimizer.pin_memory),
                        why_native(" (DeepSpeed's)"));
    }
  } else {
    ctx.add_default("zero.offload_optimizer.device", "none", why_native(" (nothing offloaded)"));
  }
  if (const Node* s = m.find("sub_group_size")) z.sub_group_size = config::read_int(*s, 1, int64_t(1) << 62);
  m.fail_unknown();
  check_offload(z, ratio, n, ctx, false);
  return z;
}

bool looks_numeric(std::string_view s) {
  const std::string text(s);
  char* end = nullptr;
  (void)std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

void check_offload(const ZeroConfig& z, const Node* ratio_node, const Node& zero_node, Ctx& ctx, bool ds) {
  const OffloadOptimizerConfig& o = z.offload_optimizer;
  if (o.device == OffloadDevice::kNone && ratio_node)
    ctx.warn(*ratio_node,
             "has no effect: the offload device is none, so nothing is offloaded (set device: cpu to "
             "put this share of the optimizer on the CPU)");
  if (o.device == OffloadDevice::kCpu && o.ratio < 1 && z.stage < 3)
    ctx.warn(ratio_node ? *ratio_node : zero_node,
             "partial offload (ratio " + number_text(o.ratio) + ") at ZeRO stage " + std::to_string(z.stage) +
                 " is a Twin-Flow extension: DeepSpeed refuses it (deepspeed/runtime/zero/config.py, "
                 "offload_ratio_check: \"Partial offloading only supported for ZeRO Stage 3\")" +
                 (ds ? "" : ", so a ds_config with it would not run on DeepSpeed"));
}

}  // namespace tf::core::detail
