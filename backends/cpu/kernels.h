// Per-ISA entry points of the CPU optimizer kernels (one translation unit per ISA).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/backend.h"

namespace tf::backend::cpu {

enum class Isa : uint8_t { kScalar, kAvx2, kAvx512 };

// Memory-access knobs of the CPU kernels (results are the same bits whatever they are).
struct KernelTuning {
  // Defaults measured on the H100 host (16 cores, bench/results/h100-2026-11-22.md): prefetching
  // 1024 elements ahead gave +10-20%; streaming the copy was within noise.
  uint32_t prefetch_elems = 1024;  // software-prefetch this many elements ahead on every stream (0: off)
  bool stream_copy = false;        // non-temporal stores for the write-only bf16/fp16 copy (no RFO read)
  // Non-temporal stores for an out-of-place update's master and states (OptimChunk::from: a speculative
  // update into the spare slot, which it only writes): without them each written line is read first
  // (write-allocate), 12 more B/element for AdamW. Not yet measured against plain stores.
  bool stream_out_of_place = true;
};

// Updates tiles [tile_begin, tile_end) of one chunk (grad_stats.h tiles of 2048 elements). Writes one
// canonical tile sum per tile to tile_sums[0 .. tile_end - tile_begin). Returns the non-finite count.
using StepTilesFn = uint64_t (*)(OptimizerKind k, const OptimChunk& c, const StepScalars& s,
                                 const KernelTuning& tune, size_t tile_begin, size_t tile_end, double* tile_sums);
// Statistics only (no update).
using StatsTilesFn = uint64_t (*)(const BufferView& grad, size_t tile_begin, size_t tile_end, double* tile_sums);

struct KernelTable {
  StepTilesFn step = nullptr;
  StatsTilesFn stats = nullptr;
};

// nullptr members when the ISA was not compiled in (compiler without support).
KernelTable kernels_scalar();
KernelTable kernels_avx2();
KernelTable kernels_avx512();

}  // namespace tf::backend::cpu
