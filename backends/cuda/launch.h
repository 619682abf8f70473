// Host-side launchers of the CUDA kernels and the descriptors they read: includable from plain
// C++ (g++) translation units; the kernels themselves live in the .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/backend.h"
#include "backends/cuda/cuda_tuning.h"
#include "core/local_kernels.h"

namespace tf::backend::cuda {

// One chunk as the kernels see it (device memory, uploaded per call). 72 bytes (core::kChunkDescBytes).
struct ChunkDesc {
  float* p;                   // (n) fp32 master
  float* s1;                  // (n) fp32 state 1
  float* s2;                  // (n) fp32 state 2, or null
  const void* g;              // (n) fp32 | bf16 | fp16 gradient
  void* copy;                 // (n) bf16 | fp16 copy, or null
  uint64_t n;                 // elements
  uint64_t local_tile_begin;  // first tile of this chunk in its launch group's tile sequence
  uint64_t sum_begin;         // index of its tile 0 in the tile-sums array (chunks in call order)
  uint64_t tiles;             // stats_tiles(n)
};

static_assert(sizeof(ChunkDesc) == size_t(core::kChunkDescBytes), "core/local_kernels.h sizes the descriptors");

constexpr int kWarpsPerBlock = 8;                   // 8 tiles per block per round
constexpr int kBlockThreads = 32 * kWarpsPerBlock;  // 256
// Tile sums folded by one thread each in fold_tiles_strided; the rest fit one block's shared memory.
constexpr uint64_t kFoldShared = 4096;

inline bool is_default(const StepVariant& v) {
  return v.unroll == kDefaultVariant.unroll && v.min_blocks == kDefaultVariant.min_blocks &&
         v.streaming == kDefaultVariant.streaming;
}

// One launch of the step kernel over a group of chunks that share grad and copy dtypes.
struct StepLaunch {
  const ChunkDesc* descs = nullptr;  // device, `count` chunks, local_tile_begin ascending
  uint32_t count = 0;
  uint64_t tiles = 0;  // total tiles of the group
  DType grad = DType::kF32;
  DType copy = DType::kNone;
  StepScalars s{};
  double* tile_sums = nullptr;              // device
  unsigned long long* nonfinite = nullptr;  // device counter (atomicAdd)
  int sm_count = 0;
  cudaStream_t stream = nullptr;
};

// Defined in step_<kind>.cu, one translation unit per optimizer.
void launch_step_adamw(const StepLaunch& l, const StepVariant& v);
void launch_step_adam(const StepLaunch& l, const StepVariant& v);
void launch_step_adagrad(const StepLaunch& l, const StepVariant& v);
void launch_step_lion(const StepLaunch& l, const StepVariant& v);

// Defined in stats_kernels.cu.
void launch_stats(const ChunkDesc* descs, uint32_t count, uint64_t tiles, DType grad, double* tile_sums,
                  unsigned long long* nonfinite, cudaStream_t stream);
// Folds every chunk's tile sums (descs in call order, `any_big`: some chunk has > kFoldShared tiles)
// into chunk_sums[c].
void launch_fold(const ChunkDesc* descs, uint32_t count, bool any_big, double* tile_sums, double* chunk_sums,
                 cudaStream_t stream);
// Fills the arrays of one timing set with finite pseudo-random values as `values` says (state1 = 0,
// copy = 0xFFFF poison).
void launch_fill_random(const ChunkDesc& d, DType grad, DType copy, uint64_t seed, cudaStream_t stream,
                        StepValues values = StepValues::kRandom);
// Counts elements the first step left unwritten: copy == 0xFFFF, a non-finite param, or state1 == 0
// where the gradient was not 0.
void launch_count_unwritten(const ChunkDesc& d, DType grad, DType copy, unsigned long long* out, cudaStream_t stream);
// cudaSuccess when this binary holds code for the current device.
cudaError_t probe_kernel_image();

// Defined in engine_kernels.cu: the engine's small kernels.
// Initial weights of n elements: master[j] (may be null) and lp[j] = bf16(master) from the
// synthetic initial weight of model element model_first + j, times scale.
void launch_init_weights(float* master, uint16_t* lp, int64_t n, uint64_t seed, int64_t model_first, float scale,
                         cudaStream_t s);
// The deterministic reduce-scatter's sum over one slice (backends/cuda/reduce_scatter.h): acc_in,
// acc_out and out null or not as core::SliceSumIo says.
void launch_sum_slices(const uint16_t* recv, const uint16_t* own, int rank, int world, int64_t slice,
                       const float* acc_in, float* acc_out, uint16_t* out, DType grad, cudaStream_t s);
// core::fold_tile_sums over tiles[0, n) on the device, in its order and rounding (tiles unchanged;
// scratch holds core::norm_fold_scratch_elems(n) doubles): out[0] = the sum (0 for n == 0), out[1] =
// *nonfinite. core::fold_level_launches(n) + 1 kernels.
void launch_fold_tiles(const double* tiles, int64_t n, double* scratch, const double* nonfinite, double* out,
                       cudaStream_t s);
// *slot = double(*gpu_count) + double(host_count)
void launch_store_nonfinite(double* slot, const unsigned long long* gpu_count, unsigned long long host_count,
                            cudaStream_t s);

}  // namespace tf::backend::cuda
