// The lr schedule in scenarios and ds_configs: the scenario's top-level `scheduler: {type, params}`, the
// ds_config's `scheduler` (DeepSpeed's names and keyword arguments, "auto" as the Hugging Face Trainer
// fills it), defaults, errors that name the key path, the settings report and the step policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "tests/error_of.h"

using namespace tf::core;
using tf::test::error_of;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A small scenario whose optimizer runs at lr 2e-4 with weight decay 0.1, and `extra` appended (a
// scheduler section).
std::string scenario(const std::string& extra,
                     const std::string& optimizer_params = "{lr: 2.0e-4, weight_decay: 0.1}") {
  return "model: gpt-tiny\n"
         "cluster: {profile: h100-80gb-16core}\n"
         "training: {micro_batch: 2, steps: 40}\n"
         "optimizer: {type: adamw, params: " +
         optimizer_params +
         "}\n"
         "zero: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}}\n" +
         extra;
}

Scenario parse(const std::string& text) { return parse_scenario(text, {}, "s.yaml"); }

// The same scenario's training and optimizer with a ds_config (JSON text) instead of a zero section.
Scenario parse_ds(const std::string& scenario_extra, const std::string& ds_scheduler) {
  const std::string yaml =
      "model: gpt-tiny\n"
      "cluster: {profile: h100-80gb-16core}\n"
      "training: {micro_batch: 2, steps: 40, precision: bf16, gradient_clipping: 1.0}\n"
      "optimizer: {type: adamw, params: {lr: 3.0e-4}}\n" +
      scenario_extra;
  const std::string ds = R"({"train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.01}},
    "zero_optimization": {"stage": 3})" +
                         (ds_scheduler.empty() ? std::string() : ",\n    \"scheduler\": " + ds_scheduler) + "}";
  return parse_scenario_with_ds_config(yaml, ds, {}, "s.yaml", "ds.json");
}

std::string report_value(const Scenario& s, const std::string& key) {
  for (const ReportedSetting& r : settings_report(s))
    if (r.key == key) return r.value;
  return "(absent)";
}

bool defaulted(const Scenario& s, const std::string& key) {
  return std::any_of(s.applied_defaults.begin(), s.applied_defaults.end(),
                     [&](const AppliedDefault& d) { return d.key == key; });
}

}  // namespace

TEST(LrScheduleScenario, NoSchedulerIsConstantAtTheOptimizersLr) {
  const Scenario s = parse(scenario(""));
  EXPECT_EQ(s.optimizer.schedule.kind, LrScheduleKind::kConstant);
  EXPECT_EQ(s.optimizer.schedule.base_lr, 2e-4);
  EXPECT_EQ(report_value(s, "scheduler.type"), "constant");
  const RunSettings rs = resolve_settings(s);
  for (int64_t t : {1, 7, 40}) EXPECT_EQ(decide_step(rs.policy, int(t), 0.0, 0, 1.0, t).lr, 2e-4);
}

TEST(LrScheduleScenario, WarmupLrWithDefaults) {
  const Scenario s = parse(scenario("scheduler: {type: warmuplr, params: {warmup_num_steps: 8}}\n"));
  const LrSchedule& l = s.optimizer.schedule;
  EXPECT_EQ(l.kind, LrScheduleKind::kWarmupLr);
  EXPECT_EQ(l.warmup_num_steps, 8);
  EXPECT_EQ(l.warmup_min_lr, 0.0);   // DeepSpeed's default
  EXPECT_EQ(l.warmup_max_lr, 2e-4);  // WarmupLR's default: the optimizer's lr
  EXPECT_EQ(l.warmup_type, WarmupType::kLog);
  EXPECT_TRUE(defaulted(s, "scheduler.params.warmup_max_lr"));
  EXPECT_TRUE(defaulted(s, "scheduler.params.warmup_min_lr"));
  EXPECT_TRUE(defaulted(s, "scheduler.params.warmup_type"));
  EXPECT_FALSE(defaulted(s, "scheduler.params.warmup_num_steps"));
  EXPECT_EQ(report_value(s, "scheduler.type"), "WarmupLR");
  EXPECT_EQ(report_value(s, "scheduler.warmup_max_lr"), "2e-04");
  EXPECT_EQ(report_value(s, "scheduler.warmup_num_steps"), "8");
  EXPECT_EQ(report_value(s, "scheduler.warmup_type"), "log");
  // the step policy carries it: update 1 at warmup_min_lr, the peak after 8 steps
  const RunSettings rs = resolve_settings(s);
  EXPECT_EQ(decide_step(rs.policy, 1, 0.0, 0, 1.0, 1).lr, 0.0);
  EXPECT_EQ(decide_step(rs.policy, 10, 0.0, 0, 1.0, 10).lr, 2e-4);
}

