// `twinflow run`'s overlap figures (see run_overlap.h).
#include "apps/twinflow/run_overlap.h"

#include <algorithm>

#include "core/optim/optimizer.h"

namespace tf::app {

OverlapFigures overlap_figures(const backend::StepTimeline& t, const core::StepConfig& cfg, int64_t cpu_elems,
                               const core::CpuProfile& cpu, int ranks_per_host) {
  OverlapFigures f;
  f.overlap_fraction = t.cpu_overlap_fraction();
  f.gpu_work_ms = double(t.busy_ns[size_t(core::Queue::kCompute)]) / 1e6;
  const double bytes =
      double(cpu_elems) * double(core::bytes_per_element(cfg.optimizer, cfg.grad_dtype, cfg.param_dtype).total());
  const double gbps = cpu.mem_gbps / double(std::max(1, ranks_per_host));  // GB/s = bytes per ns
  f.cpu_pass_bound_ms = gbps > 0 ? bytes / gbps / 1e6 : 0.0;
  f.bound_ms = std::max(f.gpu_work_ms, f.cpu_pass_bound_ms);
  return f;
}

}  // namespace tf::app
