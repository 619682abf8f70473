// The Twin-Flow split: a rank's flat optimizer shard cut, element-granular, into a GPU segment and a
// CPU segment by `ratio`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/partition.h"

namespace tf::core {

// The CPU segment is the END of the shard: the last layers in forward order, whose gradients are
// reduced FIRST in backward. Their D2H copies and the CPU optimizer can then start while backward
// still runs on the earlier layers (docs/ARCHITECTURE.md, "Where the CPU segment sits").
struct TwinFlowSplit {
  double requested_ratio = 0;
  double actual_ratio = 0;  // cpu_elems / shard elems
  int64_t shard_elems = 0;
  int64_t cpu_elems = 0;  // a multiple of the alignment (or the whole shard)
  int64_t gpu_elems = 0;
  int64_t boundary = 0;         // shard offset where the CPU segment starts (= gpu_elems)
  std::vector<ShardPiece> gpu;  // pieces (or parts of pieces) on the GPU, forward order
  std::vector<ShardPiece> cpu;  // pieces on the CPU, forward order
};

// cpu_elems = round(ratio * shard / align) * align, clamped to the shard: the actual ratio is within
// half an alignment unit of the request (DeepSpeed rounds to whole sub-groups instead). Throws
// InputError unless 0 <= ratio <= 1.
TwinFlowSplit split_shard(const RankShard& shard, double ratio, int64_t align_elems);

}  // namespace tf::core
