// The lr schedule's keys, shared by the scenario's `scheduler: {type, params}` and the ds_config's
// `scheduler` section: DeepSpeed's keyword arguments of WarmupLR, WarmupDecayLR and WarmupCosineLR
// (deepspeed/runtime/lr_schedules.py), their ranges and DeepSpeed's defaults.
#include <string>
#include <vector>

#include "core/error.h"
#include "core/scenario_read.h"
#include "core/strings.h"

namespace tf::core::detail {

namespace {

constexpr std::string_view kWarmupLrParams[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
                                                "last_batch_iteration"};
constexpr std::string_view kWarmupDecayLrParams[] = {"total_num_steps",  "warmup_min_lr", "warmup_max_lr",
                                                     "warmup_num_steps", "warmup_type",   "last_batch_iteration"};
constexpr std::string_view kWarmupCosineLrParams[] = {"total_num_steps", "warmup_min_ratio", "warmup_num_steps",
                                                      "cos_min_ratio",   "warmup_type",      "last_batch_iteration"};

constexpr std::string_view kNativeTypes = "constant, WarmupLR, WarmupDecayLR, WarmupCosineLR";

std::string why_ds(LrScheduleKind k) {
  return "DeepSpeed's (deepspeed/runtime/lr_schedules.py " + std::string(lr_schedule_name(k)) + ".__init__)";
}

int64_t read_schedule_steps(std::string_view key, const Node& n) {
  const int64_t v = config::read_int(n, INT64_MIN / 2, kMaxSteps);
  if (v < 1)
    config::fail(n, std::to_string(v) + " is out of range; allowed an integer in [1, " + std::to_string(kMaxSteps) +
                        "]" +
                        (key == "warmup_num_steps" ? " (DeepSpeed refuses 0 and negatives: \"warmup_num_steps must "
                                                     "be a positive integer\"; 1 and 2 both warm up over 2 steps)"
                                                   : ""));
  return v;
}

// The native schema's type, case-insensitive.
LrScheduleKind read_native_kind(const Node& tn) {
  const std::string t = ascii_lower(config::read_string(tn));
  for (LrScheduleKind k : {LrScheduleKind::kConstant, LrScheduleKind::kWarmupLr, LrScheduleKind::kWarmupDecayLr,
                           LrScheduleKind::kWarmupCosineLr})
    if (t == ascii_lower(lr_schedule_name(k))) return k;
  std::string what = "'";  // appended, not "'" + ...: GCC 12 warns falsely (-Wrestrict) on that form
  what += config::excerpt(tn.scalar);
  what += "' is not supported; allowed: ";
  what += kNativeTypes;
  config::fail(tn, what + " (case-insensitive)");
}

}  // namespace

std::span<const std::string_view> lr_schedule_params(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::kConstant: return {};
    case LrScheduleKind::kWarmupLr: return kWarmupLrParams;
    case LrScheduleKind::kWarmupDecayLr: return kWarmupDecayLrParams;
    case LrScheduleKind::kWarmupCosineLr: return kWarmupCosineLrParams;
  }
  return {};
}

void read_lr_schedule_param(std::string_view key, const Node& n, LrSchedule& s) {
  if (key == "warmup_min_lr") s.warmup_min_lr = read_lr(n);
  if (key == "warmup_max_lr") s.warmup_max_lr = read_lr(n);
  if (key == "warmup_min_ratio") s.warmup_min_ratio = config::read_number(n, 0, kMaxHyper);
  if (key == "cos_min_ratio") s.cos_min_ratio = config::read_number(n, 0, kMaxHyper);
  if (key == "warmup_num_steps") s.warmup_num_steps = read_schedule_steps(key, n);
  if (key == "total_num_steps") s.total_num_steps = read_schedule_steps(key, n);
  if (key == "warmup_type")
    s.warmup_type = config::read_choice(n, {"log", "linear"}) == "linear" ? WarmupType::kLinear : WarmupType::kLog;
  if (key == "last_batch_iteration" && config::read_int(n, INT64_MIN / 2, INT64_MAX / 2) != -1)
    config::fail(n,
                 "only -1 (start from the beginning) is supported: a resumed run continues the schedule from its "
                 "checkpoint's optimizer step (twinflow run --resume); remove it or write -1");
}

