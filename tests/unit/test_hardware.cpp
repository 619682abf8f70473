// Hardware profiles written by format_hardware_profile (what `twinflow calibrate` writes) read back
// to the same figures and sources; the optional calibrate fields parse and are checked.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/hardware.h"

#ifndef TWINFLOW_SOURCE_DIR
#error "TWINFLOW_SOURCE_DIR (the repository's absolute path) must be defined by the build"
#endif

using namespace tf::core;
namespace fs = std::filesystem;

namespace {

const fs::path kHardware = fs::path(TWINFLOW_SOURCE_DIR) / "scenarios" / "hardware";

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every field set, every optional figure present, awkward strings and numbers.
HardwareProfile full_profile() {
  HardwareProfile p;
  p.name = "calibrated-box";
  p.description = "two \"GPUs\": a\\b, #not a comment, tab\there, line\nbreak, unicode \xC3\xA9";
  p.gpus_per_node = 2;
  p.gpu.name = "NVIDIA H200";
  p.gpu.hbm_bytes = 150754820096;
  p.gpu.hbm_gbps = 4012.3456789012345;
  p.gpu.bf16_tflops = 0.1 + 0.2;  // 0.30000000000000004: needs all 17 digits
  p.gpu.fp16_tflops = 1.0 / 3.0;
  p.gpu.fp32_tflops = 51.25;
  p.gpu.kernel_launch_ns = 2140.5;
  p.gpu.hbm_copy_gbps = 3890;
  p.gpu.event_record_ns = 1234.5;
  p.gpu.event_sync_ns = 9876.25;
  p.gpu.optimizer_gbps = 2870.25;
  p.gpu.bf16_gemm_tflops_by_shape = {{1024, 4096, 4096, 612.75},
                                     {8192, 8192, 8192, 781.0625},
                                     {16, 4096, 4096, 55.5},
                                     {8192, 8192, 8192, 700.5, GemmPass::kInputGrad},
                                     {8192, 8192, 4096, 650.25, GemmPass::kWeightGrad}};
  p.gpu.attention_tflops_by_shape = {{64, 1024, 301.5, false},
                                     {64, 1024, 240.25, true},
                                     {128, 2048, 410.125, false},
                                     {64, 1024, 260.5, false, 96},  // with its (sample, head) pairs
                                     {64, 1024, 201.75, true, 96}};
  p.gpu.decoder_kernel_gbps = {{KernelClass::kLayerNormForward, 2650.5}, {KernelClass::kCrossEntropy, 1999.25}};
  p.pcie.h2d_gbps = 53.7;
  p.pcie.d2h_gbps = 54.1;
  p.pcie.bidir_total_gbps = 83.2;
  p.pcie.gpus_per_link = 2;
  p.pcie.pageable_h2d_gbps = 12.5;
  p.pcie.copy_latency_ns = 2500.125;
  p.pcie.h2d_slowdown_under_cpu_pass = 1.4375;
  p.pcie.d2h_slowdown_under_cpu_pass = 1.0625;
  p.intra_node.kind = "nvlink";
  p.intra_node.gbps = 251.5;
  p.intra_node.latency_ns = 29000;
  p.intra_node.bus_gbps_by_message_bytes = {{2097152, 28}, {536870912, 250}};
  p.intra_node.all_gather_bus_gbps_by_message_bytes = {{1048576, 19.5}, {33554432, 181.25}, {536870912, 251.5}};
  p.intra_node.reduce_scatter_bus_gbps_by_message_bytes = {{1048576, 18.25}, {536870912, 248}};
  p.inter_node.kind = "infiniband";
  p.inter_node.gbps = 50;
  p.inter_node.latency_ns = 5000;
  p.cpu.name = "Intel(R) Xeon(R) Platinum 8480+";
  p.cpu.cores = 32;
  p.cpu.mem_gbps = 146.25;
  p.cpu.optimizer_gparam_s_per_core = 1.04;
  p.cpu.optimizer_gparam_s_all_cores = 5.2;
  p.cpu.dma_slowdown_factor = 1.6834;
  p.cpu.dma_slowdown_factor_d2h = 1.8125;
  p.cpu.dma_slowdown_factor_h2d = 1.125;
  p.cpu.optimizer_out_of_place_factor = 1.0625;
  p.cpu.optimizer_gparam_s_by_threads = {{1, 1.04}, {2, 1.66}, {4, 2.89}, {32, 5.2}};
  p.cpu.optimizer_node_gparam_s_by_ranks = {{1, 5.125}, {2, 4.75}, {4, 4.5}};
  p.cpu.optimizer_rate_factor_by_node_bytes = {{4831838208, 1}, {112400000000, 0.9921875}, {224800000000, 0.875}};
  p.gpu.compute_slowdown_during_collectives = 1.0625;
  p.gpu.compute_slowdown_during_dma = 1.015625;
  p.gpu.gemm_sm_clock_mhz = 1755;
  p.gpu.context_bytes = 612345678;
  p.gpu.nccl_comm_bytes = 301989888;
  p.gpu.alloc_granularity_bytes = 2097152;
  p.gpu.pinned_host_map_bytes_per_gb = 1953125.5;
  p.host_memory_bytes = 274877906944;
  for (const char* key : {"gpus_per_node",
                          "gpu.hbm_bytes",
                          "gpu.hbm_gbps",
                          "gpu.bf16_tflops",
                          "gpu.fp16_tflops",
                          "gpu.fp32_tflops",
                          "gpu.kernel_launch_ns",
                          "gpu.hbm_copy_gbps",
                          "gpu.event_record_ns",
                          "gpu.optimizer_gbps",
                          "gpu.event_sync_ns",
                          "gpu.compute_slowdown_during_collectives",
                          "gpu.compute_slowdown_during_dma",
                          "gpu.gemm_sm_clock_mhz",
                          "gpu.bf16_gemm_tflops_by_shape",
                          "gpu.context_bytes",
                          "gpu.nccl_comm_bytes",
                          "gpu.alloc_granularity_bytes",
                          "gpu.pinned_host_map_bytes_per_gb",
                          "gpu.attention_tflops_by_shape",
                          "gpu.decoder_kernel_gbps",
                          "pcie.h2d_gbps",
                          "pcie.d2h_gbps",
                          "pcie.bidir_total_gbps",
                          "pcie.gpus_per_link",
                          "pcie.pageable_h2d_gbps",
                          "pcie.copy_latency_ns",
                          "pcie.h2d_slowdown_under_cpu_pass",
                          "pcie.d2h_slowdown_under_cpu_pass",
                          "intra_node.bus_gbps",
                          "intra_node.latency_ns",
                          "intra_node.bus_gbps_by_message_bytes",
                          "intra_node.all_gather_bus_gbps_by_message_bytes",
                          "intra_node.reduce_scatter_bus_gbps_by_message_bytes",
                          "inter_node.gbps",
                          "inter_node.latency_ns",
                          "cpu.cores",
                          "cpu.mem_gbps",
                          "cpu.optimizer_gparam_s_per_core",
                          "cpu.optimizer_gparam_s_all_cores",
                          "cpu.optimizer_gparam_s_by_threads",
                          "cpu.optimizer_node_gparam_s_by_ranks",
                          "cpu.optimizer_rate_factor_by_node_bytes",
                          "cpu.dma_slowdown_factor",
                          "cpu.dma_slowdown_factor_d2h",
                          "cpu.dma_slowdown_factor_h2d",
                          "cpu.optimizer_out_of_place_factor",
                          "host.memory_bytes"})
    p.sources[key] = std::string("twinflow calibrate 2026-11-22 (twinflow calibrate --out x.yaml): ") + key +
                     ", median of 20, spread 1.2%; \"quoted\" \\ back";
  return p;
}

}  // namespace

