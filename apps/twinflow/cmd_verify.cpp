// `twinflow verify`: every available backend, bit for bit against the scalar path (the written
// fp32 order) and within the stated tolerance of the double Eigen reference.
#include <boost/program_options.hpp>
#include <cstdint>
#include <iostream>
#include <memory>
#include <sstream>

#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "apps/twinflow/optim_harness.h"
#include "apps/twinflow/table.h"
#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#if defined(TWINFLOW_HAVE_CUDA)
#include "backends/cuda/cuda_backend.h"
#endif

namespace po = boost::program_options;

namespace tf::app {

namespace {
const IntOption kN{"n", 1, int64_t(1) << 31, 100003, "elements per problem (odd sizes test the tails)"};
const IntOption kSteps{"steps", 1, 1000000, 100, "optimizer steps per problem"};
const IntOption kSeed{"seed", 0, INT64_MAX, 1, "problem seed"};

std::string sci(double v) {
  std::ostringstream os;
  os.precision(2);
  os << std::scientific << v;
  return os.str();
}
}  // namespace

int cmd_verify(const std::vector<std::string>& args) {
  po::options_description desc("twinflow verify: bitwise parity across backends, tolerance vs the reference");
  desc.add_options()("help,h", "show this help");
  for (const IntOption* io : {&kN, &kSteps, &kSeed}) add_int_option(desc, *io);
  desc.add_options()("threads", po::value<size_t>()->default_value(0), "CPU threads (0: all)");
  add_output_options(desc, {.csv = "write the table as CSV", .json = "write the table as JSON"});
  const std::optional<po::variables_map> parsed =
      parse_command(args, desc, nullptr,
                    "\nbits: equal to the cpu-scalar path on every element of master, states, copy and\n"
                    "stats; max abs/rel: elementwise error against the double reference after --steps.\n");
  if (!parsed) return kExitOk;
  const po::variables_map& vm = *parsed;
  const size_t n = size_t(int_option(vm, kN));
  const int steps = int(int_option(vm, kSteps));
  const uint64_t seed = uint64_t(int_option(vm, kSeed));

  struct Entry {
    std::string name;
    std::unique_ptr<backend::OptimizerBackend> be;
  };
  std::vector<Entry> backends;
  backend::cpu::CpuOptions scalar_opt;
  scalar_opt.isa = int(backend::cpu::Isa::kScalar);
  scalar_opt.threads = vm["threads"].as<size_t>();
  backend::cpu::CpuBackend scalar(scalar_opt);
  for (auto isa : {backend::cpu::Isa::kAvx2, backend::cpu::Isa::kAvx512}) {
    if (!backend::cpu::isa_available(isa)) {
      std::cerr << "verify: cpu-" << backend::cpu::isa_name(isa) << " skipped (not available on this CPU)\n";
      continue;
    }
    backend::cpu::CpuOptions o = scalar_opt;
    o.isa = int(isa);
    backends.push_back(
        {"cpu-" + std::string(backend::cpu::isa_name(isa)), std::make_unique<backend::cpu::CpuBackend>(o)});
  }
#if defined(TWINFLOW_HAVE_CUDA)
  std::string why;
  if (backend::cuda::cuda_available(&why))
    backends.push_back({"cuda", backend::cuda::make_cuda_backend(0)});
  else
    std::cerr << "verify: cuda skipped (" << why << ")\n";
#else
  std::cerr << "verify: cuda skipped (built without CUDA)\n";
#endif

  Table t({"optimizer", "grad", "copy", "backend", "bits vs scalar", "max abs err", "max rel err", "tolerance",
           "excluded", "ok"});
  bool all_ok = true;
  const core::OptimizerKind kinds[] = {core::OptimizerKind::kAdamW, core::OptimizerKind::kAdam,
                                       core::OptimizerKind::kAdagrad, core::OptimizerKind::kLion};
  const core::DType dts[] = {core::DType::kF32, core::DType::kBF16, core::DType::kF16};
  size_t done = 0;
  for (auto k : kinds)
    for (auto g : dts) {
      const core::DType c = g == core::DType::kF32 ? core::DType::kBF16 : g;
      harness::Problem p = harness::random_problem(seed * 100 + uint64_t(k), k, g, c, n);
      p.n = n;
      p.steps = steps;
      p.chunks = 3;
      std::cerr << "[" << ++done << "/12] " << harness::describe(p) << "\n";
      const auto ref = harness::run_reference(p);
      const auto base = harness::run_backend(scalar, p);
      const auto tol = harness::stated_tolerance(k, p.hp, p.steps);
      auto row = [&](const std::string& name, const harness::Result& r, const std::string& bits) {
        const auto rep = harness::compare_tolerance(r, ref, tol);
        const bool ok = rep.within && (bits == "equal" || bits == "(baseline)");
        all_ok = all_ok && ok;
        t.add({std::string(core::optimizer_name(k)), std::string(core::dtype_name(g)), std::string(core::dtype_name(c)),
               name, bits, sci(rep.max_abs), sci(rep.max_rel),
               "rtol " + sci(tol.rtol) + " atol " + sci(tol.atol) + " + " + sci(tol.scale) + "*max|ref|",
               std::to_string(rep.excluded), ok ? "yes" : "NO"});
      };
      row("cpu-scalar", base, "(baseline)");
      for (auto& e : backends) {
        const auto r = harness::run_backend(*e.be, p);
        const auto bits = harness::compare_bits(r, base);
        row(e.name, r, bits.equal ? "equal" : std::to_string(bits.mismatches) + " differ: " + bits.first);
      }
    }
  std::cout << "\n";
  t.print(std::cout);
  if (vm.count("csv")) t.write_csv(vm["csv"].as<std::string>());
  if (vm.count("json")) t.write_json(vm["json"].as<std::string>());
  std::cout << (all_ok ? "verify: all backends bitwise equal and within tolerance\n" : "verify: FAILED\n");
  return all_ok ? kExitOk : kExitCheckFailed;
}

}  // namespace tf::app
