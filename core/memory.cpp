// Per-rank memory accounting and the feasible ratio range.
#include "core/memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "core/error.h"

namespace tf::core {

std::string format_gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", double(bytes) / 1e9);
  return buf;
}

std::string unnamed_gpu_text(const AllocPlan& plan) {
  const auto bytes_of = [&](std::string_view name) { return plan.has(name) ? plan.at(name).bytes : int64_t(0); };
  std::string t = "unnamed GPU memory " + format_gb(plan.bytes(MemPlace::kGpu, MemKind::kContext)) +
                  ": CUDA context and libraries " + format_gb(bytes_of(buf::kContext)) +
                  (plan.context_measured ? " (measured)" : " (estimate: the profile has no gpu.context_bytes)");
  if (plan.has(buf::kAllocRounding)) t += ", allocation rounding " + format_gb(bytes_of(buf::kAllocRounding));
  if (plan.has(buf::kPinnedHostMap)) t += ", pinned-host mapping " + format_gb(bytes_of(buf::kPinnedHostMap));
  return t;
}

int64_t margin_bytes(const MemoryMargin& m, int64_t total_bytes) {
  return std::max(m.bytes, int64_t(std::floor(m.fraction * double(std::max<int64_t>(total_bytes, 0)))));
}

std::string margin_text(const MemoryMargin& m) {
  const auto bytes = [](int64_t b) {
    for (const auto& [unit, size] : {std::pair{"TiB", int64_t(1) << 40}, std::pair{"GiB", int64_t(1) << 30},
                                     std::pair{"MiB", int64_t(1) << 20}, std::pair{"KiB", int64_t(1) << 10}})
      if (b >= size && b % size == 0) return std::to_string(b / size) + " " + unit;
    return std::to_string(b) + " B";
  };
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.4g%%", m.fraction * 100);
  if (m.fraction == 0) return bytes(m.bytes);
  if (m.bytes == 0) return pct;
  return "max(" + bytes(m.bytes) + ", " + pct + ")";
}

int64_t pinnable_host_bytes_per_rank(int64_t host_bytes, int local_ranks, const MemoryMargin& reserve) {
  if (local_ranks < 1) throw std::invalid_argument("pinnable_host_bytes_per_rank: local_ranks must be >= 1");
  return std::max<int64_t>(0, host_bytes - margin_bytes(reserve, host_bytes)) / local_ranks;
}

std::string headroom_warning(double ratio, int64_t gpu_planned_bytes, int64_t gpu_bytes, int64_t headroom_bytes) {
  if (gpu_planned_bytes + headroom_bytes <= gpu_bytes) return {};
  char r[32];
  std::snprintf(r, sizeof r, "%.3g", ratio);
  return std::string("ratio ") + r + " leaves " + format_gb(std::max<int64_t>(0, gpu_bytes - gpu_planned_bytes)) +
         " of the GPU beyond the allocation plan (" + format_gb(gpu_planned_bytes) + " of " + format_gb(gpu_bytes) +
         "), less than training.gpu_headroom (" + format_gb(headroom_bytes) +
         "): allocator fragmentation or a library's late allocation may run out of GPU memory; `ratio: auto` keeps "
         "the headroom";
}

RankMemory sum_by_kind(const AllocPlan& plan) {
  RankMemory m;
  for (const BufferSpec& b : plan.buffers) {
    int64_t* term = nullptr;
    if (b.place == MemPlace::kGpu) {
      switch (b.kind) {
        case MemKind::kParams: term = &m.gpu_params; break;
        case MemKind::kGrads: term = &m.gpu_grads; break;
        case MemKind::kOptimizer: term = &m.gpu_optimizer; break;
        case MemKind::kActivations: term = &m.gpu_activations; break;
        case MemKind::kComm: term = &m.gpu_comm; break;
        case MemKind::kWorkspace: term = &m.gpu_workspace; break;
        case MemKind::kContext: term = &m.gpu_context; break;
        case MemKind::kStaging: break;
      }
      if (term) m.gpu_total += b.bytes;
    } else {
      switch (b.kind) {
        case MemKind::kOptimizer: term = &m.host_optimizer; break;
        case MemKind::kStaging: term = &m.host_staging; break;
        case MemKind::kWorkspace: term = &m.host_workspace; break;
        default: break;
      }
      if (term) m.host_total += b.bytes;
    }
    if (!term)
      throw std::logic_error("sum_by_kind: buffer " + b.name + " of kind " + mem_kind_name(b.kind) +
                             " has no memory term in its place");
    *term += b.bytes;
  }
  return m;
}

