// `twinflow run --save-master`: the final fp32 master weights as one raw file that every rank writes
// its own weights into, whole or not at all.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/io_hooks.h"

namespace tf::app {

// Writes `total_params` fp32 values in model order (raw float32, 4 bytes each, this machine's byte
// order) to `path`: this rank's (index, value) pairs `mine` at index x 4, the other ranks' theirs, through
// core::write_shared_output_file (`barrier` across the `world` ranks; unused with one). Every index must
// be in [0, total_params) (std::logic_error otherwise: the engine's shard is broken).
void write_master_weights(const std::string& path, int64_t total_params,
                          const std::vector<std::pair<int64_t, float>>& mine, int rank, int world,
                          const core::RankBarrier& barrier, const core::FaultHook& hook = {});

}  // namespace tf::app