TEST(LrScheduleScenario, WarmupDecayLrDefaultsItsMaxTo1e3) {
  const Scenario s = parse(
      scenario("scheduler: {type: WarmupDecayLR, params: {total_num_steps: 40}}\n", "{lr: 2.0e-4, weight_decay: 0.1}"));
  EXPECT_EQ(s.optimizer.schedule.warmup_max_lr, 1e-3);  // DeepSpeed's WarmupDecayLR default, not the optimizer's lr
  EXPECT_EQ(s.optimizer.schedule.warmup_num_steps, 1000);
  EXPECT_EQ(s.optimizer.schedule.total_num_steps, 40);
  EXPECT_EQ(s.warnings.size(), 1u);  // total < warmup: the decay never starts
  EXPECT_TRUE(contains(s.warnings.at(0), "total_num_steps 40 is less than warmup_num_steps 1000")) << s.warnings[0];
}

TEST(LrScheduleScenario, WarmupCosineLr) {
  const Scenario s = parse(scenario(
      "scheduler:\n  type: WarmupCosineLR\n  params: {total_num_steps: 40, warmup_num_steps: 5, warmup_type: linear, "
      "warmup_min_ratio: 0.1, cos_min_ratio: 0.05, last_batch_iteration: -1}\n"));
  const LrSchedule& l = s.optimizer.schedule;
  EXPECT_EQ(l.kind, LrScheduleKind::kWarmupCosineLr);
  EXPECT_EQ(l.warmup_type, WarmupType::kLinear);
  EXPECT_EQ(l.warmup_min_ratio, 0.1);
  EXPECT_EQ(l.cos_min_ratio, 0.05);
  EXPECT_EQ(l.base_lr, 2e-4);
  EXPECT_EQ(report_value(s, "scheduler.cos_min_ratio"), "0.05");
}

TEST(LrScheduleScenario, ErrorsNameTheKeyAndWhatIsAllowed) {
  const auto err = [](const std::string& extra) { return error_of<InputError>([&] { parse(scenario(extra)); }); };
  std::string e = err("scheduler: {type: OneCycle}\n");
  EXPECT_TRUE(contains(e, "s.yaml:6:")) << e;
  EXPECT_TRUE(contains(e,
                       "scheduler.type: 'OneCycle' is not supported; allowed: constant, WarmupLR, WarmupDecayLR, "
                       "WarmupCosineLR"))
      << e;
  e = err("scheduler: {type: WarmupDecayLR, params: {warmup_num_steps: 10}}\n");
  EXPECT_TRUE(contains(e, "scheduler.params.total_num_steps: missing; WarmupDecayLR needs total_num_steps")) << e;
  e = err("scheduler: {type: WarmupCosineLR}\n");
  EXPECT_TRUE(contains(e, "scheduler.params: missing; WarmupCosineLR needs total_num_steps")) << e;
  for (const char* bad : {"0", "-5"}) {
    e = err(std::string("scheduler: {type: WarmupLR, params: {warmup_num_steps: ") + bad + "}}\n");
    EXPECT_TRUE(contains(e, "scheduler.params.warmup_num_steps: " + std::string(bad) + " is out of range")) << e;
    EXPECT_TRUE(contains(e, "DeepSpeed refuses 0 and negatives")) << e;
  }
  e = err("scheduler: {type: WarmupLR, params: {warmup_type: cosine}}\n");
  EXPECT_TRUE(contains(e, "scheduler.params.warmup_type")) << e;
  EXPECT_TRUE(contains(e, "log, linear")) << e;
  e = err("scheduler: {type: WarmupLR, params: {warmup_max_lrr: 1.0e-3}}\n");
  EXPECT_TRUE(contains(e, "unknown key `warmup_max_lrr`")) << e;
  EXPECT_TRUE(contains(e, "did you mean `warmup_max_lr`?")) << e;
  e = err("scheduler: {type: WarmupCosineLR, params: {total_num_steps: 9, warmup_max_lr: 1.0e-3}}\n");
  EXPECT_TRUE(contains(e, "unknown key `warmup_max_lr`")) << e;  // not a WarmupCosineLR parameter
  e = err("scheduler: {type: WarmupLR, params: {last_batch_iteration: 10}}\n");
  EXPECT_TRUE(contains(e, "scheduler.params.last_batch_iteration: only -1")) << e;
  e = err("scheduler: {type: constant, params: {warmup_num_steps: 3}}\n");
  EXPECT_TRUE(contains(e, "constant takes no params")) << e;
  e = err("scheduler: {type: WarmupLR, params: {warmup_max_lr: 20}}\n");  // 20 x weight decay 0.1 > 1
  EXPECT_TRUE(contains(e, "lr*weight_decay <= 1")) << e;
  EXPECT_TRUE(contains(e, "at the schedule's largest lr, 20")) << e;
  e = err("scheduler: {type: WarmupLR, params: {warmup_min_lr: -1.0e-5}}\n");
  EXPECT_TRUE(contains(e, "scheduler.params.warmup_min_lr")) << e;
}

