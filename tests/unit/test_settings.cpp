// Scenario -> step settings in one place: what each precision, clip and override gives, and that the
// step's flags follow the policy.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/scenario.h"
#include "core/settings.h"

using namespace tf::core;

namespace {
Scenario scenario(const std::string& training, const std::string& extra = "") {
  return parse_scenario(
      "model: {type: mlp, dims: [256, 512, 256]}\n"
      "cluster: {profile: h200x2-32core, gpus_per_node: 2, cpu_cores_per_gpu: 6}\n"
      "training: {" +
          training +
          "}\n"
          "optimizer: {type: lion, params: {lr: 0.001}}\n"
          "zero: {stage: 2, offload_optimizer: {device: cpu, ratio: 0.5}}\n" +
          extra,
      {}, "settings.yaml");
}
}  // namespace

TEST(Settings, Bf16WithClipping) {
  const RunSettings s = resolve_settings(scenario("micro_batch: 4, grad_accum: 3, gradient_clipping: 0.5"));
  EXPECT_EQ(s.world, 2);
  EXPECT_EQ(s.partition.stage, 2);
  EXPECT_EQ(s.partition.world, 2);
  EXPECT_EQ(s.partition.align_elems, 2048);
  EXPECT_EQ(s.model.total_params, 256 * 512 + 512 + 512 * 256 + 256);
  EXPECT_EQ(s.policy.kind, OptimizerKind::kLion);
  EXPECT_EQ(s.policy.hp.lr, 0.001);
  EXPECT_EQ(s.policy.clip, 0.5);
  EXPECT_FALSE(s.policy.skip_nonfinite);
  EXPECT_EQ(s.step.optimizer, OptimizerKind::kLion);
  EXPECT_EQ(s.step.micro_batch, 4);
  EXPECT_EQ(s.step.grad_accum, 3);
  EXPECT_EQ(s.step.grad_dtype, DType::kBF16);
  EXPECT_EQ(s.step.param_dtype, DType::kBF16);
  EXPECT_TRUE(s.step.clip_gradients);
  EXPECT_FALSE(s.step.loss_scaling);
  // bf16: a fixed scale of 1
  EXPECT_EQ(s.loss_scaler.scale, 1);
  EXPECT_EQ(s.loss_scaler.window, 0);
  EXPECT_EQ(s.workload, WorkloadType::kMlp);  // auto, for an MLP
  EXPECT_EQ(s.cpu_threads, 6);
  const MemoryOptions m = s.memory_options();
  EXPECT_EQ(m.step, s.step);
  EXPECT_EQ(m.workload, WorkloadType::kMlp);
}

// A rank's CPU optimizer threads: the scenario's cores per GPU, or an override (run --threads, a measured
// run's threads, so the simulator plans what runs); fewer than one is an error.
TEST(Settings, CpuOptimizerThreadsTakeTheOverride) {
  EXPECT_EQ(resolve_settings(scenario("micro_batch: 4")).cpu_threads, 6);
  SettingsOverrides o;
  o.cpu_threads = 16;
  EXPECT_EQ(resolve_settings(scenario("micro_batch: 4"), o).cpu_threads, 16);
  o.cpu_threads = 0;
  EXPECT_THROW(resolve_settings(scenario("micro_batch: 4"), o), InputError);
}

