// Small SVG plots: a line plot (one x axis, a left and an optional right y axis, a legend) and a step
// timeline (one lane per queue, a bar per op).
#pragma once

#include <string>
#include <utility>
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

// One op of a timeline: [start_ms, end_ms) on a lane, colored by its kind (an index into `kinds`).
struct TimelineBar {
  int lane = 0;
  double start_ms = 0, end_ms = 0;
  int kind = 0;
};
// A quantity sampled over the timeline (a GPU's SM clock): a lane of its own under the queues' lanes, drawn as a
// step line between its smallest and largest value (both labelled). Points (ms, value) in time order.
struct TimelineTrack {
  std::string name, unit;
  std::vector<std::pair<double, double>> points;
};
struct TimelineSpec {
  std::string title;
  std::vector<std::string> lanes;                          // top to bottom
  std::vector<std::pair<std::string, std::string>> kinds;  // (name, color) for the legend
  std::vector<TimelineBar> bars;
  std::vector<TimelineTrack> tracks;  // optional, under the lanes (a track without points is left out)
  std::string note;                   // a line under the plot
};
std::string render_timeline_svg(const TimelineSpec& spec);
void write_timeline_svg(const TimelineSpec& spec, const std::string& path,
                        const std::string& option = "--timeline-svg");

}  // namespace tf::app
