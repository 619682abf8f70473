#include "metrics/gpu_telemetry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace tf::metrics {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return GpuWindow::kNaN;
  const size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(h), v.end());
  if (v.size() % 2) return v[h];
  const double upper = v[h];
  return (*std::max_element(v.begin(), v.begin() + ptrdiff_t(h)) + upper) / 2;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- NVML, opened at run time -----------------------------------------------------------------------------
// The few entry points the sampler reads, declared here with NVML's C ABI (nvml.h: nvmlReturn_t is an int enum,
// nvmlDevice_t an opaque pointer, NVML_CLOCK_SM = 1, NVML_TEMPERATURE_GPU = 0, 0 = NVML_SUCCESS).
using NvmlDevice = struct NvmlDeviceSt*;
constexpr int kNvmlSuccess = 0, kNvmlClockSm = 1, kNvmlTemperatureGpu = 0;

struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  int (*power)(NvmlDevice, unsigned*) = nullptr;
  int (*temperature)(NvmlDevice, int, unsigned*) = nullptr;
  int (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  int (*power_limit)(NvmlDevice, unsigned*) = nullptr;
  bool initialized = false;

  ~Nvml() {
    if (initialized) shutdown();
    if (lib) dlclose(lib);
  }
  std::string error(int rc) const { return error_string ? error_string(rc) : "error " + std::to_string(rc); }
};

