// `ratio: auto`: the ratio with the shortest predicted step among those that fit in memory, from the
// memory model (core::check_fit, the allocation plan's sums) and the cost-only simulator (simulate_step).
// It lives here, not in core/, because it runs the simulator (the core never includes sim headers), and
// both `twinflow run` and `twinflow simulate` link this library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/hardware.h"
#include "core/memory.h"
#include "core/scenario.h"

namespace tf::backend::sim {

// One evaluated ratio.
struct RatioPoint {
  double requested = 0;                   // as asked of the simulator (and of the engine: it gives the same split)
  double ratio = 0;                       // the split's actual ratio (element-granular, 2048-element units)
  int64_t step_ns = 0;                    // the step compared (predicted_step: the slower of the two below)
  int64_t held_ns = 0;                    // the step with its speculation holding (the slowest rank)
  int64_t after_clip_ns = 0;              // the step after a clipped one (no speculation); 0: not simulated
  int64_t gpu_bytes = 0, host_bytes = 0;  // per rank, the allocation plan's (largest shard)
};

struct AutoRatio {
  double ratio = 0;  // the chosen ratio, as requested (its split: actual_ratio)
  double actual_ratio = 0;
  int64_t step_ns = 0;             // its predicted step
  core::RatioRange range;          // the ratios that fit with the GPU headroom kept free (core::check_fit)
  int64_t gpu_headroom_bytes = 0;  // that headroom (training.gpu_headroom of the profile's GPU)
  std::vector<RatioPoint> table;   // every evaluated point, ascending ratio
  std::string profile;             // the hardware profile's name
  std::string why;  // "ratio 0.35: smallest that fits is 0.22 (1.1 GB of the GPU kept free: ...), fastest ..."
};

// The search: a grid of `grid_points` ratios spread evenly over the feasible range (ends included), then
// `refine_rounds` rounds of 9 more points between the best point's neighbours, each round 5x finer, and
// none finer than one 2048-element unit of the largest shard. A grid rather than golden-section search:
// the predicted step is not unimodal in the ratio (it is flat where the CPU half hides behind backward and
// steps where a layer's CPU part changes), and the simulator is fast (milliseconds a point for our models).
// Equal predictions go to the smaller ratio (less pinned memory and PCIe traffic).
struct AutoRatioOptions {
  SimOptions sim;  // the simulated world and grad_accum; memory counts overrides.workload when given
                   // (`run`'s workload), else the model trained for real (as simulate_step does)
  int grid_points = 41;
  int refine_rounds = 3;
  // Simulations at once (each point is independent; the result does not depend on it): 0 takes
  // simulation_threads' default (backends/sim/parallel.h).
  int threads = 0;
};

// The step time `ratio: auto` compares at ratio `r`: the simulator's (simulate_step with opt.sim), and where
// that assumes the speculation holds (SpeculationCase::kHolds), the slower of it and the step after a
// clipped one (kNotSpeculating): a ratio must pay off whether or not the run's steps clip (measured on one
// H100 with every step clipping, bench/results/2026-11-24-auto-sweep-h100: the choice that assumed
// speculation held ran 1.28-1.32x the best ratio). Memory and fit are simulate_step's.
SimPoint predicted_step(const core::Scenario& s, double r, const SimOptions& opt = {});
// The same, with both cases' steps: `point.step_ns` is the one compared, `held_ns` the step with the speculation
// holding (opt.speculation's case where that is not kHolds) and `after_clip_ns` the step after a clipped one (0
// where opt.speculation is not kHolds).
struct RatioPrediction {
  SimPoint point;
  int64_t held_ns = 0, after_clip_ns = 0;
};
RatioPrediction predict_ratio(const core::Scenario& s, double r, const SimOptions& opt = {});

// Throws core::InputError when no ratio fits: by how much and at which ratio (core::check_fit), and the
// changes that would fit (core::fit_suggestions).
AutoRatio choose_ratio(const core::Scenario& s, const AutoRatioOptions& opt = {});

// `s` with `ratio` in place of `auto` (zero.offload_optimizer.ratio).
core::Scenario with_ratio(const core::Scenario& s, double ratio);

// The figures `auto` rests on that `twinflow calibrate` measures and `p` lacks (empty: none):
// gpu.bf16_gemm_tflops_by_shape, gpu.optimizer_gbps, cpu.optimizer_gparam_s_by_threads.
std::vector<std::string> missing_calibration(const core::HardwareProfile& p);
// What to do about them: the built-in profiles that have them, and how to make one with calibrate.
std::string calibration_hint(const core::HardwareProfile& p);

}  // namespace tf::backend::sim
