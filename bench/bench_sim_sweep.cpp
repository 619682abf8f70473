// The cost-only simulator's ratio sweep: 101 points of OPT-30B on a DGX-H100 (8 ranks), points/s.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "backends/sim/sim_backend.h"
#include "core/scenario.h"

namespace {

constexpr int kPoints = 101;  // ratios 0, 0.01, ..., 1

// One iteration is the whole sweep; the target is < 1 s per sweep on one core (Release).
void BM_SimSweepOpt30bDgxH100(benchmark::State& state) {
  const tf::core::Scenario s = tf::core::load_default_scenario();  // scenarios/opt-30b-dgx-h100.yaml
  int64_t checksum = 0;
  for (auto _ : state) {
    for (int i = 0; i < kPoints; ++i) checksum += tf::backend::sim::simulate_step(s, i / double(kPoints - 1)).step_ns;
    benchmark::DoNotOptimize(checksum);
  }
  state.counters["points/s"] = benchmark::Counter(double(state.iterations()) * kPoints, benchmark::Counter::kIsRate);
  state.counters["ranks"] = double(s.cluster.world_size());
}
BENCHMARK(BM_SimSweepOpt30bDgxH100)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
