// Scenarios, hardware profiles and ds_config: shipped files load, keys are honoured, bad input is named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/config_node.h"
#include "core/error.h"
#include "core/hardware.h"
#include "core/scenario.h"
#include "core/token_data.h"
#include "tests/temp_dir.h"

#ifndef TWINFLOW_SOURCE_DIR
#error "TWINFLOW_SOURCE_DIR (the repository's absolute path) must be defined by the build"
#endif

using namespace tf::core;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = TWINFLOW_SOURCE_DIR;
const fs::path kScenarios = kSource / "scenarios";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

using tf::test::TempDir;

// A valid scenario, one key per line, so that cases can replace single lines.
const std::vector<std::string> kBase = {
    "model:",                                          // 1
    "  type: decoder",                                 // 2
    "  layers: 2",                                     // 3
    "  hidden: 64",                                    // 4
    "  heads: 4",                                      // 5
    "  vocab: 100",                                    // 6
    "  seq: 16",                                       // 7
    "cluster:",                                        // 8
    "  profile: h100-80gb-16core",                     // 9
    "training:",                                       // 10
    "  micro_batch: 2",                                // 11
    "optimizer:",                                      // 12
    "  type: adamw",                                   // 13
    "zero:",                                           // 14
    "  stage: 3",                                      // 15
    "  offload_optimizer: {device: cpu, ratio: 0.5}",  // 16
};

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}
// kBase with line `n` (1-based) replaced.
std::string with_line(int n, const std::string& text) {
  auto lines = kBase;
  lines[size_t(n - 1)] = text;
  return join_lines(lines);
}
// "s.yaml:LINE:COL" of `token` within `line_text` on line `n`.
std::string at(const fs::path& file, int n, const std::string& line_text, const std::string& token) {
  const size_t c = line_text.find(token);
  EXPECT_NE(c, std::string::npos) << token << " not in " << line_text;
  return file.string() + ":" + std::to_string(n) + ":" + std::to_string(c + 1);
}

std::string load_error(const fs::path& file) {
  try {
    load_scenario(file);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// ---- shipped files ------------------------------------------------------------------------------

TEST(Scenario, EveryShippedScenarioLoads) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(kScenarios)) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    Scenario s;
    ASSERT_NO_THROW(s = load_scenario(e.path()));
    names.insert(s.name);
    EXPECT_EQ(s.name, e.path().stem().string());
    EXPECT_GE(s.cluster.world_size(), 1);
    EXPECT_GT(parameter_count(s.model), 0);
    EXPECT_GE(s.cpu_ratio(), 0.0);
    EXPECT_LE(s.cpu_ratio(), 1.0);
  }
  for (const char* n : {"opt-13b-dgx-a100", "opt-30b-dgx-h100", "gpt2-10b-v100", "gpt-350m-ratio0.3",
                        "toy-zero3-ratio0.4", "h100-single", "h200x2"})
    EXPECT_TRUE(names.count(n)) << n;
}

TEST(Scenario, SeedsReproduceTheirSetups) {
  const Scenario opt30 = load_scenario(kScenarios / "opt-30b-dgx-h100.yaml");
  EXPECT_EQ(opt30.model.name, "opt-30b");
  EXPECT_EQ(opt30.cluster.hardware.name, "dgx-h100-80gb");
  EXPECT_EQ(opt30.cluster.world_size(), 8);
  EXPECT_EQ(opt30.zero.stage, 3);
  EXPECT_EQ(opt30.zero.offload_optimizer.device, OffloadDevice::kCpu);
  ASSERT_TRUE(opt30.reference.has_value());
  EXPECT_EQ(opt30.reference->speedup_vs_full_offload, 6);
  EXPECT_TRUE(opt30.warnings.empty());

  const Scenario opt13 = load_scenario(kScenarios / "opt-13b-dgx-a100.yaml");
  EXPECT_EQ(opt13.cluster.hardware.name, "dgx-a100-40gb");
  EXPECT_EQ(opt13.cluster.world_size(), 8);
  ASSERT_TRUE(opt13.reference.has_value());
  EXPECT_EQ(opt13.reference->speedup_vs_full_offload, 3);

  const Scenario g10 = load_scenario(kScenarios / "gpt2-10b-v100.yaml");
  EXPECT_EQ(g10.model.decoder.layers, 50);
  EXPECT_EQ(g10.model.decoder.hidden, 4096);
  EXPECT_EQ(g10.model.decoder.heads, 32);
  EXPECT_EQ(g10.cluster.world_size(), 1);
  EXPECT_EQ(g10.zero.stage, 2);
  EXPECT_EQ(g10.cpu_ratio(), 1.0);  // legacy cpu_offload: true
  EXPECT_EQ(g10.training.micro_batch, 10);
  EXPECT_TRUE(g10.training.activation_checkpointing);
  EXPECT_EQ(g10.training.precision, Precision::kFP16);
  EXPECT_EQ(g10.optimizer.kind, OptimizerKind::kAdamW);  // DeepSpeed "Adam" with adam_w_mode default
  EXPECT_TRUE(g10.from_ds_config);
  EXPECT_EQ(g10.training.gradient_clipping, 1.0);
  ASSERT_EQ(g10.warnings.size(), 2u);  // contiguous_gradients, overlap_comm: not modelled
  EXPECT_TRUE(contains(g10.warnings[0],
                       "ds_config.zero_optimization.contiguous_gradients: a DeepSpeed key that "
                       "Twin-Flow does not model, ignored"));

  const Scenario g350 = load_scenario(kScenarios / "gpt-350m-ratio0.3.yaml");
  EXPECT_EQ(g350.model.decoder.hidden, 1024);
  EXPECT_EQ(g350.model.decoder.seq, 2048);
  EXPECT_EQ(g350.cpu_ratio(), 0.3);
  EXPECT_EQ(g350.zero.stage, 3);
  EXPECT_TRUE(g350.zero.offload_optimizer.pin_memory);
  EXPECT_FALSE(g350.training.prescale_gradients);
  EXPECT_EQ(g350.ds_config_file, (kScenarios / "ds_config" / "gpt-350m.json").lexically_normal());
  EXPECT_EQ(g350.global_batch(), 256);

  const Scenario toy = load_scenario(kScenarios / "toy-zero3-ratio0.4.yaml");
  EXPECT_EQ(toy.model.type, ModelType::kMlp);
  EXPECT_EQ(toy.model.mlp_dims, (std::vector<int64_t>{4096, 4096, 4096, 4096, 4096}));
  EXPECT_EQ(toy.zero.stage, 3);
  EXPECT_EQ(toy.cpu_ratio(), 0.4);
  EXPECT_EQ(toy.zero.sub_group_size, 8);
  EXPECT_EQ(toy.training.loss_scaling.initial_scale_power, 15);
  EXPECT_EQ(toy.training.micro_batch, 128);  // train_batch_size 256 over 2 GPUs
  // no gradient_clipping in the ds_config: DeepSpeed's default since PR #8068, and it is recorded
  EXPECT_EQ(toy.training.gradient_clipping, kDeepSpeedGradientClippingDefault);
  EXPECT_TRUE(std::any_of(toy.applied_defaults.begin(), toy.applied_defaults.end(), [](const AppliedDefault& d) {
    return d.key == "gradient_clipping" && d.value == "1" && contains(d.why, "PR #8068");
  }));

  const Scenario h100 = load_scenario(kScenarios / "h100-single.yaml");
  EXPECT_EQ(h100.cluster.hardware.name, "h100-80gb-16core");
  EXPECT_EQ(h100.cluster.world_size(), 1);
  const Scenario h200 = load_scenario(kScenarios / "h200x2.yaml");
  EXPECT_EQ(h200.cluster.hardware.name, "h200x2-32core");
  EXPECT_EQ(h200.cluster.world_size(), 2);
}

