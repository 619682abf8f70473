// Results as a table on the terminal, and the same rows as CSV or JSON.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace tf::app {

class Table {
 public:
  explicit Table(std::vector<std::string> columns) : cols_(std::move(columns)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& os) const;  // aligned, with a header rule
  // The files are written whole or not at all (core::write_output_file; `option` names the path's
  // origin in its errors).
  std::string to_csv() const;
  void write_csv(const std::string& path, const std::string& option = "--csv") const;
  std::string to_json() const;  // array of objects keyed by column; numbers stay numbers
  void write_json(const std::string& path, const std::string& option = "--json") const;
  const std::vector<std::vector<std::string>>& rows() const { return rows_; }

 private:
  std::vector<std::string> cols_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(double v, int precision = 2);
// A learning rate: 4 significant digits ("1e-05", "0.0003"), as `run` and `simulate --functional` print it.
std::string fmt_lr(double lr);
// A rate with one decimal, or with 3 significant digits where one decimal would print a nonzero rate below 1
// as "0.0" (a small bench under a sanitizer moves a few MB/s): "173.9", "0.0563".
std::string fmt_rate(double v);

}  // namespace tf::app
