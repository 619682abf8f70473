// The CPU kernels' exact path (backends/cpu/exact_ops.h): the update rules in double, each operation
// rounded once to fp32, taken by vectors holding values near the subnormals so that the processor's
// subnormal assists are not (5-6x on the H200 host's Xeon). Its operations must give the fp32
// instructions' bits on every input: random bits over every exponent, and FMAs made to fall within
// 2^-24..2^-46 ulps of a rounding midpoint, where a plain double FMA rounded again would differ.
#include <gtest/gtest.h>

#include <string>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"

namespace {

using tf::backend::cpu::Isa;

TEST(ExactPath, EveryOperationGivesTheInstructionsBits) {
  int checked = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!tf::backend::cpu::isa_available(isa)) continue;
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      std::string first;
      const uint64_t bad = tf::backend::cpu::check_exact_path(isa, uint64_t(1) << 21, seed, &first);
      EXPECT_EQ(bad, 0u) << tf::backend::cpu::isa_name(isa) << " seed " << seed << ": " << first;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "neither AVX2 nor AVX-512 is available on this CPU";
}

TEST(ExactPath, TheScalarPathHasNone) {
  std::string first;
  EXPECT_THROW(tf::backend::cpu::check_exact_path(Isa::kScalar, 16, 1, &first), tf::core::InputError);
}

}  // namespace
