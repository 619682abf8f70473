// CPU measurements: the fused optimizer pass, the RMW stream bound, and a naive AdamW peer.
#include "apps/twinflow/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/optim/dtype.h"

namespace tf::app {

namespace {
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <class Fn>
double median_seconds(int iters, Fn&& fn, std::vector<double>* samples = nullptr) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  if (samples) *samples = t;
  return median(t);
}

uint32_t hash32(size_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return uint32_t(x >> 32);
}
float small_value(size_t i) { return float(int(hash32(i) % 2001) - 1000) * 1e-4f; }
}  // namespace

CpuStepPass::CpuStepPass(backend::cpu::CpuBackend& be, core::OptimizerKind k, core::DType grad, core::DType copy,
                         size_t n, core::StepValues values)
    : be_(be), kind_(k), n_(n) {
  const bool two = core::state_count(k) == 2;
  p_ = be.allocate(n * 4), m_ = be.allocate(n * 4), v_ = be.allocate(two ? n * 4 : 0);
  g_ = be.allocate(n * core::dtype_bytes(grad)), c_ = be.allocate(n * core::dtype_bytes(copy));
  chunk_.param = {p_->data(), n, core::DType::kF32};
  chunk_.state1 = {m_->data(), n, core::DType::kF32};
  if (two) chunk_.state2 = {v_->data(), n, core::DType::kF32};
  chunk_.grad = {g_->data(), n, grad};
  if (copy != core::DType::kNone) chunk_.param_copy = {c_->data(), n, copy};
  be.first_touch(std::span<const backend::OptimChunk>(&chunk_, 1));
  float* pf = static_cast<float*>(p_->data());
  for (size_t i = 0; i < n; ++i) pf[i] = small_value(i);
  const bool decayed = values == core::StepValues::kDecayed;  // g = 0 on subnormal m and v
  if (decayed)
    for (size_t i = 0; i < n; ++i) {
      static_cast<float*>(m_->data())[i] = (hash32(i + 4 * n) & 1) ? -core::kDecayedM : core::kDecayedM;
      if (two) static_cast<float*>(v_->data())[i] = core::kDecayedV;
    }
  for (size_t i = 0; i < n; ++i) {
    float x = small_value(i + n);
    if (values == core::StepValues::kSubnormal)
      x = (hash32(i + 2 * n) & 1) ? -core::kSubnormalGrad : core::kSubnormalGrad;
    if (decayed || (values == core::StepValues::kHalfZero && (hash32(i + 3 * n) & 1))) x = 0.f;
    if (grad == core::DType::kF32)
      static_cast<float*>(g_->data())[i] = x;
    else
      static_cast<uint16_t*>(g_->data())[i] = grad == core::DType::kBF16 ? core::f32_to_bf16(x) : core::f32_to_f16(x);
  }
}

void CpuStepPass::run() {
  const core::StepScalars s = core::make_step_scalars(kind_, core::default_hyper_params(kind_), ++step_, 1.0);
  be_.step(kind_, std::span<const backend::OptimChunk>(&chunk_, 1), s);
}

double time_cpu_step(backend::cpu::CpuBackend& be, core::OptimizerKind k, core::DType grad, core::DType copy, size_t n,
                     int iters, std::vector<double>* samples, core::StepValues values) {
  CpuStepPass pass(be, k, grad, copy, n, values);
  return median_seconds(
      iters, [&] { pass.run(); }, samples);
}

Pairs alternate(int pairs, const std::function<double()>& first, const std::function<double()>& second) {
  if (pairs < 1) throw std::invalid_argument("alternate: pairs must be >= 1, got " + std::to_string(pairs));
  Pairs p;
  for (int i = 0; i < pairs; ++i) {
    p.first.push_back(first());
    p.second.push_back(second());
    p.ratios.push_back(p.second.back() / p.first.back());
  }
  return p;
}

PairedTimes time_alone_and_under(int pairs, const std::function<double()>& pass,
                                 const std::function<void()>& start_load, const std::function<double()>& stop_load) {
  PairedTimes t;
  const auto under = [&] {
    start_load();
    double s = 0;
    try {
      s = pass();
    } catch (...) {
      try {
        (void)stop_load();
      } catch (...) {  // the pass's failure is the one to report
      }
      throw;
    }
    t.load_sum += stop_load();
    return s;
  };
  t.seconds = alternate(pairs, pass, under);
  return t;
}

namespace {
// The k-th array starts k*(4 KiB + 64 B) into its 2 MiB-aligned allocation, so that equal indices of
// different arrays never share their low 12 address bits (no false 4K-aliasing stalls between a
// store to one stream and a load from the next, which would understate the bound).
struct HostArray {
  std::unique_ptr<backend::Buffer> buf;
  float* f;
  HostArray(backend::cpu::CpuBackend& be, size_t n, size_t k)
      : buf(be.allocate(n * 4 + k * 4160)), f(reinterpret_cast<float*>(static_cast<char*>(buf->data()) + k * 4160)) {}
  float& operator[](size_t i) { return f[i]; }
  float* get() { return f; }
};
}  // namespace

