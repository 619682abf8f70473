// `twinflow run`'s overlap figures: how much of a step's CPU optimizer pass ran while the GPU computed
// (from the step's timeline), beside the step time no schedule can beat (docs/ARCHITECTURE.md, "What it
// hides, and what it cannot").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/hardware.h"
#include "core/step.h"

namespace tf::app {

struct OverlapFigures {
  double overlap_fraction = 0;   // StepTimeline::cpu_overlap_fraction: the CPU pass's share hidden by compute
  double gpu_work_ms = 0;        // the compute queue's busy time (forward, backward, statistics, GPU optimizer)
  double cpu_pass_bound_ms = 0;  // the CPU segment's optimizer bytes (core::bytes_per_element) at the host's
                                 // read-modify-write bandwidth (the profile's cpu.mem_gbps) shared by its ranks
  double free_bound_ms = 0;      // max(gpu_work_ms, cpu_pass_bound_ms): the bound when no update waits
  // The CPU elements whose update waited for the gradient norm or overflow flag in this step (all of the
  // CPU segment's when the step clipped or scaled and did not speculate or its speculation failed; those
  // of the layers that did not speculate when it held; none without clipping or loss scaling), at the
  // same bandwidth.
  double waited_pass_bound_ms = 0;
  // The bound of the schedule the step ran: max(free_bound_ms, backward + waited_pass_bound_ms). An
  // update that waits for the norm starts after the last backward op, and the next step's backward needs
  // every CPU layer's new parameters (its forward reads them), so a period holds both in a row.
  double bound_ms = 0;
};

// The CPU elements of a step whose update waited for the norm (OverlapFigures::waited_pass_bound_ms):
// `cpu_elems` in the CPU segment, `speculated_elems` of them in the speculated layers (core::spare_range).
int64_t norm_waited_elems(const core::StepConfig& cfg, int64_t cpu_elems, int64_t speculated_elems, bool speculated,
                          bool speculation_held, bool skipped);

// Of one step of `t` on a rank whose CPU segment holds `cpu_elems` elements, `waited_elems` of which
// waited for the norm, with `cfg`'s optimizer and dtypes, on a host of `cpu` shared by `ranks_per_host`
// ranks.
OverlapFigures overlap_figures(const backend::StepTimeline& t, const core::StepConfig& cfg, int64_t cpu_elems,
                               int64_t waited_elems, const core::CpuProfile& cpu, int ranks_per_host);

// One steady step as the clip note reads it: whether it clipped (core::StepDecision::clipped) and its norm.
struct ClipSample {
  bool clipped = false;
  double grad_norm = 0;
};
// Why a point's CPU half did not hide behind backward when its steady steps clipped: in a step that clips,
// and in the step after it, every CPU update waits for the gradient norm (docs/ARCHITECTURE.md,
// "Speculation"). One line naming the ratio, how many of the steady steps clipped and their norms; empty
// where none clipped or the point has no CPU segment (`has_cpu_segment` false).
std::string clip_note(double ratio, bool has_cpu_segment, const std::vector<ClipSample>& steady);

}  // namespace tf::app
