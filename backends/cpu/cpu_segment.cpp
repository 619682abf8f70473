// The CPU half of one rank: segment ranges, first touch per layer, one fused pass per CPU op.
#include "backends/cpu/cpu_segment.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tf::backend::cpu {

std::vector<SegmentRange> segment_ranges(const core::TwinFlowSplit& split) {
  std::vector<SegmentRange> out;
  for (const core::ShardPiece& p : split.cpu)
    out.push_back({p.layer, p.shard_offset - split.boundary, p.shard_offset - split.boundary + p.count});
  return out;
}

CpuSegment::CpuSegment(const CpuOptions& opt, core::OptimizerKind kind, const SegmentBuffers& bufs,
                       std::vector<SegmentRange> ranges)
    : be_(opt), kind_(kind), bufs_(bufs), ranges_(std::move(ranges)) {
  int64_t prev_end = 0;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const SegmentRange& r = ranges_[i];
    if (r.begin < prev_end || r.end < r.begin)
      throw core::InputError("cpu segment: range " + std::to_string(i) + " (layer " + std::to_string(r.layer) + ", [" +
                             std::to_string(r.begin) + ", " + std::to_string(r.end) +
                             ")) overlaps the one before or runs backwards");
    prev_end = r.end;
    if (r.layer >= range_of_layer_.size()) range_of_layer_.resize(r.layer + 1, -1);
    if (range_of_layer_[r.layer] >= 0)
      throw core::InputError("cpu segment: layer " + std::to_string(r.layer) + " has two CPU ranges");
    range_of_layer_[r.layer] = int64_t(i);
  }
}

const SegmentRange* CpuSegment::find(size_t layer) const {
  if (layer >= range_of_layer_.size() || range_of_layer_[layer] < 0) return nullptr;
  return &ranges_[size_t(range_of_layer_[layer])];
}

OptimChunk CpuSegment::chunk(int64_t begin, int64_t end) const {
  const auto n = size_t(end - begin);
  const auto at = [&](void* base, core::DType d) {
    return static_cast<char*>(base) + begin * int64_t(core::dtype_bytes(d));
  };
  OptimChunk c;
  c.param = {bufs_.master + begin, n, core::DType::kF32};
  c.state1 = {bufs_.state1 + begin, n, core::DType::kF32};
  if (bufs_.state2) c.state2 = {bufs_.state2 + begin, n, core::DType::kF32};
  c.grad = {at(bufs_.grad, bufs_.grad_dtype), n, bufs_.grad_dtype};
  if (bufs_.copy && bufs_.copy_dtype != core::DType::kNone)
    c.param_copy = {at(bufs_.copy, bufs_.copy_dtype), n, bufs_.copy_dtype};
  return c;
}

void CpuSegment::first_touch() {
  for (const SegmentRange& r : ranges_) {
    if (r.end <= r.begin) continue;
    const OptimChunk c = chunk(r.begin, r.end);
    be_.first_touch(std::span<const OptimChunk>(&c, 1));
  }
}

GradStats CpuSegment::update_layer(size_t layer, const core::StepScalars& s) {
  const SegmentRange* r = find(layer);
  if (!r || r->end <= r->begin) return {};
  const OptimChunk c = chunk(r->begin, r->end);
  return be_.step(kind_, std::span<const OptimChunk>(&c, 1), s);
}

OptimChunk CpuSegment::chunk_at(const SegmentRange& r, const LayerState& at) const {
  OptimChunk c = chunk(r.begin, r.end);
  const size_t n = c.param.count;
  c.param = {at.master, n, core::DType::kF32};
  c.state1 = {at.state1, n, core::DType::kF32};
  c.state2 = at.state2 ? BufferView{at.state2, n, core::DType::kF32} : BufferView{};
  return c;
}

GradStats CpuSegment::update_layer(size_t layer, const core::StepScalars& s, const LayerState& to,
                                   const LayerState* from) {
  const SegmentRange* r = find(layer);
  if (!r || r->end <= r->begin) return {};
  OptimChunk c = chunk_at(*r, to);
  if (from) c.from = {from->master, from->state1, from->state2};
  return be_.step(kind_, std::span<const OptimChunk>(&c, 1), s);
}

LayerState CpuSegment::layer_state(size_t layer) const {
  const SegmentRange* r = find(layer);
  if (!r || r->end <= r->begin) return {};
  return {bufs_.master + r->begin, bufs_.state1 + r->begin, bufs_.state2 ? bufs_.state2 + r->begin : nullptr};
}

void CpuSegment::first_touch(size_t layer, const LayerState& at) {
  const SegmentRange* r = find(layer);
  if (!r || r->end <= r->begin) return;
  OptimChunk c = chunk_at(*r, at);
  c.grad = {};
  c.param_copy = {};
  be_.first_touch(std::span<const OptimChunk>(&c, 1));
}

}  // namespace tf::backend::cpu
