// The Prometheus registry: exact text format 0.0.4 output, escaping, ordering, histogram buckets, naming rules
// and thread safety.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include "metrics/registry.h"

namespace tf::metrics {
namespace {

TEST(Registry, EmptyRegistryAndFamiliesWithoutSeriesExposeNothing) {
  Registry r;
  EXPECT_EQ(r.expose(), "");
  r.counter("a_total", "help");
  r.histogram("h_seconds", "help", {1});
  EXPECT_EQ(r.expose(), "");
}

TEST(Registry, CounterAndGaugeExactText) {
  Registry r;
  r.counter("jobs_total", "Jobs done.").with({}).inc();
  r.counter("jobs_total", "Jobs done.").with({}).inc(2.5);
  r.gauge("temperature_celsius", "Temperature.", {"room"}).with({"lab"}).set(-3.25);
  EXPECT_EQ(r.expose(),
            "# HELP jobs_total Jobs done.\n"
            "# TYPE jobs_total counter\n"
            "jobs_total 3.5\n"
            "# HELP temperature_celsius Temperature.\n"
            "# TYPE temperature_celsius gauge\n"
            "temperature_celsius{room=\"lab\"} -3.25\n");
}

TEST(Registry, StableOrderingByFamilyNameThenLabelValues) {
  // Registered and updated in a scrambled order; exposed sorted by name, then by label values in label order.
  Registry r;
  auto& z = r.gauge("z_ratio", "z", {"rank", "queue"});
  z.with({"1", "cpu"}).set(1);
  z.with({"0", "h2d"}).set(2);
  z.with({"0", "compute"}).set(3);
  r.gauge("a_ratio", "a").with({}).set(4);
  const std::string want =
      "# HELP a_ratio a\n# TYPE a_ratio gauge\na_ratio 4\n"
      "# HELP z_ratio z\n# TYPE z_ratio gauge\n"
      "z_ratio{rank=\"0\",queue=\"compute\"} 3\n"
      "z_ratio{rank=\"0\",queue=\"h2d\"} 2\n"
      "z_ratio{rank=\"1\",queue=\"cpu\"} 1\n";
  EXPECT_EQ(r.expose(), want);
  EXPECT_EQ(r.expose(), want);  // and again: nothing depends on scrape history
}

TEST(Registry, LabelValueAndHelpEscaping) {
  Registry r;
  r.gauge("g", "A \"quoted\" help\nwith a back\\slash.", {"path"}).with({"C:\\dir\\\"x\"\nnext"}).set(1);
  EXPECT_EQ(r.expose(),
            "# HELP g A \"quoted\" help\\nwith a back\\\\slash.\n"  // quotes stay as they are in HELP
            "# TYPE g gauge\n"
            "g{path=\"C:\\\\dir\\\\\\\"x\\\"\\nnext\"} 1\n");
}

TEST(Registry, Utf8IsKeptAndInvalidBytesAreReplaced) {
  EXPECT_EQ(escape_label_value("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(escape_label_value("a\xFF"
                               "b"),
            "a" + fffd + "b");                                            // never valid
  EXPECT_EQ(escape_label_value("\xC3"), fffd);                            // truncated sequence
  EXPECT_EQ(escape_label_value("\xC0\xAF"), fffd + fffd);                 // overlong '/'
  EXPECT_EQ(escape_label_value("\xED\xA0\x80"), fffd + fffd + fffd);      // a UTF-16 surrogate
  EXPECT_EQ(escape_help("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // beyond U+10FFFF
}

TEST(Registry, HistogramBucketsAreCumulativeAndInclusive) {
  Registry r;
  auto& h = r.histogram("latency_seconds", "Latency.", {0.5, 1, 2.5}, {"op"}).with({"read"});
  for (double v : {0.5, 0.75, 1.0, 3.0, -1.0, std::numeric_limits<double>::quiet_NaN()}) h.observe(v);
  EXPECT_EQ(r.expose(),
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{op=\"read\",le=\"0.5\"} 2\n"  // -1 and 0.5 (a bound is inclusive)
            "latency_seconds_bucket{op=\"read\",le=\"1\"} 4\n"    // + 0.75 and 1
            "latency_seconds_bucket{op=\"read\",le=\"2.5\"} 4\n"
            "latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 5\n"  // + 3; NaN dropped
            "latency_seconds_sum{op=\"read\"} 4.25\n"
            "latency_seconds_count{op=\"read\"} 5\n");
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 4, 5}));
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.sum, 4.25);
}

TEST(Registry, HistogramWithoutLabelsAndWithoutFiniteBuckets) {
  Registry r;
  r.histogram("x_seconds", "x", {}).with({}).observe(2);
  EXPECT_EQ(r.expose(),
            "# HELP x_seconds x\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"+Inf\"} 1\nx_seconds_sum 2\nx_seconds_count 1\n");
}

TEST(Registry, ValueFormatting) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(1), "1");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(-2.5), "-2.5");
  EXPECT_EQ(format_value(123456789012.0), "123456789012");
  EXPECT_EQ(format_value(1e21), "1e+21");
  EXPECT_EQ(format_value(1.5e-7), "1.5e-07");
  EXPECT_EQ(format_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(std::stod(format_value(0.1 + 0.2)), 0.1 + 0.2);  // round-trips
}

