// One conformance suite over every backend: bitwise against the scalar path (the written fp32
// order), within the stated tolerance of the double Eigen reference, and non-finite handling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "apps/twinflow/optim_harness.h"
#include "core/error.h"
#include "tests/backends_under_test.h"

using namespace tf;
using core::DType;
using core::OptimizerKind;

namespace {

struct Case {
  std::string backend;
  OptimizerKind kind;
  DType grad, copy;
};

// Readable test parameter in listings (instead of the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.backend << "/" << core::optimizer_name(c.kind) << "/grad " << core::dtype_name(c.grad) << "/copy "
      << core::dtype_name(c.copy);
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const auto& b : test::backends_under_test())
    for (OptimizerKind k : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kAdagrad, OptimizerKind::kLion})
      for (DType g : {DType::kF32, DType::kBF16, DType::kF16})
        for (DType c : {DType::kNone, DType::kBF16, DType::kF16}) out.push_back({b.name, k, g, c});
  return out;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.backend + "_" + std::string(core::optimizer_name(c.kind)) + "_g" + std::string(core::dtype_name(c.grad)) +
         "_c" + std::string(core::dtype_name(c.copy));
}

class OptimConformance : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    for (auto& e : test::backends_under_test())
      if (e.name == GetParam().backend) entry_ = e;
    if (!entry_.unavailable.empty()) GTEST_SKIP() << entry_.unavailable;
    backend_ = entry_.make();
    backend::cpu::CpuOptions o;
    o.isa = int(backend::cpu::Isa::kScalar);
    o.threads = 1;
    scalar_ = std::make_unique<backend::cpu::CpuBackend>(o);
  }
  test::BackendEntry entry_;
  std::unique_ptr<backend::OptimizerBackend> backend_;
  std::unique_ptr<backend::cpu::CpuBackend> scalar_;
};

// Bit for bit against the scalar path, random sizes (tails), chunks, hyper-parameters, 7 steps.
TEST_P(OptimConformance, BitwiseEqualToScalarPath) {
  const Case& c = GetParam();
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    harness::Problem p = harness::random_problem(seed * 1000 + uint64_t(c.kind), c.kind, c.grad, c.copy, 9000);
    p.steps = 7;
    const auto a = harness::run_backend(*backend_, p);
    const auto b = harness::run_backend(*scalar_, p);
    const auto rep = harness::compare_bits(a, b);
    EXPECT_TRUE(rep.equal) << harness::describe(p) << "\n" << rep.mismatches << " mismatches, first " << rep.first;
    // every output element was written: no poison (0xFFFF) left in the copy
    for (size_t i = 0; i < a.copy.size(); ++i) ASSERT_NE(a.copy[i], 0xFFFF) << "copy[" << i << "] unwritten";
  }
}

// Bit for bit against the scalar path where IEEE division and square root leave their fast paths: zero
// gradients on zero state (sqrt(0), 0 / den), subnormal v, v at the GPU's fast square root edge (2^-101),
// subnormal gradients and m, and zero gradients on live state (harness::special_grad), every 3rd element;
// non-finite gradients at step 2 every 7th.
TEST_P(OptimConformance, BitwiseEqualToScalarPathOnZerosAndSubnormals) {
  const Case& c = GetParam();
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    harness::Problem p = harness::random_problem(seed * 7919 + uint64_t(c.kind), c.kind, c.grad, c.copy, 9000);
    p.steps = 6;
    p.special_every = 3;
    p.nonfinite_every = 7;  // NaN and infinite gradients at step 2 in vectors that take the exact path too
    const auto a = harness::run_backend(*backend_, p);
    const auto b = harness::run_backend(*scalar_, p);
    const auto rep = harness::compare_bits(a, b);
    EXPECT_TRUE(rep.equal) << harness::describe(p) << "\n" << rep.mismatches << " mismatches, first " << rep.first;
  }
}

// Within the stated elementwise tolerance of the double reference after 100 steps.
TEST_P(OptimConformance, WithinToleranceOfDoubleReferenceOver100Steps) {
  const Case& c = GetParam();
  harness::Problem p = harness::random_problem(77 + uint64_t(c.kind), c.kind, c.grad, c.copy, 3000);
  p.n = 3000 + 37;
  p.steps = 100;
  const auto got = harness::run_backend(*backend_, p);
  const auto ref = harness::run_reference(p);
  const auto tol = harness::stated_tolerance(c.kind, p.hp, p.steps);
  const auto rep = harness::compare_tolerance(got, ref, tol);
  EXPECT_TRUE(rep.within) << harness::describe(p) << "\nmax abs err " << rep.max_abs << " at " << rep.worst_array << "["
                          << rep.worst_index << "], max rel err " << rep.max_rel << "; rtol " << tol.rtol << " atol "
                          << tol.atol << " scale " << tol.scale;
  for (size_t s = 0; s < got.stats.size(); ++s) {
    ASSERT_EQ(got.stats[s].sumsq, ref.stats[s].sumsq) << "step " << s + 1 << ": canonical sum of squares";
    ASSERT_EQ(got.stats[s].nonfinite, 0u);
  }
}

