// One step's timeline as an SVG (rank 0: a lane per queue, a bar per op colored by its kind), for the
// measured step (`twinflow run --timeline-svg`) and the simulated one (`twinflow simulate --timeline-svg`).
#pragma once

#include <string>

#include "apps/twinflow/svg_plot.h"
#include "backends/sim/sim_backend.h"

namespace tf::app {

// The plot of rank 0 of `p` (which needs keep_plans and record_ops, as write_chrome_trace does): one lane
// per queue (core::Queue order), one bar per op, a color per op kind; `what` heads the title ("measured",
// "simulated"), the note gives the step, the ratio and the busy time per queue. Throws
// std::invalid_argument without plans or op timings.
TimelineSpec step_timeline(const backend::sim::SimPoint& p, const std::string& what, const std::string& scenario);

}  // namespace tf::app