TEST(HardwareWriter, EveryFieldRoundTrips) {
  const HardwareProfile p = full_profile();
  const std::string text = format_hardware_profile(p, "written by a test\n\nsecond line");
  const HardwareProfile q = parse_hardware_profile(text, "full.yaml");
  EXPECT_TRUE(q.warnings.empty());
  // Field by field first, so that a failure names the field; then the whole struct (every field).
  EXPECT_EQ(q.name, p.name);
  EXPECT_EQ(q.description, p.description);
  EXPECT_EQ(q.gpus_per_node, p.gpus_per_node);
  EXPECT_EQ(q.gpu, p.gpu);
  EXPECT_EQ(q.gpu.bf16_tflops, 0.1 + 0.2);  // bit-exact, not approximately
  EXPECT_EQ(q.gpu.fp16_tflops, 1.0 / 3.0);
  EXPECT_EQ(q.gpu.bf16_gemm_tflops_by_shape, p.gpu.bf16_gemm_tflops_by_shape);
  EXPECT_EQ(q.pcie, p.pcie);
  EXPECT_EQ(q.intra_node, p.intra_node);
  EXPECT_EQ(q.inter_node, p.inter_node);
  EXPECT_EQ(q.cpu, p.cpu);
  EXPECT_EQ(q.host_memory_bytes, p.host_memory_bytes);
  EXPECT_EQ(q.sources, p.sources);
  EXPECT_EQ(q, p);
  // the header is comment lines
  EXPECT_EQ(text.rfind("# written by a test\n#\n# second line\nname: ", 0), 0u) << text;
  // writing the re-read profile gives the same text
  EXPECT_EQ(format_hardware_profile(q, "written by a test\n\nsecond line"), text);
}

