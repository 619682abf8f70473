// `twinflow run` for language models: throughput, the oracle's batch and gradient files, memory checks.
#include "apps/twinflow/run_decoder.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/hf_names.h"
#include "core/memory.h"
#include "core/output_file.h"
#include "core/token_data.h"

namespace tf::app {

int64_t tokens_per_step(const core::RunSettings& s) {
  return s.step.micro_batch * s.model.tokens_per_sample() * int64_t(s.step.grad_accum) * int64_t(s.world);
}

double model_flops_per_token(const core::RunSettings& s) { return s.model.train_flops_per_token(false); }

Throughput throughput(const core::RunSettings& s, const core::GpuProfile& gpu, int64_t step_ns) {
  Throughput t;
  if (step_ns <= 0) return t;
  const double seconds = double(step_ns) / 1e9;
  t.tokens_per_s = double(tokens_per_step(s)) / seconds;
  t.tflops = model_flops_per_token(s) * t.tokens_per_s / double(s.world) / 1e12;
  const double peak = gpu.gemm_peak_tflops(s.step.param_dtype);
  t.mfu = peak > 0 ? t.tflops / peak : std::nan("");
  return t;
}

void write_batch_file(const std::filesystem::path& path, const core::RunSettings& s, int first_step, int steps,
                      const std::string& option) {
  if (s.model.spec.type != core::ModelType::kDecoder)
    throw core::InputError(option + ": the model is not a decoder, so it trains on no tokens");
  const core::DecoderShape& d = s.model.spec.decoder;
  const core::TokenSource source = core::open_token_source(s.data_train, d.vocab, d.seq);
  const int64_t shards = int64_t(s.step.grad_accum) * s.world, per_shard = s.step.micro_batch * d.seq;
  const int32_t header[4] = {kBatchFileMagic, steps, int32_t(s.step.micro_batch * shards), int32_t(d.seq)};
  core::OutputFile out(path, option);  // whole or not at all
  out.write(header, sizeof header);
  std::vector<int32_t> tok(size_t(per_shard * shards)), tgt(tok.size());  // (B, s) int32 each
  for (int step = first_step; step < first_step + steps; ++step) {
    for (int64_t k = 0; k < shards; ++k)  // k = micro_step * world + rank: every rank's micro-batches
      source.micro_batch(s.seed, step, k, s.step.micro_batch,
                         std::span(tok).subspan(size_t(k * per_shard), size_t(per_shard)),
                         std::span(tgt).subspan(size_t(k * per_shard), size_t(per_shard)));
    out.write(tok.data(), tok.size() * 4);
    out.write(tgt.data(), tgt.size() * 4);
  }
  out.commit();
}

void write_gradients(const std::filesystem::path& path, const core::ModelDesc& model,
                     const std::vector<std::pair<int64_t, float>>& grads) {
  std::vector<float> flat(size_t(model.total_params), 0.f);  // (total_params) fp32, model order
  std::vector<char> seen(flat.size(), 0);
  for (const auto& [i, v] : grads) {
    if (i < 0 || i >= model.total_params)
      throw core::InputError("gradient dump: element " + std::to_string(i) + " is outside the model");
    flat[size_t(i)] = v;
    seen[size_t(i)] = 1;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i])
      throw core::InputError("gradient dump: element " + std::to_string(i) +
                             " is not this rank's; the dump needs the whole model (one rank)");
  core::export_hf_weights(model, flat, path, core::DType::kF32);
}

double percent_diff(int64_t predicted, int64_t measured) {
  return predicted > 0 ? 100.0 * double(measured - predicted) / double(predicted) : std::nan("");
}

std::string host_bytes_line(const core::HostBytesPerParam& b) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "host bytes per CPU-side parameter %.2f (state) + %.2f (speculation spare) + %.2f (staging rings) = "
                "%.2f",
                b.optimizer, b.spare, b.staging, b.total());
  return buf;
}

std::string memory_report(const MemoryCheck& m) {
  char b[256];
  std::snprintf(b, sizeof b,
                "memory: GPU predicted %s, measured %s (%+.1f%%); pinned host predicted %s, measured %s (%+.1f%%)",
                core::format_gb(m.gpu_predicted).c_str(), core::format_gb(m.gpu_measured).c_str(),
                percent_diff(m.gpu_predicted, m.gpu_measured), core::format_gb(m.host_predicted).c_str(),
                core::format_gb(m.host_measured).c_str(), percent_diff(m.host_predicted, m.host_measured));
  std::string out = b;
  if (m.host_rss > 0) out += "; host RSS " + core::format_gb(m.host_rss);
  if (m.has_cpu_segment) out += "; " + host_bytes_line(m.per_cpu_param);
  return out;
}

int64_t process_rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) {
      long long kib = 0;
      return std::sscanf(line.c_str() + 6, "%lld", &kib) == 1 ? int64_t(kib) * 1024 : 0;
    }
  return 0;
}

}  // namespace tf::app
