// The CPU half of one rank: segment ranges, first touch per layer, one fused pass per CPU op.
#include "backends/cpu/cpu_segment.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"
#include "core/optim/dtype.h"

namespace tf::backend::cpu {

std::vector<SegmentRange> segment_ranges(const core::TwinFlowSplit& split) {
  std::vector<SegmentRange> out;
  for (const core::ShardPiece& p : split.cpu)
    out.push_back({p.layer, p.shard_offset - split.boundary, p.shard_offset - split.boundary + p.count});
  return out;
}

float cpu_fill_value(uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return float(int((x >> 32) % 2001) - 1000) * 1e-4f;  // [-0.1, 0.1]
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
  if (!rings()) return;
  const auto filled = size_t(std::count_if(ranges_.begin(), ranges_.end(), [](auto& r) { return r.end > r.begin; }));
  const auto slots = int32_t(bufs_.staging_offsets.size()) - 1;
  if (bufs_.staging_slots.size() != filled || std::any_of(bufs_.staging_slots.begin(), bufs_.staging_slots.end(),
                                                          [&](int32_t s) { return s < 0 || s >= slots; }))
    throw core::InputError("cpu segment: " + std::to_string(bufs_.staging_slots.size()) + " staging slots given for " +
                           std::to_string(filled) + " ranges with elements over " + std::to_string(slots) +
                           " slots; pass core::StagingRing::slot_of of the step plan");
}

const SegmentRange* CpuSegment::find(size_t layer) const {
  if (layer >= range_of_layer_.size() || range_of_layer_[layer] < 0) return nullptr;
  return &ranges_[size_t(range_of_layer_[layer])];
}

OptimChunk CpuSegment::chunk(int64_t begin, int64_t end, int32_t slot) const {
  const auto n = size_t(end - begin);
  const auto slots = int32_t(bufs_.staging_offsets.size()) - 1;
  if (rings() && (slot < 0 || slot >= slots ||
                  end - begin > bufs_.staging_offsets[size_t(slot) + 1] - bufs_.staging_offsets[size_t(slot)]))
    throw core::InputError("cpu segment: staging slot " + std::to_string(slot) + " of " + std::to_string(slots) +
                           " cannot hold elements [" + std::to_string(begin) + ", " + std::to_string(end) +
                           "); the step plan's staging ring and the segment's buffers disagree");
  const int64_t staged = rings() ? bufs_.staging_offsets[size_t(slot)] : begin;  // grad/copy element index
  const auto at = [&](void* base, core::DType d) {
    return static_cast<char*>(base) + staged * int64_t(core::dtype_bytes(d));
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

// With rings, the i-th range from the segment's end (backward order, as the plan numbers them) is held by
// slot staging_slots[i].
template <class Fn>
void CpuSegment::each_range_backward(Fn&& fn) const {
  size_t i = 0;
  for (auto r = ranges_.rbegin(); r != ranges_.rend(); ++r) {
    if (r->end <= r->begin) continue;
    fn(*r, chunk(r->begin, r->end, rings() ? bufs_.staging_slots[i++] : -1));
  }
}

void CpuSegment::first_touch() {
  each_range_backward(
      [&](const SegmentRange&, const OptimChunk& c) { be_.first_touch(std::span<const OptimChunk>(&c, 1)); });
}

GradStats CpuSegment::update_layer(size_t layer, const core::StepScalars& s, int32_t slot) {
  const SegmentRange* r = find(layer);
  if (!r || r->end <= r->begin) return {};
  const OptimChunk c = chunk(r->begin, r->end, slot);
  return be_.step(kind_, std::span<const OptimChunk>(&c, 1), s);
}

namespace {
// Points the chunk's master and states (n elements) at `at`.
void point_states_at(OptimChunk& c, const LayerState& at, size_t n) {
  c.param = {at.master, n, core::DType::kF32};
  c.state1 = {at.state1, n, core::DType::kF32};
  c.state2 = at.state2 ? BufferView{at.state2, n, core::DType::kF32} : BufferView{};
}
}  // namespace

OptimChunk CpuSegment::chunk_at(const SegmentRange& r, const LayerState& at, int32_t slot) const {
  OptimChunk c = chunk(r.begin, r.end, slot);
  point_states_at(c, at, c.param.count);
  return c;
}

GradStats CpuSegment::update_layer(size_t layer, const core::StepScalars& s, const LayerState& to,
                                   const LayerState* from, int32_t slot) {
  const SegmentRange* r = find(layer);
  if (!r || r->end <= r->begin) return {};
  OptimChunk c = chunk_at(*r, to, slot);
  if (from) c.from = {from->master, from->state1, from->state2};
  return be_.step(kind_, std::span<const OptimChunk>(&c, 1), s);
}

void CpuSegment::fill_measurement_data() {
  const auto n = uint64_t(ranges_.empty() ? 0 : ranges_.back().end);
  const float s1 =
      kind_ == core::OptimizerKind::kAdagrad ? float(core::default_hyper_params(kind_).initial_accumulator_value) : 0.f;
  ThreadPool& pool = be_.pool();
  each_range_backward([&](const SegmentRange& r, const OptimChunk& c) {
    const auto first = uint64_t(r.begin);
    const core::DType gd = c.grad.dtype;
    pool.run(pool.size(), [&](size_t w) {
      size_t b = 0, e = 0;
      ThreadPool::split(c.param.count, pool.size(), w, b, e);
      for (size_t k = b; k < e; ++k) {
        static_cast<float*>(c.param.data)[k] = cpu_fill_value(first + k);
        static_cast<float*>(c.state1.data)[k] = s1;
        if (c.state2.data) static_cast<float*>(c.state2.data)[k] = 0.f;
        const float g = cpu_fill_value(first + k + n);
        if (gd == core::DType::kF32)
          static_cast<float*>(c.grad.data)[k] = g;
        else
          static_cast<uint16_t*>(c.grad.data)[k] =
              gd == core::DType::kBF16 ? core::f32_to_bf16(g) : core::f32_to_f16(g);
      }
    });
  });
}

double CpuSegment::probe_pass(int64_t step) {
  const core::StepScalars s = core::make_step_scalars(kind_, core::default_hyper_params(kind_), step, 1.0);
  const auto t0 = std::chrono::steady_clock::now();
  each_range_backward(
      [&](const SegmentRange&, const OptimChunk& c) { be_.step(kind_, std::span<const OptimChunk>(&c, 1), s); });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

LayerState CpuSegment::layer_state(size_t layer) const {
  const SegmentRange* r = find(layer);
  if (!r || r->end <= r->begin) return {};
  return {bufs_.master + r->begin, bufs_.state1 + r->begin, bufs_.state2 ? bufs_.state2 + r->begin : nullptr};
}

void CpuSegment::first_touch(size_t layer, const LayerState& at) {
  const SegmentRange* r = find(layer);
  if (!r || r->end <= r->begin) return;
  OptimChunk c;  // the states alone: no gradient, no copy
  point_states_at(c, at, size_t(r->end - r->begin));
  be_.first_touch(std::span<const OptimChunk>(&c, 1));
}

}  // namespace tf::backend::cpu