TEST(HardwareWriter, ShippedProfilesRoundTrip) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kHardware)) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    HardwareProfile p = load_hardware_profile(e.path());
    p.file.clear();
    const HardwareProfile q = parse_hardware_profile(format_hardware_profile(p), "again.yaml");
    EXPECT_EQ(q, p);
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(HardwareWriter, MinimalProfileWritesNoOptionalFigure) {
  HardwareProfile p = full_profile();
  p.gpu.hbm_copy_gbps = p.gpu.event_record_ns = p.gpu.event_sync_ns = p.gpu.optimizer_gbps = 0;
  p.gpu.compute_slowdown_during_collectives = p.gpu.compute_slowdown_during_dma = 0;
  p.gpu.gemm_sm_clock_mhz = 0;
  p.gpu.bf16_gemm_tflops_by_shape.clear();
  p.gpu.attention_tflops_by_shape.clear();
  p.gpu.decoder_kernel_gbps.clear();
  p.pcie.pageable_h2d_gbps = p.pcie.copy_latency_ns = 0;
  p.pcie.h2d_slowdown_under_cpu_pass = p.pcie.d2h_slowdown_under_cpu_pass = 1;  // the default: not slowed
  p.cpu.dma_slowdown_factor_d2h = p.cpu.dma_slowdown_factor_h2d = 0;            // not measured
  p.cpu.optimizer_out_of_place_factor = 0;                                      // not measured
  p.intra_node.bus_gbps_by_message_bytes.clear();
  p.intra_node.all_gather_bus_gbps_by_message_bytes.clear();
  p.intra_node.reduce_scatter_bus_gbps_by_message_bytes.clear();
  p.cpu.optimizer_gparam_s_by_threads.clear();
  p.cpu.optimizer_node_gparam_s_by_ranks.clear();
  p.cpu.optimizer_rate_factor_by_node_bytes.clear();
  p.gpu.context_bytes = p.gpu.nccl_comm_bytes = p.gpu.alloc_granularity_bytes = 0;
  p.gpu.pinned_host_map_bytes_per_gb = 0;
  p.description.clear();
  for (const char* key :
       {"gpu.hbm_copy_gbps", "gpu.event_record_ns", "gpu.event_sync_ns", "gpu.optimizer_gbps",
        "gpu.compute_slowdown_during_collectives", "gpu.compute_slowdown_during_dma", "gpu.gemm_sm_clock_mhz",
        "pcie.pageable_h2d_gbps",
        "pcie.copy_latency_ns", "gpu.context_bytes", "gpu.nccl_comm_bytes", "gpu.alloc_granularity_bytes",
        "gpu.pinned_host_map_bytes_per_gb", "pcie.h2d_slowdown_under_cpu_pass", "pcie.d2h_slowdown_under_cpu_pass",
        "cpu.dma_slowdown_factor_d2h", "cpu.dma_slowdown_factor_h2d", "cpu.optimizer_out_of_place_factor"})
    p.sources.erase(key);  // zero without a source: not measured
  const std::string text = format_hardware_profile(p);
  for (const char* key :
       {"hbm_copy_gbps",     "event_record_ns", "event_sync_ns",    "optimizer_gbps",  "bf16_gemm_tflops_by_shape",
        "pageable_h2d_gbps", "copy_latency_ns", "by_message_bytes", "by_threads",      "by_ranks",
        "compute_slowdown",  "description",     "context_bytes",    "nccl_comm_bytes", "alloc_granularity",
        "pinned_host_map",   "attention",       "decoder_kernel",   "under_cpu_pass",  "factor_d2h",
        "factor_h2d",        "by_node_bytes",   "out_of_place",     "sm_clock"})
    EXPECT_FALSE(contains(text, key)) << key;
  HardwareProfile q = parse_hardware_profile(text, "min.yaml");
  // sources of the figures not written are not read back
  for (auto it = p.sources.begin(); it != p.sources.end();)
    it = q.sources.count(it->first) ? std::next(it) : p.sources.erase(it);
  EXPECT_EQ(q, p);
  EXPECT_EQ(q.sources.size(), 21u);  // the required figures
}

