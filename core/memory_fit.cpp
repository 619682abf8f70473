// What fits on a machine by the memory model: budgets, shortfalls, changes that fit, the largest preset.
#include "core/memory_fit.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/error.h"

namespace tf::core {

RankBudget rank_budget(const Scenario& s, int ranks_per_node) {
  const HardwareProfile& hw = s.cluster.hardware;
  return {hw.gpu.hbm_bytes, pinnable_host_bytes_per_rank(hw.host_memory_bytes, ranks_per_node, s.training.host_reserve),
          margin_bytes(s.training.gpu_headroom, hw.gpu.hbm_bytes),
          margin_bytes(s.training.host_reserve, hw.host_memory_bytes)};
}

std::string format_ratio(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", r);
  return b;
}

std::string ratio_range_text(const RatioRange& r) {
  std::string t(1, '[');  // appended piecewise: GCC 12's -Wrestrict misfires on "[" + std::string
  t += format_ratio(r.min_ratio);
  t += ", ";
  t += format_ratio(r.max_ratio);
  t += ']';
  return t;
}

namespace {

// The settings and memory options the fit is of: the override's workload, else the model trained for real;
// `speculation: max` (auto's ceiling) resolved against the rank's host budget (the plan's spare slots fill what is
// left).
struct FitInputs {
  RunSettings rs;
  MemoryOptions mo;
  Partition part;
  RankBudget budget;
};
FitInputs fit_inputs(const Scenario& s, const SettingsOverrides& o) {
  FitInputs f{resolve_settings(s, o), {}, {}, {}};
  f.mo = f.rs.memory_options();
  if (!o.workload) f.mo.workload = WorkloadType::kAuto;
  f.part = make_partition(f.rs.model, f.rs.partition);
  f.budget = rank_budget(s, f.rs.ranks_per_node);
  f.mo.host_bytes_per_rank = f.budget.host_bytes;
  return f;
}

// The sentence for an infeasible fit: what is short, by how much, at which ratio.
std::string shortfall_text(const FitReport& r) {
  std::string t;
  if (r.gpu_short_bytes > 0)
    t = "GPU memory is short by " + format_gb(r.gpu_short_bytes) + " per rank at ratio " +
        format_ratio(r.shortfall_ratio) + " (needs " + format_gb(r.needed.gpu_total) + " + the headroom " +
        format_gb(r.budget.gpu_headroom_bytes) + " (training.gpu_headroom), a GPU has " +
        format_gb(r.budget.gpu_bytes) + "; activations " + format_gb(r.needed.gpu_activations) + ", parameters " +
        format_gb(r.needed.gpu_params) + ", gradients " + format_gb(r.needed.gpu_grads) + ", optimizer " +
        format_gb(r.needed.gpu_optimizer) + ")";
  if (r.host_short_bytes > 0)
    t += std::string(t.empty() ? "" : "; ") + "pinned host memory is short by " + format_gb(r.host_short_bytes) +
         " per rank at ratio " + format_ratio(r.shortfall_ratio) + " (needs " + format_gb(r.needed.host_total) +
         ", a rank may pin " + format_gb(r.budget.host_bytes) + " after training.host_reserve)";
  return t;
}

}  // namespace

FitReport check_fit(const Scenario& s, const SettingsOverrides& overrides) {
  const FitInputs f = fit_inputs(s, overrides);
  FitReport r;
  r.budget = f.budget;
  const int64_t gpu_usable = std::max<int64_t>(0, r.budget.gpu_bytes - r.budget.gpu_headroom_bytes);
  r.range = feasible_ratios(f.rs.model, f.part, f.mo, gpu_usable, r.budget.host_bytes);
  if (r.range.feasible) {
    r.at_min = rank_memory_at(f.rs.model, f.part, f.mo, r.range.min_ratio);
    r.at_max = rank_memory_at(f.rs.model, f.part, f.mo, r.range.max_ratio);
    return r;
  }
  // The GPU alone: its smallest fitting ratio is where the host needs the least.
  const RatioRange gpu_only =
      feasible_ratios(f.rs.model, f.part, f.mo, gpu_usable, std::numeric_limits<int64_t>::max());
  r.shortfall_ratio = gpu_only.feasible ? gpu_only.min_ratio : 1.0;
  r.needed = rank_memory_at(f.rs.model, f.part, f.mo, r.shortfall_ratio);
  r.gpu_short_bytes = std::max<int64_t>(0, r.needed.gpu_total - gpu_usable);
  r.host_short_bytes = std::max<int64_t>(0, r.needed.host_total - r.budget.host_bytes);
  r.shortfall = shortfall_text(r);
  return r;
}

namespace {

// One changed scenario, as a suggestion when it fits.
std::optional<std::string> try_change(const Scenario& s, const SettingsOverrides& o, const std::string& change) {
  try {
    const FitReport r = check_fit(s, o);
    if (r.range.feasible) return change + " fits at ratios " + ratio_range_text(r.range);
  } catch (const InputError&) {  // a change the settings refuse is no suggestion
  }
  return std::nullopt;
}

// The largest micro-batch below the scenario's that fits (memory grows with it), if any.
std::optional<std::string> smaller_micro_batch(Scenario s, const SettingsOverrides& o, const std::string& with) {
  int64_t lo = 1, hi = s.training.micro_batch - 1, best = 0;
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    s.training.micro_batch = mid;
    if (check_fit(s, o).range.feasible) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (best == 0) return std::nullopt;
  s.training.micro_batch = best;
  return try_change(s, o, "training.micro_batch: " + std::to_string(best) + with);
}

// The fewest ranks (doubling, up to kMaxWorld) that fit: ZeRO-3 divides the shard among them.
std::optional<std::string> more_ranks(const Scenario& s, const SettingsOverrides& o) {
  const int world = o.world.value_or(s.cluster.world_size());
  for (int64_t w = int64_t(world) * 2; w <= kMaxWorld; w *= 2) {
    SettingsOverrides ow = o;
    ow.world = int(w);
    if (auto fit = try_change(
            s, ow,
            std::to_string(w) + " ranks (" + std::to_string(resolve_settings(s, ow).ranks_per_node) + " per node)"))
      return fit;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> fit_suggestions(const Scenario& s, const SettingsOverrides& o) {
  std::vector<std::string> out;
  auto add = [&](std::optional<std::string> v) {
    if (v) out.push_back(std::move(*v));
  };
  Scenario ckpt = s;
  ckpt.training.activation_checkpointing = true;
  if (!s.training.activation_checkpointing) add(try_change(ckpt, o, "training.activation_checkpointing: true"));
  add(smaller_micro_batch(s, o, ""));
  if (!s.training.activation_checkpointing)
    add(smaller_micro_batch(ckpt, o, " with training.activation_checkpointing: true"));
  if (s.zero.stage < 3) {
    Scenario z3 = s;
    z3.zero.stage = 3;
    add(try_change(z3, o, "zero.stage: 3"));
  }
  add(more_ranks(s, o));
  return out;
}

PresetWalk largest_fitting_preset(const Scenario& base, std::string_view prefix, std::optional<double> ratio,
                                  const SettingsOverrides& overrides) {
  std::vector<std::pair<int64_t, ModelSpec>> presets;
  for (std::string_view name : model_preset_names()) {
    if (name.substr(0, prefix.size()) != prefix) continue;
    ModelSpec spec = model_preset(name);
    if (spec.type != ModelType::kDecoder) continue;
    if (base.model.type == ModelType::kDecoder)
      spec.decoder.seq = std::min(base.model.decoder.seq, spec.decoder.max_positions);
    normalize_model(spec);
    validate(spec);
    presets.emplace_back(parameter_count(spec), std::move(spec));
  }
  if (presets.empty()) {
    std::string names;
    for (std::string_view n : model_preset_names()) names += (names.empty() ? "" : ", ") + std::string(n);
    throw InputError("no decoder preset starts with '" + std::string(prefix) + "'; the presets: " + names);
  }
  std::stable_sort(presets.begin(), presets.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  PresetWalk walk;
  for (auto& [params, spec] : presets) {
    Scenario s = base;
    s.model = spec;
    s.workload.type = WorkloadType::kAuto;  // the decoder itself (the base may train an MLP)
    PresetFit pf{spec.name, params, spec.decoder.seq, check_fit(s, overrides), false};
    const RatioRange& r = pf.fit.range;
    pf.qualifies = r.feasible && (!ratio || (*ratio >= r.min_ratio && *ratio <= r.max_ratio));
    walk.tried.push_back(std::move(pf));
    if (walk.tried.back().qualifies) {
      walk.found = walk.tried.size() - 1;
      break;
    }
  }
  return walk;
}

}  // namespace tf::core
