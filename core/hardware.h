// Hardware profiles (scenarios/hardware/*.yaml): GPU, PCIe, interconnects, CPU and host memory, each figure sourced.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/gemm.h"
#include "core/optim/dtype.h"

namespace tf::core {

// Units are in the names; GB = 1e9 B and TFLOP = 1e12 FLOP everywhere; "gparam_s" = 1e9 elements/s.
// Fields marked "optional" may be absent from a profile (0 or empty then); the rest are required.

// A GEMM rate measured at one shape: C (m, n) = A (m, k) x B (k, n), bf16 in and out, fp32 accumulation,
// in the operand layout of `pass` (kAny: not said; it then stands for every pass).
struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;
  double tflops = 0;
  GemmPass pass = GemmPass::kAny;
  bool operator==(const GemmPoint&) const = default;
};

// The fused attention kernel's achieved rate (backends/cuda/attention.cu) at one shape: FLOPs as
// core::fused_attention_flops counts the pass (the forward's two products, or the backward's five with
// the recomputed scores) over its measured time (twinflow calibrate --scenario).
struct AttentionPoint {
  int64_t head_dim = 0, seq = 0;
  double tflops = 0;
  bool backward = false;  // the backward's kernels (D, dK/dV, dQ), else the forward's
  // The micro-batch's (sample, head) pairs, batch x heads: the kernels' grid is this many pairs of query (or
  // key) tiles, and a small grid leaves SMs idle in its last wave (GPT-2 124M's 96 pairs ran 13% below
  // OPT-1.3B's 256 at the same d and s). 0: not recorded (older profiles), a match for any.
  int64_t pairs = 0;
  bool operator==(const AttentionPoint&) const = default;
};

// A class of the decoder's memory-bound kernels at its achieved rate: the class's bytes as
// core::layer_elementwise counts them over the measured time of its kernels (twinflow calibrate --scenario).
struct KernelRate {
  KernelClass kind = KernelClass::kOther;
  double gbps = 0;
  bool operator==(const KernelRate&) const = default;
};

struct GpuProfile {
  std::string name;
  int64_t hbm_bytes = 0;
  double hbm_gbps = 0;     // device memory bandwidth (a copy moves 2x its size through it)
  double bf16_tflops = 0;  // dense tensor-core peak; 0: no bf16 support
  double fp16_tflops = 0;
  double fp32_tflops = 0;       // non-tensor-core fp32
  double kernel_launch_ns = 0;  // per kernel: empty kernels launched back to back on one stream
  // Optional measurements (twinflow calibrate):
  double hbm_copy_gbps = 0;    // cudaMemcpy device-to-device, read + written (hbm_gbps: a streaming kernel's)
  double event_record_ns = 0;  // host cost of one cudaEventRecord
  double event_sync_ns = 0;    // a host thread waiting on the device: event recorded on an idle stream,
                               // then cudaEventSynchronize, host round trip
  double optimizer_gbps = 0;   // the engine's fused GPU optimizer kernel (AdamW, bf16 gradient and copy):
                               // bytes read + written per second (28 B/element); 0: use hbm_gbps
  // A GEMM's time while the engine's collectives run on another stream of the same GPU (its SMs and
  // HBM shared with the NCCL kernels), and while pinned H2D and D2H copies run, over its time alone
  // (>= 1; 0: not measured, no slowdown). The simulator slows forward and backward by them.
  double compute_slowdown_during_collectives = 0;
  double compute_slowdown_during_dma = 0;
  // The SM clock (MHz, the median of NVML's samples) while calibrate timed bf16_gemm_tflops_by_shape; 0: not
  // read. No simulator term reads it: `validate` sets a run's clock beside it, for a GPU that its power limit
  // held to a lower clock than calibrate's short GEMMs ran at (docs/ARCHITECTURE.md, "GPU telemetry").
  double gemm_sm_clock_mhz = 0;
  std::vector<GemmPoint> bf16_gemm_tflops_by_shape;  // cuBLAS bf16 GEMM rates, in measurement order
  // GPU memory a process holds beyond its own cudaMallocs (the allocation plan's unnamed entries,
  // core::unnamed_gpu_memory), as cudaMemGetInfo counts it:
  int64_t context_bytes = 0;            // the CUDA context, a cuBLAS handle that ran a GEMM, the engine's 4 streams
  int64_t nccl_comm_bytes = 0;          // what a NCCL communicator over the node's GPUs adds on one of them, after the
                                        // engine's collectives (all-gather, send/recv, all-reduce) ran once
  int64_t alloc_granularity_bytes = 0;  // cudaMalloc's: a buffer costs its size rounded up to this
  double pinned_host_map_bytes_per_gb = 0;  // device bytes per GB of page-locked host memory (its mapping)
  std::vector<AttentionPoint> attention_tflops_by_shape;  // optional: the fused attention's rates
  std::vector<KernelRate> decoder_kernel_gbps;            // optional: one rate per measured class
  // The measured attention point a pass at (head_dim, seq, pairs) runs at: of the pass's points, those with the
  // nearest head dimension, of those the nearest sequence length, of those the nearest pairs (all in log
  // distance; a point without pairs is at distance 0); null when the pass has none.
  const AttentionPoint* attention_point_at(int64_t head_dim, int64_t seq, int64_t pairs, bool backward) const;
  // That point's rate; 0 when none.
  double attention_tflops_at(int64_t head_dim, int64_t seq, int64_t pairs, bool backward) const;
  // The class's measured rate, else hbm_gbps.
  double kernel_gbps(KernelClass c) const;
  // The dense GEMM peak for operands of `compute` (the parameters' dtype as gathered and computed with,
  // core::StepConfig::param_dtype: bf16 for bf16 and fp16 training, fp32 for fp32): bf16_tflops, fp16_tflops
  // or fp32_tflops; 0 when the profile has none.
  double gemm_peak_tflops(DType compute) const;
  bool operator==(const GpuProfile&) const = default;
};

