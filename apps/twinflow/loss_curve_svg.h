// A run's training curve as an SVG (`twinflow run --loss-svg`): the loss per step on the left axis, the
// learning rate of each step's update on the right.
#pragma once

#include <string>
#include <vector>

#include "apps/twinflow/svg_plot.h"

namespace tf::app {

struct LossPoint {
  int step = 0;
  double loss = 0;  // NaN: none computed (the synthetic workload), or a skipped fp16 step's
  double lr = 0;
};

// The plot of `points` (in step order) of scenario `scenario` at `ratio`: a "loss" series over the steps
// with a finite loss and a "learning rate" series on the right axis; the note gives the step range, the
// first and last finite losses, the lowest, and how many steps had none. Throws std::invalid_argument
// when no step has a finite loss (there is no curve to draw).
PlotSpec loss_curve(const std::vector<LossPoint>& points, const std::string& scenario, double ratio);

}  // namespace tf::app