TEST(HardwareWriter, AMeasuredZeroIsWritten) {
  // a copy latency measured as 0 ns keeps its figure and source
  HardwareProfile p = full_profile();
  p.pcie.copy_latency_ns = 0;
  p.gpu.event_record_ns = 0;
  const HardwareProfile q = parse_hardware_profile(format_hardware_profile(p), "zero.yaml");
  EXPECT_EQ(q, p);
  EXPECT_EQ(q.sources.count("pcie.copy_latency_ns"), 1u);
}

// The copies' slowdown under the CPU pass defaults to 1 (not slowed): a profile written before the term
// reads as 1, and a measured 1 (calibrate clamps a copy that ran faster) keeps its figure and source.
TEST(HardwareWriter, CopySlowdownUnderCpuPassDefaultsToOne) {
  const HardwareProfile old = load_hardware_profile(kHardware / "h100-80gb-16core-calibrated.yaml");
  EXPECT_EQ(old.pcie.h2d_slowdown_under_cpu_pass, 1.0);
  EXPECT_EQ(old.pcie.d2h_slowdown_under_cpu_pass, 1.0);
  EXPECT_EQ(old.sources.count("pcie.h2d_slowdown_under_cpu_pass"), 0u);
  EXPECT_EQ(old.cpu.dma_slowdown_factor_d2h, 0.0);  // the CPU's one-way DMA slowdowns: not measured
  EXPECT_EQ(old.cpu.dma_slowdown_factor_h2d, 0.0);
  EXPECT_EQ(old.cpu.optimizer_out_of_place_factor, 0.0);  // nor the out-of-place factor: 1 in the simulator
  HardwareProfile p = full_profile();
  p.pcie.d2h_slowdown_under_cpu_pass = 1;
  const std::string text = format_hardware_profile(p);
  EXPECT_TRUE(contains(text, "d2h_slowdown_under_cpu_pass: {value: 1,")) << text;
  const HardwareProfile q = parse_hardware_profile(text, "one.yaml");
  EXPECT_EQ(q, p);
  EXPECT_EQ(q.sources.count("pcie.d2h_slowdown_under_cpu_pass"), 1u);
}

TEST(HardwareWriter, AFigureWithoutASourceIsRefused) {
  HardwareProfile p = full_profile();
  p.sources.erase("pcie.copy_latency_ns");
  try {
    (void)format_hardware_profile(p);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "pcie.copy_latency_ns has no source")) << e.what();
  }
  p = full_profile();
  p.cpu.name.clear();
  EXPECT_THROW((void)format_hardware_profile(p), std::invalid_argument);
}