// An lr schedule reaches every backend and the double reference alike: 30 steps of a WarmupCosineLR
// (warm-up over 8, cosine to step 30) bit for bit against the scalar path and within the stated
// tolerance (at the schedule's peak lr) of the reference, which with the constant lr lands elsewhere.
TEST_P(OptimConformance, ScheduledLrReachesEveryBackendAndTheReference) {
  const Case& c = GetParam();
  harness::Problem p = harness::random_problem(314 + uint64_t(c.kind), c.kind, c.grad, c.copy, 3000);
  p.steps = 30;
  p.schedule.kind = core::LrScheduleKind::kWarmupCosineLr;
  p.schedule.warmup_num_steps = 8;
  p.schedule.warmup_min_ratio = 0.05;
  p.schedule.cos_min_ratio = 0.1;
  p.schedule.total_num_steps = 30;
  const auto got = harness::run_backend(*backend_, p);
  const auto bits = harness::compare_bits(got, harness::run_backend(*scalar_, p));
  EXPECT_TRUE(bits.equal) << harness::describe(p) << "\n" << bits.mismatches << " mismatches, first " << bits.first;
  const auto ref = harness::run_reference(p);
  const auto tol = harness::stated_tolerance(c.kind, p.hp, p.steps);  // the peak lr is the optimizer's
  const auto rep = harness::compare_tolerance(got, ref, tol);
  EXPECT_TRUE(rep.within) << harness::describe(p) << "\nmax abs err " << rep.max_abs << " at " << rep.worst_array << "["
                          << rep.worst_index << "]";
  harness::Problem constant = p;
  constant.schedule = {};
  EXPECT_FALSE(harness::compare_tolerance(got, harness::run_reference(constant), tol).within) << harness::describe(p);
}

// NaN/Inf gradients are counted; those elements keep their old master, states and copy; all other
// elements match the reference that skips the same elements.
TEST_P(OptimConformance, NonFiniteGradientsAreCountedAndLeaveStateUntouched) {
  const Case& c = GetParam();
  harness::Problem p = harness::random_problem(4242, c.kind, c.grad, c.copy, 2000);
  p.n = 5000;
  p.steps = 2;
  p.nonfinite_every = 97;
  const auto got = harness::run_backend(*backend_, p);
  EXPECT_EQ(got.stats[0].nonfinite, 0u);
  EXPECT_EQ(got.stats[1].nonfinite, (p.n + 96) / 97);
  EXPECT_TRUE(std::isnan(got.stats[1].sumsq) || std::isinf(got.stats[1].sumsq));
  // the poisoned elements after step 2 equal their values after step 1
  harness::Problem one = p;
  one.steps = 1;
  const auto after1 = harness::run_backend(*backend_, one);
  for (size_t i = 0; i < p.n; i += 97) {
    ASSERT_EQ(got.param[i], after1.param[i]) << i;
    ASSERT_EQ(got.state1[i], after1.state1[i]) << i;
    if (!got.state2.empty()) {
      ASSERT_EQ(got.state2[i], after1.state2[i]) << i;
    }
    if (!got.copy.empty()) {
      ASSERT_EQ(got.copy[i], after1.copy[i]) << i;
    }
  }
  const auto ref = harness::run_reference(p);
  EXPECT_TRUE(harness::compare_tolerance(got, ref, harness::stated_tolerance(c.kind, p.hp, p.steps)).within);
}