TEST(Scenario, DefaultScenarioIsTheShippedOpt30bFile) {
  EXPECT_EQ(std::string(default_scenario_text()), slurp(kScenarios / "opt-30b-dgx-h100.yaml"));
  const Scenario s = load_default_scenario();
  EXPECT_EQ(s.name, "opt-30b-dgx-h100");
  EXPECT_EQ(s.cluster.hardware.name, "dgx-h100-80gb");
  EXPECT_TRUE(s.cluster.profile_file.empty());  // built-in profile
}

TEST(Hardware, EveryShippedProfileParsesWithASourcePerFigure) {
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(kScenarios / "hardware")) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    files.insert(e.path().stem().string());
    const HardwareProfile p = load_hardware_profile(e.path());
    EXPECT_EQ(p.name, e.path().stem().string());
    EXPECT_TRUE(p.warnings.empty());
    // 21 figures; 22 with the measured bus-bandwidth curve
    EXPECT_GE(p.sources.size(), 21u);
    for (const auto& [key, source] : p.sources) EXPECT_GE(source.size(), 10u) << key;
    EXPECT_GT(p.gpu.hbm_bytes, int64_t(16) << 30);
    EXPECT_GT(p.pcie.h2d_gbps, 0);
    EXPECT_GE(p.cpu.optimizer_gparam_s_all_cores, p.cpu.optimizer_gparam_s_per_core);
    // the compiled-in copy is the file
    const auto text = builtin_hardware_profile_text(p.name);
    ASSERT_TRUE(text.has_value());
    EXPECT_EQ(std::string(*text), slurp(e.path()));
  }
  std::set<std::string> builtin;
  for (auto n : builtin_hardware_profile_names()) builtin.insert(std::string(n));
  EXPECT_EQ(files, builtin);
}

TEST(Hardware, MeasuredFiguresFromDesign) {
  const HardwareProfile h100 = load_hardware_profile(kScenarios / "hardware" / "h100-80gb-16core.yaml");
  EXPECT_EQ(h100.pcie.h2d_gbps, 55);
  EXPECT_EQ(h100.pcie.bidir_total_gbps, 83);
  EXPECT_EQ(h100.gpu.hbm_gbps, 3000);
  EXPECT_EQ(h100.gpu.bf16_tflops, 790);
  EXPECT_EQ(h100.cpu.optimizer_gparam_s_all_cores, 5.2);
  EXPECT_EQ(h100.cpu.dma_slowdown_factor, 1.68);
  EXPECT_TRUE(contains(h100.sources.at("pcie.h2d_gbps"), "MEASUREMENTS.md"));
  // measured by threads: interpolated, held after the last point
  EXPECT_DOUBLE_EQ(h100.cpu.optimizer_gparam_s(1), 1.04);
  EXPECT_DOUBLE_EQ(h100.cpu.optimizer_gparam_s(3), (1.66 + 2.89) / 2);
  EXPECT_DOUBLE_EQ(h100.cpu.optimizer_gparam_s(16), 4.88);
  EXPECT_DOUBLE_EQ(h100.cpu.optimizer_gparam_s(64), 4.88);
  EXPECT_DOUBLE_EQ(h100.cpu.optimizer_gparam_s(0), 0);
  EXPECT_EQ(h100.gpu.hbm_bytes, int64_t(81559) << 20);
  // no measurements: per-core rate x threads up to the all-core ceiling
  const HardwareProfile dgx = load_hardware_profile(kScenarios / "hardware" / "dgx-h100-80gb.yaml");
  EXPECT_TRUE(dgx.cpu.optimizer_gparam_s_by_threads.empty());
  EXPECT_DOUBLE_EQ(dgx.cpu.optimizer_gparam_s(2), 2.08);
  EXPECT_DOUBLE_EQ(dgx.cpu.optimizer_gparam_s(112), dgx.cpu.optimizer_gparam_s_all_cores);

  const HardwareProfile h200 = load_hardware_profile(kScenarios / "hardware" / "h200x2-32core.yaml");
  const LinkProfile& nv = h200.intra_node;
  EXPECT_EQ(nv.kind, "nvlink");
  EXPECT_DOUBLE_EQ(nv.bus_gbps_at(2 << 20), 28);
  EXPECT_DOUBLE_EQ(nv.bus_gbps_at(32 << 20), 180);
  EXPECT_DOUBLE_EQ(nv.bus_gbps_at(int64_t(512) << 20), 250);
  EXPECT_DOUBLE_EQ(nv.bus_gbps_at(8 << 20), 104);  // halfway in log(size) between 2 and 32 MiB
  EXPECT_DOUBLE_EQ(nv.bus_gbps_at(1024), 28);      // clamped
  EXPECT_DOUBLE_EQ(nv.bus_gbps_at(int64_t(1) << 40), 250);
  EXPECT_GE(h200.pcie.h2d_gbps, 52);
  const HardwareProfile v100 = load_hardware_profile(kScenarios / "hardware" / "v100-32gb.yaml");
  EXPECT_EQ(v100.gpu.bf16_tflops, 0);
  EXPECT_DOUBLE_EQ(v100.intra_node.bus_gbps_at(1 << 20), v100.intra_node.gbps);  // no curve: the figure
}

// ---- ds_config ----------------------------------------------------------------------------------

// Every honoured key set away from its default, in a file and embedded.
const char* kFullDsConfig = R"({
  "train_micro_batch_size_per_gpu": 3,
  "gradient_accumulation_steps": 5,
  "gradient_clipping": 0.7,
  "prescale_gradients": true,
  "bf16": {"enabled": false},
  "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
           "hysteresis": 3, "min_loss_scale": 0.5},
  "optimizer": {"type": "AdamW",
                "params": {"lr": 2e-4, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.05}},
  "zero_optimization": {
    "stage": 2,
    "sub_group_size": 1e8,
    "offload_optimizer": {"device": "cpu", "ratio": 0.25, "pin_memory": true}
  }
})";

