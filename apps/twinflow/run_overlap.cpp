// `twinflow run`'s overlap figures (see run_overlap.h).
#include "apps/twinflow/run_overlap.h"

#include <algorithm>
#include <cstdio>
#include <limits>

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

std::string clip_note(double ratio, bool has_cpu_segment, const std::vector<ClipSample>& steady) {
  size_t clipped = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const ClipSample& s : steady) {
    if (!s.clipped) continue;
    ++clipped;
    lo = std::min(lo, s.grad_norm);
    hi = std::max(hi, s.grad_norm);
  }
  if (clipped == 0 || !has_cpu_segment) return "";
  char norms[64];
  if (hi > lo)
    std::snprintf(norms, sizeof norms, "%.3g-%.3g", lo, hi);
  else
    std::snprintf(norms, sizeof norms, "%.3g", lo);
  char head[96];
  std::snprintf(head, sizeof head, "ratio %.3f: %zu of %zu steady steps clipped (gradient norm ", ratio, clipped,
                steady.size());
  return std::string(head) + norms +
         " over the clip): in a step that clips, and in the step after it, the CPU half updates after the gradient "
         "norm, which follows backward, so it cannot hide behind backward (docs/ARCHITECTURE.md, \"Speculation\"); "
         "in steps that do not clip it can";
}

}  // namespace tf::app
