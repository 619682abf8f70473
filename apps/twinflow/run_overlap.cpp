// `twinflow run`'s overlap figures (see run_overlap.h).
#include "apps/twinflow/run_overlap.h"

#include <algorithm>

#include "core/optim/optimizer.h"

namespace tf::app {

int64_t norm_waited_elems(const core::StepConfig& cfg, int64_t cpu_elems, int64_t speculated_elems, bool speculated,
                          bool speculation_held, bool skipped) {
  if (!(cfg.clip_gradients || cfg.loss_scaling) || skipped) return 0;  // a skipped step updates nothing
  return speculated && speculation_held ? cpu_elems - speculated_elems : cpu_elems;
}

OverlapFigures overlap_figures(const backend::StepTimeline& t, const core::StepConfig& cfg, int64_t cpu_elems,
                               int64_t waited_elems, const core::CpuProfile& cpu, int ranks_per_host) {
  OverlapFigures f;
  f.overlap_fraction = t.cpu_overlap_fraction();
  f.gpu_work_ms = double(t.busy_ns[size_t(core::Queue::kCompute)]) / 1e6;
  const double bytes_per_elem = double(core::bytes_per_element(cfg.optimizer, cfg.grad_dtype, cfg.param_dtype).total());
  const double gbps = cpu.mem_gbps / double(std::max(1, ranks_per_host));  // GB/s = bytes per ns
  const auto at_bandwidth_ms = [&](int64_t elems) {
    return gbps > 0 ? double(elems) * bytes_per_elem / gbps / 1e6 : 0.0;
  };
  f.cpu_pass_bound_ms = at_bandwidth_ms(cpu_elems);
  f.waited_pass_bound_ms = at_bandwidth_ms(waited_elems);
  f.free_bound_ms = std::max(f.gpu_work_ms, f.cpu_pass_bound_ms);
  const double backward_ms = double(t.kind_ns[size_t(core::OpKind::kBackward)]) / 1e6;
  f.bound_ms =
      f.waited_pass_bound_ms > 0 ? std::max(f.free_bound_ms, backward_ms + f.waited_pass_bound_ms) : f.free_bound_ms;
  return f;
}

}  // namespace tf::app