HostBytesPerParam host_bytes_per_cpu_param(const AllocPlan& plan, int64_t cpu_elems) {
  HostBytesPerParam b;
  if (cpu_elems <= 0) return b;
  const auto bytes_of = [&](std::string_view name) { return plan.has(name) ? double(plan.at(name).bytes) : 0.0; };
  b.optimizer =
      (bytes_of(buf::kHostMaster) + bytes_of(buf::kHostState1) + bytes_of(buf::kHostState2)) / double(cpu_elems);
  b.spare = (bytes_of(buf::kHostMasterSpare) + bytes_of(buf::kHostState1Spare) + bytes_of(buf::kHostState2Spare)) /
            double(cpu_elems);
  b.staging = (bytes_of(buf::kHostGrad) + bytes_of(buf::kHostCopy)) / double(cpu_elems);
  return b;
}

std::string staging_choice_text(const StagingChoice& c) {
  const std::string what =
      c.slots == kUnboundedStaging ? std::string("full-size") : "rings of " + std::to_string(c.slots) + " slots";
  std::string why = "as set";
  if (c.automatic && c.host_bytes_per_rank <= 0)
    why = "the host's memory is not known";
  else if (c.automatic && c.slots == kUnboundedStaging)
    why = "the host holds it: " + format_gb(c.full_size_host_bytes) + " of " + format_gb(c.host_bytes_per_rank);
  else if (c.automatic)
    why = "full-size staging would need " + format_gb(c.full_size_host_bytes) + " of host memory, the host has " +
          format_gb(c.host_bytes_per_rank);
  return "host staging: " + what + " (" + why + ")";
}

RankMemory rank_memory(const ModelDesc& model, const Partition& part, const RankShard& shard,
                       const TwinFlowSplit& split, const MemoryOptions& opt) {
  return sum_by_kind(plan_allocations(model, part, shard, split, opt));
}

namespace {
// The largest shard decides (the last rank carries the most padding only in real terms; sizes are
// equal across ranks by construction, but be general).
const RankShard& largest(const Partition& part) {
  return *std::max_element(part.ranks.begin(), part.ranks.end(),
                           [](const RankShard& a, const RankShard& b) { return a.elems < b.elems; });
}

// `speculation: max` (auto's ceiling) fills what the host has beyond the plan (core::resolve_speculation_bytes):
// checked against the limit it is checked with, it never makes a ratio not fit; an explicit budget may.
MemoryOptions with_host_limit(MemoryOptions opt, int64_t host_bytes_per_rank) {
  opt.host_bytes_per_rank = host_bytes_per_rank;
  return opt;
}

std::string breakdown(const RankMemory& m) {
  std::ostringstream os;
  os << "params " << format_gb(m.gpu_params) << " + grads " << format_gb(m.gpu_grads) << " + optimizer "
     << format_gb(m.gpu_optimizer) << " + activations " << format_gb(m.gpu_activations) << " + comm buffers "
     << format_gb(m.gpu_comm) << " + workspace " << format_gb(m.gpu_workspace)
     << " + unnamed (CUDA context and libraries, allocation rounding, pinned-host mapping) "
     << format_gb(m.gpu_context);
  return os.str();
}
}  // namespace