void expect_full_ds(const Scenario& s) {
  EXPECT_TRUE(s.from_ds_config);
  EXPECT_EQ(s.training.micro_batch, 3);
  EXPECT_EQ(s.training.grad_accum, 5);
  EXPECT_EQ(s.training.gradient_clipping, 0.7);
  EXPECT_TRUE(s.training.prescale_gradients);
  EXPECT_EQ(s.training.precision, Precision::kFP16);
  EXPECT_TRUE(s.training.loss_scaling.dynamic());
  EXPECT_EQ(s.training.loss_scaling.initial_scale_power, 12);
  EXPECT_EQ(s.training.loss_scaling.initial_loss_scale(), 4096);
  EXPECT_EQ(s.training.loss_scaling.loss_scale_window, 500);
  EXPECT_EQ(s.training.loss_scaling.hysteresis, 3);
  EXPECT_EQ(s.training.loss_scaling.min_loss_scale, 0.5);
  EXPECT_EQ(s.optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_EQ(s.optimizer.hp.lr, 2e-4);
  EXPECT_EQ(s.optimizer.hp.beta1, 0.8);
  EXPECT_EQ(s.optimizer.hp.beta2, 0.95);
  EXPECT_EQ(s.optimizer.hp.eps, 1e-6);
  EXPECT_EQ(s.optimizer.hp.weight_decay, 0.05);
  EXPECT_EQ(s.zero.stage, 2);
  EXPECT_EQ(s.zero.sub_group_size, 100'000'000);
  EXPECT_EQ(s.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(s.zero.offload_optimizer.ratio, 0.25);
  EXPECT_TRUE(s.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(s.cpu_ratio(), 0.25);
  // the one note: partial offload at stage 2, which DeepSpeed refuses
  ASSERT_EQ(s.warnings.size(), 1u) << s.warnings.front();
  EXPECT_TRUE(contains(s.warnings[0],
                       "zero_optimization.offload_optimizer.ratio: partial offload (ratio 0.25) at ZeRO "
                       "stage 2 is a Twin-Flow extension: DeepSpeed refuses it"))
      << s.warnings[0];
}

const char* kDsScenarioHead =
    "model: gpt-tiny\n"
    "cluster: {profile: h200x2-32core}\n"
    "training: {steps: 4}\n";

TEST(DsConfig, FileHonoursEveryKey) {
  TempDir d;
  d.write("ds/full.json", kFullDsConfig);
  const fs::path s = d.write("s.yaml", std::string(kDsScenarioHead) + "ds_config: ds/full.json\n");
  const Scenario sc = load_scenario(s);
  expect_full_ds(sc);
  EXPECT_EQ(sc.training.steps, 4);
  EXPECT_EQ(sc.cluster.world_size(), 2);
  EXPECT_EQ(sc.ds_config_file, (d.path() / "ds" / "full.json").lexically_normal());
}

TEST(DsConfig, EmbeddedHonoursEveryKey) {
  TempDir d;  // JSON is YAML: the same text embedded as a flow mapping
  const fs::path s = d.write("s.yaml", std::string(kDsScenarioHead) + "ds_config: " + kFullDsConfig + "\n");
  expect_full_ds(load_scenario(s));
}

TEST(DsConfig, DeepSpeedSemantics) {
  TempDir d;
  auto load = [&](const std::string& ds) {
    d.write("ds.json", ds);
    return load_scenario(d.write("s.yaml", std::string(kDsScenarioHead) + "ds_config: ds.json\n"));
  };
  const std::string zero = R"("zero_optimization": {"stage": 3})";
  // "Adam" is AdamW unless adam_w_mode is false; DeepSpeed's defaults (weight_decay 0)
  Scenario s = load(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam"}, )" + zero + "}");
  EXPECT_EQ(s.optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_EQ(s.optimizer.hp.weight_decay, 0);
  EXPECT_EQ(s.training.precision, Precision::kFP32);
  EXPECT_EQ(s.zero.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(s.cpu_ratio(), 0);
  EXPECT_EQ(s.zero.sub_group_size, 1'000'000'000);
  s = load(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "adam", "params": {"adam_w_mode": false,
           "weight_decay": 0.01}}, )" +
           zero + "}");
  EXPECT_EQ(s.optimizer.kind, OptimizerKind::kAdam);
  // bf16, static loss scale (ignored for bf16 but kept), offload default ratio 1
  s = load(R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "fp16": {"loss_scale": 128},
           "optimizer": {"type": "Lion"}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_EQ(s.training.precision, Precision::kBF16);
  EXPECT_EQ(s.training.loss_scaling.loss_scale, 128);
  EXPECT_FALSE(s.training.loss_scaling.dynamic());
  EXPECT_EQ(s.optimizer.kind, OptimizerKind::kLion);
  EXPECT_EQ(s.zero.stage, 1);
  EXPECT_EQ(s.cpu_ratio(), 1.0);
  EXPECT_FALSE(s.zero.offload_optimizer.pin_memory);
  // train_batch_size = micro x accumulation x world (2 GPUs): the missing one is derived
  s = load(R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 3, "optimizer": {"type": "adagrad"}, )" +
           zero + "}");
  EXPECT_EQ(s.training.grad_accum, 4);
  EXPECT_EQ(s.optimizer.kind, OptimizerKind::kAdagrad);
  s = load(R"({"train_batch_size": 24, "gradient_accumulation_steps": 3, "optimizer": {"type": "adamw"}, )" + zero +
           "}");
  EXPECT_EQ(s.training.micro_batch, 4);
  s = load(R"({"train_batch_size": 24, "optimizer": {"type": "adamw"}, )" + zero + "}");
  EXPECT_EQ(s.training.micro_batch, 12);
  EXPECT_EQ(s.training.grad_accum, 1);
}

TEST(DsConfig, UnknownKeysWarnWithTheirPosition) {
  TempDir d;
  d.write("ds.json",
          "{\n"
          "  \"train_micro_batch_size_per_gpu\": 1,\n"
          "  \"steps_per_print\": 10,\n"
          "  \"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 1e-3, \"torch_adam\": true}},\n"
          "  \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true,\n"
          "    \"offload_optimizer\": {\"device\": \"cpu\", \"nvme_path\": \"/x\"}}\n"
          "}\n");
  const fs::path s = d.write("s.yaml", std::string(kDsScenarioHead) + "ds_config: ds.json\n");
  const Scenario sc = load_scenario(s);
  const std::string ds = (d.path() / "ds.json").string();
  std::string all;
  for (const auto& w : sc.warnings) all += w + "\n";
  const std::string not_modelled = "a DeepSpeed key that Twin-Flow does not model, ignored";
  EXPECT_TRUE(contains(all, ds + ":3:3: steps_per_print: " + not_modelled)) << all;
  EXPECT_TRUE(contains(all, ds + ":4:57: optimizer.params.torch_adam: a DeepSpeed optimizer argument")) << all;
  EXPECT_TRUE(contains(all, ds + ":5:37: zero_optimization.overlap_comm: " + not_modelled)) << all;
  EXPECT_TRUE(contains(all, ds + ":6:44: zero_optimization.offload_optimizer.nvme_path: " + not_modelled)) << all;
  EXPECT_EQ(sc.warnings.size(), 4u) << all;
}

// ---- errors -------------------------------------------------------------------------------------

struct BadCase {
  const char* name;
  int line;               // 1-based line replaced in kBase (0: text used whole)
  std::string text;       // the replacement line, or the whole scenario
  int err_line;           // expected position: the line ...
  std::string err_token;  // ... and the token whose column is expected (empty: column not checked)
  std::string message;    // "key.path: what"
};

TEST(ScenarioErrors, EachKindNamesFileLineAndKeyPath) {
  const std::vector<BadCase> cases = {
      {"negative size", 3, "  layers: -1", 3, "-1", "model.layers: -1 is out of range; allowed [1, 100000]"},
      {"zero size", 4, "  hidden: 0", 4, "0", "model.hidden: 0 is out of range; allowed [1, 1048576]"},
      {"heads do not divide hidden", 5, "  heads: 5", 5, "5",
       "model.heads: 5 does not divide hidden 64; allowed: a divisor of hidden"},
      {"seq past positions", 7, "  seq: 16\n  max_positions: 8", 7, "16",
       "model.seq: 16 exceeds max_positions 8; allowed [1, max_positions]"},
      {"ratio above 1", 16, "  offload_optimizer: {device: cpu, ratio: 1.5}", 16, "1.5",
       "zero.offload_optimizer.ratio: 1.5 is out of range; allowed [0, 1]"},
      {"ratio below 0", 16, "  offload_optimizer: {device: cpu, ratio: -0.1}", 16, "-0.1",
       "zero.offload_optimizer.ratio: -0.1 is out of range; allowed [0, 1]"},
      {"ratio not a number", 16, "  offload_optimizer: {device: cpu, ratio: half}", 16, "half",
       "zero.offload_optimizer.ratio: expected a number in [0, 1] or auto, got 'half'; allowed [0, 1] or auto"},
      {"ratio a capitalised auto", 16, "  offload_optimizer: {device: cpu, ratio: Auto}", 16, "Auto",
       "zero.offload_optimizer.ratio: expected a number in [0, 1] or auto, got 'Auto'; allowed [0, 1] or auto"},
      {"ratio a list", 16, "  offload_optimizer: {device: cpu, ratio: [0.5]}", 16, "[0.5]",
       "zero.offload_optimizer.ratio: expected a number in [0, 1] or auto, got a list"},
      {"stage 0", 15, "  stage: 0", 15, "0", "zero.stage: 0 is out of range; allowed [1, 3]"},
      {"stage not a number", 15, "  stage: three", 15, "three", "zero.stage: expected an integer, got 'three'"},
      {"missing profile", 9, "  nodes: 1", 9, "nodes",
       "cluster.profile: missing required key; expected a hardware profile name"},
      {"missing micro_batch", 11, "  steps: 3", 11, "steps", "training.micro_batch: missing required key"},
      {"unknown profile", 9, "  profile: dgx-z100", 9, "dgx-z100",
       "cluster.profile: unknown hardware profile 'dgx-z100'"},
      {"missing profile file", 9, "  profile: hw/none.yaml", 9, "hw/none.yaml",
       "cluster.profile: hardware profile file '"},
      {"integer expected", 11, "  micro_batch: four", 11, "four",
       "training.micro_batch: expected an integer, got 'four'; allowed [1, 1048576]"},
      {"fraction for an integer", 11, "  micro_batch: 2.5", 11, "2.5",
       "training.micro_batch: expected an integer, got '2.5'"},
      {"quoted number", 13, "  type: adamw\n  params: {lr: \"1e-3\"}", 14, "\"1e-3\"",
       "optimizer.params.lr: expected a finite number, got string '1e-3'"},
      {"bool expected", 16, "  offload_optimizer: {device: cpu, pin_memory: 1}", 16, "1}",
       "zero.offload_optimizer.pin_memory: expected true or false, got '1'"},
      {"stage out of range", 15, "  stage: 4", 15, "4", "zero.stage: 4 is out of range; allowed [1, 3]"},
      {"unknown precision", 11, "  micro_batch: 2\n  precision: int8", 12, "int8",
       "training.precision: got 'int8'; allowed: bf16, fp16, fp32"},
      {"unknown optimizer", 13, "  type: lamb", 13, "lamb",
       "optimizer.type: 'lamb' is not supported; allowed: adamw, adam, adagrad, lion"},
      {"nvme offload", 16, "  offload_optimizer: {device: nvme}", 16, "nvme",
       "zero.offload_optimizer.device: 'nvme' is not supported; allowed: none, cpu"},
      {"beta at 1", 13, "  type: adam\n  params: {betas: [0.9, 1.0]}", 14, "1.0",
       "optimizer.params.betas[1]: beta2 = 1.0 is out of range; allowed [0, 1)"},
      {"beta above 1", 13, "  type: adam\n  params: {betas: [1.5, 0.9]}", 14, "1.5",
       "optimizer.params.betas[0]: 1.5 is out of range; allowed [0, 1]"},
      {"betas not a pair", 13, "  type: adam\n  params: {betas: [0.9]}", 14, "[0.9]",
       "optimizer.params.betas: expected 2 values [beta1, beta2], got a list of 1; allowed: a list [beta1, beta2], "
       "each in [0, 1)"},
      {"betas a number", 13, "  type: adam\n  params: {betas: 0.9}", 14, "0.9",
       "optimizer.params.betas: expected a list [beta1, beta2], got '0.9'; allowed: a list [beta1, beta2], each in "
       "[0, 1)"},
      {"decay times lr above 1", 13, "  type: adamw\n  params: {lr: 2, weight_decay: 0.75}", 14, "0.75",
       "optimizer.params.weight_decay: adamw: hyper-parameter 'weight_decay' = 0.75 is out of range; expected "
       "lr*weight_decay <= 1"},
      {"section of the wrong type", 9, "  - h100", 9, "- h100",
       "cluster: expected the cluster {profile, nodes, gpus_per_node, cpu_cores_per_gpu} (a mapping), got a list"},
      {"too many GPUs", 9, "  profile: dgx-h100-80gb\n  gpus_per_node: 9", 10, "9",
       "cluster.gpus_per_node: 9 exceeds the 8 GPUs per node of profile 'dgx-h100-80gb'; allowed [1, 8]"},
      {"too many cores", 9, "  profile: dgx-h100-80gb\n  cpu_cores_per_gpu: 20", 10, "20",
       "cluster.cpu_cores_per_gpu: 20 cores per GPU exceed the node's 112 cores / 8 GPUs; allowed [1, 14]"},
      {"nodes without network", 9, "  profile: h100-80gb-16core\n  nodes: 2", 10, "2",
       "cluster.nodes: 2 nodes need a network, but profile 'h100-80gb-16core' has inter_node.gbps 0"},
      {"bf16 on V100", 9, "  profile: v100-32gb", 11, "",
       "training.precision: bf16 is not supported by V100-SXM3 32GB"},
      {"duplicate key", 11, "  micro_batch: 2\n  micro_batch: 3", 12, "micro_batch",
       "training.micro_batch: duplicate key (first at "},
      {"YAML syntax error", 5, "  heads: [4", 0, "", "YAML syntax error"},
      {"tab indentation", 5, "\theads: 4", 0, "", "YAML syntax error"},
      {"activation overflow", 0,
       "model: {preset: opt-175b, seq: 4194304, max_positions: 4194304, ffn: 16777216}\n"
       "cluster: {profile: h100-80gb-16core}\n"
       "training: {micro_batch: 1048576, precision: fp32}\n"
       "optimizer: {type: adamw}\n"
       "zero: {stage: 3}\n",
       3, "1048576", "training.micro_batch: model: activation bytes overflows 64 bits"},
      {"missing model", 0, "cluster: {profile: h100-80gb-16core}\ntraining: {micro_batch: 1}\n", 1, "",
       "model: missing required key"},
      {"empty document", 0, "", 0, "", "expected a scenario (a mapping), got null"},
      {"list document", 0, "- model\n- cluster\n", 1, "", "expected a scenario (a mapping), got a list"},
      {"unknown preset", 0, "model: opt-66b\n", 1, "opt-66b",
       "model: unknown model preset 'opt-66b'; allowed: gpt2-124m, gpt2-350m"},
      {"mlp dims not a list", 0, "model: {type: mlp, dims: 5}\n", 1, "5", "model.dims: expected a list of layer sizes"},
      {"mlp dim negative", 0, "model: {type: mlp, dims: [4, -3, 2]}\n", 1, "-3",
       "model.dims[1]: -3 is out of range; allowed [1, 16777216]"},
      {"ds_config and zero", 0, join_lines(kBase) + "ds_config: {train_micro_batch_size_per_gpu: 1}\n", 15, "stage",
       "zero: the scenario takes its ZeRO settings from ds_config (zero_optimization); remove this section"},
      {"ds_config and training disagree", 0,
       join_lines(std::vector<std::string>(kBase.begin(), kBase.begin() + 11)) +
           "ds_config: {train_micro_batch_size_per_gpu: 1, optimizer: {type: adamw}, zero_optimization: {stage: 3}}\n",
       11, "2",
       "training.micro_batch: '2' differs from the ds_config's ds_config.train_micro_batch_size_per_gpu = '1' ("},
      {"unknown key", 16, "  offload_optimizer: {device: cpu, raito: 0.3}", 16, "raito",
       "zero.offload_optimizer.raito: unknown key `raito` at 16:36; did you mean `ratio`? allowed: device, ratio, "
       "pin_memory"},
      {"misspelt section", 14, "zeor:", 14, "zeor", "zeor: unknown key `zeor` at 14:1; did you mean `zero`?"},
      {"profile name with a path in it", 9, "  profile: ../hardware/h100", 9, "../hardware/h100",
       "cluster.profile: '../hardware/h100' is neither a profile name nor a .yaml path"},
      {"profile name with dots", 9, "  profile: ..", 9, "..", "cluster.profile: '..' is neither a profile name"},
      {"control characters in a name", 0, "name: \"run\\e[31m\"\n" + join_lines(kBase), 1, "\"",
       "name: 'run\\x1b[31m' holds control characters; allowed: printable text"},
      {"control characters in a key", 0, join_lines(kBase) + "\"x\\e[2J\": 1\n", 17, "\"",
       "x\\x1b[2J: unknown key `x\\x1b[2J` at 17:1"},
      {"too many nodes", 9, "  profile: dgx-h100-80gb\n  nodes: 5000", 10, "5000",
       "cluster.nodes: 5000 is out of range; allowed [1, 4096]"},
      {"ranks too many to simulate", 0,
       "model: {preset: gpt-tiny}\ncluster: {profile: dgx-h100-80gb, nodes: 4096}\n"
       "training: {micro_batch: 1, grad_accum: 32}\noptimizer: {type: adamw}\nzero: {stage: 3}\n",
       1, "", "training.grad_accum: ranks (32768) x grad_accum (32) x layers (4) = 4194304 layer micro-steps"},
      {"simulation too large", 11, "  micro_batch: 1\n  grad_accum: 500000", 0, "",
       "training.grad_accum: ranks (1) x grad_accum (500000) x layers (4) = 2000000 layer micro-steps to simulate; "
       "allowed at most 1048576"},
      {"model too large", 0,
       "model: {type: decoder, layers: 100000, hidden: 1048576, heads: 16, vocab: 100, seq: 16}\n"
       "cluster: {profile: h100-80gb-16core}\ntraining: {micro_batch: 1}\noptimizer: {type: adamw}\n"
       "zero: {stage: 3}\n",
       1, "", "model: 1319415316603731968 parameters exceed 1125899906842624 (2^50"},
      {"hidden 2^31", 4, "  hidden: 2147483648", 4, "2147483648",
       "model.hidden: 2147483648 is out of range; allowed [1, 1048576]"},
  };
  TempDir d;
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string text = c.line > 0 ? with_line(c.line, c.text) : c.text;
    const fs::path file = d.write("s.yaml", text);
    const std::string err = load_error(file);
    EXPECT_TRUE(contains(err, c.message)) << "got: " << err;
    if (c.err_line > 0) {
      std::string prefix = file.string() + ":" + std::to_string(c.err_line) + ":";
      if (!c.err_token.empty()) {
        std::istringstream lines(text);
        std::string l;
        for (int i = 0; i < c.err_line; ++i) std::getline(lines, l);
        prefix = at(file, c.err_line, l, c.err_token);
      }
      EXPECT_EQ(err.rfind(prefix, 0), 0u) << "expected prefix " << prefix << "\ngot: " << err;
    } else {
      EXPECT_EQ(err.rfind(file.string() + ":", 0), 0u) << "got: " << err;
    }
  }
}

TEST(ScenarioErrors, DsConfigFileErrorsNameTheJsonAndTheScenario) {
  TempDir d;
  auto err_for = [&](const std::string& json) {
    d.write("ds.json", json);
    return load_error(d.write("s.yaml", std::string(kDsScenarioHead) + "ds_config: ds.json\n"));
  };
  const std::string ds = (d.path() / "ds.json").string();
  const std::string named = "(in the ds_config named at " + (d.path() / "s.yaml").string() + ":4:12 ds_config)";
  std::string e = err_for(
      "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"adamw\"},\n"
      " \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"ratio\": 2}}}");
  EXPECT_EQ(e, ds + ":2:67: zero_optimization.offload_optimizer.ratio: 2 is out of range; allowed [0, 1] " + named);
  e = err_for("{\"train_micro_batch_size_per_gpu\": 1,\n \"zero_optimization\": {\"stage\": 3,}");
  EXPECT_TRUE(contains(e, ds + ":2:")) << e;
  EXPECT_TRUE(contains(e, "hjson syntax error: the object opened at 1:1 is not closed")) << e;
  EXPECT_TRUE(contains(e, named)) << e;
  e = err_for("{\"train_micro_batch_size_per_gpu\": \"4\", \"optimizer\": {\"type\": \"adamw\"}}");
  EXPECT_TRUE(contains(e, ds + ":1:36: train_micro_batch_size_per_gpu: the string \"4\" where a number belongs; "
                               "DeepSpeed reads this key without converting it"))
      << e;
  e = err_for("{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"adamw\"}}");
  EXPECT_TRUE(contains(e, ds + ":1:1: zero_optimization: zero_optimization is absent, which is ZeRO stage 0 in "
                               "DeepSpeed"))
      << e;
  e = err_for("{\"optimizer\": {\"type\": \"adamw\"}, \"zero_optimization\": {\"stage\": 3}}");
  EXPECT_TRUE(contains(e, "train_micro_batch_size_per_gpu: missing required key; DeepSpeed needs")) << e;
  e = err_for(
      "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": true},"
      " \"optimizer\": {\"type\": \"adamw\"}, \"zero_optimization\": {\"stage\": 3}}");
  EXPECT_TRUE(contains(e, "fp16.enabled: fp16 and bf16 are both enabled")) << e;
  e = err_for(
      "{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 2,"
      " \"optimizer\": {\"type\": \"adamw\"}, \"zero_optimization\": {\"stage\": 3}}");
  EXPECT_TRUE(contains(e, "train_batch_size: 10 != 2 x 2 x 2 (train_batch_size =")) << e;
  e = err_for(
      "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"OneBitAdam\"},"
      " \"zero_optimization\": {\"stage\": 0}}");
  EXPECT_TRUE(contains(e, "optimizer.type: 'OneBitAdam' is not supported by Twin-Flow")) << e;
  e = err_for(
      "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"adamw\"},"
      " \"zero_optimization\": {\"stage\": 0}}");
  EXPECT_TRUE(contains(e, "zero_optimization.stage: stage 0, which is ZeRO stage 0 in DeepSpeed (no partitioning"))
      << e;
  EXPECT_TRUE(contains(e, "so it needs stage 1, 2 or 3")) << e;
  e = err_for("{\"a\": 1, \"a\": 2}");
  EXPECT_TRUE(contains(e, ds + ":1:10: a: duplicate key (first at " + ds + ":1:2)")) << e;
  e = err_for(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "adamw", "params": {"lr": -1}}})");
  EXPECT_TRUE(contains(e, "optimizer.params.lr: -1 is out of range; allowed [0, 1000000]")) << e;
  // missing file
  e = load_error(d.write("s2.yaml", std::string(kDsScenarioHead) + "ds_config: nothere.json\n"));
  EXPECT_TRUE(contains(e, "ds_config: file '" + (d.path() / "nothere.json").string() + "' does not exist")) << e;
  // a directory is not a file
  fs::create_directories(d.path() / "adir.json");
  e = load_error(d.write("s3.yaml", std::string(kDsScenarioHead) + "ds_config: adir.json\n"));
  EXPECT_TRUE(contains(e, "is not a regular file")) << e;
}

