// SVG line plots for sweeps and step timelines (no dependencies; opens in any browser).
#include "apps/twinflow/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

#include "core/output_file.h"

namespace tf::app {

namespace {
std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}
struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  void finish(bool from_zero) {
    if (!std::isfinite(lo)) lo = 0, hi = 1;
    if (from_zero) lo = std::min(lo, 0.0);
    if (hi <= lo) hi = lo + 1;
    hi += (hi - lo) * 0.05;
  }
};
}  // namespace

std::string render_svg(const PlotSpec& spec) {
  const double W = 760, H = 440, L = 80, R = 80, T = 50, B = 70;
  Range xr, yl, yr;
  bool has_right = false;
  for (const Series& s : spec.series) {
    for (double x : s.x) xr.add(x);
    for (double y : s.y) (s.right_axis ? yr : yl).add(y);
    has_right = has_right || s.right_axis;
  }
  xr.finish(false);
  yl.finish(true);
  yr.finish(true);
  auto X = [&](double x) { return L + (x - xr.lo) / (xr.hi - xr.lo) * (W - L - R); };
  auto Y = [&](double y, bool right) {
    const Range& r = right ? yr : yl;
    return H - B - (y - r.lo) / (r.hi - r.lo) * (H - T - B);
  };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << esc(spec.title)
    << "</text>\n";
  // axes and ticks
  o << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B
    << "\" stroke=\"black\"/>\n";
  o << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n";
  if (has_right)
    o << "<line x1=\"" << W - R << "\" y1=\"" << T << "\" x2=\"" << W - R << "\" y2=\"" << H - B
      << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 5; ++i) {
    const double fx = xr.lo + (xr.hi - xr.lo) * i / 5, fl = yl.lo + (yl.hi - yl.lo) * i / 5;
    o << "<text x=\"" << X(fx) << "\" y=\"" << H - B + 18 << "\" text-anchor=\"middle\">" << num(fx) << "</text>\n";
    o << "<line x1=\"" << L << "\" y1=\"" << Y(fl, false) << "\" x2=\"" << W - R << "\" y2=\"" << Y(fl, false)
      << "\" stroke=\"#ddd\"/>\n";
    o << "<text x=\"" << L - 6 << "\" y=\"" << Y(fl, false) + 4 << "\" text-anchor=\"end\">" << num(fl) << "</text>\n";
    if (has_right) {
      const double fr = yr.lo + (yr.hi - yr.lo) * i / 5;
      o << "<text x=\"" << W - R + 6 << "\" y=\"" << Y(fr, true) + 4 << "\">" << num(fr) << "</text>\n";
    }
  }
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - B + 40 << "\" text-anchor=\"middle\">" << esc(spec.x_label)
    << "</text>\n";
  o << "<text transform=\"translate(22," << (T + H - B) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << esc(spec.left_label) << "</text>\n";
  if (has_right)
    o << "<text transform=\"translate(" << W - 18 << "," << (T + H - B) / 2 << ") rotate(90)\" text-anchor=\"middle\">"
      << esc(spec.right_label) << "</text>\n";
  // series
  int legend = 0;
  const double legend_step = spec.series.size() > 3 ? 165 : 230;  // four entries fit across
  for (const Series& s : spec.series) {
    o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\""
      << (s.right_axis ? " stroke-dasharray=\"6,4\"" : "") << " points=\"";
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i])) o << X(s.x[i]) << "," << Y(s.y[i], s.right_axis) << " ";
    o << "\"/>\n";
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      const bool mark = i < s.marked.size() && s.marked[i];
      o << "<circle cx=\"" << X(s.x[i]) << "\" cy=\"" << Y(s.y[i], s.right_axis) << "\" r=\"3\" fill=\""
        << (mark ? "white" : s.color) << "\" stroke=\"" << (mark ? "red" : s.color) << "\"/>\n";
    }
    const double lx = L + 10 + legend_step * legend++, ly = T - 10;
    o << "<line x1=\"" << lx << "\" y1=\"" << ly << "\" x2=\"" << lx + 24 << "\" y2=\"" << ly << "\" stroke=\""
      << s.color << "\" stroke-width=\"2\"" << (s.right_axis ? " stroke-dasharray=\"6,4\"" : "") << "/>\n";
    o << "<text x=\"" << lx + 30 << "\" y=\"" << ly + 4 << "\">" << esc(s.name) << "</text>\n";
  }
  if (!spec.note.empty())
    o << "<text x=\"" << L << "\" y=\"" << H - 10 << "\" font-size=\"11\" fill=\"#555\">" << esc(spec.note)
      << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

void write_svg(const PlotSpec& spec, const std::string& path, const std::string& option) {
  core::write_output_file(path, render_svg(spec), option);
}

