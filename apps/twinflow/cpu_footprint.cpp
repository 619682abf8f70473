#include "apps/twinflow/cpu_footprint.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "apps/twinflow/measure.h"
#include "backends/sim/sim_backend.h"
#include "core/memory.h"
#include "core/memory_fit.h"
#include "core/settings.h"
#include "core/strings.h"

namespace tf::app {

namespace {

std::vector<double> footprint_ratios(bool quick) {
  return quick ? std::vector<double>{1.0} : std::vector<double>{0.5, 1.0};
}

// The host's free memory now.
int64_t free_host_bytes() { return int64_t(sysconf(_SC_AVPHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE)); }

int64_t segment_bytes(const RankLayout& l) { return l.elems() * kCpuRankBytesPerElem; }

HostFootprint footprint_at(const core::Scenario& sc, double ratio) {
  const core::RunSettings rs = core::resolve_settings(sc, {});
  const int k = std::max(1, std::min(rs.world, rs.ranks_per_node));
  // the simulator's plan of the node's pinned memory: what it looks the footprint factor up at
  const backend::sim::SimPoint p = backend::sim::simulate_step(sc, ratio, {});
  HostFootprint fp;
  fp.what = sc.name + " at ratio " + core::format_ratio(p.ratio);
  fp.node_bytes = p.cpu_node_host_bytes;
  std::vector<RankLayout> all = scenario_layouts(rs, ratio);
  all.resize(size_t(k));
  fp.layouts = std::move(all);
  for (const RankLayout& l : fp.layouts)
    fp.resident.push_back(std::max<int64_t>(0, p.memory.host_total - segment_bytes(l)));
  return fp;
}

}  // namespace

std::vector<HostFootprint> scenario_footprints(const std::vector<core::Scenario>& scenarios, bool quick) {
  std::vector<HostFootprint> all;
  for (const core::Scenario& sc : scenarios)
    for (double r : footprint_ratios(quick)) {
      HostFootprint fp = footprint_at(sc, r);
      if (fp.node_bytes > 0 &&
          std::any_of(fp.layouts.begin(), fp.layouts.end(), [](const RankLayout& l) { return l.elems() > 0; }))
        all.push_back(std::move(fp));
    }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.node_bytes > b.node_bytes; });
  std::vector<HostFootprint> kept;  // largest first, then within 10% of a kept one: dropped
  for (HostFootprint& fp : all)
    if (kept.empty() || double(fp.node_bytes) < 0.9 * double(kept.back().node_bytes)) kept.push_back(std::move(fp));
  std::reverse(kept.begin(), kept.end());
  return kept;
}

bool fit_footprint(HostFootprint& fp, int64_t available_bytes) {
  int64_t segments = 0, resident = 0;
  for (const RankLayout& l : fp.layouts) segments += segment_bytes(l);
  for (int64_t r : fp.resident) resident += r;
  if (segments > available_bytes) return false;
  if (segments + resident > available_bytes) {
    const double keep = double(available_bytes - segments) / double(std::max<int64_t>(1, resident));
    resident = 0;
    for (int64_t& r : fp.resident) resident += (r = int64_t(double(r) * keep) / 4096 * 4096);
  }
  fp.node_bytes = segments + resident;
  return true;
}

std::optional<FootprintMeasurement> measure_footprint(HostFootprint fp, const std::vector<RankLayout>& small, int reps,
                                                      bool pin, bool register_memory,
                                                      const std::function<void(const std::string&)>& note,
                                                      std::string* why) {
  if (small.size() != fp.layouts.size())
    throw core::InputError("footprint " + fp.what + ": " + std::to_string(small.size()) + " small layouts for " +
                           std::to_string(fp.layouts.size()) + " ranks");
  FootprintMeasurement m;
  for (const RankLayout& l : small) m.small_node_bytes += segment_bytes(l);
  const int64_t free_bytes = free_host_bytes();
  const int64_t room = free_bytes - std::max<int64_t>(int64_t(4) << 30, free_bytes / 50) - m.small_node_bytes;
  const std::string planned = core::format_gb(fp.node_bytes);
  if (!fit_footprint(fp, room)) {
    if (why)
      *why = fp.what + ": its CPU segments alone need more than the " + core::format_gb(std::max<int64_t>(0, room)) +
             " of free host memory left";
    return std::nullopt;
  }
  const int k = int(fp.layouts.size());
  CpuRankGroup ref(small, 0, pin);
  ref.setup(CpuRankSetup{});
  if (register_memory) ref.register_memory();
  note("placing " + core::format_gb(fp.node_bytes) + " of host memory for " + fp.what + " (" + std::to_string(k) +
       " rank process" + (k > 1 ? "es" : "") + "; planned " + planned + ")");
  CpuRankGroup big(fp.layouts, 0, pin);
  big.setup(CpuRankSetup{});
  big.hold_resident(fp.resident);
  if (register_memory) big.register_memory();
  (void)big.passes(1);
  (void)ref.passes(1);
  Pairs rates = alternate(
      reps, [&] { return ref.pass_gparam_s(); }, [&] { return big.pass_gparam_s(); });
  m.small_gparam_s = std::move(rates.first);
  m.gparam_s = std::move(rates.second);
  m.factors = std::move(rates.ratios);
  m.held = std::move(fp);
  return m;
}

}  // namespace tf::app
