// `twinflow bench --cpu-ranks K,...`: k ranks' CPU optimizer passes at once on this host through the
// engine's CPU path (apps/twinflow/cpu_ranks.h), against the read-modify-write bound measured by the same
// processes (the optimizer's streams without its arithmetic, plain and streamed copy stores), with and
// without DMA traffic, the tuning variants and huge pages on or off.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/twinflow/cli.h"
#include "backends/cpu/cpu_tuning.h"
#include "core/optim/dtype.h"
#include "core/optim/optimizer.h"

namespace tf::app {

struct RanksBenchOptions {
  std::vector<int> ranks;                  // the k to measure, each a group of k processes
  int64_t n = int64_t(1) << 28;            // flat layout: elements over all ranks
  int layers = 32;                         // flat layout: CPU ops per rank
  std::optional<std::string> scenario;     // else: each rank's CPU pieces of this scenario at world k
  double ratio = -1;                       // with a scenario: the CPU share (< 0: the scenario's)
  size_t threads = 0;                      // per rank; 0: its share's cores
  bool pin = true;                         // pin each rank's threads to its CPUs
  bool identical_pinning = false;          // every rank on the same first CPUs (the engine before shares)
  int iters = 10;                          // synchronised passes per row (median)
  std::vector<core::OptimizerKind> kinds;  // each with every gradient dtype
  std::vector<core::DType> grads;          // bf16/fp16: a copy of that dtype; fp32: none
  std::string tuning = "default";          // every row's CPU tuning (backend::cpu::apply_tuning_spec)
  std::vector<std::string> variants;       // AdamW bf16 variants: specs applied over `tuning`
  std::vector<bool> huge_pages = {backend::cpu::kCpuTuning.huge_pages};  // groups: the first has every row,
                                                                         // the others the AdamW bf16 row
  std::string dma = "off";             // off | on | both: H2D+D2H copies on GPU 0 during the passes
  bool per_layer = false;              // also each op's rate (k = 1: how op size costs)
  bool out_of_place = false;           // every row also out of place (CpuUpdate), the two alternating
  bool alternate = false;              // the variants in groups of their own, alternating pass by pass
  std::optional<std::string> profile;  // the simulator's host model with this profile, beside
                                       // the measured AdamW bf16 rows (no DMA, default tuning)
  bool register_memory = false;        // page-lock each rank's memory (CpuRankGroup::register_memory)
  bool footprints = false;             // the scenario's footprint curve instead (apps/twinflow/cpu_footprint.h)
  OutputFiles out;                     // csv, json
};

// Measures and prints the table; returns the exit status.
int bench_cpu_ranks(const RanksBenchOptions& o);

}  // namespace tf::app
