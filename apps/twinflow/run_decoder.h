// `twinflow run` for language models: throughput (tokens/s, MFU), the batch and gradient files the
// Hugging Face oracle reads (bench/peer/hf_decoder.py), and predicted against measured memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/hardware.h"
#include "core/memory.h"
#include "core/model.h"
#include "core/settings.h"

namespace tf::app {

// The batch file's magic (hf_decoder.py read_batch).
inline constexpr int32_t kBatchFileMagic = 20241124;

// Tokens one step trains over all ranks: micro_batch x tokens per sample x grad_accum x world.
int64_t tokens_per_step(const core::RunSettings& s);

// Model FLOPs per trained token: core::ModelDesc::train_flops_per_token without activation
// checkpointing's recompute (MFU counts the model's FLOPs, not the hardware's): per layer 6 x its
// matmul parameters (forward 2, backward 4) plus the attention over the causal half (forward 2h(s+1),
// backward 2.5 times that), the tied head's logits GEMM included.
double model_flops_per_token(const core::RunSettings& s);

struct Throughput {
  double tokens_per_s = 0;  // the step's tokens over all ranks / its wall time
  double tflops = 0;        // model TFLOP/s per GPU
  double mfu = 0;           // tflops over the GPU's dense GEMM peak of the dtype it computes in (the profile's)
};
// Of one step of `step_ns` with the settings' model and batch, on `gpu`.
Throughput throughput(const core::RunSettings& s, const core::GpuProfile& gpu, int64_t step_ns);

// Writes steps [first_step, first_step + steps) of the run's data as hf_decoder.py's batch file:
// int32 header (kBatchFileMagic, steps, B, s), then per step B x s int32 tokens and B x s int32
// targets. Each step's batch is the global batch: micro-shards k = 0 .. grad_accum x world - 1 in
// order (core::TokenSource at core::global_micro_shard, as every rank samples), B = micro_batch x
// grad_accum x world samples. Written whole or not at all (core::OutputFile; `option` names the path's
// origin in errors): core::RuntimeFailure when the file cannot be written.
void write_batch_file(const std::filesystem::path& path, const core::RunSettings& s, int first_step, int steps,
                      const std::string& option);

// Writes a whole model's gradients, (model-order element, value) pairs covering every parameter, as a
// Hugging Face safetensors file in fp32 (core::export_hf_weights: whole or not at all). Throws
// core::InputError when the pairs do not cover the model, core::RuntimeFailure when the file cannot be
// written.
void write_gradients(const std::filesystem::path& path, const core::ModelDesc& model,
                     const std::vector<std::pair<int64_t, float>>& grads);

// Predicted (the allocation plan with its context estimate) against measured bytes.
struct MemoryCheck {
  int64_t gpu_predicted = 0, gpu_measured = 0;    // GPU: plan total; cudaMemGetInfo's use after step 1
  int64_t host_predicted = 0, host_measured = 0;  // pinned host: plan total; page-locked by the run
  int64_t host_rss = 0;                           // the process's resident set after step 1 (0: unknown)
  core::HostBytesPerParam per_cpu_param;          // the plan's host bytes per CPU-side parameter (issue 16)
  bool has_cpu_segment = false;                   // per_cpu_param applies
};
// (measured - predicted) / predicted in %.
double percent_diff(int64_t predicted, int64_t measured);
// "memory: GPU predicted 14.2 GB, measured 14.6 GB (+2.8%); pinned host predicted ..., measured ... (+0.0%)"
// then, when known, "; host RSS 13.1 GB" and "; host bytes per CPU-side parameter 12.00 (state) + 0.66
// (staging rings) = 12.66".
std::string memory_report(const MemoryCheck& m);
// "host bytes per CPU-side parameter 12.00 (state) + 0.66 (staging rings) = 12.66" (twinflow run and simulate).
std::string host_bytes_line(const core::HostBytesPerParam& b);
// This process's resident set size (VmRSS of /proc/self/status) in bytes; 0 when it cannot be read.
int64_t process_rss_bytes();

}  // namespace tf::app
