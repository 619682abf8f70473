// The GPU telemetry sampler (metrics/gpu_telemetry.h): the window summaries, the sampler thread on a scripted
// reader, and NVML's absence on a machine without the driver (CI).
#include "metrics/gpu_telemetry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

namespace tf::metrics {
namespace {

GpuSample sample(double t, double mhz, double watts, double temp, uint64_t reasons = 0) {
  GpuSample s;
  s.t_s = t, s.sm_mhz = mhz, s.power_w = watts, s.temperature_c = temp, s.clock_reasons = reasons;
  return s;
}

TEST(GpuTelemetry, AWindowsMedianPowerAndReasons) {
  const GpuSample base = sample(10.0, 1980, 100.0, 40);
  const std::vector<GpuSample> s = {sample(10.1, 1900, 600.0, 50, kReasonPowerCap),
                                    sample(10.2, 1700, 700.0, 61, kReasonPowerCap | kReasonSwThermal),
                                    sample(10.3, 1800, 650.0, 55), sample(10.4, 1750, 690.0, 52, kReasonPowerCap)};
  const GpuWindow w = summarize(s, &base, 700);
  EXPECT_EQ(w.samples, 4);
  EXPECT_DOUBLE_EQ(w.sm_mhz_median, 1775);  // even count: the mean of the middle two (1750, 1800)
  EXPECT_DOUBLE_EQ(w.sm_mhz_min, 1700);
  EXPECT_DOUBLE_EQ(w.sm_mhz_max, 1900);
  EXPECT_NEAR(w.seconds, 0.4, 1e-12);
  EXPECT_NEAR(w.power_w, 660, 1e-9);  // the mean of the window's readings (the base's is the previous window's)
  EXPECT_DOUBLE_EQ(w.power_limit_w, 700);
  EXPECT_DOUBLE_EQ(w.temperature_c_max, 61);
  EXPECT_DOUBLE_EQ(w.power_capped_fraction, 0.75);
  EXPECT_DOUBLE_EQ(w.thermal_fraction, 0.25);

  const GpuWindow alone = summarize(std::span(s).subspan(1), nullptr, 700);  // no base: the samples' own span
  EXPECT_DOUBLE_EQ(alone.sm_mhz_median, 1750);  // odd count: the middle one
  EXPECT_NEAR(alone.power_w, 680, 1e-9);
  EXPECT_NEAR(alone.seconds, 0.2, 1e-12);  // no base: the samples' own span
}

TEST(GpuTelemetry, WhatWasNotReadIsNaN) {
  const GpuWindow none = summarize({}, nullptr, 700);
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(std::isnan(none.sm_mhz_median));
  EXPECT_TRUE(std::isnan(none.power_w));
  const std::vector<GpuSample> one = {sample(1, 1500, GpuWindow::kNaN, GpuWindow::kNaN)};
  const GpuWindow w = summarize(one, nullptr, GpuWindow::kNaN);
  EXPECT_DOUBLE_EQ(w.sm_mhz_median, 1500);
  EXPECT_TRUE(std::isnan(w.power_w));  // no power reading
  EXPECT_TRUE(std::isnan(w.temperature_c_max));
  EXPECT_DOUBLE_EQ(w.seconds, 0);
  const std::vector<GpuSample> some = {sample(1, 1500, GpuWindow::kNaN, 30), sample(2, 1500, 300, 30)};
  EXPECT_DOUBLE_EQ(summarize(some, nullptr, 700).power_w, 300) << "the readings there are";
}

TEST(GpuTelemetry, CombinedWindowsTakeTheMediansAndWeighTheFractionsBySamples) {
  GpuWindow a, b, c, empty;
  a.samples = 10, a.sm_mhz_median = 1800, a.sm_mhz_min = 1700, a.sm_mhz_max = 1900, a.power_w = 600,
  a.power_capped_fraction = 1.0, a.thermal_fraction = 0, a.temperature_c_max = 60, a.power_limit_w = 700;
  b = a, b.samples = 30, b.sm_mhz_median = 1750, b.sm_mhz_min = 1650, b.power_w = 690, b.power_capped_fraction = 0;
  c = a, c.sm_mhz_median = 1900, c.sm_mhz_max = 1980, c.power_w = GpuWindow::kNaN, c.temperature_c_max = 70;
  const std::vector<GpuWindow> all = {a, empty, b, c};
  const GpuWindow w = combine(all);
  EXPECT_EQ(w.samples, 50);
  EXPECT_DOUBLE_EQ(w.sm_mhz_median, 1800);
  EXPECT_DOUBLE_EQ(w.sm_mhz_min, 1650);
  EXPECT_DOUBLE_EQ(w.sm_mhz_max, 1980);
  EXPECT_DOUBLE_EQ(w.power_w, 645);  // the median of the two windows that had a power
  EXPECT_DOUBLE_EQ(w.power_capped_fraction, 20.0 / 50);
  EXPECT_DOUBLE_EQ(w.temperature_c_max, 70);
  EXPECT_TRUE(combine({}).empty());
}

TEST(GpuTelemetry, TheSamplerTakesWindowsOneAfterAnother) {
  std::atomic<int> reads{0};
  GpuTelemetry tel(
      [&reads](GpuSample& s) {
        const int i = reads++;
        if (i % 5 == 4) return false;  // a device that sometimes does not answer: dropped
        s = sample(i * 0.001, 1000 + i, 500, 40);
        return true;
      },
      700, std::chrono::microseconds(200));
  while (reads < 20) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const GpuWindow first = tel.take();
  ASSERT_GT(first.samples, 0);
  while (reads < 40) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const GpuWindow second = tel.take_now();
  ASSERT_GT(second.samples, 0);
  // the second window starts at the first's last sample (t = its read index in ms), not at its own first
  EXPECT_NEAR(second.seconds, 0.001 * (second.sm_mhz_max - first.sm_mhz_max), 1e-9);
  EXPECT_NEAR(second.power_w, 500, 1e-9);
  EXPECT_GT(second.sm_mhz_min, first.sm_mhz_max);
  EXPECT_DOUBLE_EQ(second.power_limit_w, 700);
  // each window keeps its own readings, in time order, none dropped and none of the other's
  for (const GpuWindow* w : {&first, &second}) {
    ASSERT_EQ(w->readings.size(), size_t(w->samples));
    for (size_t i = 1; i < w->readings.size(); ++i) EXPECT_LT(w->readings[i - 1].t_s, w->readings[i].t_s);
    for (const GpuSample& g : w->readings) EXPECT_NE(int(g.sm_mhz - 1000) % 5, 4);
  }
  EXPECT_DOUBLE_EQ(first.readings.back().sm_mhz, first.sm_mhz_max);
  EXPECT_DOUBLE_EQ(second.readings.front().sm_mhz, second.sm_mhz_min);
}

TEST(GpuTelemetry, OpeningNvmlWithoutADeviceSaysWhy) {
  std::string why;
  const auto tel = GpuTelemetry::open_nvml("0000:ff:1f.7", why);  // no such device, wherever this runs
  ASSERT_EQ(tel, nullptr);
  EXPECT_FALSE(why.empty());
  // without the driver (CI): the library is named; with it: NVML's answer for the bus id
  EXPECT_TRUE(why.find("libnvidia-ml") != std::string::npos || why.find("0000:ff:1f.7") != std::string::npos ||
              why.find("nvmlInit") != std::string::npos)
      << why;
}

}  // namespace
}  // namespace tf::metrics