TEST(ScenarioErrors, ProfileErrorsNameTheProfileAndTheScenario) {
  TempDir d;
  std::string good = std::string(*builtin_hardware_profile_text("h100-80gb-16core"));
  auto err_for = [&](const std::string& profile) {
    d.write("hw/custom.yaml", profile);
    return load_error(d.write("s.yaml", with_line(9, "  profile: hw/custom.yaml")));
  };
  const std::string hw = (d.path() / "hw" / "custom.yaml").string();
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    const size_t p = s.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    return s.replace(p, from.size(), to);
  };
  std::string e = err_for(replace(good, "hbm_gbps: {value: 3000, source:", "hbm_gbps: {value: 3000, sauce:"));
  EXPECT_TRUE(contains(e, hw + ":")) << e;
  EXPECT_TRUE(contains(e,
                       "gpu.hbm_gbps.sauce: unknown key `sauce` at 12:27; did you mean `source`? (source is "
                       "required: a source"))
      << e;
  EXPECT_TRUE(
      contains(e, "(in the hardware profile named at " + (d.path() / "s.yaml").string() + ":9:12 cluster.profile)"))
      << e;
  e = err_for(
      replace(good, "hbm_gbps: {value: 3000, source: \"measured", "hbm_gbps: 3000\n  x: {value: 1, source: \""));
  EXPECT_TRUE(contains(e,
                       "gpu.hbm_gbps: expected a figure {value: V, source: \"datasheet name or measurement\"} (a "
                       "mapping), got '3000'"))
      << e;
  e = err_for(replace(good, "h2d_gbps: {value: 55,", "h2d_gbps: {value: -55,"));
  EXPECT_TRUE(contains(e, "pcie.h2d_gbps.value: -55 is out of range; allowed (0, 10000]")) << e;
  e = err_for(replace(good, "bidir_total_gbps: {value: 83,", "bidir_total_gbps: {value: 200,"));
  EXPECT_TRUE(contains(e, "pcie.bidir_total_gbps: 200 exceeds h2d_gbps + d2h_gbps = 110")) << e;
  e = err_for(replace(good, "kind: none\n  bus_gbps", "kind: warp\n  bus_gbps"));
  EXPECT_TRUE(contains(e, "intra_node.kind: got 'warp'; allowed: nvlink, pcie, none")) << e;
  // unknown keys in a profile warn, in the scenario's warnings too
  d.write("hw/custom.yaml", good + "vendor: acme\n");
  const Scenario s = load_scenario(d.write("s.yaml", with_line(9, "  profile: hw/custom.yaml")));
  ASSERT_EQ(s.warnings.size(), 1u);
  const auto vendor_line = std::to_string(std::count(good.begin(), good.end(), '\n') + 1);
  EXPECT_TRUE(contains(s.warnings[0], hw + ":" + vendor_line + ":1: vendor: unknown key, ignored")) << s.warnings[0];
}

