// Per-rank memory accounting and the feasible ratio range.
#include "core/memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace tf::core {

std::string format_gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", double(bytes) / 1e9);
  return buf;
}

RankMemory rank_memory(const ModelDesc& model, const Partition& part, const RankShard& shard,
                       const TwinFlowSplit& split, const MemoryOptions& opt) {
  RankMemory m;
  const int64_t lp = opt.lp_bytes;
  const int64_t fp32_arrays = 1 + opt.optimizer_states;
  const int stage = part.opt.stage;
  m.gpu_params = (stage == 3 ? shard.elems : part.total_params) * lp;
  m.gpu_grads = stage >= 2 ? shard.elems * lp + (opt.grad_accum > 1 ? shard.elems * 4 : 0) : part.total_params * lp;
  m.gpu_optimizer = split.gpu_elems * 4 * fp32_arrays;
  int64_t act_ckpt = 0, act_full = 0, act_max_layer = 0;
  for (const LayerDesc& l : model.layers) {
    const ActivationBytes a = activation_bytes(model, l, opt.micro_batch, int(lp));
    act_full += a.full;
    act_ckpt += a.checkpointed;
    act_max_layer = std::max(act_max_layer, a.full);
  }
  // With checkpointing, backward recomputes one block at a time on top of the kept block inputs.
  m.gpu_activations = opt.checkpointing ? act_ckpt + act_max_layer : act_full;
  int64_t padded_layer = part.max_layer_params;
  for (int64_t s : part.layer_slice) padded_layer = std::max(padded_layer, s * part.opt.world);
  const int64_t layer_bytes = padded_layer * lp;
  // stage 3: two full-layer gradient buffers (backward writes one while the reduce-scatter reads the
  // other); with more than one rank also the gathered layers (prefetch) and two receive buffers of
  // the deterministic reduce-scatter (all-to-all, then a sum in rank order). One rank computes on its
  // shard directly. Stages 1/2: two gradient buckets of one layer each.
  m.gpu_comm = stage == 3 ? (2 + (part.opt.world > 1 ? opt.prefetch_layers + 2 : 0)) * layer_bytes : 2 * layer_bytes;
  m.gpu_workspace = opt.workspace_bytes;
  m.gpu_total = m.gpu_params + m.gpu_grads + m.gpu_optimizer + m.gpu_activations + m.gpu_comm + m.gpu_workspace;
  m.host_optimizer = split.cpu_elems * 4 * fp32_arrays;
  m.host_staging = split.cpu_elems * lp * 2;
  m.host_total = m.host_optimizer + m.host_staging;
  return m;
}

namespace {
// The largest shard decides (the last rank carries the most padding only in real terms; sizes are
// equal across ranks by construction, but be general).
const RankShard& largest(const Partition& part) {
  return *std::max_element(part.ranks.begin(), part.ranks.end(),
                           [](const RankShard& a, const RankShard& b) { return a.elems < b.elems; });
}

std::string breakdown(const RankMemory& m) {
  std::ostringstream os;
  os << "params " << format_gb(m.gpu_params) << " + grads " << format_gb(m.gpu_grads) << " + optimizer "
     << format_gb(m.gpu_optimizer) << " + activations " << format_gb(m.gpu_activations) << " + comm buffers "
     << format_gb(m.gpu_comm) << " + workspace " << format_gb(m.gpu_workspace);
  return os.str();
}
}  // namespace

RatioRange feasible_ratios(const ModelDesc& model, const Partition& part, const MemoryOptions& opt,
                           int64_t gpu_bytes_per_rank, int64_t host_bytes_per_rank) {
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

void check_ratio_fits(const ModelDesc& model, const Partition& part, const MemoryOptions& opt, double ratio,
                      int64_t gpu_bytes_per_rank, int64_t host_bytes_per_rank) {
  const RankShard& shard = largest(part);
  const TwinFlowSplit split = split_shard(shard, ratio, part.opt.align_elems);
  const RankMemory m = rank_memory(model, part, shard, split, opt);
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
