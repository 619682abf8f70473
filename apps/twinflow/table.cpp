// Table printing and CSV/JSON export.
#include "apps/twinflow/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "core/output_file.h"

namespace tf::app {

std::string fmt(double v, int precision) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << v;
  return os.str();
}

std::string fmt_lr(double lr) {
  std::ostringstream os;
  os << std::setprecision(4) << lr;
  return os.str();
}

std::string fmt_rate(double v) {
  if (v == 0 || !(std::abs(v) < 1)) return fmt(v, 1);
  std::ostringstream os;
  os << std::setprecision(3) << v;
  return os.str();
}

void Table::print(std::ostream& os) const {
  std::vector<size_t> w(cols_.size());
  for (size_t c = 0; c < cols_.size(); ++c) w[c] = cols_[c].size();
  for (const auto& r : rows_)
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t c = 0; c < cols_.size(); ++c) {
      const std::string& s = c < r.size() ? r[c] : "";
      os << (c ? "  " : "") << std::setw(int(w[c])) << (c == 0 ? std::left : std::right) << s;
    }
    os << std::right << "\n";
  };
  line(cols_);
  size_t total = 0;
  for (size_t x : w) total += x + 2;
  os << std::string(total > 2 ? total - 2 : 0, '-') << "\n";
  for (const auto& r : rows_) line(r);
}

namespace {
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace

std::string Table::to_csv() const {
  std::ostringstream f;
  for (size_t c = 0; c < cols_.size(); ++c) f << (c ? "," : "") << csv_field(cols_[c]);
  f << "\n";
  for (const auto& r : rows_) {
    for (size_t c = 0; c < r.size(); ++c) f << (c ? "," : "") << csv_field(r[c]);
    f << "\n";
  }
  return f.str();
}

void Table::write_csv(const std::string& path, const std::string& option) const {
  core::write_output_file(path, to_csv(), option);
}

std::string Table::to_json() const {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : rows_) {
    nlohmann::json o;
    for (size_t c = 0; c < cols_.size() && c < r.size(); ++c) {
      char* end = nullptr;
      const double v = std::strtod(r[c].c_str(), &end);
      if (!r[c].empty() && end && *end == '\0')
        o[cols_[c]] = v;
      else
        o[cols_[c]] = r[c];
    }
    arr.push_back(o);
  }
  return arr.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);  // bad UTF-8 in a cell: replaced
}

void Table::write_json(const std::string& path, const std::string& option) const {
  core::write_output_file(path, to_json() + "\n", option);
}

}  // namespace tf::app