RatioRange feasible_ratios(const ModelDesc& model, const Partition& part, const MemoryOptions& options,
                           int64_t gpu_bytes_per_rank, int64_t host_bytes_per_rank) {
  const MemoryOptions opt = with_host_limit(options, host_bytes_per_rank);
  RatioRange r;
  const RankShard& shard = largest(part);
  const int64_t align = part.opt.align_elems;
  const int64_t units = (shard.elems + align - 1) / align;
  auto mem_at = [&](int64_t cpu_units) {
    const double ratio = shard.elems ? std::min(1.0, double(cpu_units * align) / double(shard.elems)) : 0.0;
    return std::make_pair(ratio, rank_memory(model, part, shard, split_shard(shard, ratio, align), opt));
  };
  // GPU bytes fall with cpu_units: binary search the first that fits; host bytes rise: the last.
  auto gpu_fits = [&](int64_t u) { return mem_at(u).second.gpu_total <= gpu_bytes_per_rank; };
  auto host_fits = [&](int64_t u) { return mem_at(u).second.host_total <= host_bytes_per_rank; };
  int64_t lo = 0, hi = units + 1;  // first u in [0, units] with gpu_fits, or units+1
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (gpu_fits(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  const int64_t first_gpu = lo;
  lo = -1, hi = units;  // last u in [0, units] with host_fits, or -1
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (host_fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t last_host = lo;
  if (first_gpu > units) {
    const RankMemory m = mem_at(units).second;
    r.why = "even ratio 1 needs " + format_gb(m.gpu_total) + " on each GPU (" + breakdown(m) + ") but a GPU has " +
            format_gb(gpu_bytes_per_rank) +
            "; use more GPUs, a higher ZeRO stage, activation checkpointing or a "
            "smaller micro-batch";
    return r;
  }
  if (last_host < first_gpu) {
    const auto [ratio, m] = mem_at(first_gpu);
    char rbuf[32];
    std::snprintf(rbuf, sizeof rbuf, "%.3f", ratio);
    r.why = std::string("the smallest ratio that fits the GPU, ") + rbuf + ", needs " + format_gb(m.host_total) +
            " of pinned host memory per rank but a rank has " + format_gb(host_bytes_per_rank);
    return r;
  }
  r.feasible = true;
  r.min_ratio = mem_at(first_gpu).first;
  r.max_ratio = mem_at(last_host).first;
  return r;
}

RankMemory rank_memory_at(const ModelDesc& model, const Partition& part, const MemoryOptions& opt, double ratio) {
  const RankShard& shard = largest(part);
  return rank_memory(model, part, shard, split_shard(shard, ratio, part.opt.align_elems), opt);
}

void check_ratio_fits(const ModelDesc& model, const Partition& part, const MemoryOptions& options, double ratio,
                      int64_t gpu_bytes_per_rank, int64_t host_bytes_per_rank) {
  const MemoryOptions opt = with_host_limit(options, host_bytes_per_rank);
  const RankMemory m = rank_memory_at(model, part, opt, ratio);
  if (m.gpu_total <= gpu_bytes_per_rank && m.host_total <= host_bytes_per_rank) return;
  const RatioRange range = feasible_ratios(model, part, opt, gpu_bytes_per_rank, host_bytes_per_rank);
  std::ostringstream os;
  os.precision(3);
  os << "ratio " << ratio << " does not fit: ";
  if (m.gpu_total > gpu_bytes_per_rank)
    os << "it needs " << format_gb(m.gpu_total) << " on each GPU (" << breakdown(m) << ") but a GPU has "
       << format_gb(gpu_bytes_per_rank);
  else
    os << "it needs " << format_gb(m.host_total) << " of pinned host memory per rank but a rank has "
       << format_gb(host_bytes_per_rank);
  if (range.feasible)
    os << "; the ratios that fit are [" << range.min_ratio << ", " << range.max_ratio << "]";
  else
    os << "; no ratio fits: " << range.why;
  throw InputError(os.str());
}

}  // namespace tf::core