TEST(HardwareWriter, CalibrateFieldsAreChecked) {
  const std::string good = format_hardware_profile(full_profile());
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    return t;
  };
  const struct {
    std::string from, to, message;
  } cases[] = {
      {"- [8192, 8192, 8192, 781.0625]", "- [1024, 4096, 4096, 781.0625]", "is listed twice"},
      {"- [8192, 8192, 8192, 781.0625]", "- [8192, 8192, 781.0625]", "expected an entry [m, n, k, tflops]"},
      {"- [8192, 8192, 8192, 781.0625]", "- [8192, 0, 8192, 781.0625]", "bf16_gemm_tflops_by_shape.value[1][1]"},
      {"- [8192, 8192, 8192, 781.0625]", "- [8192, 8192, 8192, 0]", "bf16_gemm_tflops_by_shape.value[1][3]"},
      {"- [33554432, 181.25]", "- [1000, 181.25]", "message sizes must ascend"},
      {"- [64, 1024, 240.25, backward]", "- [64, 1024, 240.25, forward]", "is listed twice"},
      {"- [64, 1024, 240.25, backward]", "- [64, 1024, 240.25, sideways]", "unknown attention pass"},
      {"- [64, 1024, 240.25, backward]", "- [64, 1024, 0, backward]", "attention_tflops_by_shape.value[1][2]"},
      {"- [64, 1024, 240.25, backward]", "- [64, 240.25, backward]", "expected an entry [head_dim, seq, pairs, tflops"},
      {"- [64, 1024, 96, 201.75, backward]", "- [64, 1024, 96, 240.25, forward]", "pairs 96 (forward) is listed twice"},
      {"- [64, 1024, 96, 201.75, backward]", "- [64, 1024, 0, 201.75, backward]",
       "attention_tflops_by_shape.value[4][2]"},
      {"- [64, 1024, 96, 201.75, backward]", "- [64, 1024, 96, 1, 201.75, backward]", "or without pairs"},
      {"- [cross_entropy, 1999.25]", "- [layer_norm, 1999.25]", "unknown kernel class"},
      {"- [cross_entropy, 1999.25]", "- [layer_norm_forward, 1999.25]", "is listed twice"},
      {"- [cross_entropy, 1999.25]", "- [other, 1999.25]", "unknown kernel class"},
      {"- [cross_entropy, 1999.25]", "- [cross_entropy, 0]", "decoder_kernel_gbps.value[1][1]"},
      {"- [2, 4.75]", "- [1, 4.75]", "rank counts must ascend; 1 follows 1"},
      {"- [4, 4.5]", "- [33, 4.5]", "optimizer_node_gparam_s_by_ranks.value[2][0]"},
      {"- [4, 4.5]", "- [4, 0]", "optimizer_node_gparam_s_by_ranks.value[2][1]"},
      {"- [112400000000, 0.9921875]", "- [4831838208, 0.9921875]", "node_bytes must ascend; 4831838208 follows"},
      {"- [224800000000, 0.875]", "- [224800000000, 0]", "optimizer_rate_factor_by_node_bytes.value[2][1]"},
      {"- [224800000000, 0.875]", "- [0, 0.875]", "optimizer_rate_factor_by_node_bytes.value[2][0]"},
      {"- [224800000000, 0.875]", "- [224800000000]", "expected a pair [node_bytes, factor]"},
      {"copy_latency_ns: {value: 2500.125", "copy_latency_ns: {value: -1", "pcie.copy_latency_ns.value"},
      {"pageable_h2d_gbps: {value: 12.5", "pageable_h2d_gbps: {value: 0", "pcie.pageable_h2d_gbps.value"},
      {"h2d_slowdown_under_cpu_pass: {value: 1.4375", "h2d_slowdown_under_cpu_pass: {value: 0.9",
       "pcie.h2d_slowdown_under_cpu_pass.value"},
      {"d2h_slowdown_under_cpu_pass: {value: 1.0625", "d2h_slowdown_under_cpu_pass: {value: 101",
       "pcie.d2h_slowdown_under_cpu_pass.value"},
      {"dma_slowdown_factor_d2h: {value: 1.8125", "dma_slowdown_factor_d2h: {value: 0.5",
       "cpu.dma_slowdown_factor_d2h.value"},
      {"dma_slowdown_factor_h2d: {value: 1.125", "dma_slowdown_factor_h2d: {value: 100.5",
       "cpu.dma_slowdown_factor_h2d.value"},
      {"optimizer_out_of_place_factor: {value: 1.0625", "optimizer_out_of_place_factor: {value: 0.125",
       "cpu.optimizer_out_of_place_factor.value"},
      {"event_sync_ns: {value: 9876.25", "event_sync_ns: {value: 9876.25, sauce: x", "unknown key"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.to);
    const std::string text = replaced(c.from, c.to);
    try {
      const HardwareProfile p = parse_hardware_profile(text, "bad.yaml");
      ASSERT_FALSE(p.warnings.empty()) << "no error";
      EXPECT_TRUE(contains(p.warnings.front(), c.message)) << p.warnings.front();
    } catch (const InputError& e) {
      EXPECT_TRUE(contains(e.what(), c.message)) << e.what();
    }
  }
}

