// ZeRO sharding: which elements of each gather unit (layer) a rank owns, with alignment and padding.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model.h"

namespace tf::core {

struct PartitionOptions {
  int stage = 3;               // ZeRO stage 1, 2 or 3 (the optimizer shard is the same; memory differs)
  int world = 1;               // ranks
  int64_t align_elems = 2048;  // every slice starts on a multiple of this (core::kStatsTile: the
                               // canonical gradient-statistics tile, so a split never cuts a tile)
};

// Elements [layer_offset, layer_offset + count) of `layer`'s flat parameters, stored at
// [shard_offset, shard_offset + count) of the rank's flat shard. `count` includes padding when the
// slice runs past the layer's real parameters (real_count says how many are real).
struct ShardPiece {
  size_t layer = 0;
  int64_t layer_offset = 0;
  int64_t count = 0;
  int64_t real_count = 0;
  int64_t shard_offset = 0;
};

struct RankShard {
  int rank = 0;
  std::vector<ShardPiece> pieces;  // forward layer order, contiguous in the shard
  int64_t elems = 0;               // shard size including padding (a multiple of align_elems)
  int64_t real_elems = 0;          // real parameters owned
};

struct Partition {
  PartitionOptions opt;
  std::vector<int64_t> layer_params;  // (L) real parameters of each layer
  std::vector<int64_t> layer_slice;   // (L) elements each rank owns of each layer, padded: a multiple of align
  std::vector<RankShard> ranks;       // (world)
  int64_t total_params = 0;
  int64_t max_layer_params = 0;
};

// Each layer's flat parameters are padded to a multiple of world*align and cut into `world` equal,
// aligned slices; rank r owns slice r of every layer. Throws InputError for stage outside 1..3,
// world < 1 or align < 1.
Partition make_partition(const ModelDesc& model, const PartitionOptions& opt);

}  // namespace tf::core
