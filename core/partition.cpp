// ZeRO sharding of a model's layers over ranks, with aligned, padded slices.
#include "core/partition.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tf::core {

Partition make_partition(const ModelDesc& model, const PartitionOptions& opt) {
  if (opt.stage < 1 || opt.stage > 3)
    throw InputError("zero.stage = " + std::to_string(opt.stage) + " is out of range; expected 1, 2 or 3");
  if (opt.world < 1) throw InputError("world size = " + std::to_string(opt.world) + "; expected >= 1");
  if (opt.align_elems < 1) throw InputError("alignment = " + std::to_string(opt.align_elems) + "; expected >= 1");
  Partition p;
  p.opt = opt;
  p.ranks.resize(size_t(opt.world));
  for (int r = 0; r < opt.world; ++r) p.ranks[size_t(r)].rank = r;
  const int64_t unit = int64_t(opt.world) * opt.align_elems;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const int64_t n = model.layers[l].params;
    const int64_t padded = (n + unit - 1) / unit * unit;
    const int64_t slice = padded / opt.world;
    p.layer_params.push_back(n);
    p.layer_slice.push_back(slice);
    p.total_params += n;
    p.max_layer_params = std::max(p.max_layer_params, n);
    if (slice == 0) continue;  // a layer without parameters owns nothing
    for (int r = 0; r < opt.world; ++r) {
      RankShard& s = p.ranks[size_t(r)];
      ShardPiece piece;
      piece.layer = l;
      piece.layer_offset = int64_t(r) * slice;
      piece.count = slice;
      piece.real_count = std::clamp<int64_t>(n - piece.layer_offset, 0, slice);
      piece.shard_offset = s.elems;
      s.pieces.push_back(piece);
      s.elems += slice;
      s.real_elems += piece.real_count;
    }
  }
  return p;
}

}  // namespace tf::core
