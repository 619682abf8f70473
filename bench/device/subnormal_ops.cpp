// Which AVX-512 floating-point instructions slow down on subnormal operands or results, on this CPU?
// (The CPU optimizer ran 5-6x slower on subnormal data on the H200 host: bench/results/
// 2026-11-29-h200-gpu-optimizer-values.) For each instruction the optimizer's kernels use, a loop over
// an L1-resident buffer of 1024 floats, 2000 passes, on one core, with the operands normal (the result
// normal), a subnormal operand (normal result where the instruction allows), and a subnormal result.
// Prints ns per 16-lane instruction and the ratio to the normal case. Build (here, no GPU needed):
//   g++ -O2 -mavx512f -mavx512dq -mavx512vl -Wno-uninitialized -o subnormal_ops bench/device/subnormal_ops.cpp
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

namespace {

constexpr int kN = 1024, kPasses = 2000;

double time_ns(const std::function<void()>& body) {
  body();  // warm-up
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = ns < best ? ns : best;
  }
  return best / (double(kPasses) * kN / 16);
}

// out[i] = op(a[i], b[i], c[i]) over the buffer, kPasses times (the results stored, so nothing is elided).
template <class Op>
double run_ps(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c, Op op) {
  std::vector<float> out(kN);
  return time_ns([&] {
    for (int p = 0; p < kPasses; ++p)
      for (int i = 0; i < kN; i += 16)
        _mm512_storeu_ps(&out[size_t(i)],
                         op(_mm512_loadu_ps(&a[size_t(i)]), _mm512_loadu_ps(&b[size_t(i)]), _mm512_loadu_ps(&c[size_t(i)])));
    asm volatile("" : : "r"(out.data()) : "memory");
  });
}

std::vector<float> filled(float x) { return std::vector<float>(kN, x); }

void row(const char* name, double normal, double sub_in, double sub_out) {
  std::printf("%-34s %8.2f %8.2f %8.2f   %6.1fx %6.1fx\n", name, normal, sub_in, sub_out, sub_in / normal,
              sub_out / normal);
}

}  // namespace

int main() {
  const float sub = 1e-40f, tiny = 1e-20f;
  std::printf("ns per 16-lane instruction (best of 5 x %d passes over %d floats, one core)\n", kPasses, kN);
  std::printf("%-34s %8s %8s %8s   %7s %7s\n", "instruction", "normal", "sub in", "sub out", "in/norm", "out/norm");
  auto mul = [](__m512 a, __m512 b, __m512) { return _mm512_mul_ps(a, b); };
  row("vmulps", run_ps(filled(1.5f), filled(0.75f), filled(0), mul),
      run_ps(filled(sub), filled(1e30f), filled(0), mul),  // subnormal x 1e30 = 1e-10
      run_ps(filled(tiny), filled(tiny), filled(0), mul));  // 1e-40
  auto add = [](__m512 a, __m512 b, __m512) { return _mm512_add_ps(a, b); };
  row("vaddps", run_ps(filled(1.5f), filled(0.75f), filled(0), add),
      run_ps(filled(sub), filled(1.0f), filled(0), add),  // 1 + subnormal = 1
      run_ps(filled(3e-38f), filled(-2.9e-38f), filled(0), add));  // a subnormal difference
  auto fma = [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); };
  row("vfmadd (0.9 m + c)", run_ps(filled(0.9f), filled(1e-5f), filled(1e-6f), fma),
      run_ps(filled(0.9f), filled(sub), filled(1e-6f), fma),  // subnormal m, normal result
      run_ps(filled(0.9f), filled(sub), filled(0.f), fma));   // decayed m: 0.9 x 1e-40 + 0
  auto sqrt = [](__m512 a, __m512, __m512) { return _mm512_sqrt_ps(a); };
  row("vsqrtps", run_ps(filled(1e-10f), filled(0), filled(0), sqrt), run_ps(filled(sub), filled(0), filled(0), sqrt),
      0.0 / 0.0);
  auto div = [](__m512 a, __m512 b, __m512) { return _mm512_div_ps(a, b); };
  row("vdivps (m / den)", run_ps(filled(1e-5f), filled(1e-8f), filled(0), div),
      run_ps(filled(sub), filled(1e-8f), filled(0), div),     // subnormal m / eps = 1e-32
      run_ps(filled(1e-30f), filled(1e10f), filled(0), div));  // 1e-40
  auto cvt = [](__m512 a, __m512, __m512) {  // float -> double -> float (acc_sq reads the gradient in double)
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
    return _mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_mul_pd(lo, lo)));
  };
  row("vcvtps2pd + vmulpd + vcvtpd2ps", run_ps(filled(1e-5f), filled(0), filled(0), cvt),
      run_ps(filled(sub), filled(0), filled(0), cvt),  // subnormal in, 1e-80 -> 0 out (underflow)
      run_ps(filled(1e-20f), filled(0), filled(0), cvt));  // 1e-40 out
  return 0;
}
