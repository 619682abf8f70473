// Optimizer problems run on any backend and on the Eigen reference, with elementwise comparisons.
#include "apps/twinflow/optim_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>

#include "backends/reference/reference_optim.h"
#include "core/error.h"
#include "core/optim/grad_stats.h"
#include "core/random.h"
#include "core/step_decision.h"

namespace tf::harness {

namespace {

double unit(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

// Chunk boundaries: p.chunks pieces with random sizes (some may be tiny), summing to n.
std::vector<size_t> chunk_bounds(const Problem& p) {
  std::vector<size_t> b = {0};
  const int c = std::max(1, std::min<int>(p.chunks, int(std::max<size_t>(p.n, 1))));
  std::vector<size_t> cuts;
  for (int i = 1; i < c; ++i) cuts.push_back(core::splitmix64(p.seed * 31 + size_t(i)) % (p.n + 1));
  std::sort(cuts.begin(), cuts.end());
  for (size_t x : cuts) b.push_back(x);
  b.push_back(p.n);
  return b;
}

// The gradients of Problem::special_every, chosen by kind (every step unless said):
//   0: +0 and 1: -0 (m = v = 0 for good: sqrt(0) and 0 / den); 2: +-1e-20 (v = (1 - b2) g^2 subnormal);
//   3: +-[1e-15, 1e-13) (v about 2^-101, where a GPU's fast square root path ends); 4: +-[1e-39, 1e-38)
//   (a subnormal gradient, and m); 5: 0 at odd steps, +-[1e-4, 1) at even ones (a zero gradient on live state).
double special_grad(int kind, int step, uint64_t r) {
  const double sign = (r & 1) ? -1.0 : 1.0, u = unit(core::splitmix64(r));
  switch (kind) {
    case 0: return 0.0;
    case 1: return -0.0;
    case 2: return sign * 1e-20;
    case 3: return sign * std::pow(10.0, -15.0 + 2.0 * u);
    case 4: return sign * std::pow(10.0, -39.0 + u);
    default: return step % 2 ? 0.0 : sign * std::pow(10.0, -4.0 + 4.0 * u);
  }
}

float grad_value(const Problem& p, int step, size_t i) {
  const uint64_t r = core::splitmix64(p.seed ^ (uint64_t(step) << 44) ^ (i * 0x2545F4914F6CDD1Dull));
  const double mag = std::pow(10.0, -4.0 + 4.0 * unit(core::splitmix64(r)));
  double v = (r & 1) ? -mag : mag;
  if (p.special_every > 0 && i % size_t(p.special_every) == 0)
    v = special_grad(int((i / size_t(p.special_every)) % 6), step, r);
  if (p.nonfinite_every > 0 && step == 2 && i % size_t(p.nonfinite_every) == 0) {
    switch ((i / size_t(p.nonfinite_every)) % 3) {
      case 0: return std::numeric_limits<float>::quiet_NaN();
      case 1: return std::numeric_limits<float>::infinity();
      default: return -std::numeric_limits<float>::infinity();
    }
  }
  return float(v * p.loss_scale);
}

float raw_to_float(DType t, const uint8_t* base, size_t i) {
  uint16_t h;
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, base + 4 * i, 4);
      return f;
    }
    case DType::kBF16: std::memcpy(&h, base + 2 * i, 2); return core::bf16_to_f32(h);
    case DType::kF16: std::memcpy(&h, base + 2 * i, 2); return core::f16_to_f32(h);
    default: return 0;
  }
}

}  // namespace

std::string describe(const Problem& p) {
  std::ostringstream os;
  os << core::optimizer_name(p.kind) << " grad=" << core::dtype_name(p.grad) << " copy=" << core::dtype_name(p.copy)
     << " n=" << p.n << " chunks=" << p.chunks << " steps=" << p.steps << " seed=" << p.seed << " lr=" << p.hp.lr
     << " b1=" << p.hp.beta1 << " b2=" << p.hp.beta2 << " eps=" << p.hp.eps << " wd=" << p.hp.weight_decay
     << " loss_scale=" << p.loss_scale << " schedule=" << core::lr_schedule_name(p.schedule.kind);
  if (p.special_every > 0) os << " special_every=" << p.special_every;
  return os.str();
}