struct PcieProfile {
  double h2d_gbps = 0;  // pinned host -> device, one direction alone
  double d2h_gbps = 0;
  double bidir_total_gbps = 0;  // both directions at once, the two added
  int gpus_per_link = 1;        // GPUs sharing one host uplink (through a PCIe switch)
  // Optional measurements (twinflow calibrate):
  double pageable_h2d_gbps = 0;  // cudaMemcpy from pageable (malloc'd) host memory
  double copy_latency_ns = 0;    // fixed cost per pinned copy: t(bytes) = latency + bytes / rate
  // A pinned copy's rate alone over its rate while the CPU optimizer pass runs on the host (host DRAM
  // shared between the DMA and the pass), per direction; >= 1, 1 (the default): not slowed. The
  // simulator divides a copy's rate by it while a CPU pass of the link's host runs
  // (docs/ARCHITECTURE.md, "Copies slowed by the CPU pass").
  double h2d_slowdown_under_cpu_pass = 1;
  double d2h_slowdown_under_cpu_pass = 1;
  bool operator==(const PcieProfile&) const = default;
};

// A collective bus bandwidth measured at one message size (nccl-tests "busbw").
struct BusPoint {
  int64_t message_bytes = 0;
  double bus_gbps = 0;
  bool operator==(const BusPoint&) const = default;
};

struct LinkProfile {
  std::string kind;  // nvlink, pcie, infiniband, ethernet, none
  double gbps = 0;   // intra-node: collective bus bandwidth; inter-node: per GPU, per direction; 0: none
  double latency_ns = 0;
  std::vector<BusPoint> bus_gbps_by_message_bytes;  // optional measurements, ascending sizes
  // Optional measurements per collective (intra-node; ascending sizes). Each overrides
  // bus_gbps_by_message_bytes for its own kind.
  std::vector<BusPoint> all_gather_bus_gbps_by_message_bytes;
  std::vector<BusPoint> reduce_scatter_bus_gbps_by_message_bytes;
  // Bus bandwidth for a message: interpolated linearly in log(size) between measured points and
  // clamped at the ends; `gbps` when nothing was measured.
  double bus_gbps_at(int64_t message_bytes) const;
  bool operator==(const LinkProfile&) const = default;
};

// The CPU optimizer's rate at one host footprint, relative to calibrate's small segments.
struct FootprintPoint {
  int64_t node_bytes = 0;
  double factor = 1;
  bool operator==(const FootprintPoint&) const = default;
};