// A ds_config's scheduler: DeepSpeed's exact names, "auto" from the scenario's scheduler or as the
// Trainer fills it (warmup_min_lr 0, warmup_max_lr the optimizer's lr, total_num_steps training.steps).
TEST(LrScheduleDsConfig, AutoValuesAsTheTrainerFillsThem) {
  const Scenario s = parse_ds("scheduler: {type: WarmupDecayLR, params: {warmup_num_steps: 6}}\n",
                              R"({"type": "WarmupDecayLR", "params": {"total_num_steps": "auto",
                                  "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}})");
  const LrSchedule& l = s.optimizer.schedule;
  EXPECT_EQ(l.kind, LrScheduleKind::kWarmupDecayLr);
  EXPECT_EQ(l.total_num_steps, 40);  // training.steps
  EXPECT_EQ(l.warmup_min_lr, 0.0);   // the Trainer's fill
  EXPECT_EQ(l.warmup_max_lr, 3e-4);  // the optimizer's lr ("auto" there, from the scenario)
  EXPECT_EQ(l.warmup_num_steps, 6);  // the scenario's scheduler
  EXPECT_EQ(l.warmup_type, WarmupType::kLog);
  EXPECT_TRUE(defaulted(s, "scheduler.params.total_num_steps"));
  EXPECT_TRUE(defaulted(s, "scheduler.params.warmup_type"));
  EXPECT_TRUE(std::any_of(s.warnings.begin(), s.warnings.end(), [](const std::string& w) {
    return contains(w, "the ds_config's scheduler section") &&
           contains(w, "only fills the values it gives as \"auto\"");
  }));
  EXPECT_EQ(resolve_settings(s).policy.schedule.warmup_max_lr, 3e-4);
}

TEST(LrScheduleDsConfig, UnresolvedAutoIsListedWithTheOthers) {
  const std::string e = error_of<InputError>(
      [] { parse_ds("", R"({"type": "WarmupLR", "params": {"warmup_num_steps": "auto", "warmup_type": "auto"}})"); });
  EXPECT_TRUE(contains(e, "2 \"auto\" value(s)")) << e;
  EXPECT_TRUE(contains(e, "scheduler.params.warmup_num_steps: set scheduler.params.warmup_num_steps in the scenario"))
      << e;
  EXPECT_TRUE(contains(e, "scheduler.params.warmup_type: set scheduler.params.warmup_type in the scenario")) << e;
}