Problem random_problem(uint64_t seed, OptimizerKind k, DType grad, DType copy, size_t max_n) {
  std::mt19937_64 rng(seed);
  auto u = [&](double a, double b) { return a + (b - a) * unit(rng()); };
  Problem p;
  p.kind = k;
  p.grad = grad;
  p.copy = copy;
  p.seed = seed;
  p.n = 1 + rng() % max_n;
  p.chunks = 1 + int(rng() % 4);
  p.hp = core::default_hyper_params(k);
  p.hp.lr = std::pow(10.0, u(-4, -1.5));
  p.hp.beta1 = u(0.8, 0.95);
  p.hp.beta2 = k == OptimizerKind::kLion ? u(0.9, 0.995) : u(0.99, 0.9999);
  p.hp.eps = k == OptimizerKind::kLion ? 0 : std::pow(10.0, u(-10, -6));
  p.hp.weight_decay = (rng() & 1) ? 0.0 : u(0, 0.1);
  if (k == OptimizerKind::kAdagrad) {
    p.hp.lr_decay = (rng() & 1) ? 0.0 : u(0, 0.01);
    p.hp.initial_accumulator_value = (rng() & 1) ? 0.0 : u(0, 0.1);
  }
  p.loss_scale = grad == DType::kF16 ? 1024.0 : 1.0;
  return p;
}

std::vector<float> initial_params(const Problem& p) {
  std::vector<float> v(p.n);
  for (size_t i = 0; i < p.n; ++i) {
    const uint64_t r = core::splitmix64(p.seed * 7919 + i);
    v[i] = (i % 97 == 5) ? 0.0f : float(unit(r) - 0.5);
  }
  return v;
}

