// Helpers of the checkpoint tests and the crash driver: threads standing in for ranks (an AND barrier),
// reference array contents, and layouts (partition + Twin-Flow split, or random).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "core/and_barrier.h"
#include "core/checkpoint.h"
#include "core/partition.h"
#include "core/random.h"
#include "core/twinflow.h"

namespace tf::test {

// The bits every checkpoint of `tag` holds for array `a` at model element `e`: any 32-bit pattern
// (NaN payloads, subnormals, -0 included), so a single flipped or converted bit shows.
inline float ref_value(uint64_t tag, size_t a, int64_t e) {
  const uint64_t r = core::splitmix64(tag * 0x9E3779B97F4A7C15ull ^ (uint64_t(a) << 56) ^ uint64_t(e));
  return std::bit_cast<float>(uint32_t(r >> 32));
}

// One rank's layout: spans into flat arrays of `elems`.
struct RankLayout {
  std::vector<core::ShardSpan> spans;
  int64_t elems = 0;
};

// The engine's layout: each rank's whole shard (GPU segment, then CPU segment), padding included.
inline std::vector<RankLayout> shard_layouts(const core::ModelDesc& model, int world, int stage = 3) {
  const core::Partition part = core::make_partition(model, {stage, world, 2048});
  std::vector<RankLayout> out;
  for (const core::RankShard& s : part.ranks) out.push_back({core::shard_spans(part, s.pieces, 0), s.elems});
  return out;
}

// The functional simulator's layout: every rank's GPU and CPU segments as separate arrays (2 x world).
inline std::vector<RankLayout> segment_layouts(const core::ModelDesc& model, int world, double ratio) {
  const core::Partition part = core::make_partition(model, {3, world, 2048});
  std::vector<RankLayout> out;
  for (const core::RankShard& s : part.ranks) {
    const core::TwinFlowSplit split = core::split_shard(s, ratio, 2048);
    out.push_back({core::shard_spans(part, split.gpu, 0), split.gpu_elems});
    out.push_back({core::shard_spans(part, split.cpu, split.boundary), split.cpu_elems});
  }
  return out;
}

// `world` random layouts covering [0, total) exactly once: random cuts anywhere, pieces dealt to random
// ranks, placed in random order with random gaps.
inline std::vector<RankLayout> random_layouts(int64_t total, int world, std::mt19937_64& rng) {
  std::vector<std::vector<core::ShardSpan>> pieces(static_cast<size_t>(world));
  const int64_t mean = std::max<int64_t>(1, total / (int64_t(world) * 6));
  for (int64_t at = 0; at < total;) {
    const int64_t n = std::min<int64_t>(total - at, 1 + int64_t(rng() % uint64_t(2 * mean)));
    pieces[rng() % size_t(world)].push_back({at, n, 0});
    at += n;
  }
  std::vector<RankLayout> out;
  for (auto& p : pieces) {
    std::shuffle(p.begin(), p.end(), rng);
    RankLayout l;
    for (core::ShardSpan& s : p) {
      l.elems += int64_t(rng() % 5);  // a gap the checkpoint must not touch
      s.offset = l.elems;
      l.elems += s.count;
      l.spans.push_back(s);
    }
    out.push_back(std::move(l));
  }
  return out;
}

// Fills a rank's staging arrays with ref_value(tag, ...) at its spans.
inline void fill_staging(const std::vector<std::span<float>>& staging, const RankLayout& layout, uint64_t tag) {
  for (size_t a = 0; a < staging.size(); ++a)
    for (const core::ShardSpan& s : layout.spans)
      for (int64_t i = 0; i < s.count; ++i) staging[a][size_t(s.offset + i)] = ref_value(tag, a, s.model_begin + i);
}

// Index of the first element whose bits differ from the reference (padding must be 0), or -1.
inline int64_t first_mismatch(const std::vector<float>& got, const RankLayout& layout, uint64_t tag, size_t a) {
  std::vector<float> want(size_t(layout.elems), 0.f);
  for (const core::ShardSpan& s : layout.spans)
    for (int64_t i = 0; i < s.count; ++i) want[size_t(s.offset + i)] = ref_value(tag, a, s.model_begin + i);
  if (got.size() != want.size()) return -2;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0) return int64_t(i);
  return -1;
}

// Runs fn(rank) on `world` threads and joins them.
inline void on_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

}  // namespace tf::test
