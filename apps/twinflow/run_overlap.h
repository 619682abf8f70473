// `twinflow run`'s overlap figures: how much of a step's CPU optimizer pass ran while the GPU computed
// (from the step's timeline), beside the step time no schedule can beat, max(GPU work, CPU pass at the
// host's memory bandwidth).
#pragma once

#include <cstdint>

#include "backends/backend.h"
#include "core/hardware.h"
#include "core/step.h"

namespace tf::app {

struct OverlapFigures {
  double overlap_fraction = 0;   // StepTimeline::cpu_overlap_fraction: the CPU pass's share hidden by compute
  double gpu_work_ms = 0;        // the compute queue's busy time (forward, backward, statistics, GPU optimizer)
  double cpu_pass_bound_ms = 0;  // the CPU segment's optimizer bytes (core::bytes_per_element) at the host's
                                 // read-modify-write bandwidth (the profile's cpu.mem_gbps) shared by its ranks
  double bound_ms = 0;           // max(gpu_work_ms, cpu_pass_bound_ms)
};

// Of one step of `t` on a rank whose CPU segment holds `cpu_elems` elements, with `cfg`'s optimizer and
// dtypes, on a host of `cpu` shared by `ranks_per_host` ranks.
OverlapFigures overlap_figures(const backend::StepTimeline& t, const core::StepConfig& cfg, int64_t cpu_elems,
                               const core::CpuProfile& cpu, int ranks_per_host);

}  // namespace tf::app