// grad_stats (no update) returns the same canonical bits as the fused pass and the definition.
TEST_P(OptimConformance, GradStatsMatchesCanonicalDefinition) {
  const Case& c = GetParam();
  if (c.copy != DType::kNone || c.kind != OptimizerKind::kAdamW) GTEST_SKIP() << "covered by one combination";
  harness::Problem p = harness::random_problem(99, c.kind, c.grad, c.copy, 50000);
  p.n = 2048 * 9 + 5;
  const auto raw = harness::raw_grad(p, 1);
  auto buf = backend_->allocate(raw.size());
  backend_->upload(*buf, raw.data(), raw.size());
  const backend::BufferView v{buf->data(), p.n, c.grad};
  const auto st = backend_->grad_stats(std::span<const backend::BufferView>(&v, 1));
  const auto ref = harness::run_reference([&] {
    harness::Problem q = p;
    q.steps = 1;
    q.chunks = 1;
    return q;
  }());
  EXPECT_EQ(st.sumsq, ref.stats[0].sumsq);
  EXPECT_EQ(st.nonfinite, 0u);

  // With NaN/Inf in the gradient (step 2 of a poisoned problem) the read-only pass counts them, so a
  // caller can skip the step before any state changes.
  harness::Problem bad = p;
  bad.nonfinite_every = 101;
  const auto raw2 = harness::raw_grad(bad, 2);
  backend_->upload(*buf, raw2.data(), raw2.size());
  const auto st2 = backend_->grad_stats(std::span<const backend::BufferView>(&v, 1));
  EXPECT_EQ(st2.nonfinite, (bad.n + 100) / 101);
  EXPECT_FALSE(std::isfinite(st2.sumsq));
}

INSTANTIATE_TEST_SUITE_P(AllBackends, OptimConformance, testing::ValuesIn(all_cases()), case_name);

// Results do not depend on the thread count (static split + per-tile sums).
TEST(CpuThreads, BitsIndependentOfThreadCount) {
  harness::Problem p = harness::random_problem(5, OptimizerKind::kAdamW, DType::kBF16, DType::kBF16, 10);
  p.n = 2048 * 37 + 11;
  p.chunks = 3;
  harness::Result first;
  for (size_t threads : {1u, 2u, 3u, 8u}) {
    backend::cpu::CpuOptions o;
    o.threads = threads;
    o.min_tiles_per_thread = 1;
    backend::cpu::CpuBackend be(o);
    const auto r = harness::run_backend(be, p);
    if (threads == 1)
      first = r;
    else
      EXPECT_TRUE(harness::compare_bits(r, first).equal) << threads << " threads";
  }
}

// Prefetching and streaming stores change memory traffic, never bits.
TEST(CpuTuning, BitsIndependentOfPrefetchAndStreamingStores) {
  for (DType copy : {DType::kBF16, DType::kF16}) {
    harness::Problem p = harness::random_problem(6, OptimizerKind::kAdamW, DType::kBF16, copy, 10);
    p.n = 2048 * 21 + 3;
    p.chunks = 2;
    p.nonfinite_every = 333;  // the rare non-finite path must also keep the old copy with streaming on
    p.steps = 3;
    backend::cpu::CpuBackend plain{backend::cpu::CpuOptions{}};
    const auto base = harness::run_backend(plain, p);
    for (uint32_t pf : {0u, 64u, 1024u}) {
      backend::cpu::CpuOptions o;
      o.tuning.prefetch_elems = pf;
      o.tuning.stream_copy = true;
      backend::cpu::CpuBackend be(o);
      const auto rep = harness::compare_bits(harness::run_backend(be, p), base);
      EXPECT_TRUE(rep.equal) << "prefetch " << pf << ": " << rep.first;
    }
  }
}

// Unrolling, interleaving tiles, the prefetch level and the pool's spin change the order of memory
// accesses, never bits: every ISA, every optimizer, with tails, partial last tiles and non-finite lanes,
// against the plain kernel elementwise (master, states, copy and the statistics).
TEST(CpuTuning, BitsIndependentOfUnrollInterleaveAndSpin) {
  for (backend::cpu::Isa isa : {backend::cpu::Isa::kScalar, backend::cpu::Isa::kAvx2, backend::cpu::Isa::kAvx512}) {
    if (!backend::cpu::isa_available(isa)) continue;
    for (OptimizerKind k : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kAdagrad, OptimizerKind::kLion})
      for (DType g : {DType::kBF16, DType::kF32}) {
        harness::Problem p = harness::random_problem(70 + uint64_t(k), k, g, g == DType::kF32 ? DType::kNone : g, 10);
        p.n = 2048 * 13 + 21;  // odd tile counts per worker, a partial last tile and a tail vector
        p.chunks = 2;
        p.nonfinite_every = 257;
        p.steps = 2;
        backend::cpu::CpuOptions plain;
        plain.isa = int(isa);
        plain.threads = 2;
        plain.min_tiles_per_thread = 1;
        backend::cpu::CpuBackend base_be(plain);
        const auto base = harness::run_backend(base_be, p);
        for (const char* spec :
             {"unroll=2", "unroll=4", "interleave=2", "interleave=2,nt=1", "level=1", "level=1,unroll=2,nt=1",
              "spin=20,block=1", "block=0,interleave=2", "nice=5", "idle=0"}) {
          backend::cpu::CpuOptions o = plain;
          backend::cpu::apply_tuning_spec(o, spec, "test");
          backend::cpu::CpuBackend be(o);
          const auto rep = harness::compare_bits(harness::run_backend(be, p), base);
          EXPECT_TRUE(rep.equal) << backend::cpu::isa_name(isa) << " " << core::optimizer_name(k) << " grad "
                                 << core::dtype_name(g) << " " << spec << ": " << rep.first;
        }
      }
  }
}

