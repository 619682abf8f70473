// What the GPU did while Twin-Flow worked on it: its SM clock, power, temperature and why its clock was held
// (docs/ARCHITECTURE.md, "GPU telemetry"). A thread samples the device every `period` through NVML, which is opened
// at run time (dlopen of the driver's libnvidia-ml.so.1): nothing at build time, and where the library is missing
// or refuses, open_nvml says why and the caller runs without telemetry. take() summarises the samples since the
// previous take: `twinflow run` takes one window per step, calibrate one around its GEMM table.
//
//   std::string why;
//   auto tel = tf::metrics::GpuTelemetry::open_nvml(pci_bus_id, why);   // nullptr: `why` says what failed
//   ... one step ...
//   const tf::metrics::GpuWindow w = tel->take();   // w.sm_mhz_median, w.power_w, w.power_capped_fraction, ...
//
// No CUDA here: the caller names the device by its PCI bus id (cudaDeviceGetPCIBusId), which CUDA and NVML agree
// on whatever CUDA_VISIBLE_DEVICES says.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tf::metrics {

// One reading of the device.
struct GpuSample {
  double t_s = 0;                // seconds on the sampler's steady clock
  double sm_mhz = 0;             // SM clock now
  double power_w = 0;            // NVML's power reading (NaN: not read): on Ampere and later, its 1 s average
  double temperature_c = 0;      // GPU die temperature
  uint64_t clock_reasons = 0;    // NVML's clocks-event reasons: kReasonPowerCap, kReasonThermal, ...
};

// NVML's clocks-event (throttle) reason bits that hold the clock below its boost.
inline constexpr uint64_t kReasonPowerCap = 0x4;              // the software power cap
inline constexpr uint64_t kReasonHwSlowdown = 0x8;            // hardware slowdown (power brake or thermal)
inline constexpr uint64_t kReasonSwThermal = 0x20;            // software thermal slowdown
inline constexpr uint64_t kReasonHwThermal = 0x40;            // hardware thermal slowdown
inline constexpr uint64_t kReasonHwPowerBrake = 0x80;         // hardware power brake
inline constexpr uint64_t kReasonThermal = kReasonSwThermal | kReasonHwThermal;

// A window's summary. NaN where it has no samples (or, for the power, fewer than two).
struct GpuWindow {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  int samples = 0;
  double seconds = 0;  // from the window's base sample (the previous window's last) to its last
  double sm_mhz_median = kNaN, sm_mhz_min = kNaN, sm_mhz_max = kNaN;
  // The mean of the samples' power readings. NVML averages them over about a second on recent GPUs, so a short
  // window's figure lags (an energy counter does not average, but its coarse updates made 0 and 2,066 W of
  // 100 ms windows on an H200: bench/results/2026-11-29-h200-telemetry-wgmma).
  double power_w = kNaN;
  double power_limit_w = kNaN;  // the enforced power limit
  double temperature_c_max = kNaN;
  double power_capped_fraction = kNaN;  // of the samples: the software power cap among the clock's reasons
  double thermal_fraction = kNaN;       // ... a thermal or hardware slowdown
  // The readings themselves, in time order (GpuTelemetry::take; empty from summarize and combine): what a run's
  // trace shows as counters beside its ops.
  std::vector<GpuSample> readings;
  bool empty() const { return samples == 0; }
};

// The summary of `samples` (in time order), with `base` the sample before them (the previous window's last: its
// time starts the window), or nullptr (the window then spans the samples themselves). Pure: tested alone.
GpuWindow summarize(std::span<const GpuSample> samples, const GpuSample* base, double power_limit_w);

// The samples' medians of a run of windows (e.g. a run's steady steps): the median of the windows' clock
// medians and of their powers, the largest temperature, the mean capped and thermal fractions weighted by samples.
GpuWindow combine(std::span<const GpuWindow> windows);

class GpuTelemetry {
 public:
  // One reading now; false when the device did not answer (the sample is dropped).
  using Reader = std::function<bool(GpuSample&)>;

  // Samples through `read` every `period` on its own thread until destroyed. `power_limit_w` is reported with
  // every window (NaN: unknown).
  GpuTelemetry(Reader read, double power_limit_w, std::chrono::microseconds period);
  ~GpuTelemetry();
  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  // NVML for the device at `pci_bus_id` ("0000:3b:00.0", as cudaDeviceGetPCIBusId writes it), sampled every
  // `period`. nullptr, with `why_not` saying what failed (no libnvidia-ml.so.1, NVML's error), when it cannot.
  static std::unique_ptr<GpuTelemetry> open_nvml(const std::string& pci_bus_id, std::string& why_not,
                                                 std::chrono::microseconds period = std::chrono::milliseconds(10));

  // The samples since the previous take (or since the start) as one window; the sampler goes on.
  GpuWindow take();
  // Takes one sample now, on the caller's thread (a window's edge), then the window.
  GpuWindow take_now();

 private:
  void loop();

  Reader read_;
  double power_limit_w_;
  std::chrono::microseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<GpuSample> pending_;
  GpuSample base_{};
  bool has_base_ = false;
  std::shared_ptr<void> library_;  // keeps NVML loaded (and shut down after the thread) when open_nvml made it
  std::thread thread_;
};

}  // namespace tf::metrics
