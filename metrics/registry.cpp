// A small Prometheus metrics registry: counters, gauges and histograms with labels, exposed in the text
// format version 0.0.4.
#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace tf::metrics {

namespace {

// Adds `by` to an atomic double (compare-exchange loop; std::atomic<double>::fetch_add is C++20 but not
// lock-free everywhere).
void atomic_add(std::atomic<double>& a, double by) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + by, std::memory_order_relaxed)) {
  }
}

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are not one.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

std::string escape(std::string_view v, bool quotes) {
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size();) {
    const char c = v[i];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      const size_t n = utf8_sequence_length(v, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
        ++i;
        continue;
      }
      out.append(v.substr(i, n));
      i += n;
      continue;
    }
    ++i;
  }
  return out;
}

std::string quoted_list(const std::vector<std::string>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s + "}";
}

std::string bounds_list(const std::vector<double>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + format_value(v[i]);
  return s + "}";
}

void append_sample(std::string& out, const std::string& name, const std::string& prefix, const std::string& extra,
                   double value) {
  out += name;
  if (!prefix.empty() || !extra.empty()) {
    out += prefix.empty() ? "{" : prefix;
    if (!extra.empty()) out += (prefix.empty() ? "" : ",") + extra;
    out += '}';
  }
  out += ' ';
  out += format_value(value);
  out += '\n';
}

}  // namespace

// ---- values ----------------------------------------------------------------------------------------

void Counter::inc(double by) {
  if (!(by >= 0))
    throw std::invalid_argument("Counter::inc(" + format_value(by) +
                                "): a counter only goes up; use a Gauge for a value that can go down");
  atomic_add(value_, by);
}

void Gauge::add(double by) { atomic_add(value_, by); }

void Histogram::observe(double v) {
  if (std::isnan(v)) return;
  const size_t bucket = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[bucket];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  std::lock_guard<std::mutex> lock(mutex_);
  s.cumulative.resize(counts_.size());
  uint64_t acc = 0;
  for (size_t i = 0; i < counts_.size(); ++i) s.cumulative[i] = acc += counts_[i];
  s.sum = sum_;
  s.count = count_;
  return s;
}

// ---- families ---------------------------------------------------------------------------------------

const char* metric_type_name(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

FamilyBase::FamilyBase(std::string name, std::string help, MetricType type, std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), type_(type), label_names_(std::move(label_names)) {}

void FamilyBase::check_values(const LabelValues& values) const {
  if (values.size() != label_names_.size())
    throw std::invalid_argument("metric " + name_ + ": " + std::to_string(values.size()) +
                                " label value(s) given for the label names " + quoted_list(label_names_) +
                                "; give one value per name, in that order");
}

std::string FamilyBase::label_prefix(const LabelValues& values) const {
  if (label_names_.empty()) return {};
  std::string s = "{";
  for (size_t i = 0; i < label_names_.size(); ++i) {
    if (i) s += ',';
    s += label_names_[i];
    s += "=\"";
    s += escape_label_value(values[i]);
    s += '"';
  }
  return s;
}

template <class T>
T& Family<T>::with(const LabelValues& values) {
  check_values(values);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = series_.find(values);
  if (it == series_.end()) {
    std::unique_ptr<T> v;
    if constexpr (std::is_same_v<T, Histogram>)
      v = std::make_unique<T>(bounds_);
    else
      v = std::make_unique<T>();
    it = series_.emplace(values, std::move(v)).first;
  }
  return *it->second;
}

template <class T>
void Family<T>::expose(std::string& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (series_.empty()) return;
  out += "# HELP " + name_ + " " + escape_help(help_) + "\n";
  out += "# TYPE " + name_ + " " + metric_type_name(type_) + "\n";
  for (const auto& [values, v] : series_) {
    const std::string prefix = label_prefix(values);
    if constexpr (std::is_same_v<T, Histogram>) {
      const Histogram::Snapshot s = v->snapshot();
      const std::string bucket = name_ + "_bucket";
      for (size_t i = 0; i < bounds_.size(); ++i)
        append_sample(out, bucket, prefix, "le=\"" + format_value(bounds_[i]) + "\"", double(s.cumulative[i]));
      append_sample(out, bucket, prefix, "le=\"+Inf\"", double(s.count));
      append_sample(out, name_ + "_sum", prefix, "", s.sum);
      append_sample(out, name_ + "_count", prefix, "", double(s.count));
    } else {
      append_sample(out, name_, prefix, "", v->value());
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---- registry ---------------------------------------------------------------------------------------

template <class T>
Family<T>& Registry::get_or_add(const std::string& name, const std::string& help, MetricType type,
                                const std::vector<std::string>& label_names, const std::vector<double>& bounds) {
  const std::string what = std::string(metric_type_name(type)) + " '" + name + "'";
  if (!valid_metric_name(name))
    throw std::invalid_argument(what + ": not a valid metric name; use [a-zA-Z_:][a-zA-Z0-9_:]*");
  if (type == MetricType::kCounter && !(name.size() > 6 && name.ends_with("_total")))
    throw std::invalid_argument(what + ": a counter's name must end in \"_total\" (Prometheus naming)");
  if (type != MetricType::kCounter && name.ends_with("_total"))
    throw std::invalid_argument(what + ": only counters may end in \"_total\"");
  for (size_t i = 0; i < label_names.size(); ++i) {
    const std::string& l = label_names[i];
    if (!valid_label_name(l))
      throw std::invalid_argument(what + ": label name '" + l +
                                  "' is not valid; use [a-zA-Z_][a-zA-Z0-9_]* not starting with \"__\"");
    if (type == MetricType::kHistogram && l == "le")
      throw std::invalid_argument(what + ": the label \"le\" is reserved for histogram buckets");
    if (std::find(label_names.begin(), label_names.begin() + long(i), l) != label_names.begin() + long(i))
      throw std::invalid_argument(what + ": label name '" + l + "' given twice");
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]))
      throw std::invalid_argument(what + ": bucket bound " + format_value(bounds[i]) +
                                  " is not finite (the +Inf bucket is always there)");
    if (i && !(bounds[i] > bounds[i - 1]))
      throw std::invalid_argument(what + ": bucket bounds must increase strictly; " + format_value(bounds[i]) +
                                  " follows " + format_value(bounds[i - 1]));
  }

  std::lock_guard<std::mutex> lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end())
    it = families_.emplace(name, std::make_unique<Family<T>>(name, help, type, label_names, bounds)).first;
  FamilyBase& f = *it->second;
  if (f.type() != type) throw std::invalid_argument(what + ": already registered as a " + metric_type_name(f.type()));
  if (f.label_names() != label_names)
    throw std::invalid_argument(what + ": already registered with the labels " + quoted_list(f.label_names()) +
                                ", asked for " + quoted_list(label_names));
  if (f.help() != help)
    throw std::invalid_argument(what + ": already registered with the help \"" + f.help() + "\", asked for \"" + help +
                                "\"");
  auto& family = static_cast<Family<T>&>(f);
  if (family.bounds() != bounds)
    throw std::invalid_argument(what + ": already registered with the buckets " + bounds_list(family.bounds()) +
                                ", asked for " + bounds_list(bounds));
  return family;
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help,
                                   const std::vector<std::string>& label_names) {
  return get_or_add<Counter>(name, help, MetricType::kCounter, label_names, {});
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help,
                               const std::vector<std::string>& label_names) {
  return get_or_add<Gauge>(name, help, MetricType::kGauge, label_names, {});
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help,
                                       const std::vector<double>& bounds, const std::vector<std::string>& label_names) {
  return get_or_add<Histogram>(name, help, MetricType::kHistogram, label_names, bounds);
}