// ---- warnings, paths ----------------------------------------------------------------------------

TEST(Scenario, UnknownKeysAreErrorsThatSuggestTheNearestKey) {
  TempDir d;
  auto err_with = [&](int line, const std::string& text) {
    return load_error(d.write("s.yaml", with_line(line, text)));
  };
  const std::string f = (d.path() / "s.yaml").string();
  EXPECT_EQ(err_with(11, "  micro_batch: 2\n  mirco_batch: 3"),
            f + ":12:3: training.mirco_batch: unknown key `mirco_batch` at 12:3; did you mean `micro_batch`? allowed: "
                "micro_batch, grad_accum, precision, loss_scaling, gradient_clipping, prescale_gradients, steps, "
                "activation_checkpointing, speculation, gpu_headroom, host_reserve, carry_tail, cpu_order, ring_order");
  EXPECT_TRUE(contains(err_with(16, "  offload_optimizer: {device: cpu, ratio: 0.5, rate: 2}"),
                       f + ":16:48: zero.offload_optimizer.rate: unknown key `rate` at 16:48; did you mean `ratio`?"));
  EXPECT_TRUE(contains(err_with(1, "modle:"), f + ":1:1: modle: unknown key `modle` at 1:1; did you mean `model`?"));
  // nothing close: no suggestion, the allowed keys
  const std::string e = err_with(13, "  type: adamw\n  xyzzy: 1");
  EXPECT_TRUE(contains(e, "optimizer.xyzzy: unknown key `xyzzy` at 14:3 allowed: type, params")) << e;
}