TEST(Settings, Fp16DynamicAndStaticLossScaling) {
  const RunSettings d = resolve_settings(
      scenario("micro_batch: 1, precision: fp16, loss_scaling: {initial_scale_power: 12, loss_scale_window: 50, "
               "min_loss_scale: 0.5}"));
  EXPECT_EQ(d.step.grad_dtype, DType::kF16);
  EXPECT_EQ(d.step.param_dtype, DType::kBF16);  // the engine keeps bf16 parameters for fp16 gradients
  EXPECT_TRUE(d.step.loss_scaling);
  EXPECT_FALSE(d.step.clip_gradients);
  EXPECT_TRUE(d.policy.skip_nonfinite);
  EXPECT_EQ(d.loss_scaler.scale, 4096);
  EXPECT_EQ(d.loss_scaler.window, 50);
  EXPECT_EQ(d.loss_scaler.min_scale, 0.5);
  EXPECT_EQ(d.loss_scaler.clean, 0);
  const RunSettings st =
      resolve_settings(scenario("micro_batch: 1, precision: fp16, loss_scaling: {loss_scale: 1024}"));
  EXPECT_EQ(st.loss_scaler.scale, 1024);
  EXPECT_EQ(st.loss_scaler.window, 0);  // a static scale never grows
}

TEST(Settings, Fp32) {
  const RunSettings s = resolve_settings(scenario("micro_batch: 1, precision: fp32"));
  EXPECT_EQ(s.step.grad_dtype, DType::kF32);
  EXPECT_EQ(s.step.param_dtype, DType::kF32);
  EXPECT_EQ(grad_dtype_of(Precision::kFP32), DType::kF32);
  EXPECT_EQ(s.loss_scaler.scale, 1);
}

TEST(Settings, Overrides) {
  const Scenario sc = scenario("micro_batch: 2, grad_accum: 3", "workload: {type: synthetic, seed: 9}\n");
  EXPECT_EQ(resolve_settings(sc).workload, WorkloadType::kSynthetic);
  EXPECT_EQ(resolve_settings(sc).seed, 9u);
  const RunSettings s = resolve_settings(sc, {.world = 4, .grad_accum = 5, .workload = WorkloadType::kMlp});
  EXPECT_EQ(s.world, 4);
  EXPECT_EQ(s.partition.world, 4);
  EXPECT_EQ(s.step.grad_accum, 5);
  EXPECT_EQ(s.workload, WorkloadType::kMlp);
  EXPECT_THROW(resolve_settings(sc, {.world = 0}), InputError);
  EXPECT_THROW(resolve_settings(sc, {.grad_accum = 0}), InputError);
  const Scenario decoder = parse_scenario(
      "model: {preset: gpt-tiny}\ncluster: {profile: h100-80gb-16core}\ntraining: {micro_batch: 1}\n"
      "optimizer: {type: adamw}\nzero: {stage: 3}\n",
      {}, "d.yaml");
  EXPECT_EQ(resolve_settings(decoder).workload, WorkloadType::kDecoder);  // auto: the model trained for real
  EXPECT_EQ(resolve_settings(decoder, {.workload = WorkloadType::kSynthetic}).workload, WorkloadType::kSynthetic);
  EXPECT_THROW(resolve_settings(decoder, {.workload = WorkloadType::kMlp}), InputError);
  EXPECT_THROW(resolve_settings(sc, {.workload = WorkloadType::kDecoder}), InputError);  // an MLP
  EXPECT_TRUE(resolve_settings(decoder).data_train.empty());                             // the built-in stream
  EXPECT_TRUE(resolve_settings(decoder).init_from.empty());                              // GPT-2's init
}