// A spec names every knob; tuning_spec writes them back in a form apply_tuning_spec reads to the same
// options; a value out of range names the pair and its range.
TEST(CpuTuning, SpecRoundTripsAndNamesBadValues) {
  backend::cpu::CpuOptions o;
  backend::cpu::apply_tuning_spec(o, "nice=7,spin=20,block=3,nt=0,ntoop=0,idle=0", "test");
  EXPECT_EQ(o.pool_nice, 7u);
  EXPECT_FALSE(o.pool_idle);
  EXPECT_FALSE(o.tuning.stream_out_of_place);
  const std::string spec = backend::cpu::tuning_spec(o);
  EXPECT_NE(spec.find(",nice=7,idle=0,"), std::string::npos) << spec;
  EXPECT_NE(spec.find(",ntoop=0,"), std::string::npos) << spec;
  backend::cpu::CpuOptions back;
  backend::cpu::apply_tuning_spec(back, spec, "test");
  EXPECT_EQ(backend::cpu::tuning_spec(back), spec);
  try {
    backend::cpu::apply_tuning_spec(o, "nice=20", "--cpu-tuning");
    ADD_FAILURE() << "nice=20 accepted";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--cpu-tuning: 'nice=20': the value must be an integer in [0, 19]"),
              std::string::npos)
        << e.what();
  }
}

// The bound's pass (CpuBackend::stream_pass) streams every element of every buffer, under every
// unroll and interleave: p += g, s1 += g, s2 += g and the copy from p, checked elementwise.
TEST(CpuStreams, EveryElementOfEveryStream) {
  const size_t n = 2048 * 7 + 45;
  for (const char* spec : {"default", "unroll=4", "interleave=2,nt=1", "level=1,unroll=2", "prefetch=0,block=0"}) {
    backend::cpu::CpuOptions o;
    o.threads = 2;
    o.min_tiles_per_thread = 1;
    backend::cpu::apply_tuning_spec(o, spec, "test");
    backend::cpu::CpuBackend be(o);
    std::vector<float> p(n), m(n), v(n);          // (n) fp32 each
    std::vector<uint16_t> g(n), copy(n, 0xFFFF);  // (n) bf16 each
    for (size_t i = 0; i < n; ++i) {
      p[i] = float(i % 97) * 0.25f;
      m[i] = -float(i % 13);
      v[i] = 1.0f + float(i % 5);
      g[i] = core::f32_to_bf16(float(int(i % 7) - 3) * 0.5f);
    }
    const std::vector<float> p0 = p, m0 = m, v0 = v;
    backend::OptimChunk c;
    c.param = {p.data(), n, DType::kF32};
    c.state1 = {m.data(), n, DType::kF32};
    c.state2 = {v.data(), n, DType::kF32};
    c.grad = {g.data(), n, DType::kBF16};
    c.param_copy = {copy.data(), n, DType::kBF16};
    be.stream_pass(std::span<const backend::OptimChunk>(&c, 1));
    for (size_t i = 0; i < n; ++i) {
      const float gi = core::bf16_to_f32(g[i]);
      ASSERT_EQ(p[i], p0[i] + gi) << spec << " p[" << i << "]";
      ASSERT_EQ(m[i], m0[i] + gi) << spec << " m[" << i << "]";
      ASSERT_EQ(v[i], v0[i] + gi) << spec << " v[" << i << "]";
      ASSERT_EQ(copy[i], core::f32_to_bf16(p[i])) << spec << " copy[" << i << "]";
    }
  }
}

