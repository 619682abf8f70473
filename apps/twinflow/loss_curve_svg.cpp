// A run's training curve as an SVG: loss and learning rate per step.
#include "apps/twinflow/loss_curve_svg.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace tf::app {

namespace {

std::string fmt(double v, const char* f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

PlotSpec loss_curve(const std::vector<LossPoint>& points, const std::string& scenario, double ratio) {
  Series loss, lr;
  loss.name = "loss";
  lr.name = "learning rate";
  lr.right_axis = true;
  lr.color = "#ff7f0e";
  size_t without = 0;
  double lowest = INFINITY;
  int lowest_step = 0;
  for (const LossPoint& p : points) {
    lr.x.push_back(p.step);
    lr.y.push_back(p.lr);
    if (!std::isfinite(p.loss)) {
      ++without;
      continue;
    }
    loss.x.push_back(p.step);
    loss.y.push_back(p.loss);
    if (p.loss < lowest) lowest = p.loss, lowest_step = p.step;
  }
  if (loss.y.empty())
    throw std::invalid_argument(
        "no step of the run has a finite loss (the synthetic workload computes none): "
        "nothing to plot; use the mlp or decoder workload");
  PlotSpec s;
  s.title = "Training curve: " + scenario + ", ratio " + fmt(ratio, "%.3g");
  s.x_label = "step";
  s.left_label = "loss";
  s.right_label = "learning rate";
  s.series = {loss, lr};
  s.note = "steps " + std::to_string(points.front().step) + ".." + std::to_string(points.back().step) + ": loss " +
           fmt(loss.y.front(), "%.4g") + " at step " + std::to_string(int(loss.x.front())) + ", " +
           fmt(loss.y.back(), "%.4g") + " at step " + std::to_string(int(loss.x.back())) + ", lowest " +
           fmt(lowest, "%.4g") + " at step " + std::to_string(lowest_step) +
           (without ? "; " + std::to_string(without) + " step(s) without a loss" : "");
  return s;
}

}  // namespace tf::app