// An override out of range names what set it.
TEST(Settings, OverrideErrorsNameTheirSource) {
  const Scenario sc = scenario("micro_batch: 2, grad_accum: 3");
  const auto error_of = [&](const SettingsOverrides& o) {
    try {
      resolve_settings(sc, o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error_of({.world = 0, .world_from = "--world"}), "--world 0: ranks must be in [1, 65536]");
  EXPECT_EQ(error_of({.world = kMaxWorld + 1, .world_from = "--world"}), "--world 65537: ranks must be in [1, 65536]");
  EXPECT_EQ(error_of({.grad_accum = int(kMaxBatch) + 1, .grad_accum_from = "--grad-accum"}),
            "--grad-accum 1048577: micro-batches per step must be in [1, 1048576]");
  EXPECT_EQ(error_of({.grad_accum = 0}), "the grad_accum override 0: micro-batches per step must be in [1, 1048576]");
  EXPECT_EQ(error_of({.world = 2, .ranks_per_node = 3}),
            "ranks per node 3 (LOCAL_WORLD_SIZE) must be in [1, 2], the world size");
  EXPECT_EQ(error_of({.world = 2, .ranks_per_node = 0}),
            "ranks per node 0 (LOCAL_WORLD_SIZE) must be in [1, 2], the world size");
}

// The ranks of one node: the scenario's GPUs per node at its own world, the profile's at another, and a
// launched run's LOCAL_WORLD_SIZE over both (two GPUs of one host launched with a one-GPU scenario).
TEST(Settings, RanksPerNode) {
  const Scenario one = parse_scenario(
      "model: {type: mlp, dims: [256, 512, 256]}\ncluster: {profile: h100-80gb-16core}\n"
      "training: {micro_batch: 2}\noptimizer: {type: adamw}\nzero: {stage: 3}\n",
      {}, "one.yaml");  // one GPU a node, as its profile
  EXPECT_EQ(resolve_settings(one).ranks_per_node, 1);
  EXPECT_EQ(resolve_settings(one, {.world = 2}).ranks_per_node, 1);  // nodes of the profile
  EXPECT_EQ(resolve_settings(one, {.world = 2, .ranks_per_node = 2}).ranks_per_node, 2);
  EXPECT_EQ(ranks_per_node(one, 2), 1);
  const Scenario two = scenario("micro_batch: 2");  // two GPUs a node, of two a node in its profile
  EXPECT_EQ(resolve_settings(two).ranks_per_node, 2);
  EXPECT_EQ(resolve_settings(two, {.world = 8}).ranks_per_node, 2);
  EXPECT_EQ(resolve_settings(two, {.world = 8, .ranks_per_node = 8}).ranks_per_node, 8);
}

// The simulators' bound on ranks x micro-batches x layers (core::simulation_size_issue) names the
// overrides that set the sizes, else the scenario's keys.
TEST(Settings, SimulationSizeNamesWhatSetIt) {
  const Scenario sc = scenario("micro_batch: 1, grad_accum: 8");  // 2 layers (an MLP of three widths)
  const auto error_of = [&](const Scenario& s, const SettingsOverrides& o) {
    try {
      check_simulation_size(s, o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error_of(sc, {}), "(no error)");
  EXPECT_EQ(error_of(sc, {.world = 65536, .world_from = "--world"}), "(no error)");  // 65536 x 8 x 2 = 2^20
  EXPECT_EQ(error_of(sc, {.world = 65536, .grad_accum = 9, .world_from = "--world", .grad_accum_from = "--grad-accum"}),
            "--world 65536: " + *simulation_size_issue(sc, 65536, 9) + "; reduce --world or --grad-accum");
  EXPECT_EQ(error_of(sc, {.grad_accum = 524289, .grad_accum_from = "run.json: grad_accum"}),
            "run.json: grad_accum 524289: " + *simulation_size_issue(sc, 2, 524289) +
                "; reduce cluster.nodes x gpus_per_node or run.json: grad_accum");
  EXPECT_NE(error_of(sc, {.world = 0, .world_from = "--nproc"}).find("--nproc 0: 0 ranks is out of range"),
            std::string::npos);
}

// training.speculation: auto by default (the cost model's count within max: every eligible layer until it is
// chosen), max, 0 off, a byte count, or the command's override; anything else names the key. The count, once
// chosen (SettingsOverrides::speculation_layers), ends auto.
TEST(Settings, SpeculationBudget) {
  const RunSettings by_default = resolve_settings(scenario("micro_batch: 1, gradient_clipping: 1.0"));
  EXPECT_EQ(by_default.step.speculation_bytes, kSpeculationMax);
  EXPECT_EQ(by_default.step.speculation_layers, kEveryEligibleLayer);
  EXPECT_TRUE(by_default.speculation_auto);
  EXPECT_EQ(resolve_settings(scenario("micro_batch: 1, speculation: auto")).step.speculation_bytes, kSpeculationMax);
  EXPECT_TRUE(resolve_settings(scenario("micro_batch: 1, speculation: auto")).speculation_auto);
  const RunSettings max = resolve_settings(scenario("micro_batch: 1, speculation: MAX"));
  EXPECT_EQ(max.step.speculation_bytes, kSpeculationMax);
  EXPECT_EQ(max.step.speculation_layers, kEveryEligibleLayer);
  EXPECT_FALSE(max.speculation_auto);
  EXPECT_FALSE(resolve_settings(scenario("micro_batch: 1, speculation: 0")).speculation_auto);
  const RunSettings chosen = resolve_settings(scenario("micro_batch: 1"), {.speculation_layers = 3});
  EXPECT_FALSE(chosen.speculation_auto);
  EXPECT_EQ(chosen.step.speculation_layers, 3);
  EXPECT_EQ(chosen.step.speculation_bytes, kSpeculationMax);
  EXPECT_THROW(resolve_settings(scenario("micro_batch: 1"), {.speculation_layers = -2}), InputError);
  EXPECT_EQ(resolve_settings(scenario("micro_batch: 1, speculation: 0")).step.speculation_bytes, 0);
  EXPECT_EQ(resolve_settings(scenario("micro_batch: 1, speculation: 8000000000")).step.speculation_bytes, 8000000000);
  SettingsOverrides o;
  o.speculation_bytes = 0;
  EXPECT_EQ(resolve_settings(scenario("micro_batch: 1, speculation: auto"), o).step.speculation_bytes, 0);
  o.speculation_bytes = -5;
  EXPECT_THROW(resolve_settings(scenario("micro_batch: 1"), o), InputError);
  for (const char* bad :
       {"speculation: -1", "speculation: lots", "speculation: '12'", "speculation: [1]", "speculation: all"}) {
    try {
      resolve_settings(scenario(std::string("micro_batch: 1, ") + bad));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("speculation"), std::string::npos) << e.what();
    }
  }
  // the report lists it
  bool listed = false;
  for (const ReportedSetting& r : settings_report(scenario("micro_batch: 1, speculation: 0")))
    if (r.key == "training.speculation") listed = r.value == "0";
  EXPECT_TRUE(listed);
  listed = false;
  for (const ReportedSetting& r : settings_report(scenario("micro_batch: 1, speculation: max")))
    if (r.key == "training.speculation") listed = r.value == "max";
  EXPECT_TRUE(listed);
}

// training.carry_tail: on by default (the CUDA engine carries), `false` off, or the command's override
// (--carry-tail); anything but a boolean names the key; the report lists it.
TEST(Settings, CarryTail) {
  EXPECT_TRUE(resolve_settings(scenario("micro_batch: 1")).step.carry_tail);
  EXPECT_TRUE(resolve_settings(scenario("micro_batch: 1, carry_tail: true")).step.carry_tail);
  EXPECT_FALSE(resolve_settings(scenario("micro_batch: 1, carry_tail: false")).step.carry_tail);
  SettingsOverrides o;
  o.carry_tail = true;
  EXPECT_TRUE(resolve_settings(scenario("micro_batch: 1, carry_tail: false"), o).step.carry_tail);
  try {
    resolve_settings(scenario("micro_batch: 1, carry_tail: sometimes"));
    ADD_FAILURE() << "carry_tail: sometimes was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("carry_tail"), std::string::npos) << e.what();
  }
  bool listed = false;
  for (const ReportedSetting& r : settings_report(scenario("micro_batch: 1, carry_tail: false")))
    if (r.key == "training.carry_tail") listed = r.value == "false";
  EXPECT_TRUE(listed);
}

// training.cpu_order: auto by default (the cost model chooses before the plan: step.cpu_order is today's
// until then), `arrival` today's order, or the command's order (--cpu-order); anything else names the key and
// the forms, a negative count the setting; the report lists it.
TEST(Settings, CpuOrder) {
  const RunSettings def = resolve_settings(scenario("micro_batch: 1"));
  EXPECT_TRUE(def.cpu_order_auto);
  EXPECT_EQ(def.step.cpu_order, CpuPassOrder{});
  EXPECT_FALSE(resolve_settings(scenario("micro_batch: 1, cpu_order: arrival")).cpu_order_auto);
  EXPECT_TRUE(resolve_settings(scenario("micro_batch: 1, cpu_order: AUTO")).cpu_order_auto);
  SettingsOverrides o;
  o.cpu_order = CpuOrderSetting{false, {2, 5}};
  const RunSettings given = resolve_settings(scenario("micro_batch: 1, cpu_order: auto"), o);
  EXPECT_FALSE(given.cpu_order_auto);
  EXPECT_EQ(given.step.cpu_order, (CpuPassOrder{2, 5}));
  o.cpu_order = CpuOrderSetting{false, {-3, 5}};
  EXPECT_THROW(resolve_settings(scenario("micro_batch: 1"), o), InputError);
  try {
    resolve_settings(scenario("micro_batch: 1, cpu_order: backward"));
    ADD_FAILURE() << "cpu_order: backward was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected `auto`"), std::string::npos) << e.what();
  }
  bool listed = false;
  for (const ReportedSetting& r : settings_report(scenario("micro_batch: 1, cpu_order: arrival")))
    if (r.key == "training.cpu_order") listed = r.value == "arrival";
  EXPECT_TRUE(listed);
}

// training.ring_order: forward by default, `backward` the order before it, the command's (--ring-order) over
// the scenario's; anything else names the key and both forms; the report lists it.
TEST(Settings, RingOrder) {
  EXPECT_TRUE(resolve_settings(scenario("micro_batch: 1")).step.ring_forward_order);
  EXPECT_FALSE(resolve_settings(scenario("micro_batch: 1, ring_order: backward")).step.ring_forward_order);
  EXPECT_TRUE(resolve_settings(scenario("micro_batch: 1, ring_order: Forward")).step.ring_forward_order);
  SettingsOverrides o;
  o.ring_forward_order = false;
  EXPECT_FALSE(resolve_settings(scenario("micro_batch: 1, ring_order: forward"), o).step.ring_forward_order);
  try {
    resolve_settings(scenario("micro_batch: 1, ring_order: arrival"));
    ADD_FAILURE() << "ring_order: arrival was accepted";
  } catch (const InputError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("ring_order"), std::string::npos) << w;
    EXPECT_NE(w.find("expected `forward`"), std::string::npos) << w;
    EXPECT_NE(w.find("`backward`"), std::string::npos) << w;
  }
  bool listed = false;
  for (const ReportedSetting& r : settings_report(scenario("micro_batch: 1, ring_order: backward")))
    if (r.key == "training.ring_order") listed = r.value == "backward";
  EXPECT_TRUE(listed);
}

// The host staging: auto by default (resolved per rank, core::resolve_staging_slots), or the command's
// slots; out of range names the setting.
TEST(Settings, StagingSlots) {
  const Scenario sc = scenario("micro_batch: 1");
  EXPECT_EQ(resolve_settings(sc).step.staging_slots, kStagingAuto);
  for (int slots : {kStagingAuto, kUnboundedStaging, 1, 3, kMaxStagingSlots})
    EXPECT_EQ(resolve_settings(sc, {.staging_slots = slots}).step.staging_slots, slots);
  for (int bad : {-2, kMaxStagingSlots + 1}) {
    try {
      resolve_settings(sc, {.staging_slots = bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("staging_slots"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(check_staging_slots(kStagingAuto), InputError);  // planning never sees the sentinel
}
