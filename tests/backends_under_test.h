// Every backend the conformance suite runs over. Unavailable ones are listed with the reason, so
// that tests skip and say why.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#if defined(TWINFLOW_HAVE_CUDA)
#include "backends/cuda/cuda_backend.h"
#endif

namespace tf::test {

struct BackendEntry {
  std::string name;
  std::string unavailable;  // empty when usable
  std::function<std::unique_ptr<backend::OptimizerBackend>()> make;
};

inline std::vector<BackendEntry> backends_under_test() {
  using backend::cpu::Isa;
  std::vector<BackendEntry> out;
  // Each SIMD path twice: with the exact path as this CPU's probe decides (auto), and forced on ("_exact":
  // every vector near the subnormals takes the rules in double, backends/cpu/exact_ops.h), so that both
  // are checked whatever the CPU running the suite decides.
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    for (bool exact : {false, true}) {
      if (exact && isa == Isa::kScalar) continue;  // the reference has no exact path
      BackendEntry e;
      e.name = "cpu_" + std::string(backend::cpu::isa_name(isa)) + (exact ? "_exact" : "");
      if (!backend::cpu::isa_available(isa)) e.unavailable = e.name + " is not supported by this CPU or compiler";
      e.make = [isa, exact] {
        backend::cpu::CpuOptions o;
        o.isa = int(isa);
        o.threads = 2;
        if (exact) o.tuning.exact_path = 1;
        return std::unique_ptr<backend::OptimizerBackend>(new backend::cpu::CpuBackend(o));
      };
      out.push_back(e);
    }
  BackendEntry cu;
  cu.name = "cuda";
#if defined(TWINFLOW_HAVE_CUDA)
  std::string why;
  if (!backend::cuda::cuda_available(&why)) cu.unavailable = "no usable CUDA device: " + why;
  cu.make = [] { return backend::cuda::make_cuda_backend(0); };
#else
  cu.unavailable = "built without CUDA (TWINFLOW_CUDA=OFF or no nvcc)";
#endif
  out.push_back(cu);
  return out;
}

}  // namespace tf::test