std::string lr_schedule_param_value(std::string_view key, const LrSchedule& s) {
  if (key == "warmup_min_lr") return number_text(s.warmup_min_lr);
  if (key == "warmup_max_lr") return number_text(s.warmup_max_lr);
  if (key == "warmup_min_ratio") return number_text(s.warmup_min_ratio);
  if (key == "cos_min_ratio") return number_text(s.cos_min_ratio);
  if (key == "warmup_num_steps") return std::to_string(s.warmup_num_steps);
  if (key == "total_num_steps") return std::to_string(s.total_num_steps);
  if (key == "warmup_type") return std::string(warmup_type_name(s.warmup_type));
  return "-1";
}

std::optional<std::string> default_lr_schedule_param(std::string_view key, LrSchedule& s, double optimizer_lr) {
  const LrSchedule ds;  // the struct's defaults are DeepSpeed's
  if (key == "warmup_min_lr") s.warmup_min_lr = ds.warmup_min_lr;
  if (key == "warmup_min_ratio") s.warmup_min_ratio = ds.warmup_min_ratio;
  if (key == "cos_min_ratio") s.cos_min_ratio = ds.cos_min_ratio;
  if (key == "warmup_num_steps") s.warmup_num_steps = ds.warmup_num_steps;
  if (key == "warmup_type") s.warmup_type = ds.warmup_type;
  if (key == "warmup_max_lr") {
    if (s.kind == LrScheduleKind::kWarmupLr) {  // warmup_max_lr=None: the optimizer's lr
      s.warmup_max_lr = optimizer_lr;
      return why_ds(s.kind) + ": the optimizer's lr";
    }
    s.warmup_max_lr = ds.warmup_max_lr;
  }
  if (key == "total_num_steps" || key == "last_batch_iteration") return std::nullopt;
  return why_ds(s.kind);
}

void finish_lr_schedule(LrSchedule& s, const OptimizerConfig& o, const Node& at, Ctx& ctx) {
  s.base_lr = o.hp.lr;
  try {
    check_lr_schedule(s);
    HyperParams peak = o.hp;
    peak.lr = lr_peak(s);
    validate(o.kind, peak);
  } catch (const InputError& e) {
    config::fail(at, std::string(e.what()) + " (at the schedule's largest lr, " + number_text(lr_peak(s)) + ")");
  }
  const bool total = s.kind == LrScheduleKind::kWarmupDecayLr || s.kind == LrScheduleKind::kWarmupCosineLr;
  if (total && s.total_num_steps < s.warmup_num_steps)
    ctx.warn(at, "total_num_steps " + std::to_string(s.total_num_steps) + " is less than warmup_num_steps " +
                     std::to_string(s.warmup_num_steps) + " (DeepSpeed warns too): the decay never starts");
}

LrSchedule read_native_scheduler(const Node& n, Ctx& ctx, const OptimizerConfig& o, bool fill_only) {
  MapReader m(n, ctx.warnings(), "the lr scheduler {type, params}");
  LrSchedule s;
  s.kind = read_native_kind(m.require("type", std::string(kNativeTypes)));
  const Node* pn = m.find("params");
  m.fail_unknown();
  if (s.kind == LrScheduleKind::kConstant) {
    if (pn && !(pn->is_map() && pn->keys.empty()))
      config::fail(*pn, "constant takes no params (every step runs at optimizer.params.lr); remove them");
    finish_lr_schedule(s, o, n, ctx);
    return s;
  }
  std::optional<MapReader> p;
  if (pn) p.emplace(*pn, ctx.warnings(), "the scheduler's params");
  for (std::string_view key : lr_schedule_params(s.kind)) {
    if (const Node* v = p ? p->find(key) : nullptr) {
      read_lr_schedule_param(key, *v, s);
      continue;
    }
    if (fill_only) continue;
    if (key == "total_num_steps")
      config::fail(pn ? at_key(*pn, key) : at_key(n, "params"),
                   "missing; " + std::string(lr_schedule_name(s.kind)) +
                       " needs total_num_steps (the step its decay ends at: usually training.steps)");
    if (const std::optional<std::string> why = default_lr_schedule_param(key, s, o.hp.lr))
      ctx.add_default("scheduler.params." + std::string(key), lr_schedule_param_value(key, s), *why);
  }
  if (p) p->fail_unknown();
  if (!fill_only) finish_lr_schedule(s, o, n, ctx);
  return s;
}

}  // namespace tf::core::detail