std::vector<uint8_t> raw_grad(const Problem& p, int step) {
  const size_t eb = core::dtype_bytes(p.grad);
  std::vector<uint8_t> out(p.n * eb);
  for (size_t i = 0; i < p.n; ++i) {
    const float f = grad_value(p, step, i);
    if (p.grad == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &f, 4);
    } else {
      const uint16_t h = p.grad == DType::kBF16 ? core::f32_to_bf16(f) : core::f32_to_f16(f);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

Result run_backend(backend::OptimizerBackend& be, const Problem& p) {
  core::validate(p.kind, p.hp);
  const std::vector<size_t> b = chunk_bounds(p);
  const size_t nc = b.size() - 1;
  const bool two = core::state_count(p.kind) == 2;
  const size_t gb = core::dtype_bytes(p.grad);
  struct Bufs {
    std::unique_ptr<backend::Buffer> param, s1, s2, grad, copy;
  };
  std::vector<Bufs> bufs(nc);
  std::vector<backend::OptimChunk> chunks(nc);
  const std::vector<float> p0 = initial_params(p);
  const float init1 = p.kind == OptimizerKind::kAdagrad ? float(p.hp.initial_accumulator_value) : 0.f;
  for (size_t c = 0; c < nc; ++c) {
    const size_t len = b[c + 1] - b[c];
    const size_t alloc = std::max<size_t>(len, 1);
    Bufs& x = bufs[c];
    x.param = be.allocate(alloc * 4);
    x.s1 = be.allocate(alloc * 4);
    if (two) x.s2 = be.allocate(alloc * 4);
    x.grad = be.allocate(alloc * gb);
    if (p.copy != DType::kNone) x.copy = be.allocate(alloc * 2);
    be.upload(*x.param, p0.data() + b[c], len * 4);
    std::vector<float> init(len, init1);
    be.upload(*x.s1, init.data(), len * 4);
    if (two) {
      std::fill(init.begin(), init.end(), 0.f);
      be.upload(*x.s2, init.data(), len * 4);
    }
    if (p.copy != DType::kNone) {
      std::vector<uint16_t> poison(len, 0xFFFF);
      be.upload(*x.copy, poison.data(), len * 2);
    }
    backend::OptimChunk& ch = chunks[c];
    ch.param = {x.param->data(), len, DType::kF32};
    ch.state1 = {x.s1->data(), len, DType::kF32};
    if (two) ch.state2 = {x.s2->data(), len, DType::kF32};
    ch.grad = {x.grad->data(), len, p.grad};
    if (p.copy != DType::kNone) ch.param_copy = {x.copy->data(), len, p.copy};
  }
  Result r;
  // the engines' step scalars: decide_step's (no clip, no non-finite count: the kernels mask elements)
  const core::StepPolicy policy = core::make_step_policy(p.kind, p.hp, 0, p.grad, p.schedule);
  for (int s = 1; s <= p.steps; ++s) {
    const std::vector<uint8_t> g = raw_grad(p, s);
    for (size_t c = 0; c < nc; ++c) be.upload(*bufs[c].grad, g.data() + b[c] * gb, (b[c + 1] - b[c]) * gb);
    const core::StepScalars sc = core::decide_step(policy, s, 0.0, 0, p.loss_scale, s).scalars;
    r.stats.push_back(be.step(p.kind, chunks, sc));
  }
  r.param.resize(p.n);
  r.state1.resize(p.n);
  if (two) r.state2.resize(p.n);
  if (p.copy != DType::kNone) r.copy.resize(p.n);
  for (size_t c = 0; c < nc; ++c) {
    const size_t len = b[c + 1] - b[c];
    be.download(r.param.data() + b[c], *bufs[c].param, len * 4);
    be.download(r.state1.data() + b[c], *bufs[c].s1, len * 4);
    if (two) be.download(r.state2.data() + b[c], *bufs[c].s2, len * 4);
    if (p.copy != DType::kNone) be.download(r.copy.data() + b[c], *bufs[c].copy, len * 2);
  }
  return r;
}

Result run_reference(const Problem& p) {
  using Vec = backend::reference::Vec<double>;
  const std::vector<float> p0 = initial_params(p);
  Vec param(Eigen::Index(p.n));
  for (size_t i = 0; i < p.n; ++i) param[Eigen::Index(i)] = p0[i];
  auto st = backend::reference::OptimState<double>::init(p.kind, p.hp, param);
  const std::vector<size_t> b = chunk_bounds(p);
  Result r;
  for (int s = 1; s <= p.steps; ++s) {
    const std::vector<uint8_t> raw = raw_grad(p, s);
    Vec g(Eigen::Index(p.n));
    std::vector<float> gf(p.n);
    std::vector<size_t> bad;
    GradStats stats;
    for (size_t i = 0; i < p.n; ++i) {
      gf[i] = raw_to_float(p.grad, raw.data(), i);
      const double d = double(gf[i]) / p.loss_scale;
      if (!std::isfinite(d)) {
        bad.push_back(i);
        ++stats.nonfinite;
      }
      g[Eigen::Index(i)] = std::isfinite(d) ? d : 0.0;
    }
    for (size_t c = 0; c + 1 < b.size(); ++c)
      stats.sumsq = stats.sumsq + core::canonical_sumsq(gf.data() + b[c], b[c + 1] - b[c]);
    r.stats.push_back(stats);
    if (p.kind == OptimizerKind::kLion) {
      if (r.ambiguous.empty()) r.ambiguous.assign(p.n, 0);
      const double b1 = p.hp.beta1, band = double(p.steps) * 0x1.0p-22;
      for (size_t i = 0; i < p.n; ++i) {
        const auto k = Eigen::Index(i);
        const double c = b1 * st.state1[k] + (1 - b1) * g[k];
        if (std::fabs(c) <= band * (b1 * std::fabs(st.state1[k]) + (1 - b1) * std::fabs(g[k]))) r.ambiguous[i] = 1;
      }
    }
    auto saved = st;
    backend::reference::step(p.kind, p.hp, p.schedule, st, g);
    for (size_t i : bad) {  // untouched, as the kernels leave them
      const auto k = Eigen::Index(i);
      st.param[k] = saved.param[k];
      st.state1[k] = saved.state1[k];
      if (st.state2.size()) st.state2[k] = saved.state2[k];
    }
  }
  r.param.assign(st.param.data(), st.param.data() + p.n);  // narrowed to float for comparison
  r.state1.assign(st.state1.data(), st.state1.data() + p.n);
  if (st.state2.size()) r.state2.assign(st.state2.data(), st.state2.data() + p.n);
  // keep double precision for the tolerance check in *_d
  r.param_d.assign(st.param.data(), st.param.data() + p.n);
  r.state1_d.assign(st.state1.data(), st.state1.data() + p.n);
  if (st.state2.size()) r.state2_d.assign(st.state2.data(), st.state2.data() + p.n);
  return r;
}

namespace {
template <class T>
void bits_of(const char* name, const std::vector<T>& a, const std::vector<T>& b, BitReport& rep) {
  if (a.size() != b.size()) {
    rep.equal = false;
    if (rep.first.empty()) rep.first = std::string(name) + ": sizes differ";
    return;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) == 0) continue;  // NOLINT(bugprone-suspicious-memory-comparison): bits
    rep.equal = false;
    if (rep.mismatches++ == 0) {
      uint64_t x = 0, y = 0;  // little-endian: the low sizeof(T) bytes
      std::memcpy(&x, &a[i], sizeof(T));
      std::memcpy(&y, &b[i], sizeof(T));
      std::ostringstream os;
      os << name << "[" << i << "]: 0x" << std::hex << x << " vs 0x" << y;
      rep.first = os.str();
    }
  }
}
}  // namespace