struct CpuProfile {
  std::string name;
  int cores = 0;  // physical cores in the node
  double mem_gbps = 0;
  double optimizer_gparam_s_per_core = 0;   // CPU AdamW, one core
  double optimizer_gparam_s_all_cores = 0;  // CPU AdamW, all cores (memory-bound ceiling)
  double dma_slowdown_factor = 1;           // CPU optimizer time x this while PCIe copies run (both ways)
  // The same while every GPU of the host copies device-to-host only / host-to-device only at once (the
  // ranks' D2Hs in backward, their H2Ds after the passes); 0: not measured (dma_slowdown_factor then).
  double dma_slowdown_factor_d2h = 0;
  double dma_slowdown_factor_h2d = 0;
  // CPU optimizer time x this for an out-of-place update (a speculated layer's update, read from its current
  // state slot and written to its spare one: core/speculation.h) against the in-place update the rates above
  // measure; 0: not measured (1 then). twinflow calibrate: the rank curve's processes at the host's ranks.
  double optimizer_out_of_place_factor = 0;
  // Optional measured rates by thread count, ascending (threads, Gparam/s).
  std::vector<std::pair<int, double>> optimizer_gparam_s_by_threads;
  // Optional measured node rates by concurrent ranks, ascending (ranks, Gparam/s of all of them
  // together): k processes at once, each on its k-th share of the cores, through the engine's CPU
  // path (twinflow calibrate). The simulator shares the host by it (docs/ARCHITECTURE.md).
  std::vector<std::pair<int, double>> optimizer_node_gparam_s_by_ranks;
  // Optional measured factors on the CPU optimizer's rate by the host memory the node's ranks hold
  // (bytes of the whole node, ascending): the node rate of k rank processes with segments of that size
  // (and the rest of each rank's planned host bytes resident) over their rate on calibrate's small
  // segments, the two measured alternately (twinflow calibrate --scenario; docs/ARCHITECTURE.md, "The
  // simulator: the host is shared"). The first point is that reference, at factor 1.
  std::vector<FootprintPoint> optimizer_rate_factor_by_node_bytes;
  // With measurements: interpolated linearly between measured thread counts (below the first,
  // proportional to threads; above the last, that rate), capped by the all-core rate. Without:
  // min(threads x per-core rate, all-core rate).
  double optimizer_gparam_s(int threads) const;
  // The node rate with `ranks` concurrent ranks: interpolated linearly between measured rank counts,
  // the first measured rate below them and the last above; 0 without measurements.
  double optimizer_node_gparam_s(int ranks) const;
  // The factor at `node_bytes` of pinned host memory on the node: interpolated linearly in bytes between
  // measured points, the first point's factor below them and the last's above; 1 without measurements.
  double optimizer_footprint_factor(int64_t node_bytes) const;
  // This profile with every CPU optimizer rate (per core, all cores, by threads, by ranks) times `factor`
  // (> 0): the host as it was when a later measurement of the node rate read factor x this profile's
  // (`twinflow run --host-probe`, what `validate` re-simulates a point with). The factors on the rates
  // (DMA, footprint) stay: they are ratios of two rates of one host.
  CpuProfile with_rates_scaled(double factor) const;
  bool operator==(const CpuProfile&) const = default;
};

struct HardwareProfile {
  std::string name;
  std::string description;
  std::filesystem::path file;  // empty for a built-in profile
  int gpus_per_node = 0;
  GpuProfile gpu;
  PcieProfile pcie;
  LinkProfile intra_node;
  LinkProfile inter_node;
  CpuProfile cpu;
  int64_t host_memory_bytes = 0;
  std::map<std::string, std::string> sources;  // "gpu.hbm_gbps" -> its source
  std::vector<std::string> warnings;           // unknown keys
  bool operator==(const HardwareProfile&) const = default;
};

// Parses a profile. Every figure is written {value: V, source: "..."}; errors throw InputError
// "FILE:LINE:COL: key.path: what; allowed ...".
HardwareProfile parse_hardware_profile(std::string_view yaml_text, const std::string& display_name);
HardwareProfile load_hardware_profile(const std::filesystem::path& file);
// How a profile is referred to: a name (letters, digits, '-', '_' and '.', no "..") is looked up among
// the profiles and never leaves their directory; a path must say it is a file (it ends in .yaml or
// .yml); anything else (a '/' or ".." without that ending) is refused.
enum class ProfileRef : uint8_t { kName, kPath, kInvalid };
ProfileRef classify_profile_ref(std::string_view s);
// A profile named on a command line: a path is loaded; a name is a built-in profile. Throws InputError
// naming the allowed profiles.
HardwareProfile find_hardware_profile(const std::string& name_or_path);

// The profile as YAML that parse_hardware_profile reads back to the same figures and sources
// (numbers in their shortest round-trip form). Every figure written needs its source in p.sources
// under its key path ("gpu.hbm_gbps"); an optional figure is written when measured (non-empty, or
// non-zero, or zero with a source). `header` becomes leading "# " comment lines. Throws
// std::invalid_argument naming a figure without a source.
std::string format_hardware_profile(const HardwareProfile& p, std::string_view header = {});

// The profiles shipped in scenarios/hardware/, compiled in (the files are the source of truth).
std::vector<std::string_view> builtin_hardware_profile_names();
std::optional<std::string_view> builtin_hardware_profile_text(std::string_view name);

}  // namespace tf::core