TEST(Scenario, NativeSchemaValues) {
  TempDir d;
  const fs::path f = d.write("s.yaml",
                             "name: mine\n"
                             "model: {preset: opt-13b, seq: 1024, layers: 4}\n"
                             "cluster: {profile: dgx-a100-40gb, nodes: 2, gpus_per_node: 4, cpu_cores_per_gpu: 8}\n"
                             "training: {micro_batch: 2, grad_accum: 3, steps: 7, precision: fp16,\n"
                             "           loss_scaling: {loss_scale: 1024}, gradient_clipping: 0.5,\n"
                             "           activation_checkpointing: true, prescale_gradients: true}\n"
                             "optimizer: {type: Lion, params: {lr: 3e-5, betas: [0.95, 0.98], weight_decay: 1.0}}\n"
                             "zero: {stage: 1, offload_optimizer: {device: cpu, ratio: 0.75, pin_memory: true},\n"
                             "       sub_group_size: 4096}\n");
  const Scenario s = load_scenario(f);
  EXPECT_EQ(s.name, "mine");
  EXPECT_EQ(s.model.decoder.layers, 4);
  EXPECT_EQ(s.model.decoder.hidden, 5120);
  EXPECT_EQ(s.model.decoder.seq, 1024);
  EXPECT_EQ(s.cluster.world_size(), 8);
  EXPECT_EQ(s.cluster.cpu_cores_per_gpu, 8);
  EXPECT_EQ(s.global_batch(), 2 * 3 * 8);
  EXPECT_EQ(s.training.steps, 7);
  EXPECT_EQ(s.training.precision, Precision::kFP16);
  EXPECT_EQ(s.training.loss_scaling.initial_loss_scale(), 1024);
  EXPECT_EQ(s.training.gradient_clipping, 0.5);
  EXPECT_TRUE(s.training.activation_checkpointing);
  EXPECT_TRUE(s.training.prescale_gradients);
  EXPECT_EQ(s.optimizer.kind, OptimizerKind::kLion);
  EXPECT_EQ(s.optimizer.hp.beta2, 0.98);
  EXPECT_EQ(s.optimizer.hp.weight_decay, 1.0);  // native scenarios start from torch's defaults
  EXPECT_EQ(s.zero.stage, 1);
  EXPECT_EQ(s.cpu_ratio(), 0.75);
  EXPECT_EQ(s.zero.sub_group_size, 4096);
  ASSERT_EQ(s.warnings.size(), 1u);  // partial offload below stage 3
  EXPECT_TRUE(contains(s.warnings[0], f.string() + ":8:51: zero.offload_optimizer.ratio: partial offload (ratio 0.75) "
                                                   "at ZeRO stage 1 is a Twin-Flow extension"))
      << s.warnings[0];
  // the cpu cores default to the node's share
  const Scenario dflt = parse_scenario(with_line(9, "  profile: dgx-h100-80gb"), {});
  EXPECT_EQ(dflt.cluster.gpus_per_node, 8);
  EXPECT_EQ(dflt.cluster.cpu_cores_per_gpu, 14);
}

