// Several ranks' CPU optimizer passes at once on one host, through the engine's own CPU path
// (cpu::CpuSegment): one worker process per rank, confined to its share of the cores
// (cpu::rank_cpu_share), its segment placed by first touch, all started together for every pass.
// `twinflow bench --cpu-ranks` and `twinflow calibrate` measure with it; no GPU is needed.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/cpu_segment.h"
#include "core/scenario.h"
#include "core/settings.h"

namespace tf::app {

// One rank's CPU segment: its layers' ranges (forward order) and the order its CPU ops run in.
struct RankLayout {
  std::vector<backend::cpu::SegmentRange> ranges;
  std::vector<size_t> order;  // layers, as the rank's CPU queue runs them
  int64_t elems() const { return ranges.empty() ? 0 : ranges.back().end; }
};

// `ranks` segments of total / ranks elements each (whole 2048-element tiles), each cut into `layers`
// equal ranges, run last layer first (the backward order in which gradients land).
std::vector<RankLayout> flat_layouts(int64_t total_elems, int ranks, int layers);
// The CPU pieces of every rank of the settings' world at `ratio` (core::plan_rank, as the engine plans
// its rank), in the order each rank's CPU queue runs them (core::plan_queue_order).
std::vector<RankLayout> scenario_layouts(const core::RunSettings& rs, double ratio);

// The engine's CPU op at one rank, for measurements that must see op sizes like the engine's (the
// rank curve and the copies under the CPU pass in `twinflow calibrate`: per-op overhead made a rank
// curve on 131 k-element ops half the engine's rate, bench/results/2026-11-24-largest-h200): elements
// per op, the median of the CPU segment's per-layer pieces of the scenarios' models at world 1 and
// ratio 1 (scenario_layouts: as the engine plans them), and the bytes of that op's parameter copy (the
// H2D after its pass, in the scenario's parameter dtype). Without scenarios kDefaultCpuOpElems of bf16.
struct EngineCpuOp {
  int64_t elems = 0;
  int64_t copy_bytes = 0;
  std::string what;  // where the size comes from, in words
};
inline constexpr int64_t kDefaultCpuOpElems = int64_t(1) << 24;
EngineCpuOp engine_cpu_op(const std::vector<core::Scenario>& scenarios);

// The segments of calibrate's rank curve (cpu.optimizer_node_gparam_s_by_ranks): `ops` ops of `op` elements
// over all the ranks, op the engine's CPU op clamped to [one 2048-element tile per rank of max_ranks, budget],
// budget 2^28 elements (quick: 2^27), ops = budget / op in [1, 32].
struct RankCurveOps {
  int64_t op = 0;
  int ops = 0;
};
RankCurveOps rank_curve_ops(int64_t engine_op_elems, int max_ranks, bool quick);

// calibrate reads one process on all the host's cores twice, seconds apart: the thread sweep's best (one process
// through its own buffer, cpu.optimizer_gparam_s_all_cores) and the rank curve's k = 1 (one worker process through
// the engine's path). On a steady host they agree within a few percent (two H200s' host: 6.169 and 6.085); one
// calibrate on that host read 5.771 and 2.168. Empty where they agree within `tolerance` of the larger, else what
// was read, in words.
inline constexpr double kHostRateTolerance = 0.15;
std::string host_rate_disagreement(double sweep_gparam_s, double rank_curve_one_gparam_s,
                                   double tolerance = kHostRateTolerance);

// What every rank runs.
struct CpuRankSetup {
  core::OptimizerKind kind = core::OptimizerKind::kAdamW;
  core::DType grad = core::DType::kBF16;
  core::DType copy = core::DType::kBF16;  // kNone: no copy
  // The CPU tuning knobs over the defaults (backend::cpu::apply_tuning_spec: "prefetch=2048,unroll=2";
  // "default": cpu_tuning.h's). huge=... is the group's (CpuRankGroup), not a setup's.
  std::string tuning = "default";
};

// Seconds per repetition: the node's (first start to last end over the ranks) and each rank's; for
// optimizer passes also each rank's ops (median over the repetitions, in the order they ran).
struct PassTimes {
  std::vector<double> node_s;
  std::vector<std::vector<double>> rank_s;  // [rank][repetition]
  std::vector<std::vector<double>> op_s;    // [rank][op]
};

// How a pass updates: in place (the engine's update of a layer) or out of place, each layer read from its
// current state slot and written to its other (the engine's speculative update into a speculated layer's
// spare slot, core/speculation.h; with streaming stores by default, cpu_tuning.h stream_out_of_place),
// which is current after the pass. The spare slot is allocated and placed at the first such pass.
enum class CpuUpdate { kInPlace, kOutOfPlace };

// k worker processes (this executable, `bench --cpu-rank-worker`), one per layout.
class CpuRankGroup {
 public:
  // threads: per rank, 0 for its share's cores; pin: bind each rank's threads to its CPUs. Starts the
  // workers and waits until each has its memory (untouched until the first setup). Throws
  // core::RuntimeFailure if one cannot start or dies. identical_pinning reproduces the engine before
  // the shares (for comparison): every rank sees the whole host and pins its cores / k threads to its
  // first CPUs, the same ones for all ranks.
  // huge_pages: the segments' regions ask for 2 MiB pages (cpu::HostRegion).
  CpuRankGroup(std::vector<RankLayout> layouts, size_t threads, bool pin, bool identical_pinning = false,
               bool huge_pages = backend::cpu::kCpuTuning.huge_pages);
  ~CpuRankGroup();  // stops the workers; never throws
  CpuRankGroup(const CpuRankGroup&) = delete;
  CpuRankGroup& operator=(const CpuRankGroup&) = delete;

