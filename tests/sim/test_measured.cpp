// twinflow validate --measured's reader: only regular files of bounded size, every integer in range with
// the file, key and value named when not, and a point without steady steps refused (not MAPE = inf).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/twinflow/validate.h"
#include "core/error.h"
#include "tests/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using tf::app::load_measured_sweep;
using tf::app::parse_measured_sweep;

// A minimal valid `twinflow run --json` document: one point, steps 1..3.
nlohmann::json sweep() {
  nlohmann::json doc = {{"rank", 0}, {"world", 1}, {"threads", 4}, {"params", 1000}, {"grad_accum", 1}};
  nlohmann::json p = {{"ratio", 0.5}, {"actual_ratio", 0.5}};
  for (int step = 1; step <= 3; ++step)
    p["steps"].push_back(
        {{"step", step}, {"step_ns", 1000}, {"optimizer_phase_ns", 10}, {"kind_ns", {{"forward", 5}}}});
  doc["points"].push_back(p);
  return doc;
}

std::string error_of(const std::string& text) {
  try {
    parse_measured_sweep(text, "m.json");
  } catch (const tf::core::InputError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string load_error(const std::string& file) {
  try {
    load_measured_sweep(file);
  } catch (const tf::core::InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(MeasuredReader, ReadsAValidSweep) {
  const tf::app::MeasuredSweep m = parse_measured_sweep(sweep().dump(), "m.json");
  ASSERT_EQ(m.points.size(), 1u);
  EXPECT_EQ(m.points[0].steps.size(), 3u);
  EXPECT_EQ(m.threads, 4);
  EXPECT_EQ(tf::app::steady_step_ms(m.points[0]).steps, 2);
}

TEST(MeasuredReader, IntegersOutOfRangeNameFileKeyAndValue) {
  struct Case {
    std::string text, message;
  };
  nlohmann::json threads = sweep();
  threads["threads"] = 4294967297ULL;  // would have been cut to 1 by an int
  nlohmann::json step = sweep();
  step["points"][0]["steps"][1]["step"] = 4294967297ULL;
  nlohmann::json negative = sweep();
  negative["points"][0]["steps"][2]["step_ns"] = -5;
  nlohmann::json zero_threads = sweep();  // found by the fuzzer: 0 came through as an unsigned value
  zero_threads["threads"] = 0;
  nlohmann::json unsigned_big = sweep();
  unsigned_big["params"] = 18446744073709551615ULL;
  const std::vector<Case> cases = {
      {threads.dump(), "m.json: threads: 4294967297 is out of range; allowed [1, 65536]"},
      {zero_threads.dump(), "m.json: threads: 0 is out of range; allowed [1, 65536]"},
      {step.dump(), "m.json: points[0].steps[1].step: 4294967297 is out of range; allowed [1, 2147483647]"},
      {negative.dump(), "m.json: points[0].steps[2].step_ns: -5 is out of range; allowed [1, 9223372036854775807]"},
      {unsigned_big.dump(), "m.json: params: 18446744073709551615 is out of range; allowed [0, 9223372036854775807]"},
      {R"({"rank": 0, "world": 100000000000000000000, "threads": 1, "params": 1, "points": []})",
       "m.json: world: must be an integer, got 1e+20 (beyond 64 bits or a fraction); allowed [1, 65536]"},
      {R"({"rank": 0, "world": 1e999})", "m.json: not JSON that can be read: "},
      {R"({"rank": 0, "world": 1.5})", "m.json: world: must be an integer, got 1.5"},
      {R"({"rank": 0, "world": "1"})", "m.json: world: must be an integer, got \"1\""},
      {R"([1, 2])", "m.json: (document): is not an object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text.substr(0, 80));
    const std::string e = error_of(c.text);
    EXPECT_NE(e.find(c.message), std::string::npos) << e;
  }
}

TEST(MeasuredReader, TheGpusClockWhereTheRunReadIt) {
  nlohmann::json doc = sweep();
  doc["points"][0]["steps"][0]["gpu"] = nullptr;  // NVML did not answer
  doc["points"][0]["steps"][1]["gpu"] = {{"samples", 10}, {"sm_mhz_median", 1755.5}, {"power_w", 690}};
  doc["points"][0]["steps"][2]["gpu"] = {{"samples", 0}, {"sm_mhz_median", nullptr}};
  const tf::app::MeasuredSweep m = parse_measured_sweep(doc.dump(), "m.json");
  const auto& steps = m.points[0].steps;
  EXPECT_TRUE(std::isnan(steps[0].sm_mhz));
  EXPECT_DOUBLE_EQ(steps[1].sm_mhz, 1755.5);
  EXPECT_TRUE(std::isnan(steps[2].sm_mhz));
  EXPECT_TRUE(std::isnan(parse_measured_sweep(sweep().dump(), "m.json").points[0].steps[1].sm_mhz))
      << "a run from before the telemetry";
  nlohmann::json text = sweep();
  text["points"][0]["steps"][1]["gpu"] = "fast";
  EXPECT_NE(error_of(text.dump()).find("m.json: points[0].steps[1].gpu: must be an object or null, got \"fast\""),
            std::string::npos)
      << error_of(text.dump());
  nlohmann::json zero = sweep();
  zero["points"][0]["steps"][2]["gpu"] = {{"sm_mhz_median", 0}};
  EXPECT_NE(error_of(zero.dump()).find("m.json: points[0].steps[2].gpu.sm_mhz_median: 0 is out of range"),
            std::string::npos)
      << error_of(zero.dump());
}

TEST(MeasuredReader, APointWithoutSteadyStepsIsAnError) {
  nlohmann::json doc = sweep();
  for (auto& s : doc["points"][0]["steps"]) s["step"] = 1;
  EXPECT_NE(error_of(doc.dump())
                .find("m.json: points[0].steps: no steady steps: all 3 are step 1, which validate leaves out (it pays "
                      "for set-up); measure at least 2 steps"),
            std::string::npos)
      << error_of(doc.dump());
  // a single step is its own steady step
  nlohmann::json one = sweep();
  one["points"][0]["steps"] = nlohmann::json::array({one["points"][0]["steps"][0]});
  EXPECT_EQ(tf::app::steady_step_ms(parse_measured_sweep(one.dump(), "m.json").points[0]).steps, 1);
}

TEST(MeasuredReader, OnlyRegularFilesOfBoundedSize) {
  tf::test::TempDir d("tf_measured");
  // a FIFO with no writer would block a plain open: refused without opening it
  const fs::path fifo = d.path() / "fifo.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(load_error(fifo.string()).find("is not a regular file"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_NE(load_error("/dev/zero").find("'/dev/zero' is not a regular file"), std::string::npos);
  EXPECT_NE(load_error((d.path() / "none.json").string()).find("does not exist"), std::string::npos);
  // larger than the limit (sparse: costs no disk)
  const fs::path big = d.path() / "big.json";
  std::ofstream(big).put('{');
  fs::resize_file(big, tf::app::kMaxMeasuredBytes + 1);
  EXPECT_NE(load_error(big.string()).find("is larger than 67108864 bytes"), std::string::npos)
      << load_error(big.string());
  // and a good one loads
  const fs::path good = d.path() / "good.json";
  std::ofstream(good) << sweep().dump();
  EXPECT_EQ(load_measured_sweep(good.string()).points.size(), 1u);
}
