// Element-granular Twin-Flow split of a rank's shard; the CPU takes the shard's tail.
#include "core/twinflow.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace tf::core {

TwinFlowSplit split_shard(const RankShard& shard, double ratio, int64_t align_elems) {
  if (!(ratio >= 0.0 && ratio <= 1.0)) {
    std::ostringstream os;
    os << "zero.offload_optimizer.ratio = " << ratio << " is out of range; expected a value in [0, 1]";
    throw InputError(os.str());
  }
  if (align_elems < 1) throw InputError("alignment must be >= 1");
  TwinFlowSplit s;
  s.requested_ratio = ratio;
  s.shard_elems = shard.elems;
  const double units = std::round(ratio * double(shard.elems) / double(align_elems));
  s.cpu_elems = std::min<int64_t>(shard.elems, int64_t(units) * align_elems);
  s.gpu_elems = shard.elems - s.cpu_elems;
  s.boundary = s.gpu_elems;
  s.actual_ratio = shard.elems ? double(s.cpu_elems) / double(shard.elems) : 0.0;
  for (const ShardPiece& p : shard.pieces) {
    const int64_t begin = p.shard_offset, end = p.shard_offset + p.count;
    if (end <= s.boundary) {
      s.gpu.push_back(p);
    } else if (begin >= s.boundary) {
      s.cpu.push_back(p);
    } else {  // the boundary cuts this piece
      ShardPiece g = p, c = p;
      g.count = s.boundary - begin;
      g.real_count = std::min(p.real_count, g.count);
      c.layer_offset += g.count;
      c.shard_offset = s.boundary;
      c.count = end - s.boundary;
      c.real_count = p.real_count - g.real_count;
      s.gpu.push_back(g);
      s.cpu.push_back(c);
    }
  }
  return s;
}

}  // namespace tf::core