BitReport compare_bits(const Result& a, const Result& b) {
  BitReport rep;
  bits_of("param", a.param, b.param, rep);
  bits_of("state1", a.state1, b.state1, rep);
  bits_of("state2", a.state2, b.state2, rep);
  bits_of("copy", a.copy, b.copy, rep);
  std::vector<double> sa, sb;
  std::vector<uint64_t> na, nb;
  for (const auto& s : a.stats) sa.push_back(s.sumsq), na.push_back(s.nonfinite);
  for (const auto& s : b.stats) sb.push_back(s.sumsq), nb.push_back(s.nonfinite);
  bits_of("stats.sumsq", sa, sb, rep);
  bits_of("stats.nonfinite", na, nb, rep);
  return rep;
}

TolReport compare_tolerance(const Result& a, const Result& ref, const Tolerance& tol) {
  TolReport rep;
  auto one = [&](const char* name, const std::vector<float>& x, const std::vector<double>& r,
                 const std::vector<uint8_t>* skip) {
    double big = 0;
    for (double v : r) big = std::max(big, std::fabs(v));
    const double rtol = tol.rtol, atol = tol.atol + tol.scale * big;
    for (size_t i = 0; i < x.size() && i < r.size(); ++i) {
      if (skip && i < skip->size() && (*skip)[i]) {
        ++rep.excluded;
        continue;
      }
      const double err = std::fabs(double(x[i]) - r[i]);
      const double rel = err / std::max(std::fabs(r[i]), 1e-30);
      if (!(err <= atol + rtol * std::fabs(r[i]))) rep.within = false;
      if (err > rep.max_abs || !std::isfinite(err)) {
        rep.max_abs = err;
        rep.worst_index = i;
        rep.worst_array = name;
      }
      if (std::fabs(r[i]) >= 1e-3 * big) rep.max_rel = std::max(rep.max_rel, rel);  // skip near-zero values
    }
    if (x.size() != r.size()) rep.within = false;
  };
  one("param", a.param, ref.param_d, &ref.ambiguous);
  one("state1", a.state1, ref.state1_d, nullptr);
  one("state2", a.state2, ref.state2_d, nullptr);
  return rep;
}

Tolerance stated_tolerance(OptimizerKind k, const core::HyperParams& hp, int steps) {
  // Each step rounds every array a few times (each <= 2^-24 relative) and the update term to a few
  // ulp; errors add up at most linearly in the number of steps.
  Tolerance t;
  t.rtol = 4e-7 * double(steps);
  t.scale = 0x1.0p-22 * double(steps);  // 4 half-ulps per step of the array's largest value
  t.atol = (k == OptimizerKind::kLion ? 0.0 : 1e-6 * hp.lr * double(steps)) + 1e-30;
  return t;
}

}  // namespace tf::harness
