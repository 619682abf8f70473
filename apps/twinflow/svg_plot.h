// A small SVG line plot: one x axis, a left and an optional right y axis, a legend.
#pragma once

#include <string>
#include <vector>

namespace tf::app {

struct Series {
  std::string name;
  std::vector<double> x, y;
  bool right_axis = false;
  std::string color = "#1f77b4";
  std::vector<bool> marked;  // optional: points drawn hollow in red (e.g. out of memory)
};

struct PlotSpec {
  std::string title, x_label, left_label, right_label;
  std::vector<Series> series;
  std::string note;  // a line under the plot
};

std::string render_svg(const PlotSpec& spec);
// Written whole or not at all (core::write_output_file; `option` names the path's origin in errors).
void write_svg(const PlotSpec& spec, const std::string& path, const std::string& option = "--svg");

}  // namespace tf::app