TEST(Scenario, RatioAutoIsReadAndMustBeChosenBeforeUse) {
  for (const char* spelling : {"auto", "\"auto\""}) {
    SCOPED_TRACE(spelling);
    const Scenario s =
        parse_scenario(with_line(16, std::string("  offload_optimizer: {device: cpu, ratio: ") + spelling + "}"), {});
    EXPECT_TRUE(s.zero.offload_optimizer.ratio_auto);
    EXPECT_TRUE(s.ratio_auto());
    EXPECT_TRUE(s.warnings.empty());
    try {
      (void)s.cpu_ratio();
      ADD_FAILURE() << "cpu_ratio() of an unresolved auto ratio";
    } catch (const InputError& e) {
      EXPECT_TRUE(contains(e.what(), "zero.offload_optimizer.ratio is auto")) << e.what();
    }
    std::string ratio, cpu;
    for (const ReportedSetting& r : settings_report(s)) {
      if (r.key == "zero.offload_optimizer.ratio") ratio = r.value;
      if (r.key == "cpu_ratio") cpu = r.value;
    }
    EXPECT_EQ(ratio, "auto");
    EXPECT_EQ(cpu, "auto");
  }
  // with nothing offloaded, auto has no effect (as any ratio): a warning, and the CPU share is 0
  const Scenario none = parse_scenario(with_line(16, "  offload_optimizer: {device: none, ratio: auto}"), {});
  EXPECT_FALSE(none.ratio_auto());
  EXPECT_EQ(none.cpu_ratio(), 0.0);
  ASSERT_EQ(none.warnings.size(), 1u);
  EXPECT_TRUE(contains(none.warnings[0], "zero.offload_optimizer.ratio: has no effect")) << none.warnings[0];
}

TEST(Scenario, RelativePathsResolveAgainstTheScenarioNotTheCwd) {
  TempDir d;
  const std::string profile = std::string(*builtin_hardware_profile_text("h100-80gb-16core"));
  auto renamed = [&](const std::string& name) {
    std::string p = profile;
    p.replace(p.find("name: h100-80gb-16core"), 22, "name: " + name);
    return p;
  };
  d.write("sub/hw/custom.yaml", renamed("next-to-scenario"));
  d.write("hw/custom.yaml", renamed("in-the-cwd"));  // a decoy where a CWD-relative lookup would look
  d.write("sub/ds.json", kFullDsConfig);
  d.write("ds.json", "{ not json");
  const fs::path s = d.write("sub/s.yaml",
                             "model: gpt-tiny\n"
                             "cluster: {profile: hw/custom.yaml}\n"
                             "ds_config: ds.json\n");
  const fs::path old = fs::current_path();
  fs::current_path(d.path());
  Scenario sc;
  std::string err;
  try {
    sc = load_scenario(s);
    // a name is looked for in <scenario dir>/hardware/ first, then among the built-in profiles
    d.write("sub/hardware/dgx-h100-80gb.yaml", renamed("local-override"));
    const Scenario local = load_scenario(d.write("sub/t.yaml",
                                                 "model: gpt-tiny\n"
                                                 "cluster: {profile: dgx-h100-80gb}\n"
                                                 "ds_config: ds.json\n"));
    EXPECT_EQ(local.cluster.hardware.name, "local-override");
  } catch (const std::exception& e) {
    err = e.what();
  }
  fs::current_path(old);
  ASSERT_EQ(err, "");
  EXPECT_EQ(sc.cluster.hardware.name, "next-to-scenario");
  EXPECT_EQ(sc.cluster.profile_file, (d.path() / "sub" / "hw" / "custom.yaml").lexically_normal());
  expect_full_ds(sc);
}

TEST(Scenario, TextScenariosUseBuiltInProfilesAndRefuseRelativeFiles) {
  const Scenario s = parse_scenario(join_lines(kBase), {}, "inline.yaml");
  EXPECT_EQ(s.cluster.hardware.name, "h100-80gb-16core");
  EXPECT_TRUE(s.cluster.profile_file.empty());
  EXPECT_EQ(s.name, "scenario");
  try {
    parse_scenario(with_line(9, "  profile: hw/x.yaml"), {}, "inline.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_TRUE(
        contains(e.what(), "inline.yaml:9:12: cluster.profile: relative path 'hw/x.yaml' needs a scenario file"))
        << e.what();
  }
}

