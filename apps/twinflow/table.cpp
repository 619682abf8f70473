// Table printing and CSV/JSON export.
#include "apps/twinflow/table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "core/error.h"

namespace tf::app {

std::string fmt(double v, int precision) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << v;
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
std::ofstream open_out(const std::string& path) {
  std::ofstream f(path);
  if (!f) throw core::RuntimeFailure("cannot write '" + path + "': check the directory exists and is writable");
  return f;
}
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace

void Table::write_csv(const std::string& path) const {
  std::ofstream f = open_out(path);
  for (size_t c = 0; c < cols_.size(); ++c) f << (c ? "," : "") << csv_field(cols_[c]);
  f << "\n";
  for (const auto& r : rows_) {
    for (size_t c = 0; c < r.size(); ++c) f << (c ? "," : "") << csv_field(r[c]);
    f << "\n";
  }
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
  return arr.dump(2);
}

void Table::write_json(const std::string& path) const { open_out(path) << to_json() << "\n"; }

}  // namespace tf::app
