// The kinds of data the optimizer benchmarks update (`twinflow bench --values`), one definition for the CPU
// pass (apps/twinflow/measure.h) and the GPU kernel's timing (backends/cuda/cuda_backend.h). IEEE division
// and square root can leave a processor's fast path for some values (zeros, subnormals); these kinds show
// whether a path's rate depends on them (docs/ARCHITECTURE.md, "Numerics").
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tf::core {

enum class StepValues : uint8_t {
  kRandom,     // every gradient finite and non-zero (calibrate's data)
  kHalfZero,   // half the elements, at random, hold g = m = v = 0: units that never had a gradient
  kSubnormal,  // every gradient +-1e-20 (0 in fp16): v = (1 - beta2) g^2 is subnormal
  kDecayed,    // every g = 0 on subnormal states (m = +-1e-40, v = 1e-41): a unit whose gradients stopped
               // long ago (with beta2 = 0.95 a v of 1e-16 is subnormal after ~1,000 steps)
};
inline constexpr std::array<StepValues, 4> kAllStepValues = {StepValues::kRandom, StepValues::kHalfZero,
                                                             StepValues::kSubnormal, StepValues::kDecayed};
inline constexpr float kSubnormalGrad = 1e-20f;
inline constexpr float kDecayedM = 1e-40f, kDecayedV = 1e-41f;

constexpr std::string_view step_values_name(StepValues v) {
  switch (v) {
    case StepValues::kRandom: return "random";
    case StepValues::kHalfZero: return "half-zero";
    case StepValues::kSubnormal: return "subnormal";
    case StepValues::kDecayed: return "decayed";
  }
  return "?";
}

inline std::optional<StepValues> parse_step_values(std::string_view s) {
  for (StepValues v : kAllStepValues)
    if (step_values_name(v) == s) return v;
  return std::nullopt;
}

}  // namespace tf::core
