// Gradient statistics without an update, the per-chunk fold of tile sums, and the timing helpers
// (random fill, coverage check).
#include <algorithm>
#include <climits>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/optim_kernels.cuh"

namespace tf::backend::cuda {
namespace kern {
namespace {

// Sum of squares and non-finite count of the raw gradient, tile by tile (grad_stats.h order).
template <DType G>
__global__ void __launch_bounds__(kBlockThreads)
    stats_kernel(const ChunkDesc* __restrict__ descs, uint32_t count, uint64_t tiles, double* __restrict__ tile_sums,
                 unsigned long long* __restrict__ nonfinite) {
  const int lane = int(threadIdx.x & 31);
  uint32_t bad = 0;
  const uint64_t stride = uint64_t(gridDim.x) * kWarpsPerBlock;
  for (uint64_t t = uint64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); t < tiles; t += stride) {
    const ChunkDesc& d = descs[count == 1 ? 0 : find_chunk(descs, count, t)];
    const uint64_t lt = t - d.local_tile_begin;
    const uint64_t base = lt * core::kStatsTile;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    if (base + core::kStatsTile <= d.n) {
#pragma unroll 4
      for (int it = 0; it < 16; ++it) {
        const float4 g = ld_grad4<G, false>(d.g, base + uint64_t(it * 128 + lane * 4));
        acc_sq(acc[0], g.x);
        acc_sq(acc[1], g.y);
        acc_sq(acc[2], g.z);
        acc_sq(acc[3], g.w);
        bad += uint32_t(!finite(g.x)) + uint32_t(!finite(g.y)) + uint32_t(!finite(g.z)) + uint32_t(!finite(g.w));
      }
    } else {
      for (int it = 0; it < 16; ++it) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint64_t i = base + uint64_t(it * 128 + lane * 4 + j);
          if (i < d.n) {
            const float g = ld_grad1<G>(d.g, i);
            acc_sq(acc[j], g);
            bad += uint32_t(!finite(g));
          }
        }
      }
    }
    const double r = fold_lanes(acc);
    if (lane == 0) tile_sums[d.sum_begin + lt] = r;
  }
  add_nonfinite(bad, nonfinite);
}

// core::fold_tile_sums over x[k] = s[k * stride], k < count; the result lands in s[0]. The adds of
// one level are independent: they are issued 8 at a time, loads first, so that L2 latency overlaps.
__device__ void fold_strided(double* s, uint64_t stride, uint64_t count) {
  uint64_t p = 1;
  while (p < count) p *= 2;
  for (uint64_t h = p / 2; h >= 1; h /= 2) {
    const uint64_t m = count > h ? (h < count - h ? h : count - h) : 0;  // j < h && j + h < count
    for (uint64_t j0 = 0; j0 < m; j0 += 8) {
      double a[8], b[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (j0 + u < m) {
          a[u] = s[(j0 + u) * stride];
          b[u] = s[(j0 + u + h) * stride];
        }
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (j0 + u < m) s[(j0 + u) * stride] = __dadd_rn(a[u], b[u]);
    }
    if (h < count) count = h;
  }
}

// Step 4 of grad_stats.h, first part, for chunks of T > H = kFoldShared tiles. The levels
// h = P/2 .. H of core::fold_tile_sums only ever add s[j + kH] into s[j + k'H] for one residue j < H,
// so each residue is an independent fold of the strided sequence s[j], s[j + H], ... in the same
// order; afterwards s[0 .. H) holds what the serial fold holds after level H.
__global__ void fold_tiles_strided(const ChunkDesc* __restrict__ descs, uint32_t count, double* tile_sums) {
  for (uint32_t c = blockIdx.y; c < count; c += gridDim.y) {
    const uint64_t T = descs[c].tiles;
    if (T <= kFoldShared) continue;
    double* s = tile_sums + descs[c].sum_begin;
    for (uint64_t j = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < kFoldShared;
         j += uint64_t(gridDim.x) * blockDim.x)
      fold_strided(s + j, kFoldShared, (T - j + kFoldShared - 1) / kFoldShared);
  }
}

// Step 4, the remaining levels over min(T, H) sums, in shared memory; one block per chunk.
constexpr int kFoldThreads = 512;
__global__ void __launch_bounds__(kFoldThreads)
    fold_tiles_final(const ChunkDesc* __restrict__ descs, uint32_t count, const double* __restrict__ tile_sums,
                     double* __restrict__ chunk_sums) {
  __shared__ double sh[kFoldShared];  // 32 KiB
  for (uint32_t c = blockIdx.x; c < count; c += gridDim.x) {
    const uint64_t L = descs[c].tiles < kFoldShared ? descs[c].tiles : kFoldShared;
    const double* s = tile_sums + descs[c].sum_begin;
    for (uint64_t i = threadIdx.x; i < L; i += blockDim.x) sh[i] = s[i];
    __syncthreads();
    uint64_t p = 1;
    while (p < L) p *= 2;
    uint64_t live = L;
    for (uint64_t h = p / 2; h >= 1; h /= 2) {
      for (uint64_t j = threadIdx.x; j < h && j + h < live; j += blockDim.x) sh[j] = __dadd_rn(sh[j], sh[j + h]);
      __syncthreads();
      if (h < live) live = h;
    }
    if (threadIdx.x == 0) chunk_sums[c] = L == 0 ? 0.0 : sh[0];
    __syncthreads();
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Uniform in [0, 1) from 24 random bits (exact in fp32).
__device__ __forceinline__ float unit(uint64_t h) { return float(uint32_t(h >> 40)) * (1.0f / 16777216.0f); }

__global__ void fill_random(ChunkDesc d, DType grad, DType copy, uint64_t seed, StepValues values) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < d.n; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t h0 = mix64(seed ^ (i * 4 + 0)), h1 = mix64(seed ^ (i * 4 + 1)), h2 = mix64(seed ^ (i * 4 + 2));
    const bool zero = values == StepValues::kHalfZero && (h1 & 1);              // g = m = v = 0, and they stay 0
    d.p[i] = __fsub_rn(__fmul_rn(2.f, unit(h0)), 1.f);                          // [-1, 1)
    const bool decayed = values == StepValues::kDecayed;                        // g = 0 on subnormal m and v
    d.s1[i] = decayed ? ((h1 & 2) ? -core::kDecayedM : core::kDecayedM) : 0.f;  // non-zero after a step where g != 0
    if (d.s2) d.s2[i] = values == StepValues::kRandom ? __fmul_rn(1e-4f, unit(h1)) : decayed ? core::kDecayedV : 0.f;
    float g = __fmul_rn((h2 & 1) ? -1.f : 1.f, __fadd_rn(0.5f, __fmul_rn(0.5f, unit(h2))));  // +-[0.5, 1)
    if (values == StepValues::kSubnormal) g = (h2 & 1) ? -core::kSubnormalGrad : core::kSubnormalGrad;
    if (zero || decayed) g = 0.f;
    if (grad == DType::kF32)
      static_cast<float*>(const_cast<void*>(d.g))[i] = g;
    else if (grad == DType::kBF16)
      static_cast<uint16_t*>(const_cast<void*>(d.g))[i] = core::f32_to_bf16(g);
    else
      static_cast<uint16_t*>(const_cast<void*>(d.g))[i] = core::f32_to_f16(g);
    if (copy != DType::kNone) static_cast<uint16_t*>(d.copy)[i] = 0xFFFFu;  // poison (a NaN no rounding makes)
  }
}

__global__ void count_unwritten(ChunkDesc d, DType grad, DType copy, unsigned long long* out) {
  uint32_t bad = 0;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < d.n; i += uint64_t(gridDim.x) * blockDim.x) {
    const bool zero_grad = grad == DType::kF32 ? static_cast<const float*>(d.g)[i] == 0.f
                                               : (static_cast<const uint16_t*>(d.g)[i] & 0x7FFFu) == 0;
    const bool unwritten = (d.s1[i] == 0.f && !zero_grad) || !finite(d.p[i]) ||
                           (copy != DType::kNone && static_cast<const uint16_t*>(d.copy)[i] == 0xFFFFu);
    bad += uint32_t(unwritten);
  }
  if (bad) atomicAdd(out, (unsigned long long)bad);
}

