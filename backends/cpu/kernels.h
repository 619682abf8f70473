// Per-ISA entry points of the CPU optimizer kernels (one translation unit per ISA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/backend.h"
#include "backends/cpu/cpu_tuning.h"

namespace tf::backend::cpu {

enum class Isa : uint8_t { kScalar, kAvx2, kAvx512 };

// Memory-access knobs of the CPU kernels (results are the same bits whatever they are). The defaults
// live in cpu_tuning.h.
struct KernelTuning {
  uint32_t prefetch_elems = kCpuTuning.prefetch_elems;  // software-prefetch this far ahead on every stream (0: off)
  uint32_t prefetch_level = kCpuTuning.prefetch_level;  // 0: into L1 (t0 / prefetchw); 1: into L2 only (t1)
  uint32_t unroll = kCpuTuning.unroll;                  // vectors per stream loaded before computing: 1, 2 or 4
  uint32_t interleave = kCpuTuning.interleave;          // tiles walked in lockstep: 1 or 2
  bool stream_copy = kCpuTuning.stream_copy;            // non-temporal stores for the write-only bf16/fp16 copy
  // Non-temporal stores for an out-of-place update's master and states (OptimChunk::from: a speculative
  // update into the spare slot, which it only writes).
  bool stream_out_of_place = kCpuTuning.stream_out_of_place;
  // 0: the fp32 instructions on every vector; 1: vectors near the subnormals take the exact path
  // (exact_ops.h); 2: decided by CpuBackend's probe (the kernels see 0 or 1).
  uint32_t exact_path = kCpuTuning.exact_path;
};
// Throws core::InputError naming `where` and the allowed values when a knob is outside what the kernels
// implement.
void check_tuning(const KernelTuning& t, const char* where);

// Updates tiles [tile_begin, tile_end) of one chunk (grad_stats.h tiles of 2048 elements). Writes one
// canonical tile sum per tile to tile_sums[0 .. tile_end - tile_begin). Returns the non-finite count.
using StepTilesFn = uint64_t (*)(OptimizerKind k, const OptimChunk& c, const StepScalars& s, const KernelTuning& tune,
                                 size_t tile_begin, size_t tile_end, double* tile_sums);
// Statistics only (no update).
using StatsTilesFn = uint64_t (*)(const BufferView& grad, size_t tile_begin, size_t tile_end, double* tile_sums);
// The optimizer's memory traffic without its arithmetic, over tiles [tile_begin, tile_end) of one chunk:
// reads the gradient (fp32/bf16/fp16), reads and writes master and states (p += g, s1 += g, s2 += g when
// the chunk has state2), writes the copy (bf16/fp16; nothing without one; non-temporal with
// tune.stream_copy), with the kernels' prefetching (one tile, one vector at a time: unroll and interleave
// do not apply): the read-modify-write bound the pass is held to.
using StreamTilesFn = void (*)(const OptimChunk& c, const KernelTuning& tune, size_t tile_begin, size_t tile_end);

// The exact path's operations (exact_ops.h) against the ISA's fp32 instructions on n operand triples
// (body::exact_operands in kernel_body.h): mul, add, div, sqrt and fma, bit for bit (NaNs as NaNs). Returns the
// mismatches and, in *first, the first one found ("fma a=0x... b=0x... c=0x...: 0x... vs 0x...").
using ExactCheckFn = uint64_t (*)(uint64_t n, uint64_t seed, std::string* first);

struct KernelTable {
  StepTilesFn step = nullptr;
  StatsTilesFn stats = nullptr;
  StreamTilesFn streams = nullptr;
  ExactCheckFn check_exact = nullptr;  // null for the scalar path, which has no exact path
};

// nullptr members when the ISA was not compiled in (compiler without support).
KernelTable kernels_scalar();
KernelTable kernels_avx2();
KernelTable kernels_avx512();

}  // namespace tf::backend::cpu