TEST(Registry, DecadeBucketsPrintAsTheirDecimals) {
  const std::vector<double> b = decade_buckets(1e-3, 1, 5);
  std::vector<std::string> s;
  for (double v : b) s.push_back(format_value(v));
  EXPECT_EQ(s, (std::vector<std::string>{"0.001", "0.0016", "0.0025", "0.004", "0.0063", "0.01", "0.016", "0.025",
                                         "0.04", "0.063", "0.1", "0.16", "0.25", "0.4", "0.63", "1"}));
  EXPECT_EQ(decade_buckets(1, 100, 3), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(decade_buckets(1e-4, 100, 5).size(), 31u);
  EXPECT_THROW(decade_buckets(0.002, 1, 5), std::invalid_argument);  // not a power of ten
  EXPECT_THROW(decade_buckets(1, 10, 4), std::invalid_argument);
  EXPECT_EQ(exponential_buckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_THROW(exponential_buckets(0, 2, 4), std::invalid_argument);
}

TEST(Registry, SameRegistrationReturnsTheSameFamilyAndSeries) {
  Registry r;
  auto& a = r.counter("c_total", "c", {"x"});
  auto& b = r.counter("c_total", "c", {"x"});
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(&a.with({"1"}), &b.with({"1"}));
  EXPECT_NE(&a.with({"1"}), &a.with({"2"}));
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << fragment << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Registry, ConflictsAndBadNamesAreRefusedWithTheReason) {
  Registry r;
  r.counter("c_total", "c", {"x"});
  r.histogram("h_seconds", "h", {1, 2});
  expect_error([&] { r.gauge("c_total", "c", {"x"}); }, "only counters may end in \"_total\"");
  r.gauge("g", "g");
  expect_error([&] { r.histogram("g", "g", {1}); }, "already registered as a gauge");
  expect_error([&] { r.counter("c_total", "c", {"y"}); }, "already registered with the labels {x}");
  expect_error([&] { r.counter("c_total", "other", {"x"}); }, "already registered with the help");
  expect_error([&] { r.histogram("h_seconds", "h", {1, 3}); }, "already registered with the buckets {1, 2}");
  expect_error([&] { r.counter("requests", "r"); }, "must end in \"_total\"");
  expect_error([&] { r.gauge("1bad", "b"); }, "not a valid metric name");
  expect_error([&] { r.gauge("bad-name", "b"); }, "not a valid metric name");
  expect_error([&] { r.gauge("ok", "b", {"__reserved"}); }, "label name '__reserved' is not valid");
  expect_error([&] { r.gauge("ok", "b", {"a:b"}); }, "label name 'a:b' is not valid");
  expect_error([&] { r.gauge("ok", "b", {"a", "a"}); }, "given twice");
  expect_error([&] { r.histogram("ok_seconds", "b", {1}, {"le"}); }, "reserved for histogram buckets");
  expect_error([&] { r.histogram("ok_seconds", "b", {2, 1}); }, "increase strictly");
  expect_error([&] { r.histogram("ok_seconds", "b", {1, std::numeric_limits<double>::infinity()}); }, "not finite");
  expect_error([&] { r.counter("c_total", "c", {"x"}).with({}); }, "0 label value(s) given for the label names {x}");
  expect_error([&] { r.counter("c_total", "c", {"x"}).with({"1"}).inc(-1); }, "a counter only goes up");
  expect_error([&] { r.counter("c_total", "c", {"x"}).with({"1"}).inc(std::nan("")); }, "a counter only goes up");
  EXPECT_TRUE(valid_metric_name("twinflow:rule_total"));
  EXPECT_FALSE(valid_metric_name(""));
}

TEST(Registry, ConcurrentUpdatesAndScrapesAreExact) {
  Registry r;
  constexpr int kThreads = 8, kIters = 5000;
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done) {
      const std::string text = r.expose();  // must never see a torn histogram
      const std::string inf_key = "le=\"+Inf\"} ", count_key = "h_seconds_count ";
      const auto inf = text.find(inf_key);
      const auto count = text.find(count_key);
      if (inf != std::string::npos && count != std::string::npos) {
        const long a = std::stol(text.substr(inf + inf_key.size())),
                   b = std::stol(text.substr(count + count_key.size()));
        ASSERT_EQ(a, b);
      }
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        r.counter("n_total", "n", {"w"}).with({std::to_string(t % 2)}).inc();
        r.gauge("level", "l").with({}).add(1);
        r.histogram("h_seconds", "h", {0.5}).with({}).observe(i % 2 ? 1.0 : 0.25);
      }
    });
  for (auto& w : workers) w.join();
  done = true;
  scraper.join();
  EXPECT_EQ(r.counter("n_total", "n", {"w"}).with({"0"}).value(), kThreads / 2 * kIters);
  EXPECT_EQ(r.gauge("level", "l").with({}).value(), kThreads * kIters);
  const auto s = r.histogram("h_seconds", "h", {0.5}).with({}).snapshot();
  EXPECT_EQ(s.count, uint64_t(kThreads * kIters));
  EXPECT_EQ(s.cumulative[0], uint64_t(kThreads * kIters / 2));
  EXPECT_EQ(s.sum, kThreads * kIters / 2 * 1.25);
}

}  // namespace
}  // namespace tf::metrics
