// `ratio: auto` in the commands: resolving it before anything runs (backends/sim/auto_ratio.h), and its
// table, JSON record and SVG plot (`twinflow run` and `twinflow simulate` share them).
#pragma once

#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "apps/twinflow/table.h"
#include "backends/sim/auto_ratio.h"
#include "core/scenario.h"

namespace tf::app {

// What a profile without the measured figures `auto` rests on gets: an error (`run`, which trains on
// this machine) or a warning (`simulate`, which may estimate a machine nobody calibrated).
enum class Calibration { kRequired, kWarn };

// Chooses the ratio (backends::sim::choose_ratio) and prints the table and why to `out`.
backend::sim::AutoRatio resolve_auto_ratio(const core::Scenario& sc, const backend::sim::AutoRatioOptions& opt,
                                           Calibration calibration, std::ostream& out);

// Columns: ratio (actual), requested, predicted step ms, GPU GB, host GB, chosen ("<-"); one row per ratio as
// printed (four decimals), the chosen point's where several print alike.
Table auto_ratio_table(const backend::sim::AutoRatio& a);
// {"chosen": {ratio, actual_ratio, step_ms}, "why", "profile", "fits": [min, max], "table": [...]}
nlohmann::json auto_ratio_json(const backend::sim::AutoRatio& a);
// Predicted step time and GPU memory against the ratio, the chosen point marked.
void write_auto_ratio_svg(const core::Scenario& sc, const backend::sim::AutoRatio& a, const std::string& path);

}  // namespace tf::app