std::string Registry::expose() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, f] : families_) f->expose(out);
  return out;
}

// ---- building blocks ----------------------------------------------------------------------------------

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest representation that round-trips
  return std::string(buf, r.ptr);
}

std::string escape_label_value(std::string_view v) { return escape(v, true); }
std::string escape_help(std::string_view v) { return escape(v, false); }

bool valid_metric_name(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!(alpha || (i > 0 && c >= '0' && c <= '9'))) return false;
  }
  return true;
}

bool valid_label_name(std::string_view n) {
  if (n.empty() || n.starts_with("__")) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!(alpha || (i > 0 && c >= '0' && c <= '9'))) return false;
  }
  return true;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1)
    throw std::invalid_argument("exponential_buckets(" + format_value(start) + ", " + format_value(factor) + ", " +
                                std::to_string(count) + "): need start > 0, factor > 1, count >= 1");
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

std::vector<double> decade_buckets(double low, double high, int per_decade) {
  static const std::map<int, std::vector<const char*>> kSeries = {
      {1, {"1"}},
      {3, {"1", "2", "5"}},
      {5, {"1", "1.6", "2.5", "4", "6.3"}},
      {10, {"1", "1.25", "1.6", "2", "2.5", "3.15", "4", "5", "6.3", "8"}}};
  const auto series = kSeries.find(per_decade);
  if (series == kSeries.end())
    throw std::invalid_argument("decade_buckets: per_decade " + std::to_string(per_decade) + " is not 1, 3, 5 or 10");
  const double e = std::log10(low);
  if (!(low > 0) || std::abs(e - std::round(e)) > 1e-9)
    throw std::invalid_argument("decade_buckets: low " + format_value(low) + " must be a power of ten, e.g. 0.001");
  if (!(high >= low)) throw std::invalid_argument("decade_buckets: high must be >= low");
  std::vector<double> b;
  for (int exp = int(std::round(e));; ++exp) {
    for (const char* m : series->second) {
      // The double nearest the decimal m x 10^exp, so that it prints back as that decimal.
      const double v = std::strtod((std::string(m) + "e" + std::to_string(exp)).c_str(), nullptr);
      if (v > high * (1 + 1e-12)) return b;
      b.push_back(v);
    }
  }
}

}  // namespace tf::metrics