// The attention rate of a pass: the nearest head dimension's points, of those the nearest sequence length, of
// those the nearest (sample, head) pairs; a point without pairs matches any.
TEST(GpuProfile, AttentionRateIsTheNearestMeasuredShapes) {
  GpuProfile g;
  EXPECT_EQ(g.attention_tflops_at(64, 1024, 256, false), 0.0);  // none measured
  EXPECT_EQ(g.attention_point_at(64, 1024, 256, false), nullptr);
  g.attention_tflops_by_shape = {{64, 1024, 300, false},
                                 {64, 1024, 240, true},
                                 {128, 1024, 400, false},
                                 {128, 4096, 450, false},
                                 {128, 2048, 350, true}};
  EXPECT_EQ(g.attention_tflops_at(64, 1024, 256, false), 300);
  EXPECT_EQ(g.attention_tflops_at(64, 1024, 96, true), 240);     // no pairs recorded: any
  EXPECT_EQ(g.attention_tflops_at(64, 8192, 256, true), 240);    // the only d 64 backward point
  EXPECT_EQ(g.attention_tflops_at(128, 2000, 256, false), 400);  // nearer 1024 than 4096 in log distance
  EXPECT_EQ(g.attention_tflops_at(128, 3000, 256, false), 450);  // nearer 4096 than 1024
  EXPECT_EQ(g.attention_tflops_at(80, 1024, 256, false), 300);   // 80 is nearer 64 than 128 in log distance
  EXPECT_EQ(g.attention_tflops_at(100, 1024, 256, true), 350);   // nearer 128: its backward point
  // calibrate's points (pairs = batch x heads): GPT-2 124M's 96 and OPT-1.3B's 256 at d 64, s 1024
  g.attention_tflops_by_shape = {{64, 1024, 163.6, false, 96},
                                 {64, 1024, 187.1, false, 256},
                                 {64, 2048, 231.5, false, 128},
                                 {64, 1024, 145.5, true, 96}};
  EXPECT_EQ(g.attention_tflops_at(64, 1024, 96, false), 163.6);
  EXPECT_EQ(g.attention_tflops_at(64, 1024, 256, false), 187.1);
  EXPECT_EQ(g.attention_tflops_at(64, 1024, 128, false), 163.6);  // 128 is nearer 96 than 256 in log distance
  EXPECT_EQ(g.attention_tflops_at(64, 1024, 512, false), 187.1);
  EXPECT_EQ(g.attention_tflops_at(64, 1200, 96, false), 163.6);   // seq before pairs: 1200 is nearer 1024
  EXPECT_EQ(g.attention_tflops_at(64, 1024, 1024, true), 145.5);  // the only backward point
  // the point itself: the one whose rate is returned (simulate names it in a note)
  ASSERT_NE(g.attention_point_at(64, 1024, 128, false), nullptr);
  EXPECT_EQ(*g.attention_point_at(64, 1024, 128, false), g.attention_tflops_by_shape[0]);
  EXPECT_EQ(*g.attention_point_at(64, 1024, 512, false), g.attention_tflops_by_shape[1]);
  EXPECT_EQ(g.attention_point_at(64, 1024, 96, true), &g.attention_tflops_by_shape[3]);
  g.hbm_gbps = 3000;
  g.decoder_kernel_gbps = {{KernelClass::kBiasGrad, 1500}};
  EXPECT_EQ(g.kernel_gbps(KernelClass::kBiasGrad), 1500);
  EXPECT_EQ(g.kernel_gbps(KernelClass::kCrossEntropy), 3000);  // not measured: HBM
  EXPECT_EQ(g.kernel_gbps(KernelClass::kOther), 3000);
}