unsigned grid_for(uint64_t tiles) {
  return unsigned(std::min<uint64_t>((tiles + kWarpsPerBlock - 1) / kWarpsPerBlock, INT_MAX));
}

}  // namespace
}  // namespace kern

void launch_stats(const ChunkDesc* descs, uint32_t count, uint64_t tiles, DType grad, double* tile_sums,
                  unsigned long long* nonfinite, cudaStream_t stream) {
  if (tiles == 0) return;
  const unsigned blocks = kern::grid_for(tiles);
  switch (grad) {
    case DType::kF32:
      kern::stats_kernel<DType::kF32><<<blocks, kBlockThreads, 0, stream>>>(descs, count, tiles, tile_sums, nonfinite);
      break;
    case DType::kBF16:
      kern::stats_kernel<DType::kBF16><<<blocks, kBlockThreads, 0, stream>>>(descs, count, tiles, tile_sums, nonfinite);
      break;
    case DType::kF16:
      kern::stats_kernel<DType::kF16><<<blocks, kBlockThreads, 0, stream>>>(descs, count, tiles, tile_sums, nonfinite);
      break;
    case DType::kNone: throw core::InputError("cuda grad_stats: grad must be fp32, bf16 or fp16");
  }
  TF_CUDA_CHECK_LAUNCH("stats_kernel");
}

void launch_fold(const ChunkDesc* descs, uint32_t count, bool any_big, double* tile_sums, double* chunk_sums,
                 cudaStream_t stream) {
  if (count == 0) return;
  const unsigned chunks = std::min<uint32_t>(count, 65535u);
  if (any_big) {
    kern::fold_tiles_strided<<<dim3(unsigned(kFoldShared / 256), chunks), 256, 0, stream>>>(descs, count, tile_sums);
    TF_CUDA_CHECK_LAUNCH("fold_tiles_strided");
  }
  kern::fold_tiles_final<<<chunks, kern::kFoldThreads, 0, stream>>>(descs, count, tile_sums, chunk_sums);
  TF_CUDA_CHECK_LAUNCH("fold_tiles_final");
}

void launch_fill_random(const ChunkDesc& d, DType grad, DType copy, uint64_t seed, cudaStream_t stream,
                        StepValues values) {
  if (d.n == 0) return;
  const unsigned blocks = unsigned(std::min<uint64_t>((d.n + 255) / 256, 65536));
  kern::fill_random<<<blocks, 256, 0, stream>>>(d, grad, copy, seed, values);
  TF_CUDA_CHECK_LAUNCH("fill_random");
}

void launch_count_unwritten(const ChunkDesc& d, DType grad, DType copy, unsigned long long* out, cudaStream_t stream) {
  if (d.n == 0) return;
  const unsigned blocks = unsigned(std::min<uint64_t>((d.n + 255) / 256, 65536));
  kern::count_unwritten<<<blocks, 256, 0, stream>>>(d, grad, copy, out);
  TF_CUDA_CHECK_LAUNCH("count_unwritten");
}

cudaError_t probe_kernel_image() {
  cudaFuncAttributes a{};
  return cudaFuncGetAttributes(&a, kern::fold_tiles_final);
}

}  // namespace tf::backend::cuda
