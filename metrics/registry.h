// A small Prometheus metrics registry: counters, gauges and histograms with labels, exposed in the text
// format version 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
//   tf::metrics::Registry reg;
//   auto& steps = reg.counter("twinflow_steps_total", "Training steps finished.", {"rank", "scenario"});
//   steps.with({"0", "opt-30b"}).inc();
//   std::string text = reg.expose();
//
// Ordering is stable: families by name, then series by their label values (compared as strings, in label
// order). Updates are thread-safe and lock-free for counters and gauges (one mutex per histogram series, so a
// scrape sees its buckets, sum and count from the same set of observations). Series are never removed: a
// reference returned by with() stays valid as long as the registry lives.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tf::metrics {

// The Content-Type of expose()'s output.
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

using LabelValues = std::vector<std::string>;

// Goes up only. Programming errors (a negative or NaN increment) throw std::invalid_argument.
class Counter {
 public:
  void inc(double by = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double by);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Cumulative buckets with upper bounds `le` (inclusive: v == bound counts in that bucket) plus +Inf.
// NaN observations are dropped (they would make the sum NaN for good).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // (bounds + 1): observations <= bounds[i]; the last one is +Inf == count
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;  // finite, increasing (the Registry checks); +Inf is implicit
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is (bounds.back(), +Inf)
  double sum_ = 0;
  uint64_t count_ = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };
const char* metric_type_name(MetricType t);

// Common part of a metric family: name, help, label names, exposition.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type, std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Appends "# HELP", "# TYPE" and every series, or nothing when the family has no series yet.
  virtual void expose(std::string& out) const = 0;

 protected:
  void check_values(const LabelValues& values) const;  // count matches the label names
  // `{a="x",b="y"` (no closing brace) for these values, escaped; "" when there are no labels.
  std::string label_prefix(const LabelValues& values) const;

  const std::string name_, help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
  mutable std::mutex mutex_;  // guards the series map (not the values)
};

// All series of one metric, keyed by label values. T is Counter, Gauge or Histogram.
template <class T>
class Family : public FamilyBase {
 public:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
         std::vector<double> bounds = {})
      : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)), bounds_(std::move(bounds)) {}

  // The series with these label values (one per label name, in order), created at 0 on first use.
  // std::invalid_argument when the number of values differs from the number of label names.
  T& with(const LabelValues& values);
  const std::vector<double>& bounds() const { return bounds_; }
  void expose(std::string& out) const override;

 private:
  const std::vector<double> bounds_;  // histograms only
  std::map<LabelValues, std::unique_ptr<T>> series_;
};

class Registry {
 public:
  // Returns the family, registering it on first use. Asking again with the same name returns the same
  // family if type, help, label names (and buckets) are the same, and throws std::invalid_argument naming the
  // difference otherwise. Names follow Prometheus rules ([a-zA-Z_:][a-zA-Z0-9_:]*, label names without ':'
  // and not starting with "__"); a counter's name must end in "_total"; a histogram may not use the label
  // "le". Bucket bounds must be finite and strictly increasing (+Inf is implicit).
  Family<Counter>& counter(const std::string& name, const std::string& help,
                           const std::vector<std::string>& label_names = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help,
                       const std::vector<std::string>& label_names = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                               const std::vector<std::string>& label_names = {});

  // The text exposition (format 0.0.4) of every family with at least one series.
  std::string expose() const;

 private:
  template <class T>
  Family<T>& get_or_add(const std::string& name, const std::string& help, MetricType type,
                        const std::vector<std::string>& label_names, const std::vector<double>& bounds);

  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_;
};

// ---- building blocks, public for tests ----
// A sample value as Prometheus parses it: shortest round-trip decimal, "NaN", "+Inf", "-Inf".
std::string format_value(double v);
// Label value escaping: backslash -> \\, double quote -> \", newline -> \n. Bytes that are not valid UTF-8
// become U+FFFD (a scrape with invalid UTF-8 is rejected whole by Prometheus).
std::string escape_label_value(std::string_view v);
// HELP text escaping: backslash -> \\, newline -> \n (invalid UTF-8 as above).
std::string escape_help(std::string_view v);
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);
// `count` bounds: start, start*factor, ... (start > 0, factor > 1).
std::vector<double> exponential_buckets(double start, double factor, int count);
// Preferred-number bounds per decade (per_decade 1: 1; 3: 1, 2, 5; 5: 1, 1.6, 2.5, 4, 6.3; 10: the R10 series
// 1, 1.25, 1.6, 2, 2.5, 3.15, 4, 5, 6.3, 8) times powers of ten, from `low` (a power of ten) up to and including
// `high`. Each bound is the double nearest its decimal, so it prints exactly ("0.0016").
std::vector<double> decade_buckets(double low, double high, int per_decade);

}  // namespace tf::metrics