TEST(LrScheduleDsConfig, DeepSpeedsNamesAndArguments) {
  const auto err = [](const std::string& sched) { return error_of<InputError>([&] { parse_ds("", sched); }); };
  std::string e = err(R"({"type": "warmuplr"})");
  EXPECT_TRUE(contains(e, "ds.json:")) << e;
  EXPECT_TRUE(contains(e, "scheduler.type: 'warmuplr': DeepSpeed looks scheduler names up exactly")) << e;
  EXPECT_TRUE(contains(e, "write WarmupLR")) << e;
  e = err(R"({"type": "OneCycle", "params": {}})");
  EXPECT_TRUE(contains(e,
                       "DeepSpeed's OneCycle is not supported by Twin-Flow; allowed: WarmupLR, WarmupDecayLR, "
                       "WarmupCosineLR, or no scheduler section (a constant lr)"))
      << e;
  e = err(R"({"type": "CosineAnnealingLR"})");
  EXPECT_TRUE(contains(e, "'CosineAnnealingLR' is not supported by Twin-Flow")) << e;
  e = err(R"({"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10}})");
  EXPECT_TRUE(contains(e,
                       "scheduler.params.total_num_steps: missing; DeepSpeed's WarmupCosineLR takes "
                       "total_num_steps as a required argument"))
      << e;
  e = err(R"({"type": "WarmupLR", "params": {"warmup_num_steps": "100"}})");
  EXPECT_TRUE(contains(e, "scheduler.params.warmup_num_steps: the string \"100\" where a number belongs")) << e;
  e = err(R"({"type": "WarmupLR", "params": {"total_num_steps": 100}})");
  EXPECT_TRUE(contains(e, "unknown key `total_num_steps`")) << e;
  EXPECT_TRUE(contains(e, "not a parameter of DeepSpeed's WarmupLR")) << e;
  e = err(R"({"type": "WarmupLR", "params": {"warmup_num_steps": 0}})");
  EXPECT_TRUE(contains(e, "scheduler.params.warmup_num_steps: 0 is out of range")) << e;
}

TEST(LrScheduleDsConfig, WithoutOneTheScenariosSchedulerApplies) {
  const Scenario s =
      parse_ds("scheduler: {type: WarmupLR, params: {warmup_num_steps: 4, warmup_max_lr: 5.0e-4}}\n", "");
  EXPECT_EQ(s.optimizer.schedule.kind, LrScheduleKind::kWarmupLr);
  EXPECT_EQ(s.optimizer.schedule.warmup_max_lr, 5e-4);
  const Scenario none = parse_ds("", "");
  EXPECT_EQ(none.optimizer.schedule.kind, LrScheduleKind::kConstant);
  EXPECT_EQ(none.optimizer.schedule.base_lr, 3e-4);
  // a section without a type: DeepSpeed builds no scheduler
  const Scenario untyped = parse_ds("", R"({"params": {"warmup_num_steps": 4}})");
  EXPECT_EQ(untyped.optimizer.schedule.kind, LrScheduleKind::kConstant);
  EXPECT_TRUE(std::any_of(untyped.warnings.begin(), untyped.warnings.end(),
                          [](const std::string& w) { return contains(w, "no type: DeepSpeed builds no scheduler"); }));
}

// make_step_policy takes the schedule's base from the optimizer's lr, and decide_step refuses a policy
// whose two disagree (built by hand).
TEST(LrSchedulePolicy, BaseLrIsTheOptimizers) {
  HyperParams hp = default_hyper_params(OptimizerKind::kAdamW);
  hp.lr = 5e-3;
  LrSchedule cos;
  cos.kind = LrScheduleKind::kWarmupCosineLr;
  cos.total_num_steps = 10;
  cos.warmup_num_steps = 2;
  cos.base_lr = 1.0;  // overwritten
  const StepPolicy p = make_step_policy(OptimizerKind::kAdamW, hp, 0, DType::kBF16, cos);
  EXPECT_EQ(p.schedule.base_lr, 5e-3);
  StepPolicy bad = p;
  bad.hp.lr = 1e-3;
  EXPECT_THROW(decide_step(bad, 1, 0.0, 0, 1.0, 1), std::logic_error);
  // the decided scalars are make_step_scalars' at the step's lr
  const StepDecision d = decide_step(p, 4, 0.0, 0, 1.0, 4);
  HyperParams at = hp;
  at.lr = d.lr;
  const StepScalars want = make_step_scalars(OptimizerKind::kAdamW, at, 4, 1.0);
  EXPECT_EQ(d.scalars.step_size, want.step_size);
  EXPECT_EQ(d.scalars.decay, want.decay);
  EXPECT_LT(d.lr, 5e-3);  // after the 2-step warm-up the cosine has begun: below the base
  // peak lr x weight decay is checked when the policy is made
  cos.kind = LrScheduleKind::kWarmupLr;
  cos.warmup_max_lr = 200;
  EXPECT_THROW(make_step_policy(OptimizerKind::kAdamW, hp, 0, DType::kBF16, cos), InputError);
}