  int ranks() const;
  int64_t elems() const;  // over all ranks
  // Each rank's CPUs ("0-7") and threads, as the workers report them.
  const std::vector<std::string>& rank_cpus() const;
  const std::vector<int>& rank_threads() const;

  // Every worker (re)builds its segment for this setup: the first setup places the pages (first touch
  // per layer by the threads that update it), then fills finite gradients and runs one warm-up pass.
  void setup(const CpuRankSetup& s);
  // Each rank's share of its process's anonymous memory in huge pages after the last setup
  // (/proc/self/smaps_rollup AnonHugePages / Anonymous; -1 where the kernel does not say).
  const std::vector<double>& huge_page_fraction() const;
  // Each rank also holds bytes_per_rank[rank] of host memory it never reads (0: none), allocated as its
  // segment is (cpu::HostRegion) and written once by its threads: the rest of a rank's planned pinned
  // memory beside its segment (staging, the speculated layers' spare slot), so that a pass is measured
  // with the node's host memory as full as the engine's (calibrate's footprint curve). After setup.
  void hold_resident(const std::vector<int64_t>& bytes_per_rank);
  // Every worker page-locks its segment and resident memory in place (cudaHostRegister, as the engine pins
  // its host buffers) after the pages were placed: the host's CPU rate on DMA-registered memory. Throws
  // core::RuntimeFailure where a worker cannot (no CUDA in this build, no device, the lock limit). After
  // setup; hold_resident's memory after it is registered by another call.
  void register_memory();
  // `reps` optimizer passes over every rank's layers, all ranks started together for each.
  PassTimes passes(int reps, CpuUpdate u = CpuUpdate::kInPlace);
  // One such pass: the node's Gparam/s (elements over all ranks / first start to last end).
  double pass_gparam_s(CpuUpdate u = CpuUpdate::kInPlace);
  // `reps` passes of the optimizer's traffic without its arithmetic (cpu::CpuBackend::stream_pass, the
  // setup's dtypes and tuning) over each rank's layers in its op order, all ranks together: the host's
  // read-modify-write bound for k processes with the optimizer's streams (4 read, 3 read-modify-write,
  // the copy write-only). The next optimizer pass refills the data.
  PassTimes bound_passes(int reps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The node's CPU optimizer rate now, measured as calibrate measures its rank curve
// (cpu.optimizer_node_gparam_s_by_ranks at `ranks`): `ranks` worker processes on rank_curve_ops segments of
// the engine op's size, three passes to warm up, then the median of ten (validate's host check, run's
// --host-probe). spawn_cpus: the CPUs the workers share out among themselves; a helper thread confined to
// them starts the workers, so a caller already confined to its own rank's share (an engine rank) still
// measures the whole host. Empty: the caller's own CPUs.
struct NodeCpuRate {
  int ranks = 0;
  double gparam_s = 0;                 // elements of all ranks over the node's pass time, Gparam/s
  std::vector<std::string> rank_cpus;  // each worker's CPUs, as it reported them
};
NodeCpuRate measure_node_cpu_rate(int64_t engine_op_elems, int ranks, std::span<const int> spawn_cpus = {});

// Host bytes a worker's segment holds per element: fp32 master, two states and the gradient (room for
// fp32), and the 16-bit copy.
inline constexpr int64_t kCpuRankBytesPerElem = 4 + 4 + 4 + 4 + 2;

// How a worker page-locks its host memory for the copy engines (the `register` command), as the engine
// pins its buffers: empty where this build has no CUDA (the command then fails, naming why).
struct HostPinning {
  std::function<bool(void*, size_t, std::string*)> pin;  // false with the reason
  std::function<void(void*)> unpin;
};

// The worker's side: reads commands from `in`, answers on `out` (exit status).
int run_cpu_rank_worker(std::istream& in, std::ostream& out, const HostPinning& pinning = {});

// The workers' data: cpu::CpuSegment::fill_measurement_data (finite, never subnormal, so no kernel takes a slow
// path). The worker's `digest` command answers the 64-bit FNV-1a of the segment's master, states and copy bytes,
// in that order (those of the current state slot: CpuUpdate).

}  // namespace tf::app
