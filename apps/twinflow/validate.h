// `twinflow validate`: a measured ratio sweep (twinflow run --json) against the simulator on the same
// points, per point and per phase, with the error of each and the sweep's MAPE.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/scenario.h"
#include "core/step.h"

namespace tf::app {

// One ratio of a measured sweep, as `twinflow run --json` wrote it (rank 0).
struct MeasuredPoint {
  double ratio = 0;         // requested
  double actual_ratio = 0;  // the engine's split
  struct Step {
    int step = 0;
    int64_t step_ns = 0;
    int64_t optimizer_phase_ns = 0;
    std::array<int64_t, core::kOpKindCount> kind_ns{};
    bool speculated = false;        // the CPU optimizer speculated (false where the run predates speculation)
    bool speculation_held = false;  // ... and the speculation held
    // The GPU's SM clock during the step (run --json's gpu.sm_mhz_median, metrics/gpu_telemetry.h); NaN where
    // the run did not read it.
    double sm_mhz = std::numeric_limits<double>::quiet_NaN();
  };
  std::vector<Step> steps;
  int64_t speculation_bytes = 0;  // the budget the run planned with (0 where the run predates speculation)
  // The cap on its speculated layers (run --json's speculation_layers: the cost model's count where
  // training.speculation was auto); every eligible layer where the run predates it.
  int speculation_layers = core::kEveryEligibleLayer;
  bool carry_tail = false;  // the run carried its tail into the next step (false where it predates that)
  // Its CPU passes after the norm with staging rings (run --json's ring_order): backward where the run
  // predates core::StepConfig::ring_forward_order.
  bool ring_forward_order = false;
  // The host staging the run planned with (core::StagingChoice::slots); none where the run predates
  // `staging_slots: auto` (validate then resolves auto against the profile's host memory).
  std::optional<int> staging_slots;
  // The speculated CPU passes' order the run planned with (run --json's cpu_order); today's order (every
  // pass in arrival order) where the run predates it.
  core::CpuPassOrder cpu_order;
  // GPU bytes the process held after step 1 (cudaMemGetInfo: total - free; the run's
  // memory_check.gpu_measured); none where the run did not record it.
  std::optional<int64_t> gpu_measured_bytes;
  // The node's CPU optimizer rate measured right before the point and right after it, every rank idle
  // (`run --host-probe`: calibrate's rank-curve measurement with `ranks` processes); none where the run did
  // not probe. validate re-simulates the point with the profile's CPU rates scaled to their mean.
  struct HostProbe {
    int ranks = 0;
    double before_gparam_s = 0, after_gparam_s = 0;
    double mean_gparam_s() const { return 0.5 * (before_gparam_s + after_gparam_s); }
  };
  std::optional<HostProbe> host_probe;
  // The node's CPU optimizer rate over the run's own pages, measured by the point's engine before its first
  // step with every rank at once (`run --pages-probe`: cpu::CpuSegment::zero_pass); none where the run did not
  // probe or the point has no CPU part. validate re-simulates the point with the profile's CPU rates scaled
  // to it.
  struct PagesProbe {
    int ranks = 0;
    double node_gparam_s = 0;
  };
  std::optional<PagesProbe> pages_probe;
};

struct MeasuredSweep {
  std::string file;  // where it was read from (for messages)
  std::string scenario, gpu, workload;
  int world = 1;
  int threads = 0;     // the CPU optimizer's threads per rank
  int grad_accum = 0;  // 0: not recorded (the scenario's then)
  int64_t params = 0;
  int64_t tokens_per_step = 0;  // all ranks' tokens of a step (a decoder's run); 0: not recorded
  std::vector<MeasuredPoint> points;
};

// Parses a `twinflow run --json` document. Throws core::InputError "FILE: key.path: what was wrong"
// for a missing or mistyped field, a value out of its range (with the value: never wrapped or cut),
// and a point without steady steps.
MeasuredSweep parse_measured_sweep(const std::string& json_text, const std::string& file);
// Reads a regular file of at most kMaxMeasuredBytes (a FIFO, a device or a larger file is an InputError).
inline constexpr size_t kMaxMeasuredBytes = size_t(64) << 20;
MeasuredSweep load_measured_sweep(const std::string& file);

// Median of a point's compared steps and their spread (max - min) / median: its steady steps
// (steady_steps.h: not the first, which pays for first-touch and cuBLAS/NCCL set-up, nor a carried run's
// second and drained last) in the case it is simulated in (speculation_case), and, where the run carried
// its tail, after a step of that case too (a period holds the previous step's tail: docs/ARCHITECTURE.md,
// "Validation").
struct SteadyStat {
  double median_ms = 0;
  double spread = 0;
  int steps = 0;
};
SteadyStat steady_step_ms(const MeasuredPoint& p);

// The speculation case most of a point's steady steps were in (ties: held, then failed). A run from before
// speculation has speculation_bytes 0: its plan has no speculative ops, whatever the case.
backend::sim::SpeculationCase speculation_case(const MeasuredPoint& p);

// Per point: the measured median and the simulated step, and the same for the phases that explain a
// difference: fwd+bwd (summed op time on the compute stream), the optimizer phase (end of the last
// backward to the end of the step), and the CPU optimizer (passes and commits), D2H and H2D op time.
struct ValidationRow {
  double ratio = 0, actual_ratio = 0;
  SteadyStat measured;
  double simulated_ms = 0;
  double error_pct = 0;  // (simulated - measured) / measured x 100
  double meas_compute_ms = 0, sim_compute_ms = 0;
  double meas_opt_phase_ms = 0, sim_opt_phase_ms = 0;
  double meas_cpu_opt_ms = 0, sim_cpu_opt_ms = 0;
  double meas_d2h_ms = 0, sim_d2h_ms = 0;
  double meas_h2d_ms = 0, sim_h2d_ms = 0;
  // Peak GPU memory: measured after step 1 against the memory model's (SimPoint::memory.gpu_total), GB;
  // has_memory false where the run did not record it.
  bool has_memory = false;
  double meas_gpu_gb = 0, sim_gpu_gb = 0;
  double gpu_error_pct = 0;  // (simulated - measured) / measured x 100
  // With the run's host probes (MeasuredPoint::host_probe) and a profile with a rank curve: the host's
  // CPU rate around the point against the profile's (probes' mean / optimizer_node_gparam_s(ranks) - 1, %),
  // and the point simulated with the profile's CPU rates scaled by that (CpuProfile::with_rates_scaled).
  // has_host false otherwise.
  bool has_host = false;
  double host_moved_pct = 0;
  double host_tracked_ms = 0, host_tracked_error_pct = 0;
  // The same with the run's own pages (MeasuredPoint::pages_probe): their node rate against the profile's,
  // and the point simulated with the profile's CPU rates scaled by that. has_pages false otherwise.
  bool has_pages = false;
  double pages_pct = 0;
  double pages_tracked_ms = 0, pages_tracked_error_pct = 0;
  // The GPU's SM clock over the compared steps (the median of their medians); NaN where the run has none.
  double meas_sm_mhz = std::numeric_limits<double>::quiet_NaN();
};

// Mean and worst absolute percentage error over a sweep's points.
struct ErrorSummary {
  double mape_pct = 0;   // mean |error|
  double worst_pct = 0;  // largest |error|
  double worst_ratio = 0;
  int points = 0;
};

struct Validation {
  std::vector<ValidationRow> rows;
  double mape_pct = 0;   // mean |error_pct|
  double worst_pct = 0;  // largest |error_pct|
  double worst_ratio = 0;
  ErrorSummary memory;  // of gpu_error_pct over the rows that have it (points 0: none)
  // Of host_tracked_error_pct over the rows that have it (points 0: none): the error left once the host's drift
  // in time is measured (a probe's fresh allocation, not the run's own pages: docs/ARCHITECTURE.md,
  // "Validation"). Not the goal, which holds the profile as calibrated: a diagnosis.
  ErrorSummary host_tracked;
  // Of pages_tracked_error_pct over the rows that have it (points 0: none): the error left once the rate of
  // the pages the run got is measured (docs/ARCHITECTURE.md, "Validation"). Not the goal either: a diagnosis
  // of what the profile, measured on other pages, cannot know.
  ErrorSummary pages_tracked;
};

// Simulates every measured point on `sc` (whose cluster.hardware is the profile to validate) with the
// run's world size, CPU threads and speculation budget, in the speculation case most of its steady steps
// were in (held, failed, or not speculating). Throws core::InputError when the sweep has no points, or when the
// simulator's split of a ratio differs from the engine's (they would not be the same point).
Validation validate_sweep(core::Scenario sc, const MeasuredSweep& m);

}  // namespace tf::app
