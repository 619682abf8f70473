// `twinflow run`'s decoder figures and files: the batch file hf_decoder.py reads, the gradient dump's
// round trip, tokens/s and MFU by hand, the memory line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "apps/twinflow/run_decoder.h"
#include "core/error.h"
#include "core/hf_names.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "core/token_data.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"

using namespace tf;

namespace {

core::RunSettings gpt_tiny(int micro_batch, int grad_accum, int world) {
  const core::Scenario sc = core::parse_scenario(
      "model: {preset: gpt-tiny, seq: 16}\ncluster: {profile: h100-80gb-16core}\ntraining: {micro_batch: " +
          std::to_string(micro_batch) + ", grad_accum: " + std::to_string(grad_accum) +
          "}\noptimizer: {type: adamw}\nzero: {stage: 3}\nworkload: {seed: 7}\n",
      {}, "t.yaml");
  return core::resolve_settings(sc, {.world = world});
}

std::vector<int32_t> read_ints(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<int32_t> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

}  // namespace

// The header (magic, steps, B, s), then per step B x s tokens and B x s targets: the global batch, every
// micro-shard k = micro_step * world + rank in order (what each rank samples), B = 2 x 3 x 2 = 12.
TEST(RunDecoder, BatchFileHoldsEachStepsGlobalBatch) {
  test::TempDir d;
  const core::RunSettings s = gpt_tiny(2, 3, 2);
  const std::filesystem::path file = d.path() / "b.bin";
  app::write_batch_file(file, s, 4, 2, "--dump-batches");  // steps 4 and 5
  const std::vector<int32_t> v = read_ints(file);
  ASSERT_EQ(v.size(), 4u + 2 * 2 * 12 * 16);
  EXPECT_EQ(v[0], app::kBatchFileMagic);
  EXPECT_EQ(v[1], 2);
  EXPECT_EQ(v[2], 12);
  EXPECT_EQ(v[3], 16);
  const core::TokenSource src(512, 16);  // gpt-tiny's built-in stream
  for (int step : {4, 5})
    for (int64_t k = 0; k < 6; ++k) {
      std::vector<int32_t> tok(32), tgt(32);
      src.micro_batch(7, step, k, 2, tok, tgt);
      const size_t base = 4 + size_t(step - 4) * 2 * 12 * 16;
      for (size_t i = 0; i < 32; ++i) {
        ASSERT_EQ(v[base + size_t(k) * 32 + i], tok[i]) << "step " << step << " shard " << k << " token " << i;
        ASSERT_EQ(v[base + 12 * 16 + size_t(k) * 32 + i], tgt[i]) << "step " << step << " shard " << k;
      }
    }
}

// The gradient dump is the whole model in Hugging Face names: it reads back element for element; a
// rank's part alone is refused.
TEST(RunDecoder, GradientDumpRoundTripsAndNeedsTheWholeModel) {
  test::TempDir d;
  const core::RunSettings s = gpt_tiny(1, 1, 1);
  std::vector<std::pair<int64_t, float>> g;
  for (int64_t i = 0; i < s.model.total_params; ++i) g.emplace_back(i, float(i % 97) * 0.25f - 3.0f);
  const std::filesystem::path file = d.path() / "g.safetensors";
  app::write_gradients(file, s.model, g);
  const std::vector<float> back = core::load_hf_weights(s.model, file);
  ASSERT_EQ(int64_t(back.size()), s.model.total_params);
  for (const auto& [i, v] : g) ASSERT_EQ(back[size_t(i)], v) << i;
  g.pop_back();
  EXPECT_THROW(app::write_gradients(file, s.model, g), core::InputError);
  EXPECT_EQ(core::load_hf_weights(s.model, file), back);  // the earlier dump is left as it was
}

// Both files go through core::OutputFile: a device that cannot take them (/dev/full) is a
// core::RuntimeFailure naming the option and the file (exit 3), not a silently short file.
TEST(RunDecoder, FilesThatCannotBeWrittenAreRuntimeFailures) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const core::RunSettings s = gpt_tiny(1, 1, 1);
  const std::string msg =
      test::error_of<core::RuntimeFailure>([&] { app::write_batch_file("/dev/full", s, 1, 1, "--dump-step"); });
  EXPECT_NE(msg.find("--dump-step /dev/full: cannot write"), std::string::npos) << msg;
  std::vector<std::pair<int64_t, float>> g;
  for (int64_t i = 0; i < s.model.total_params; ++i) g.emplace_back(i, 1.0f);
  EXPECT_THROW(app::write_gradients("/dev/full", s.model, g), core::RuntimeFailure);
}

// tokens/s = micro_batch x seq x grad_accum x world / step time; model TFLOP/s per GPU over the GEMM peak of the
// dtype the workload computes in: bf16 for bf16 and for fp16 training (core::StepConfig::param_dtype).
TEST(RunDecoder, ThroughputByHand) {
  core::RunSettings s = gpt_tiny(2, 3, 2);
  EXPECT_EQ(app::tokens_per_step(s), 2 * 16 * 3 * 2);
  EXPECT_EQ(app::model_flops_per_token(s), s.model.train_flops_per_token(false));
  core::GpuProfile gpu;
  gpu.bf16_tflops = 500;
  gpu.fp16_tflops = 250;
  gpu.fp32_tflops = 50;
  ASSERT_EQ(s.step.param_dtype, core::DType::kBF16);
  const app::Throughput t = app::throughput(s, gpu, 2'000'000);  // 2 ms
  EXPECT_DOUBLE_EQ(t.tokens_per_s, 192 / 2e-3);
  EXPECT_DOUBLE_EQ(t.tflops, app::model_flops_per_token(s) * 96000.0 / 2 / 1e12);
  EXPECT_DOUBLE_EQ(t.mfu, t.tflops / 500);
  s.step.grad_dtype = core::DType::kF16;  // fp16 training: fp16 gradients, bf16 GEMMs
  EXPECT_DOUBLE_EQ(app::throughput(s, gpu, 2'000'000).mfu, t.tflops / 500);
  s.step.grad_dtype = s.step.param_dtype = core::DType::kF32;
  EXPECT_DOUBLE_EQ(app::throughput(s, gpu, 2'000'000).mfu, t.tflops / 50);
}

TEST(RunDecoder, MemoryLineSaysBothAndTheDifference) {
  EXPECT_DOUBLE_EQ(app::percent_diff(200, 210), 5.0);
  EXPECT_EQ(app::memory_report({int64_t(14e9), int64_t(14.7e9), int64_t(2e9), int64_t(2e9), 0, {}, false}),
            "memory: GPU predicted 14.0 GB, measured 14.7 GB (+5.0%); pinned host predicted 2.0 GB, measured 2.0 GB "
            "(+0.0%)");
  // with the resident set and the CPU segment's host bytes per parameter (issue 16)
  app::MemoryCheck m{int64_t(14e9), int64_t(14.7e9), int64_t(2e9), int64_t(2e9), int64_t(13.1e9), {12, 4, 0.5}, true};
  EXPECT_EQ(
      app::memory_report(m),
      "memory: GPU predicted 14.0 GB, measured 14.7 GB (+5.0%); pinned host predicted 2.0 GB, measured 2.0 GB "
      "(+0.0%); host RSS 13.1 GB; host bytes per CPU-side parameter 12.00 (state) + 4.00 (speculation spare) + "
      "0.50 (staging rings) = 16.50");
  EXPECT_GT(app::process_rss_bytes(), 0);  // this test process is resident
}