// The CPU rate's factor by the node's pinned bytes: 1 unmeasured, linear between points, flat outside.
TEST(CpuProfile, FootprintFactorInterpolatesInBytes) {
  CpuProfile c;
  EXPECT_EQ(c.optimizer_footprint_factor(int64_t(1) << 40), 1.0);
  c.optimizer_rate_factor_by_node_bytes = {{1000, 1.0}, {3000, 0.9}, {5000, 0.5}};
  EXPECT_DOUBLE_EQ(c.optimizer_footprint_factor(0), 1.0);
  EXPECT_DOUBLE_EQ(c.optimizer_footprint_factor(1000), 1.0);
  EXPECT_DOUBLE_EQ(c.optimizer_footprint_factor(2000), 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer_footprint_factor(4000), 0.7);
  EXPECT_DOUBLE_EQ(c.optimizer_footprint_factor(5000), 0.5);
  EXPECT_DOUBLE_EQ(c.optimizer_footprint_factor(int64_t(1) << 50), 0.5);
}

// The host as a later probe found it (validate's host-tracked figures): every CPU optimizer rate scaled, the
// factors on them (DMA, footprint) and everything else kept.
TEST(CpuProfile, RatesScaledKeepTheFactors) {
  CpuProfile c;
  c.cores = 32;
  c.mem_gbps = 150;
  c.optimizer_gparam_s_per_core = 0.8;
  c.optimizer_gparam_s_all_cores = 6.0;
  c.optimizer_gparam_s_by_threads = {{1, 0.8}, {16, 5.0}};
  c.optimizer_node_gparam_s_by_ranks = {{1, 5.5}, {2, 6.0}};
  c.dma_slowdown_factor = 1.3;
  c.optimizer_rate_factor_by_node_bytes = {{1000, 1.0}, {3000, 0.9}};
  const CpuProfile s = c.with_rates_scaled(1.25);
  EXPECT_DOUBLE_EQ(s.optimizer_gparam_s_per_core, 1.0);
  EXPECT_DOUBLE_EQ(s.optimizer_gparam_s_all_cores, 7.5);
  EXPECT_DOUBLE_EQ(s.optimizer_gparam_s(16), 1.25 * c.optimizer_gparam_s(16));
  EXPECT_DOUBLE_EQ(s.optimizer_node_gparam_s(2), 7.5);
  EXPECT_EQ(s.optimizer_gparam_s_by_threads.front().first, 1);  // the counts stay
  EXPECT_EQ(s.dma_slowdown_factor, 1.3);
  EXPECT_EQ(s.optimizer_rate_factor_by_node_bytes, c.optimizer_rate_factor_by_node_bytes);
  EXPECT_EQ(s.mem_gbps, 150);
  EXPECT_EQ(c.with_rates_scaled(1.0), c);
  for (double bad : {0.0, -1.0, std::nan(""), double(INFINITY)})
    EXPECT_THROW((void)c.with_rates_scaled(bad), InputError) << bad;
}

// The node rate with k concurrent ranks: the measured points, linear between them, flat outside.
TEST(CpuProfile, NodeRateByRanksInterpolates) {
  CpuProfile c;
  EXPECT_EQ(c.optimizer_node_gparam_s(2), 0.0);  // not measured
  c.optimizer_node_gparam_s_by_ranks = {{1, 5.0}, {2, 4.5}, {4, 4.0}};
  EXPECT_DOUBLE_EQ(c.optimizer_node_gparam_s(1), 5.0);
  EXPECT_DOUBLE_EQ(c.optimizer_node_gparam_s(3), 4.25);
  EXPECT_DOUBLE_EQ(c.optimizer_node_gparam_s(4), 4.0);
  EXPECT_DOUBLE_EQ(c.optimizer_node_gparam_s(8), 4.0);
  c.optimizer_node_gparam_s_by_ranks = {{2, 4.5}};
  EXPECT_DOUBLE_EQ(c.optimizer_node_gparam_s(1), 4.5);
}