namespace {

// A track's lane at height y: its name, a step line over [lo, hi] of its values, the two labelled.
void draw_track(std::ostringstream& o, const TimelineTrack& t, double y, double h, double L,
                const std::function<double(double)>& X) {
  double lo = t.points.front().second, hi = lo;
  for (const auto& [ms, v] : t.points) lo = std::min(lo, v), hi = std::max(hi, v);
  const auto Y = [&](double v) { return hi > lo ? y + h - 4 - (v - lo) / (hi - lo) * (h - 8) : y + h / 2; };
  o << "<text x=\"" << L - 6 << "\" y=\"" << y + h / 2 + 4 << "\" text-anchor=\"end\">" << esc(t.name) << "</text>\n";
  o << "<polyline fill=\"none\" stroke=\"#444\" stroke-width=\"1.2\" points=\"";
  for (size_t i = 0; i < t.points.size(); ++i) {
    const bool last = i + 1 == t.points.size();
    if (i > 0 && t.points[i].second == t.points[i - 1].second && !last) continue;  // a repeated reading
    if (i > 0) o << X(t.points[i].first) << "," << Y(t.points[i - 1].second) << " ";  // held until this one
    o << X(t.points[i].first) << "," << Y(t.points[i].second) << " ";
  }
  o << "\"/>\n";
  o << "<text x=\"" << L + 4 << "\" y=\"" << y + 11 << "\" font-size=\"10\" fill=\"#555\">" << num(hi) << " "
    << esc(t.unit) << " (max), " << num(lo) << " (min)</text>\n";
}

}  // namespace

std::string render_timeline_svg(const TimelineSpec& spec) {
  const double W = 1000, L = 90, R = 20, T = 50, lane_h = 34, gap = 8;
  std::vector<const TimelineTrack*> tracks;
  for (const TimelineTrack& t : spec.tracks)
    if (!t.points.empty()) tracks.push_back(&t);
  const double plot_h = double(spec.lanes.size() + tracks.size()) * (lane_h + gap);
  const double legend_rows = std::ceil(double(spec.kinds.size()) / 6.0);
  const double H = T + plot_h + 40 + 18 * legend_rows + 30;
  double end = 0;
  for (const TimelineBar& b : spec.bars) end = std::max(end, b.end_ms);
  for (const TimelineTrack* t : tracks) end = std::max(end, t->points.back().first);
  Range xr;
  xr.add(0);
  xr.add(end);
  xr.finish(true);
  auto X = [&](double ms) { return L + (ms - xr.lo) / (xr.hi - xr.lo) * (W - L - R); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << esc(spec.title)
    << "</text>\n";
  const double axis_y = T + plot_h;
  for (int i = 0; i <= 10; ++i) {  // time grid, ms
    const double t = xr.lo + (xr.hi - xr.lo) * i / 10;
    o << "<line x1=\"" << X(t) << "\" y1=\"" << T << "\" x2=\"" << X(t) << "\" y2=\"" << axis_y
      << "\" stroke=\"#eee\"/>\n";
    o << "<text x=\"" << X(t) << "\" y=\"" << axis_y + 16 << "\" text-anchor=\"middle\">" << num(t) << "</text>\n";
  }
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << axis_y + 34
    << "\" text-anchor=\"middle\">time in the step (ms)</text>\n";
  for (size_t l = 0; l < spec.lanes.size(); ++l) {
    const double y = T + double(l) * (lane_h + gap);
    o << "<rect x=\"" << L << "\" y=\"" << y << "\" width=\"" << W - L - R << "\" height=\"" << lane_h
      << "\" fill=\"#f7f7f7\"/>\n";
    o << "<text x=\"" << L - 6 << "\" y=\"" << y + lane_h / 2 + 4 << "\" text-anchor=\"end\">" << esc(spec.lanes[l])
      << "</text>\n";
  }
  for (size_t k = 0; k < tracks.size(); ++k) {
    const double y = T + double(spec.lanes.size() + k) * (lane_h + gap);
    o << "<rect x=\"" << L << "\" y=\"" << y << "\" width=\"" << W - L - R << "\" height=\"" << lane_h
      << "\" fill=\"#fbfbf3\"/>\n";
    draw_track(o, *tracks[k], y, lane_h, L, X);
  }
  for (const TimelineBar& b : spec.bars) {
    if (b.lane < 0 || size_t(b.lane) >= spec.lanes.size()) continue;
    const double y = T + double(b.lane) * (lane_h + gap);
    const std::string color =
        b.kind >= 0 && size_t(b.kind) < spec.kinds.size() ? spec.kinds[size_t(b.kind)].second : "#999";
    o << "<rect x=\"" << X(b.start_ms) << "\" y=\"" << y + 2 << "\" width=\""
      << std::max(0.5, X(b.end_ms) - X(b.start_ms)) << "\" height=\"" << lane_h - 4 << "\" fill=\"" << color
      << "\" stroke=\"white\" stroke-width=\"0.3\"/>\n";
  }
  for (size_t k = 0; k < spec.kinds.size(); ++k) {
    const double lx = L + 150 * double(k % 6), ly = axis_y + 52 + 18 * double(k / 6);
    o << "<rect x=\"" << lx << "\" y=\"" << ly - 9 << "\" width=\"12\" height=\"10\" fill=\"" << spec.kinds[k].second
      << "\"/>\n<text x=\"" << lx + 16 << "\" y=\"" << ly << "\">" << esc(spec.kinds[k].first) << "</text>\n";
  }
  if (!spec.note.empty())
    o << "<text x=\"" << L << "\" y=\"" << H - 10 << "\" font-size=\"11\" fill=\"#555\">" << esc(spec.note)
      << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

void write_timeline_svg(const TimelineSpec& spec, const std::string& path, const std::string& option) {
  core::write_output_file(path, render_timeline_svg(spec), option);
}

}  // namespace tf::app