double measure_rmw_gbps(backend::cpu::CpuBackend& be, size_t n, int iters) {
  backend::cpu::ThreadPool& pool = be.pool();
  HostArray x(be, n, 0), y(be, n, 1);
  const size_t pf = be.tuning().prefetch_elems;
  const size_t parts = pool.size();
  pool.run(parts, [&](size_t w) {  // first touch with the same split
    size_t b, e;
    backend::cpu::ThreadPool::split(n, parts, w, b, e);
    for (size_t i = b; i < e; ++i) x[i] = 1.0f, y[i] = 0.5f;
  });
  const float s = 1e-7f;
  const double t = median_seconds(iters, [&] {
    pool.run(parts, [&](size_t w) {
      size_t b, e;
      backend::cpu::ThreadPool::split(n, parts, w, b, e);
      float* __restrict xx = x.get();
      const float* __restrict yy = y.get();
      size_t i = b;
      for (; i + 16 <= e; i += 16) {
        if (pf) {
          __builtin_prefetch(xx + i + pf, 1, 3);
          __builtin_prefetch(yy + i + pf, 0, 3);
        }
        for (size_t j = i; j < i + 16; ++j) xx[j] = xx[j] + s * yy[j];
      }
      for (; i < e; ++i) xx[i] = xx[i] + s * yy[i];
    });
  });
  return 12.0 * double(n) / t / 1e9;
}

double same_streams_bytes() {
  return double(core::bytes_per_element(core::OptimizerKind::kAdamW, core::DType::kF32, core::DType::kNone).total());
}

double measure_stream_gbps(backend::cpu::CpuBackend& be, core::DType grad, core::DType copy, size_t n, int iters,
                           std::vector<double>* samples) {
  auto p = be.allocate(n * 4), m = be.allocate(n * 4), v = be.allocate(n * 4);  // (n) fp32 each
  auto g = be.allocate(n * core::dtype_bytes(grad));                            // (n) grad dtype
  auto c = be.allocate(n * core::dtype_bytes(copy));                            // (n) copy dtype or nothing
  backend::OptimChunk ch;
  ch.param = {p->data(), n, core::DType::kF32};
  ch.state1 = {m->data(), n, core::DType::kF32};
  ch.state2 = {v->data(), n, core::DType::kF32};
  ch.grad = {g->data(), n, grad};
  if (copy != core::DType::kNone) ch.param_copy = {c->data(), n, copy};
  const std::span<const backend::OptimChunk> chunks(&ch, 1);
  be.first_touch(chunks);  // placed by the threads that stream them; then finite, normal data
  const size_t parts = be.pool().size();
  be.pool().run(parts, [&](size_t w) {
    size_t b, e;
    backend::cpu::ThreadPool::split(n, parts, w, b, e);
    for (size_t i = b; i < e; ++i) {
      static_cast<float*>(p->data())[i] = 1.0f;
      const float x = small_value(i) * 1e-3f;
      if (grad == core::DType::kF32)
        static_cast<float*>(g->data())[i] = x;
      else
        static_cast<uint16_t*>(g->data())[i] = grad == core::DType::kBF16 ? core::f32_to_bf16(x) : core::f32_to_f16(x);
    }
  });
  const double bytes = double(core::bytes_per_element(core::OptimizerKind::kAdamW, grad, copy).total());
  const double t = median_seconds(
      iters, [&] { be.stream_pass(chunks); }, samples);
  if (samples)
    for (double& x : *samples) x = bytes * double(n) / x / 1e9;
  return bytes * double(n) / t / 1e9;
}

double measure_same_streams_gbps(backend::cpu::CpuBackend& be, size_t n, int iters, std::vector<double>* samples) {
  return measure_stream_gbps(be, core::DType::kF32, core::DType::kNone, n, iters, samples);
}

double time_naive_adamw(backend::cpu::CpuBackend& be, size_t n, int iters) {
  backend::cpu::ThreadPool& pool = be.pool();
  HostArray p(be, n, 0), m(be, n, 1), v(be, n, 2), g(be, n, 3);
  const size_t parts = pool.size();
  pool.run(parts, [&](size_t w) {
    size_t b, e;
    backend::cpu::ThreadPool::split(n, parts, w, b, e);
    for (size_t i = b; i < e; ++i) p[i] = small_value(i), m[i] = 0, v[i] = 0, g[i] = small_value(i + n);
  });
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 1e-2f;
  int step = 0;
  return median_seconds(iters, [&] {
    ++step;
    const float bc1 = 1.0f - std::pow(b1, float(step)), bc2 = 1.0f - std::pow(b2, float(step));
    pool.run(parts, [&](size_t w) {
      size_t b, e;
      backend::cpu::ThreadPool::split(n, parts, w, b, e);
      for (size_t i = b; i < e; ++i) {
        p[i] *= 1.0f - lr * wd;
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i] / bc2) + eps);
      }
    });
  });
}

}  // namespace tf::app