TEST(Scenario, HostileDocumentsAreRefusedNotCrashedOn) {
  // alias expansion bomb: each level doubles the nodes
  std::ostringstream bomb_text;
  bomb_text << "a0: &a0 [x, x]\n";
  for (int i = 1; i < 40; ++i) bomb_text << "a" << i << ": &a" << i << " [*a" << i - 1 << ", *a" << i - 1 << "]\n";
  const std::string bomb = bomb_text.str();
  try {
    parse_scenario(bomb, {}, "bomb.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "nodes")) << e.what();
  }
  // deep nesting
  for (size_t depth : {size_t(200), size_t(100'000)}) {  // ours, then yaml-cpp's own guard
    const std::string deep = "model: " + std::string(depth, '[') + std::string(depth, ']') + "\n";
    try {
      parse_scenario(deep, {}, "deep.yaml");
      FAIL();
    } catch (const InputError& e) {
      EXPECT_TRUE(contains(e.what(), "nesting deeper than")) << e.what();
    }
  }
  // a deeply nested JSON ds_config
  TempDir d;
  d.write("ds.json", std::string(100'000, '[') + std::string(100'000, ']'));
  const std::string e =
      load_error(d.write("s.yaml", "model: gpt-tiny\ncluster: {profile: h100-80gb-16core}\nds_config: ds.json\n"));
  EXPECT_TRUE(contains(e, "ds.json:1:65: nesting deeper than 64 levels")) << e;
  // non-scalar keys
  EXPECT_THROW(parse_scenario("? [a, b]\n: 1\n", {}, "k.yaml"), InputError);
  // a device file is not read
  EXPECT_THROW(load_scenario("/dev/zero"), InputError);
  // found by hand while fuzzing paths: a read that fails with EIO made libstdc++'s filebuf throw
  // std::ios_base::failure past the parser (now stdio, and an InputError)
  if (fs::exists("/proc/self/mem")) {
    try {
      config::read_document("/proc/self/mem", "hardware profile");
      FAIL();
    } catch (const InputError& e) {
      EXPECT_TRUE(contains(e.what(), "error reading '/proc/self/mem'")) << e.what();
    }
  }
  // more than one document
  try {
    parse_scenario(join_lines(kBase) + "---\nmodel: x\n", {}, "two.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "two.yaml:17:1: text after the first YAML document")) << e.what();
  }
  // found by the fuzzer (oom-b21a8da2): yaml-cpp 0.7 answers text after a flow mapping with endless
  // empty documents, so YAML::LoadAll never returned; YAML::Load alone silently dropped the text
  for (const char* text : {"{\n  },\n  layeRse", "{model: gpt-tiny}, trailing"}) {
    try {
      parse_scenario(text, {}, "trail.yaml");
      FAIL() << text;
    } catch (const InputError& e) {
      EXPECT_TRUE(contains(e.what(), "text after the first YAML document")) << e.what();
    }
    EXPECT_THROW(parse_hardware_profile(text, "trail.yaml"), InputError);
  }
  // control bytes are escaped in messages
  try {
    parse_scenario(std::string("model: \"gpt\\0tiny\"\n"), {}, "nul.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "unknown model preset 'gpt\\x00tiny'")) << e.what();
  }
}

// A command that overrides the world (--world) checks it with the scenario's bound.
TEST(Scenario, SimulationSizeIssueForAnotherWorld) {
  const Scenario s = parse_scenario(join_lines(kBase), {}, "inline.yaml");  // 4 layers, grad_accum 1
  EXPECT_FALSE(simulation_size_issue(s, 1).has_value());
  EXPECT_FALSE(simulation_size_issue(s, kMaxWorld).has_value());  // 65536 x 1 x 4 = 262144
  EXPECT_EQ(simulation_size_issue(s, 0), "0 ranks is out of range; allowed [1, 65536]");
  EXPECT_EQ(simulation_size_issue(s, kMaxWorld + 1), "65537 ranks is out of range; allowed [1, 65536]");
  Scenario big = s;
  big.training.grad_accum = 8;
  EXPECT_EQ(simulation_size_issue(big, 65536),
            "ranks (65536) x grad_accum (8) x layers (4) = 2097152 layer micro-steps to simulate; allowed at most "
            "1048576 (the simulator holds every rank's step plan: about 3 KB per unit)");
  // another grad_accum than the scenario's (a measured sweep's, run --grad-accum)
  EXPECT_EQ(simulation_size_issue(s, 65536, 8), simulation_size_issue(big, 65536));
  EXPECT_FALSE(simulation_size_issue(big, 65536, 4).has_value());  // 65536 x 4 x 4 = 2^20
  EXPECT_EQ(simulation_size_issue(s, 1, 0), "grad_accum 0 is out of range; allowed [1, 1048576]");
  EXPECT_EQ(simulation_size_issue(s, 1, kMaxBatch + 1), "grad_accum 1048577 is out of range; allowed [1, 1048576]");
}

// data: {train: PATH} is a token file checked when the scenario is read (relative to the scenario, the
// file and byte offset named, with the key's position); init: {from: PATH} must be a file; workload
// decoder needs a decoder, and auto means it.
TEST(Scenario, DecoderDataInitAndWorkload) {
  TempDir d;
  auto token_file = [](const std::vector<uint16_t>& ids) {
    std::vector<int32_t> header(256, 0);
    header[0] = kTokenFileMagic, header[1] = kTokenFileVersion, header[2] = int32_t(ids.size());
    std::string out(reinterpret_cast<const char*>(header.data()), header.size() * 4);
    return out.append(reinterpret_cast<const char*>(ids.data()), ids.size() * 2);
  };
  std::vector<uint16_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint16_t(i % 100);
  d.write("data/ok.bin", token_file(ids));
  ids[33] = 100;  // the vocabulary is 100
  d.write("data/big-id.bin", token_file(ids));
  d.write("data/short.bin", token_file(std::vector<uint16_t>(10, 1)));  // fewer than seq + 1 = 17 tokens
  d.write("w.safetensors", "not checked here");
  const std::string base = join_lines(kBase);
  const Scenario ok =
      load_scenario(d.write("s/ok.yaml", base + "data: {train: ../data/ok.bin}\ninit: {from: ../w.safetensors}\n"));
  EXPECT_EQ(ok.data.train, (d.path() / "data" / "ok.bin").lexically_normal());
  EXPECT_EQ(ok.init.from, (d.path() / "w.safetensors").lexically_normal());
  EXPECT_EQ(ok.workload.resolved(ok.model.type), WorkloadType::kDecoder);
  EXPECT_TRUE(load_scenario(d.write("s/none.yaml", base)).data.train.empty());

  std::string e = load_error(d.write("s/id.yaml", base + "data: {train: ../data/big-id.bin}\n"));
  EXPECT_TRUE(contains(e, "s/id.yaml:17:15: data.train: token file: '")) << e;
  EXPECT_TRUE(contains(e, "big-id.bin': byte " + std::to_string(1024 + 33 * 2))) << e;
  e = load_error(d.write("s/short.yaml", base + "data: {train: ../data/short.bin}\n"));
  EXPECT_TRUE(contains(e, "data.train:") && contains(e, "short.bin")) << e;
  e = load_error(d.write("s/missing.yaml", base + "data: {train: ../data/none.bin}\n"));
  EXPECT_TRUE(contains(e, "data.train:") && contains(e, "none.bin")) << e;
  e = load_error(d.write("s/noinit.yaml", base + "init: {from: ../none.safetensors}\n"));
  EXPECT_TRUE(contains(e, "s/noinit.yaml:17:14: init.from:") && contains(e, "not a regular file")) << e;
  e = load_error(d.write("s/key.yaml", base + "data: {tarin: x.bin}\n"));
  EXPECT_TRUE(contains(e, "train")) << e;

  const Scenario dec = load_scenario(d.write("s/w.yaml", base + "workload: {type: decoder}\n"));
  EXPECT_EQ(dec.workload.type, WorkloadType::kDecoder);
  const std::string mlp =
      "model: {type: mlp, dims: [8, 8]}\ncluster: {profile: h100-80gb-16core}\n"
      "training: {micro_batch: 2}\noptimizer: {type: adamw}\nzero: {stage: 3}\n";
  e = load_error(d.write("s/mlp-dec.yaml", mlp + "workload: {type: decoder}\n"));
  EXPECT_TRUE(contains(e, "workload.type: the decoder workload needs a decoder model")) << e;
  e = load_error(d.write("s/mlp-data.yaml", mlp + "data: {train: ../data/ok.bin}\n"));
  EXPECT_TRUE(contains(e, "data: data needs a decoder model")) << e;
  e = load_error(d.write("s/dec-mlp.yaml", base + "workload: {type: mlp}\n"));
  EXPECT_TRUE(contains(e, "allowed here: auto, synthetic, decoder")) << e;
}
