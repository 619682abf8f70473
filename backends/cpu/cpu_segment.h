// The CPU half of one rank, without CUDA: the CPU segment's buffers in host memory, the per-layer
// ranges the step plan's CPU optimizer ops update, and the CpuBackend (the rank's share of the host's
// cores) that updates them. The CUDA engine runs its CPU ops through it, and so do the multi-process
// CPU measurements (`twinflow bench --cpu-ranks`, `twinflow calibrate`): they time the engine's path.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "core/optim/optimizer.h"
#include "core/twinflow.h"

namespace tf::backend::cpu {

// The segment's buffers, element e of the segment at index e of master and states. The gradient and
// copy buffers are full size (no staging offsets: element e at index e) or the step plan's staging
// rings (core::StagingRing::offsets: a layer's range from element staging_offsets[slot]).
struct SegmentBuffers {
  float* master = nullptr;  // (elems) fp32 master weights
  float* state1 = nullptr;  // (elems) fp32: exp_avg or Adagrad's sum
  float* state2 = nullptr;  // (elems) fp32 exp_avg_sq; null for one-state optimizers
  void* grad = nullptr;     // (elems) or (ring elems) grad_dtype: where the gradients land (D2H)
  void* copy = nullptr;     // (elems) or (ring elems) copy_dtype: the low-precision copy the H2D sends
  core::DType grad_dtype = core::DType::kBF16;
  core::DType copy_dtype = core::DType::kBF16;
  std::vector<int64_t> staging_offsets;  // (slots + 1) the rings' slot offsets; empty: full-size grad and copy
  // With rings: (ranges with elements) the slot of each in backward order, from the segment's end
  // (core::StagingRing::slot_of, the step plan's assignment).
  std::vector<int32_t> staging_slots;
};

// The fp32 master and states of one layer's CPU part in one state slot (core/speculation.h): pointers
// to the layer's first element, in the segment's own buffers or in a speculated layer's spare slot.
struct LayerState {
  float* master = nullptr;  // (layer's CPU elems) fp32
  float* state1 = nullptr;  // (layer's CPU elems) fp32
  float* state2 = nullptr;  // (layer's CPU elems) fp32; null for one-state optimizers
};

// One layer's CPU part: elements [begin, end) of the segment.
struct SegmentRange {
  size_t layer = 0;
  int64_t begin = 0, end = 0;
  bool operator==(const SegmentRange&) const = default;
};

// The CPU pieces of a split as segment ranges (forward order; offsets from the segment's start, which
// is the split's boundary).
std::vector<SegmentRange> segment_ranges(const core::TwinFlowSplit& split);

// The values the CPU measurements run on (the engine's probe of its pages, `bench --cpu-ranks`, calibrate's
// rank curve): a hash of i spread over [-0.1, 0.1] in steps of 1e-4, never the special values.
float cpu_fill_value(uint64_t i);

class CpuSegment {
 public:
  // `opt` says the rank's threads and CPUs. Throws core::InputError for ranges that overlap, run
  // backwards, or name one layer twice.
  CpuSegment(const CpuOptions& opt, core::OptimizerKind kind, const SegmentBuffers& bufs,
             std::vector<SegmentRange> ranges);

  // Zeroes every buffer, each layer's range by the workers that update it in update_layer (the same
  // static split per range), so that the first touch places every page near the thread that streams
  // it. Call before anything else writes the buffers.
  void first_touch();

  // One CPU optimizer op: the fused pass over the layer's range (nothing for a layer without a CPU
  // part), its gradient and copy in staging slot `slot` (Op::staging_slot; ignored with full-size
  // buffers). Returns the range's gradient statistics. Throws core::InputError for a slot outside the
  // rings or a range larger than a slot.
  GradStats update_layer(size_t layer, const core::StepScalars& s, int32_t slot = -1);
  // The same pass on the master and states at `to`, read from `from` when given (out of place: a
  // speculative update into the layer's spare slot), else in place. The gradient and the bf16 copy are
  // the segment's, in staging slot `slot` as above.
  GradStats update_layer(size_t layer, const core::StepScalars& s, const LayerState& to, const LayerState* from,
                         int32_t slot);
  // The layer's part of the segment's own master and states (slot 0); null pointers for a layer
  // without a CPU part.
  LayerState layer_state(size_t layer) const;
  // Zeroes the layer's master and states at `at` (a spare slot) with the split its updates use, as
  // first_touch does for the segment's own buffers.
  void first_touch(size_t layer, const LayerState& at);

  // The values the CPU measurements run on, over every range: master element e is cpu_fill_value(e), its
  // gradient (in the staging slot first_touch gave the range, with rings) cpu_fill_value(e + the segment's
  // elements) rounded to its dtype, the states at the optimizer's start (0; Adagrad's initial accumulator).
  // The multi-process measurements' workers fill with it; so does the engine's probe of the pages it got
  // (docs/ARCHITECTURE.md, "Validation"): probe_pass(step) runs the optimizer's step `step` (default
  // hyper-parameters) over every range in backward order and returns its seconds, then first_touch() zeroes
  // it all again. Real values, not zeros: the kernels' division and square root run faster on zeros.
  void fill_measurement_data();
  double probe_pass(int64_t step);

  // The chunk of elements [begin, end) of the segment, its gradient and copy in `slot` with rings.
  OptimChunk chunk(int64_t begin, int64_t end, int32_t slot = -1) const;
  bool rings() const { return !bufs_.staging_offsets.empty(); }
  const std::vector<SegmentRange>& ranges() const { return ranges_; }
  CpuBackend& backend() { return be_; }
  core::OptimizerKind kind() const { return kind_; }

 private:
  const SegmentRange* find(size_t layer) const;
  // fn(range, its chunk) for every non-empty range in backward order, the gradient and copy in the staging
  // slot that holds the range (rings: SegmentBuffers::staging_slots), as first_touch zeroes them.
  template <class Fn>
  void each_range_backward(Fn&& fn) const;
  // The layer's chunk with its master and states at `at`, its gradient and copy in `slot`.
  OptimChunk chunk_at(const SegmentRange& r, const LayerState& at, int32_t slot) const;

  CpuBackend be_;
  core::OptimizerKind kind_;
  SegmentBuffers bufs_;
  std::vector<SegmentRange> ranges_;
  std::vector<int64_t> range_of_layer_;  // index into ranges_, -1: no CPU part
};

}  // namespace tf::backend::cpu