// An out-of-place update (OptimChunk::from: the speculative update into a spare state slot) writes the
// bits an in-place update writes, for every ISA, optimizer, gradient and copy dtype, with tails and
// non-finite lanes, with and without streaming stores; its source stays untouched.
TEST(CpuOutOfPlace, SameBitsAsInPlace) {
  const size_t n = 2048 * 3 + 37;
  for (backend::cpu::Isa isa : {backend::cpu::Isa::kScalar, backend::cpu::Isa::kAvx2, backend::cpu::Isa::kAvx512}) {
    if (!backend::cpu::isa_available(isa)) continue;
    for (bool stream : {false, true}) {
      backend::cpu::CpuOptions o;
      o.isa = int(isa);
      o.threads = 2;
      o.min_tiles_per_thread = 1;
      o.tuning.stream_out_of_place = stream;
      backend::cpu::CpuBackend be(o);
      for (OptimizerKind k :
           {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kAdagrad, OptimizerKind::kLion})
        for (DType g : {DType::kF32, DType::kBF16, DType::kF16})
          for (DType cp : {DType::kNone, DType::kBF16, DType::kF16}) {
            harness::Problem p = harness::random_problem(31 + uint64_t(k), k, g, cp, 10);
            p.n = n;
            p.nonfinite_every = 211;
            const bool two = core::state_count(k) == 2;
            const std::vector<uint8_t> raw = harness::raw_grad(p, 2);  // (n) grad dtype, with non-finite lanes
            std::vector<float> p0(n), m0(n), v0(two ? n : 0);          // the current slot: (n) fp32 each
            for (size_t i = 0; i < n; ++i) {
              p0[i] = std::sin(float(i)) * 0.5f;
              m0[i] = k == OptimizerKind::kAdagrad ? 0.1f + float(i % 7) : std::cos(float(i)) * 0.01f;
              if (two) v0[i] = 1e-4f * float(i % 13);
            }
            const size_t cb = cp == DType::kNone ? 0 : n;
            std::vector<uint16_t> copy_in(cb, 0x1234), copy_out(cb, 0x1234);  // (n) copy dtype
            std::vector<float> pi = p0, mi = m0, vi = v0;                     // in place
            std::vector<float> po(n, NAN), mo(n, NAN), vo(two ? n : 0, NAN);  // the spare slot, poisoned
            std::vector<uint8_t> gin = raw;
            const core::StepScalars sc = core::make_step_scalars(k, p.hp, 3, 0.25);
            auto chunk = [&](std::vector<float>& a, std::vector<float>& b, std::vector<float>& c,
                             std::vector<uint16_t>& copy) {
              backend::OptimChunk ch;
              ch.param = {a.data(), n, DType::kF32};
              ch.state1 = {b.data(), n, DType::kF32};
              if (two) ch.state2 = {c.data(), n, DType::kF32};
              ch.grad = {gin.data(), n, g};
              if (cp != DType::kNone) ch.param_copy = {copy.data(), n, cp};
              return ch;
            };
            const backend::OptimChunk in_place = chunk(pi, mi, vi, copy_in);
            backend::OptimChunk out = chunk(po, mo, vo, copy_out);
            out.from = {p0.data(), m0.data(), two ? v0.data() : nullptr};
            const std::vector<float> p_src = p0, m_src = m0, v_src = v0;
            const backend::GradStats a = be.step(k, std::span<const backend::OptimChunk>(&in_place, 1), sc);
            const backend::GradStats b = be.step(k, std::span<const backend::OptimChunk>(&out, 1), sc);
            const std::string what = std::string(backend::cpu::isa_name(isa)) + (stream ? " stream " : " ") +
                                     std::string(core::optimizer_name(k)) + " g" + std::string(core::dtype_name(g)) +
                                     " c" + std::string(core::dtype_name(cp));
            ASSERT_GT(a.nonfinite, 0u) << what;
            EXPECT_EQ(a.nonfinite, b.nonfinite) << what;
            EXPECT_EQ(std::memcmp(&a.sumsq, &b.sumsq, 8), 0) << what;
            EXPECT_EQ(std::memcmp(pi.data(), po.data(), n * 4), 0) << what;
            EXPECT_EQ(std::memcmp(mi.data(), mo.data(), n * 4), 0) << what;
            if (two) {
              EXPECT_EQ(std::memcmp(vi.data(), vo.data(), n * 4), 0) << what;
            }
            EXPECT_EQ(copy_in, copy_out) << what;
            EXPECT_EQ(std::memcmp(p0.data(), p_src.data(), n * 4), 0) << what << ": the source changed";
            EXPECT_EQ(std::memcmp(m0.data(), m_src.data(), n * 4), 0) << what << ": the source changed";
            if (two) {
              EXPECT_EQ(std::memcmp(v0.data(), v_src.data(), n * 4), 0) << what << ": the source changed";
            }
          }
    }
  }
}

}  // namespace