template <typename F>
bool bind(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

// NVML loaded, initialised and its entry points bound; nullptr with `why_not` otherwise.
std::shared_ptr<Nvml> load_nvml(std::string& why_not) {
  auto n = std::make_shared<Nvml>();
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) {
    const char* e = dlerror();
    why_not = std::string("NVML not loaded (") + (e ? e : "libnvidia-ml.so.1 not found") + ")";
    return nullptr;
  }
  const bool bound = bind(n->lib, n->init, "nvmlInit_v2") && bind(n->lib, n->shutdown, "nvmlShutdown") &&
                     bind(n->lib, n->error_string, "nvmlErrorString") &&
                     bind(n->lib, n->by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") &&
                     bind(n->lib, n->clock_info, "nvmlDeviceGetClockInfo") &&
                     bind(n->lib, n->temperature, "nvmlDeviceGetTemperature");
  if (!bound) {
    why_not = "NVML (libnvidia-ml.so.1) lacks an entry point the sampler needs (nvmlInit_v2, nvmlDeviceGetClockInfo, ...)";
    return nullptr;
  }
  // optional: older drivers name the reasons call "throttle"; power and the limit are missing on some GPUs
  if (!bind(n->lib, n->reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
    bind(n->lib, n->reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  bind(n->lib, n->power, "nvmlDeviceGetPowerUsage");
  bind(n->lib, n->power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  if (const int rc = n->init(); rc != kNvmlSuccess) {
    why_not = "nvmlInit_v2: " + n->error(rc);
    return nullptr;
  }
  n->initialized = true;
  return n;
}

}  // namespace

GpuWindow summarize(std::span<const GpuSample> samples, const GpuSample* base, double power_limit_w) {
  GpuWindow w;
  w.power_limit_w = power_limit_w;
  w.samples = int(samples.size());
  if (samples.empty()) return w;
  std::vector<double> mhz;
  mhz.reserve(samples.size());
  int capped = 0, thermal = 0, powers = 0;
  double power_sum = 0;
  w.temperature_c_max = samples.front().temperature_c;
  for (const GpuSample& s : samples) {
    mhz.push_back(s.sm_mhz);
    if (std::isfinite(s.power_w)) power_sum += s.power_w, ++powers;
    w.temperature_c_max = std::fmax(w.temperature_c_max, s.temperature_c);  // fmax: NaN where unread
    capped += (s.clock_reasons & kReasonPowerCap) != 0;
    thermal += (s.clock_reasons & (kReasonThermal | kReasonHwSlowdown | kReasonHwPowerBrake)) != 0;
  }
  w.sm_mhz_min = *std::min_element(mhz.begin(), mhz.end());
  w.sm_mhz_max = *std::max_element(mhz.begin(), mhz.end());
  w.sm_mhz_median = median_of(std::move(mhz));
  w.power_capped_fraction = double(capped) / double(samples.size());
  w.thermal_fraction = double(thermal) / double(samples.size());
  if (powers > 0) w.power_w = power_sum / powers;
  w.seconds = samples.back().t_s - (base ? *base : samples.front()).t_s;
  return w;
}

GpuWindow combine(std::span<const GpuWindow> windows) {
  GpuWindow out;
  std::vector<double> mhz, watts;
  double capped = 0, thermal = 0;
  for (const GpuWindow& w : windows) {
    if (w.empty()) continue;
    out.samples += w.samples;
    out.seconds += w.seconds;
    mhz.push_back(w.sm_mhz_median);
    if (std::isfinite(w.power_w)) watts.push_back(w.power_w);
    out.sm_mhz_min = std::fmin(out.sm_mhz_min, w.sm_mhz_min);  // fmin/fmax: the other where one is NaN
    out.sm_mhz_max = std::fmax(out.sm_mhz_max, w.sm_mhz_max);
    out.temperature_c_max = std::fmax(out.temperature_c_max, w.temperature_c_max);
    out.power_limit_w = w.power_limit_w;
    capped += w.power_capped_fraction * w.samples;
    thermal += w.thermal_fraction * w.samples;
  }
  if (out.samples == 0) return out;
  out.sm_mhz_median = median_of(std::move(mhz));
  out.power_w = median_of(std::move(watts));
  out.power_capped_fraction = capped / out.samples;
  out.thermal_fraction = thermal / out.samples;
  return out;
}

GpuTelemetry::GpuTelemetry(Reader read, double power_limit_w, std::chrono::microseconds period)
    : read_(std::move(read)), power_limit_w_(power_limit_w), period_(period) {
  thread_ = std::thread([this] { loop(); });
}

GpuTelemetry::~GpuTelemetry() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuTelemetry::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    lk.unlock();
    GpuSample s;
    const bool ok = read_(s);
    lk.lock();
    if (ok) pending_.push_back(s);
    cv_.wait_for(lk, period_, [this] { return stop_; });
  }
}

GpuWindow GpuTelemetry::take() {
  std::vector<GpuSample> samples;
  GpuSample base;
  bool has_base = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    samples.swap(pending_);
    // in time order: a take_now's sample may land after one the sampler read earlier
    std::sort(samples.begin(), samples.end(), [](const GpuSample& a, const GpuSample& b) { return a.t_s < b.t_s; });
    base = base_, has_base = has_base_;
    if (!samples.empty()) base_ = samples.back(), has_base_ = true;
  }
  GpuWindow w = summarize(samples, has_base ? &base : nullptr, power_limit_w_);
  w.readings = std::move(samples);
  return w;
}

GpuWindow GpuTelemetry::take_now() {
  GpuSample s;
  if (read_(s)) {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back(s);
  }
  return take();
}

std::unique_ptr<GpuTelemetry> GpuTelemetry::open_nvml(const std::string& pci_bus_id, std::string& why_not,
                                                      std::chrono::microseconds period) {
  std::shared_ptr<Nvml> nvml = load_nvml(why_not);
  if (!nvml) return nullptr;
  NvmlDevice dev = nullptr;
  if (const int rc = nvml->by_pci_bus_id(pci_bus_id.c_str(), &dev); rc != kNvmlSuccess) {
    why_not = "NVML has no device at PCI bus id " + pci_bus_id + ": " + nvml->error(rc);
    return nullptr;
  }
  unsigned mhz = 0;
  if (const int rc = nvml->clock_info(dev, kNvmlClockSm, &mhz); rc != kNvmlSuccess) {
    why_not = "nvmlDeviceGetClockInfo (SM clock) on " + pci_bus_id + ": " + nvml->error(rc);
    return nullptr;
  }
  double limit_w = GpuWindow::kNaN;
  if (unsigned mw = 0; nvml->power_limit && nvml->power_limit(dev, &mw) == kNvmlSuccess) limit_w = mw / 1000.0;
  Nvml* n = nvml.get();
  Reader read = [n, dev](GpuSample& s) {
    unsigned clock = 0, temp = 0;
    if (n->clock_info(dev, kNvmlClockSm, &clock) != kNvmlSuccess) return false;
    s.t_s = now_s();
    s.sm_mhz = clock;
    unsigned mw = 0;
    unsigned long long reasons = 0;
    s.power_w = n->power && n->power(dev, &mw) == kNvmlSuccess ? double(mw) / 1000.0 : GpuWindow::kNaN;
    s.temperature_c = n->temperature(dev, kNvmlTemperatureGpu, &temp) == kNvmlSuccess ? double(temp) : GpuWindow::kNaN;
    s.clock_reasons = n->reasons && n->reasons(dev, &reasons) == kNvmlSuccess ? uint64_t(reasons) : 0;
    return true;
  };
  auto t = std::make_unique<GpuTelemetry>(std::move(read), limit_w, period);
  t->library_ = std::move(nvml);
  return t;
}

}  // namespace tf::metrics
