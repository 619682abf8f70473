// The decoder's memory-bound CUDA kernels: embedding, layer norm, bias/activation/residual, bias gradients,
// fused cross-entropy and conversions (API, shapes and numerics: decoder_kernels.cuh; docs/decoder.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/cuda/attention_tiles.cuh"  // pack_bf16x2
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/decoder_kernels.cuh"
#include "core/decoder_layout.h"
#include "core/error.h"
#include "core/optim/dtype.h"

namespace tf::backend::cuda {
namespace {

constexpr int kThreads = 256;           // elementwise kernels
constexpr unsigned kMaxBlocks = 16384;  // grid-stride beyond this (results never depend on the grid)
constexpr int kLnThreads = 256;         // layer norm: a block of 8 warps (16 for n > 8192)
constexpr int kLnWarpMaxWidth = 1024;   // widest row a single warp takes
constexpr int kLnChunkRows = int(core::decoder_layout::kLayerNormChunkRows);  // layer-norm backward: rows per block
constexpr int kBiasCols = 32;  // bias gradient: block (32 column groups of 8, 8 row lanes)
constexpr int kBiasLanes = 8;
constexpr int kBiasChunkRows = int(core::decoder_layout::kBiasChunkRows);  // rows per bias-gradient partial
// fold of partials: block (32 columns, 32 lanes). A fold is a few columns (2n for a layer norm) over many chunks:
// with 8 lanes, GPT-350M's layer-norm fold (1,024 chunks of 16 rows then) ran 64 blocks of 8 warps, each thread
// 128 loads in series.
constexpr int kFoldLanes = 32;
constexpr int kCeThreads = 512;  // cross-entropy: a block per row
constexpr int kLossSumThreads = 1024;

constexpr float kGeluK = 0.7978845608f;  // sqrt(2 / pi), as docs/decoder.md writes it
constexpr float kGeluC = 0.044715f;
constexpr float kGeluC3 = float(3 * 0.044715);  // 3c in d/du (u + c·u³), rounded once

// ---- host-side checks ----------------------------------------------------------------------------

void require(bool ok, const char* fn, const std::string& what) {
  if (!ok) throw core::InputError(std::string(fn) + ": " + what);
}
void require_ptr(const void* p, const char* fn, const char* name) {
  require(p != nullptr, fn, std::string(name) + " is null; pass a device buffer");
}
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
void require_grad(core::DType g, const char* fn) {
  require(g == core::DType::kBF16 || g == core::DType::kF16, fn,
          "the gradient dtype must be bf16 or fp16, got " + std::string(core::dtype_name(g)));
}
void require_dims(int64_t rows, int64_t n, const char* fn) {
  require(rows >= 1 && n >= 1, fn,
          "rows and columns must be >= 1, got " + std::to_string(rows) + " x " + std::to_string(n));
}
// A kernel's launch-configuration error, naming the kernel (TF_CUDA_CHECK_LAUNCH for runtime names).
void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(e, what, __FILE__, __LINE__);
}
unsigned grid_for(int64_t work, int64_t per_block) {
  return unsigned(std::clamp<int64_t>((work + per_block - 1) / per_block, 1, kMaxBlocks));
}

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- 8 bf16 = 16 bytes ---------------------------------------------------------------------------

__device__ __forceinline__ void unpack8(const uint4 q, float* f) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

// The 16 bytes of elements col .. col + 7 of a bf16 row, still packed; columns >= n read as +0. kVec:
// the row is 16-byte aligned and n % 8 == 0, so col < n implies col + 8 <= n.
template <bool kVec>
__device__ __forceinline__ uint4 load8_bits(const uint16_t* row, int64_t col, int64_t n) {
  if constexpr (kVec) {
    return *reinterpret_cast<const uint4*>(row + col);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = col + 2 * i < n ? row[col + 2 * i] : 0u;
      const uint32_t hi = col + 2 * i + 1 < n ? row[col + 2 * i + 1] : 0u;
      w[i] = lo | hi << 16;
    }
    return uint4{w[0], w[1], w[2], w[3]};
  }
}
// The same as fp32.
template <bool kVec>
__device__ __forceinline__ void load8(const uint16_t* row, int64_t col, int64_t n, float* f) {
  unpack8(load8_bits<kVec>(row, col, n), f);
}
template <bool kVec>
__device__ __forceinline__ void load8_f32(const float* row, int64_t col, int64_t n, float* f) {
  if constexpr (kVec) {
    const float4 a = *reinterpret_cast<const float4*>(row + col);
    const float4 b = *reinterpret_cast<const float4*>(row + col + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = col + e < n ? row[col + e] : 0.0f;
  }
}

// One rounding to bf16 or (fp16 = true) fp16.
__device__ __forceinline__ uint16_t round_to(float v, bool fp16) {
  return fp16 ? core::f32_to_f16(v) : core::f32_to_bf16(v);
}

// Stores elements col .. col + 7 (those below n) rounded once to bf16 and replaces f with the stored
// values (what a later step reads back: docs/decoder.md's stored activations).
template <bool kVec>
__device__ __forceinline__ void store8_keep(uint16_t* row, int64_t col, int64_t n, float* f) {
  if constexpr (kVec) {
    const uint4 q{attn::pack_bf16x2(f[0], f[1]), attn::pack_bf16x2(f[2], f[3]), attn::pack_bf16x2(f[4], f[5]),
                  attn::pack_bf16x2(f[6], f[7])};
    *reinterpret_cast<uint4*>(row + col) = q;
    unpack8(q, f);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint16_t h = core::f32_to_bf16(f[e]);
      if (col + e < n) row[col + e] = h;
      f[e] = core::bf16_to_f32(h);
    }
  }
}

// Stores elements col .. col + 7 (those below n), each rounded once to bf16 (or fp16).
template <bool kVec>
__device__ __forceinline__ void store8(uint16_t* row, int64_t col, int64_t n, const float* f, bool fp16 = false) {
  if constexpr (kVec) {
    uint4 q;
    if (fp16) {
      uint16_t h[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) h[e] = core::f32_to_f16(f[e]);
      q.x = h[0] | uint32_t(h[1]) << 16, q.y = h[2] | uint32_t(h[3]) << 16;
      q.z = h[4] | uint32_t(h[5]) << 16, q.w = h[6] | uint32_t(h[7]) << 16;
    } else {
      q.x = attn::pack_bf16x2(f[0], f[1]), q.y = attn::pack_bf16x2(f[2], f[3]);
      q.z = attn::pack_bf16x2(f[4], f[5]), q.w = attn::pack_bf16x2(f[6], f[7]);
    }
    *reinterpret_cast<uint4*>(row + col) = q;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (col + e < n) row[col + e] = round_to(f[e], fp16);
  }
}

// Starts moving the 128-byte line at p into L2 (no register, no wait): a later load of it then waits for
// L2 rather than DRAM.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// ---- elementwise kernels over (rows, n) ------------------------------------------------------------
// Threads take consecutive 8-column groups of a row (a warp moves 512 contiguous bytes per access);
// the flat index fits in 31 bits (launch_rowwise checks), so the row is one 32-bit division.

template <bool kVec, class Op>
__global__ void __launch_bounds__(kThreads) rowwise_kernel(uint32_t rows, int64_t n, Op op) {
  const uint32_t groups = uint32_t((n + 7) / 8);
  const uint32_t total = rows * groups;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const uint32_t r = i / groups;
    op.template apply<kVec>(r, int64_t(i - r * groups) * 8, n);
  }
}

template <class Op>
void launch_rowwise(const char* fn, int64_t rows, int64_t n, bool vec, const Op& op, cudaStream_t stream) {
  const int64_t total = rows * ((n + 7) / 8);
  require(total < (int64_t(1) << 31), fn,
          "rows x ceil(n / 8) = " + std::to_string(total) + " exceeds 2^31; split the call");
  const unsigned grid = grid_for(total, kThreads);
  if (vec)
    rowwise_kernel<true><<<grid, kThreads, 0, stream>>>(uint32_t(rows), n, op);
  else
    rowwise_kernel<false><<<grid, kThreads, 0, stream>>>(uint32_t(rows), n, op);
  check_launch(fn);
}

// Flat arrays: 8 elements per thread step, 64-bit index, no division.
template <bool kVec, class Op>
__global__ void __launch_bounds__(kThreads) flat_kernel(int64_t n, Op op) {
  const int64_t groups = (n + 7) / 8;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x)
    op.template apply<kVec>(0, i * 8, n);
}

// A vector body over n rounded down to 8 (when every pointer is 16-byte aligned) and a scalar tail.
template <class Op>
void launch_flat(const char* fn, int64_t n, bool aligned, const Op& op, cudaStream_t stream) {
  const int64_t body = aligned ? n / 8 * 8 : 0;
  if (body > 0) {
    flat_kernel<true><<<grid_for(body / 8, kThreads), kThreads, 0, stream>>>(body, op);
    check_launch(fn);
  }
  if (body < n) {
    flat_kernel<false><<<grid_for((n - body + 7) / 8, kThreads), kThreads, 0, stream>>>(n - body, op.shifted(body));
    check_launch(fn);
  }
}

// -- embedding. Bytes: embedding_forward_bytes / add_positions_bytes / gather_rows_bytes.

// The 8 columns of table row `id`, or NaN when id is outside [0, vocab) (never a wild read).
template <bool kVec>
__device__ __forceinline__ void table_row8(const uint16_t* table, int32_t id, int64_t vocab, int64_t col, int64_t n,
                                           float* f) {
  if (id >= 0 && id < vocab) {
    load8<kVec>(table + int64_t(id) * n, col, n, f);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = __uint_as_float(0x7FC00000u);
  }
}

struct EmbedOp {
  const int32_t* tok;
  const uint16_t* table;  // (V, n), null for add_positions
  const uint16_t* pos;    // (P + off, n), null for gather_rows
  uint16_t* out;          // (T, n); holds the input of add_positions
  int64_t vocab, seq, pos_offset;
  template <bool kVec>
  __device__ void apply(uint32_t r, int64_t col, int64_t n) const {
    float a[8], p[8];
    if (table)
      table_row8<kVec>(table, tok[r], vocab, col, n, a);
    else
      load8<kVec>(out + int64_t(r) * n, col, n, a);
    if (pos) {
      load8<kVec>(pos + (int64_t(r % uint32_t(seq)) + pos_offset) * n, col, n, p);
#pragma unroll
      for (int e = 0; e < 8; ++e) a[e] = a[e] + p[e];
    }
    store8<kVec>(out + int64_t(r) * n, col, n, a);
  }
};

// -- position gradient. Reads dx0 (T, h) bf16, writes (P + off, h): position_grad_bytes.
struct PosGradOp {
  const uint16_t* dx0;  // (T, n)
  uint16_t* dpos;       // (P + off, n)
  int64_t batch, seq, pos_offset;
  bool fp16;
  template <bool kVec>
  __device__ void apply(uint32_t r, int64_t col, int64_t n) const {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t t = int64_t(r) - pos_offset;
    if (t >= 0 && t < seq)
      for (int64_t b = 0; b < batch; ++b) {
        float v[8];
        load8<kVec>(dx0 + (b * seq + t) * n, col, n, v);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = acc[e] + v[e];
      }
    store8<kVec>(dpos + int64_t(r) * n, col, n, acc, fp16);
  }
};

// -- token embedding gradient, one vocabulary row per (r, col) group: token_embedding_grad_bytes.
template <int kInFlight>
struct TokenGradOp {
  const uint16_t* drows;  // (T, n) bf16
  const int32_t* starts;  // (V + 1)
  const int32_t* by_tok;  // (T)
  const float* head;      // (V, n) fp32 or null
  uint16_t* dembed;       // (V, n) grad dtype
  bool fp16;
  // kInFlight: rows a thread has in flight at once. A frequent token is a long chain: GPT-2's id 220 (a lone
  // space) is 2,057-3,371 of a GPT-350M micro-batch's 16,384 rows on the shipped data, and one load at a time
  // its vocabulary row waits for each row behind the load of that row's index.
  __device__ static void add8(float* acc, uint4 q) {
    float x[8];
    unpack8(q, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = acc[e] + x[e];
  }
  template <bool kVec>
  __device__ void apply(uint32_t v, int64_t col, int64_t n) const {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int32_t k0 = starts[v], k1 = starts[v + 1];
    int32_t k = k0;
    // kInFlight rows loaded at once, the next batch's indices with them, then added in ascending r: the
    // contract's order, the same bits as one row at a time
    int32_t idx[kInFlight];
    if (k1 - k >= kInFlight)
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) idx[j] = by_tok[k + j];
    while (k1 - k >= kInFlight) {
      uint4 q[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) q[j] = load8_bits<kVec>(drows + int64_t(idx[j]) * n, col, n);
      k += kInFlight;
      if (k1 - k >= kInFlight)
#pragma unroll
        for (int j = 0; j < kInFlight; ++j) idx[j] = by_tok[k + j];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) add8(acc, q[j]);
    }
    for (; k < k1; ++k) add8(acc, load8_bits<kVec>(drows + int64_t(by_tok[k]) * n, col, n));
    if (head) {
      float h[8];
      load8_f32<kVec>(head + int64_t(v) * n, col, n, h);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = k1 > k0 ? h[e] + acc[e] : h[e];
    }
    store8<kVec>(dembed + int64_t(v) * n, col, n, acc, fp16);
  }
};

// -- bias + activation forward. Bytes: bias_act_forward_bytes.

__device__ __forceinline__ float gelu_tanh(float u) {
  const float u3 = (u * u) * u;
  const float t = tanhf(kGeluK * (u + kGeluC * u3));
  return (0.5f * u) * (1.0f + t);
}
// d/du of gelu_tanh, in the order the header states.
__device__ __forceinline__ float gelu_tanh_grad(float u) {
  const float t = tanhf(kGeluK * (u + kGeluC * ((u * u) * u)));
  const float dinner = kGeluK * (1.0f + kGeluC3 * (u * u));
  return 0.5f * (1.0f + t) + (0.5f * u) * ((1.0f - t * t) * dinner);
}
// ReLU of a value that is exactly a bf16: sign bit set (negative, -0, negative NaN) -> +0, else kept.
__device__ __forceinline__ float relu_bf16(float u) { return (__float_as_uint(u) >> 31) ? 0.0f : u; }

template <Activation kAct>
struct BiasActOp {
  uint16_t* u;        // (T, n) in: GEMM output, out: bf16(u + b)
  const uint16_t* b;  // (n)
  uint16_t* g;        // (T, n) act(u); unused for kNone
  template <bool kVec>
  __device__ void apply(uint32_t r, int64_t col, int64_t n) const {
    float x[8], bias[8];
    load8<kVec>(u + int64_t(r) * n, col, n, x);
    load8<kVec>(b, col, n, bias);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = x[e] + bias[e];
    store8_keep<kVec>(u + int64_t(r) * n, col, n, x);  // x is now the stored u
    if constexpr (kAct != Activation::kNone) {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = kAct == Activation::kRelu ? relu_bf16(x[e]) : gelu_tanh(x[e]);
      store8<kVec>(g + int64_t(r) * n, col, n, x);
    }
  }
};

// -- out = bf16(r + (y + b)). Bytes: bias_residual_forward_bytes.
struct BiasResidualOp {
  const uint16_t* y;    // (T, n)
  const uint16_t* b;    // (n)
  const uint16_t* res;  // (T, n)
  uint16_t* out;        // (T, n), may alias y or res (each element is read, then written, by one thread)
  template <bool kVec>
  __device__ void apply(uint32_t r, int64_t col, int64_t n) const {
    float yv[8], bv[8], rv[8];
    load8<kVec>(y + int64_t(r) * n, col, n, yv);
    load8<kVec>(b, col, n, bv);
    load8<kVec>(res + int64_t(r) * n, col, n, rv);
#pragma unroll
    for (int e = 0; e < 8; ++e) yv[e] = rv[e] + (yv[e] + bv[e]);
    store8<kVec>(out + int64_t(r) * n, col, n, yv);
  }
};

// -- flat ops: out = bf16(a + b); out = round(src fp32). Bytes: add_bf16_bytes, f32_to_grad_bytes.
struct AddOp {
  const uint16_t* a;
  const uint16_t* b;
  uint16_t* out;
  AddOp shifted(int64_t k) const { return {a + k, b + k, out + k}; }
  template <bool kVec>
  __device__ void apply(uint32_t, int64_t i, int64_t n) const {
    float x[8], y[8];
    load8<kVec>(a, i, n, x);
    load8<kVec>(b, i, n, y);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = x[e] + y[e];
    store8<kVec>(out, i, n, x);
  }
};
struct ToGradOp {
  const float* src;
  uint16_t* out;
  bool fp16;
  ToGradOp shifted(int64_t k) const { return {src + k, out + k, fp16}; }
  template <bool kVec>
  __device__ void apply(uint32_t, int64_t i, int64_t n) const {
    float x[8];
    load8_f32<kVec>(src, i, n, x);
    store8<kVec>(out, i, n, x, fp16);
  }
};

// ---- layer norm ------------------------------------------------------------------------------------
// A row is taken by kWarpsPerRow warps: 1 (eight rows per 256-thread block, n <= 1024), 8 (a row per
// 256-thread block, n <= 8192) or 16 (a row per 512-thread block, n <= 16384). Thread `lane` of a row
// holds the 8-column groups lane + j·32·kWarpsPerRow (j < kVecs <= 4).

template <int kWarpsPerRow>
struct LnShape {
  static constexpr int kRowThreads = 32 * kWarpsPerRow;
  static constexpr int kBlockThreads = kRowThreads > kLnThreads ? kRowThreads : kLnThreads;
  static constexpr int kRowsPerBlock = kBlockThreads / kRowThreads;
  // backward: 128 registers a thread at most (two 256-thread blocks, or one 512-thread block, per SM)
  static constexpr int kBwdMinBlocks = 65536 / (kBlockThreads * 128);
  static_assert(kWarpsPerRow == 1 || kWarpsPerRow == 8 || kWarpsPerRow == 16, "a row per warp or per block");
};

// kN sums over a row's threads: a butterfly in the warp (every lane gets the same bits, the additions
// being commutative), then the warps' sums in warp order through red[kN][kWarpsPerRow]. One barrier:
// callers alternate between two `red` slots, and a later barrier separates a slot's readers from its
// next writers.
template <int kWarpsPerRow, int kN>
__device__ __forceinline__ void row_sums(float (&v)[kN], float* red) {
#pragma unroll
  for (int k = 0; k < kN; ++k)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[k] = v[k] + __shfl_xor_sync(0xffffffffu, v[k], o);
  if constexpr (kWarpsPerRow > 1) {
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0)
#pragma unroll
      for (int k = 0; k < kN; ++k) red[k * kWarpsPerRow + warp] = v[k];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      float s = red[k * kWarpsPerRow];
      for (int w = 1; w < kWarpsPerRow; ++w) s = s + red[k * kWarpsPerRow + w];
      v[k] = s;
    }
  }
}

// First column of this thread's j-th group of a row.
template <int kWarpsPerRow>
__device__ __forceinline__ int64_t share_col(int lane, int j) {
  return int64_t(lane + j * LnShape<kWarpsPerRow>::kRowThreads) * 8;
}

// y = bf16(((x - mean)·rstd)·w + b). Reads x (T, n) and w, b; writes y (T, n), mean, rstd:
// layer_norm_forward_bytes.
template <int kWarpsPerRow, int kVecs, bool kVec>
__global__ void __launch_bounds__(LnShape<kWarpsPerRow>::kBlockThreads)
    ln_forward_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w, const uint16_t* __restrict__ b,
                      int64_t rows, int64_t n, float eps, uint16_t* __restrict__ y, float* __restrict__ mean,
                      float* __restrict__ rstd) {
  using S = LnShape<kWarpsPerRow>;
  __shared__ float red[2][kWarpsPerRow];
  const int lane = threadIdx.x % S::kRowThreads;
  const int64_t row = int64_t(blockIdx.x) * S::kRowsPerBlock + threadIdx.x / S::kRowThreads;
  if (row >= rows) return;  // a whole row group leaves together (a whole block when a block is one row)
  float v[kVecs][8];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int64_t col = share_col<kWarpsPerRow>(lane, j);
    unpack8(col < n ? load8_bits<kVec>(x + row * n, col, n) : uint4{0, 0, 0, 0}, v[j]);
  }
  float s[1] = {0.0f};
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) s[0] = s[0] + v[j][e];  // missing columns add +0
  row_sums<kWarpsPerRow, 1>(s, red[0]);
  const float mu = s[0] / float(n);
  float q[1] = {0.0f};
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (share_col<kWarpsPerRow>(lane, j) + e < n) {
        const float d = v[j][e] - mu;
        q[0] = q[0] + d * d;
      }
  row_sums<kWarpsPerRow, 1>(q, red[1]);
  const float rs = 1.0f / sqrtf(q[0] / float(n) + eps);
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int64_t col = share_col<kWarpsPerRow>(lane, j);
    if (col >= n) continue;
    float wv[8], bv[8];
    load8<kVec>(w, col, n, wv);
    load8<kVec>(b, col, n, bv);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[j][e] = ((v[j][e] - mu) * rs) * wv[e] + bv[e];
    store8<kVec>(y + row * n, col, n, v[j]);
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// This block's dw, db partials (rows of its chunk) into partials[chunk][0, n) and [n, 2n). Row groups
// of a block are added in group order through shared memory (warp-per-row mode only).
template <int kWarpsPerRow, int kVecs>
__device__ __forceinline__ void ln_write_partials(const float (&dw)[kVecs][8], const float (&db)[kVecs][8], int lane,
                                                  int64_t n, float* partials) {
  using S = LnShape<kWarpsPerRow>;
  float* out = partials + int64_t(blockIdx.x) * 2 * n;
  if constexpr (S::kRowsPerBlock == 1) {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t col = share_col<kWarpsPerRow>(lane, j);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (col + e < n) {
          out[col + e] = dw[j][e];
          out[n + col + e] = db[j][e];
        }
    }
  } else {
    __shared__ float fold[S::kRowsPerBlock][kLnWarpMaxWidth];  // (groups, n <= 1024) fp32: 32 KB
    const int group = threadIdx.x / S::kRowThreads;
    const auto fold_one = [&](const float(&acc)[kVecs][8], float* dst) {
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        const int64_t col = share_col<kWarpsPerRow>(lane, j);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (col + e < n) fold[group][col + e] = acc[j][e];
      }
      __syncthreads();
      for (int64_t c = threadIdx.x; c < n; c += S::kBlockThreads) {
        float s = fold[0][c];
        for (int g = 1; g < S::kRowsPerBlock; ++g) s = s + fold[g][c];
        dst[c] = s;
      }
      __syncthreads();  // before the next quantity overwrites fold
    };
    fold_one(dw, out);
    fold_one(db, out + n);
  }
}

// dx = bf16(dresid + ((g - Σg/n) - xhat·(Σ(g·xhat)/n))·rstd) and this chunk's dw, db partials.
// Block b takes rows [Cb, Cb + C), C = kLnChunkRows; row group k of the block takes rows Cb + k, Cb + k + groups, ...
// dy and x stay packed bf16 between the two passes; xhat = (x - mean)·rstd and g = dy·w are computed
// again in the second (the same operations, the same bits), w is re-read from L1. A row's loads are
// round trips in series (dy and x, then the sums, then dresid): while a row is summed, its dresid (and,
// for kVecs <= 3, the next row's dy and x) are already on their way into L2 (prefetch_l2). Reads dy,
// x, dresid (T, n), mean, rstd, w; writes dx (T, n) and 2n partials per chunk: layer_norm_backward_bytes.
// dx may alias dy or dresid: a thread writes only elements it read itself.
template <int kWarpsPerRow, int kVecs, bool kVec>
__global__ void __launch_bounds__(LnShape<kWarpsPerRow>::kBlockThreads, LnShape<kWarpsPerRow>::kBwdMinBlocks)
    ln_backward_kernel(const uint16_t* dy, const uint16_t* __restrict__ x, const float* __restrict__ mean,
                       const float* __restrict__ rstd, const uint16_t* __restrict__ w, const uint16_t* dresid,
                       int64_t rows, int64_t n, uint16_t* dx, float* __restrict__ partials) {
  using S = LnShape<kWarpsPerRow>;
  __shared__ float red[2][2 * kWarpsPerRow];
  const int lane = threadIdx.x % S::kRowThreads;
  const int group = threadIdx.x / S::kRowThreads;
  float dw[kVecs][8], db[kVecs][8];
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) dw[j][e] = db[j][e] = 0.0f;
  const int64_t r0 = int64_t(blockIdx.x) * kLnChunkRows;
  const int64_t r1 = min64(r0 + kLnChunkRows, rows);
  int it = 0;
  for (int64_t row = r0 + group; row < r1; row += S::kRowsPerBlock, ++it) {
    uint4 dyp[kVecs], xp[kVecs];  // packed bf16
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t col = share_col<kWarpsPerRow>(lane, j);
      dyp[j] = col < n ? load8_bits<kVec>(dy + row * n, col, n) : uint4{0, 0, 0, 0};
      xp[j] = col < n ? load8_bits<kVec>(x + row * n, col, n) : uint4{0, 0, 0, 0};
      if (col < n && lane % 8 == 0) {  // one thread per 128-byte line (8 threads share it)
        const int64_t next = row + S::kRowsPerBlock;
        if (dresid) prefetch_l2(dresid + row * n + col);
        if constexpr (kVecs <= 3)  // with 4 the addresses would spill registers
          if (next < r1) prefetch_l2(dy + next * n + col), prefetch_l2(x + next * n + col);
      }
    }
    const float mu = mean[row], rs = rstd[row];
    float sums[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t col = share_col<kWarpsPerRow>(lane, j);
      if (col >= n) continue;
      float d[8], xh[8], wv[8];
      unpack8(dyp[j], d);
      unpack8(xp[j], xh);
      load8<kVec>(w, col, n, wv);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (col + e >= n) continue;
        xh[e] = (xh[e] - mu) * rs;
        dw[j][e] = dw[j][e] + d[e] * xh[e];
        db[j][e] = db[j][e] + d[e];
        const float g = d[e] * wv[e];
        sums[0] = sums[0] + g;
        sums[1] = sums[1] + g * xh[e];
      }
    }
    row_sums<kWarpsPerRow, 2>(sums, red[it & 1]);
    const float c1 = sums[0] / float(n), c2 = sums[1] / float(n);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t col = share_col<kWarpsPerRow>(lane, j);
      if (col >= n) continue;
      float d[8], xh[8], wv[8], res[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      unpack8(dyp[j], d);
      unpack8(xp[j], xh);
      load8<kVec>(w, col, n, wv);
      if (dresid) load8<kVec>(dresid + row * n, col, n, res);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float xhat = (xh[e] - mu) * rs;
        const float v = ((d[e] * wv[e] - c1) - xhat * c2) * rs;
        d[e] = dresid ? res[e] + v : v;
      }
      store8<kVec>(dx + row * n, col, n, d);
    }
  }
  ln_write_partials<kWarpsPerRow, kVecs>(dw, db, lane, n, partials);
}

// Calls f(warps_per_row, vecs, vec) with compile-time constants for a row of n columns.
template <int V>
using Int = std::integral_constant<int, V>;
template <class F>
void dispatch_layer_norm(int64_t n, bool vec, F&& f) {
  auto go = [&](auto wpr, auto vecs) {
    if (vec)
      f(wpr, vecs, std::true_type{});
    else
      f(wpr, vecs, std::false_type{});
  };
  // kVecs is the fewest that cover the row (a thread's unused groups still cost registers: 3 for
  // GPT-2's 768 and 6144 keeps the backward below its 128-register budget without spilling)
  const int64_t groups = (n + 7) / 8;  // 8-column groups in a row
  if (groups <= 32)
    go(Int<1>{}, Int<1>{});
  else if (groups <= 64)
    go(Int<1>{}, Int<2>{});
  else if (groups <= 96)
    go(Int<1>{}, Int<3>{});
  else if (groups <= kLnWarpMaxWidth / 8)
    go(Int<1>{}, Int<4>{});
  else if (groups <= 256)
    go(Int<8>{}, Int<1>{});
  else if (groups <= 512)
    go(Int<8>{}, Int<2>{});
  else if (groups <= 768)
    go(Int<8>{}, Int<3>{});
  else if (groups <= 1024)
    go(Int<8>{}, Int<4>{});
  else
    go(Int<16>{}, Int<4>{});
}

// ---- column sums: bias gradients and the fold of partials -----------------------------------------

// partials[chunk][c] = Σ over the chunk's rows of v[r][c], v = dy (kNone) or the bf16 du = bf16(dg·act'(u)),
// which is also stored. Block (32 column groups, 8 row lanes) over 256 columns x 64 rows: lane l adds
// rows r0 + l, r0 + l + 8, ... in order, then lanes are added in lane order. A thread loads its 8 rows
// before it computes and stores any (8 loads in flight; du may alias dg, element by element). Reads dy
// (and u) (T, n), writes du (T, n) and n partials per chunk: bias_grad_bytes / bias_act_backward_bytes.
template <Activation kAct, bool kVec>
__global__ void __launch_bounds__(kBiasCols* kBiasLanes)
    bias_grad_kernel(const uint16_t* dy, const uint16_t* __restrict__ u, int64_t rows, int64_t n, uint16_t* du,
                     float* __restrict__ partials) {
  constexpr int kRowsPerLane = kBiasChunkRows / kBiasLanes;
  __shared__ float lanes[kBiasLanes][8][kBiasCols];  // (lane, element, column group) fp32
  const int tx = threadIdx.x % kBiasCols, ty = threadIdx.x / kBiasCols;
  const int64_t col = (int64_t(blockIdx.x) * kBiasCols + tx) * 8;
  const int64_t r0 = int64_t(blockIdx.y) * kBiasChunkRows + ty;
  const int64_t r1 = min64(int64_t(blockIdx.y) * kBiasChunkRows + kBiasChunkRows, rows);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (col < n) {
    uint4 vb[kRowsPerLane] = {}, ub[kRowsPerLane] = {};  // packed bf16 of rows r0 + 8k
#pragma unroll
    for (int k = 0; k < kRowsPerLane; ++k) {
      const int64_t r = r0 + int64_t(k) * kBiasLanes;
      if (r >= r1) break;
      vb[k] = load8_bits<kVec>(dy + r * n, col, n);
      if constexpr (kAct != Activation::kNone) ub[k] = load8_bits<kVec>(u + r * n, col, n);
    }
#pragma unroll
    for (int k = 0; k < kRowsPerLane; ++k) {
      const int64_t r = r0 + int64_t(k) * kBiasLanes;
      if (r >= r1) break;
      float v[8];
      unpack8(vb[k], v);
      if constexpr (kAct != Activation::kNone) {
        float uv[8];
        unpack8(ub[k], uv);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[e] = kAct == Activation::kRelu ? (uv[e] > 0.0f ? v[e] : 0.0f) : v[e] * gelu_tanh_grad(uv[e]);
        store8_keep<kVec>(du + r * n, col, n, v);  // v is now the stored du, which the sum adds
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = acc[e] + v[e];
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) lanes[ty][e][tx] = acc[e];
  __syncthreads();
  // thread t folds column t of the block's 256: column group t / 8, element t % 8
  const int t = threadIdx.x;
  const int64_t c = int64_t(blockIdx.x) * kBiasCols * 8 + t;
  if (c < n) {
    float s = lanes[0][t % 8][t / 8];
    for (int l = 1; l < kBiasLanes; ++l) s = s + lanes[l][t % 8][t / 8];
    partials[int64_t(blockIdx.y) * n + c] = s;
  }
}

// out = one rounding of Σ_k partials[k][c] over `chunks` rows of (chunks, cols) fp32, in chunk order:
// lane l of 32 adds chunks [l·q, (l + 1)·q) (q = ceil(chunks / 32)) in order, then the lane sums are
// added in lane order. Column c < split goes to out0[c], the rest to out1[c - split].
__global__ void __launch_bounds__(kBiasCols* kFoldLanes)
    fold_partials_kernel(const float* __restrict__ partials, int64_t chunks, int64_t cols, int64_t split,
                         uint16_t* __restrict__ out0, uint16_t* __restrict__ out1, bool fp16) {
  __shared__ float lanes[kFoldLanes][kBiasCols + 1];
  const int tx = threadIdx.x % kBiasCols, ty = threadIdx.x / kBiasCols;
  const int64_t c = int64_t(blockIdx.x) * kBiasCols + tx;
  const int64_t per = (chunks + kFoldLanes - 1) / kFoldLanes;
  const int64_t k0 = ty * per, k1 = min64(k0 + per, chunks);
  float acc = 0.0f;
  if (c < cols)
    for (int64_t k = k0; k < k1; ++k) acc = acc + partials[k * cols + c];
  lanes[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && c < cols) {
    float s = lanes[0][tx];
    for (int l = 1; l < kFoldLanes; ++l) s = s + lanes[l][tx];
    if (c < split)
      out0[c] = round_to(s, fp16);
    else
      out1[c - split] = round_to(s, fp16);
  }
}

void fold_partials(const char* fn, const float* partials, int64_t chunks, int64_t cols, int64_t split, uint16_t* out0,
                   uint16_t* out1, core::DType grad, cudaStream_t stream) {
  const unsigned grid = unsigned((cols + kBiasCols - 1) / kBiasCols);
  fold_partials_kernel<<<grid, kBiasCols * kFoldLanes, 0, stream>>>(partials, chunks, cols, split, out0, out1,
                                                                    grad == core::DType::kF16);
  check_launch(fn);
}

template <Activation kAct>
void launch_bias_grad(const char* fn, const uint16_t* dy, const uint16_t* u, int64_t rows, int64_t n, uint16_t* du,
                      float* partials, bool vec, cudaStream_t stream) {
  const int64_t chunks = (rows + kBiasChunkRows - 1) / kBiasChunkRows;
  require(chunks <= 65535, fn,
          "rows = " + std::to_string(rows) + " exceeds 65535 chunks of " + std::to_string(kBiasChunkRows) +
              " rows; split the call");
  const dim3 grid(unsigned((n + kBiasCols * 8 - 1) / (kBiasCols * 8)), unsigned(chunks));
  if (vec)
    bias_grad_kernel<kAct, true><<<grid, kBiasCols * kBiasLanes, 0, stream>>>(dy, u, rows, n, du, partials);
  else
    bias_grad_kernel<kAct, false><<<grid, kBiasCols * kBiasLanes, 0, stream>>>(dy, u, rows, n, du, partials);
  check_launch(fn);
}

// ---- fused softmax cross-entropy -------------------------------------------------------------------

// (max, Σ exp(x - max)) pairs. An empty pair is (-inf, 0) and merges as the identity, so threads with
// no columns never make NaN. merge(a, b) and merge(b, a) give the same bits.
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (b.m == -INFINITY) return a;
  if (a.m == -INFINITY) return b;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
// Adds k values (all finite bf16 logits) to a running pair.
template <int K>
__device__ __forceinline__ MaxSum absorb(MaxSum a, const float* x) {
  float vmax = x[0];
#pragma unroll
  for (int e = 1; e < K; ++e) vmax = fmaxf(vmax, x[e]);
  const float m = fmaxf(a.m, vmax);
  float s = a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m);
#pragma unroll
  for (int e = 0; e < K; ++e) s = s + expf(x[e] - m);
  return {m, s};
}

// A row of V bf16 values whose start need not be 16-byte aligned: `head` scalars up to the first
// aligned element, `vecs` 16-byte vectors, then scalars to the end. The buffer base is aligned.
struct RowParts {
  int64_t head, vecs, tail_start;
};
__device__ __forceinline__ RowParts row_parts(int64_t row, int64_t vocab, int64_t ld) {
  const int64_t mis = (row * ld) % 8;
  const int64_t head = min64(mis ? 8 - mis : 0, vocab);
  const int64_t vecs = (vocab - head) / 8;
  return {head, vecs, head + vecs * 8};
}

// One row per block. Pass 1: each thread's (max, sum) over its scalars and vectors, merged by a warp
// butterfly and then warps in order; pass 2 overwrites the row with the gradient. Reads the row twice
// (the second time mostly from L2) and writes it once: cross_entropy_bytes.
__global__ void __launch_bounds__(kCeThreads)
    cross_entropy_kernel(uint16_t* __restrict__ logits, const int32_t* __restrict__ targets, int64_t vocab, int64_t ld,
                         float gscale, float* __restrict__ row_loss) {
  __shared__ MaxSum warp_pairs[kCeThreads / 32];
  const int64_t row = blockIdx.x;
  uint16_t* x = logits + row * ld;
  const RowParts p = row_parts(row, vocab, ld);
  const int t = threadIdx.x;
  MaxSum a{-INFINITY, 0.0f};
  if (t < p.head) {
    const float v = core::bf16_to_f32(x[t]);
    a = absorb<1>(a, &v);
  }
  for (int64_t i = t; i < p.vecs; i += kCeThreads) {
    float v[8];
    unpack8(*reinterpret_cast<const uint4*>(x + p.head + i * 8), v);
    a = absorb<8>(a, v);
  }
  if (p.tail_start + t < vocab) {
    const float v = core::bf16_to_f32(x[p.tail_start + t]);
    a = absorb<1>(a, &v);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const MaxSum b{__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
    a = merge(a, b);
  }
  if ((t & 31) == 0) warp_pairs[t >> 5] = a;
  const int32_t target = targets[row];
  const bool valid = target >= 0 && target < vocab;
  const float x_target = valid && t == 0 ? core::bf16_to_f32(x[target]) : 0.0f;  // read before pass 2 writes
  __syncthreads();
  MaxSum r = warp_pairs[0];
  for (int w = 1; w < kCeThreads / 32; ++w) r = merge(r, warp_pairs[w]);
  if (t == 0) row_loss[row] = valid ? (r.m + logf(r.s)) - x_target : __uint_as_float(0x7FC00000u);
  const auto grad = [&](int64_t j, float v) {  // fp32, rounded to bf16 by the store
    const float prob = expf(v - r.m) / r.s;
    return (j == target ? prob - 1.0f : prob) * gscale;
  };
  if (t < p.head) x[t] = core::f32_to_bf16(grad(t, core::bf16_to_f32(x[t])));
  for (int64_t i = t; i < p.vecs; i += kCeThreads) {
    float v[8];
    unpack8(*reinterpret_cast<const uint4*>(x + p.head + i * 8), v);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = grad(p.head + i * 8 + e, v[e]);
    store8<true>(x + p.head, i * 8, p.vecs * 8, v);
  }
  if (p.tail_start + t < vocab)
    x[p.tail_start + t] = core::f32_to_bf16(grad(p.tail_start + t, core::bf16_to_f32(x[p.tail_start + t])));
}

// *sum = Σ row_loss in a fixed order: thread t adds rows t, t + 1024, ..., then a halving tree.
__global__ void __launch_bounds__(kLossSumThreads)
    loss_sum_kernel(const float* __restrict__ row_loss, int64_t rows, float* __restrict__ sum) {
  __shared__ float part[kLossSumThreads];
  float acc = 0.0f;
  for (int64_t r = threadIdx.x; r < rows; r += kLossSumThreads) acc = acc + row_loss[r];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int h = kLossSumThreads / 2; h > 0; h /= 2) {
    if (int(threadIdx.x) < h) part[threadIdx.x] = part[threadIdx.x] + part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) *sum = part[0];
}

void check_embedding(const EmbeddingDims& d, const char* fn) {
  require(d.batch >= 1 && d.seq >= 1 && d.width >= 1 && d.vocab >= 1, fn,
          "batch, seq, width and vocab must be >= 1, got " + std::to_string(d.batch) + ", " + std::to_string(d.seq) +
              ", " + std::to_string(d.width) + ", " + std::to_string(d.vocab));
  require(d.pos_offset >= 0 && d.seq + d.pos_offset <= d.pos_rows, fn,
          "positions t + off for t < seq = " + std::to_string(d.seq) + " and off = " + std::to_string(d.pos_offset) +
              " need pos_rows >= " + std::to_string(d.seq + d.pos_offset) + ", got " + std::to_string(d.pos_rows));
}

}  // namespace

// ---- embedding -------------------------------------------------------------------------------------

void embedding_forward(const int32_t* tok, const uint16_t* embed, const uint16_t* pos, const EmbeddingDims& d,
                       uint16_t* x0, cudaStream_t stream) {
  constexpr const char* fn = "embedding_forward";
  check_embedding(d, fn);
  require_ptr(tok, fn, "tok"), require_ptr(embed, fn, "embed"), require_ptr(pos, fn, "pos"), require_ptr(x0, fn, "x0");
  const bool vec = d.width % 8 == 0 && aligned16(embed) && aligned16(pos) && aligned16(x0);
  launch_rowwise(fn, d.rows(), d.width, vec, EmbedOp{tok, embed, pos, x0, d.vocab, d.seq, d.pos_offset}, stream);
}
int64_t embedding_forward_bytes(const EmbeddingDims& d) { return d.rows() * (4 + 3 * 2 * d.width); }

void add_positions(uint16_t* x, const uint16_t* pos, const EmbeddingDims& d, cudaStream_t stream) {
  constexpr const char* fn = "add_positions";
  check_embedding(d, fn);
  require_ptr(x, fn, "x"), require_ptr(pos, fn, "pos");
  const bool vec = d.width % 8 == 0 && aligned16(pos) && aligned16(x);
  launch_rowwise(fn, d.rows(), d.width, vec, EmbedOp{nullptr, nullptr, pos, x, d.vocab, d.seq, d.pos_offset}, stream);
}
int64_t add_positions_bytes(const EmbeddingDims& d) { return d.rows() * 3 * 2 * d.width; }

void gather_rows(const int32_t* tok, const uint16_t* table, int64_t rows, int64_t vocab, int64_t width, uint16_t* out,
                 cudaStream_t stream) {
  constexpr const char* fn = "gather_rows";
  require_dims(rows, width, fn);
  require(vocab >= 1, fn, "vocab must be >= 1, got " + std::to_string(vocab));
  require_ptr(tok, fn, "tok"), require_ptr(table, fn, "table"), require_ptr(out, fn, "out");
  const bool vec = width % 8 == 0 && aligned16(table) && aligned16(out);
  launch_rowwise(fn, rows, width, vec, EmbedOp{tok, table, nullptr, out, vocab, 1, 0}, stream);
}
int64_t gather_rows_bytes(int64_t rows, int64_t width) { return rows * (4 + 2 * 2 * width); }

void position_grad(const uint16_t* dx0, const EmbeddingDims& d, core::DType grad, uint16_t* dpos, cudaStream_t stream) {
  constexpr const char* fn = "position_grad";
  check_embedding(d, fn);
  require_grad(grad, fn);
  require_ptr(dx0, fn, "dx0"), require_ptr(dpos, fn, "dpos");
  const bool vec = d.width % 8 == 0 && aligned16(dx0) && aligned16(dpos);
  launch_rowwise(fn, d.pos_rows, d.width, vec,
                 PosGradOp{dx0, dpos, d.batch, d.seq, d.pos_offset, grad == core::DType::kF16}, stream);
}
int64_t position_grad_bytes(const EmbeddingDims& d) { return 2 * d.width * (d.rows() + d.pos_rows); }

TokenRowIndex sort_token_rows(const int32_t* tok, int64_t rows, int64_t vocab, int64_t pad_token) {
  constexpr const char* fn = "sort_token_rows";
  require(rows >= 0 && rows <= INT32_MAX, fn, "rows must be in [0, 2^31), got " + std::to_string(rows));
  require(vocab >= 1 && vocab < INT32_MAX, fn, "vocab must be in [1, 2^31 - 1), got " + std::to_string(vocab));
  require(rows == 0 || tok != nullptr, fn, "tok is null; pass the micro-batch's host token ids");
  TokenRowIndex ix;
  ix.starts.assign(size_t(vocab) + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t id = tok[r];
    if (id < 0 || id >= vocab)  // the message only on failure: this loop runs over every token of every step
      require(false, fn,
              "token id " + std::to_string(id) + " at row " + std::to_string(r) + " is outside [0, V = " +
                  std::to_string(vocab) + "); validate the data before it reaches the GPU (docs/decoder.md \"Data\")");
    if (id != pad_token) ++ix.starts[size_t(id) + 1];
  }
  for (int64_t v = 0; v < vocab; ++v) ix.starts[size_t(v) + 1] += ix.starts[size_t(v)];
  std::vector<int32_t> next(ix.starts.begin(), ix.starts.end() - 1);
  ix.rows.assign(size_t(rows), 0);  // the first starts[V] entries are used
  for (int64_t r = 0; r < rows; ++r)
    if (tok[r] != pad_token) ix.rows[size_t(next[size_t(tok[r])]++)] = int32_t(r);  // ascending r
  return ix;
}

void token_embedding_grad(const uint16_t* drows, const int32_t* starts, const int32_t* rows_by_token,
                          const float* head_grad, int64_t rows, int64_t vocab, int64_t width, core::DType grad,
                          uint16_t* dembed, cudaStream_t stream, int rows_in_flight) {
  constexpr const char* fn = "token_embedding_grad";
  require_dims(rows, width, fn);
  require(vocab >= 1, fn, "vocab must be >= 1, got " + std::to_string(vocab));
  require_grad(grad, fn);
  require_ptr(drows, fn, "drows"), require_ptr(starts, fn, "starts"), require_ptr(rows_by_token, fn, "rows_by_token");
  require_ptr(dembed, fn, "dembed");
  require(rows_in_flight == 1 || rows_in_flight == 16, fn,
          "rows_in_flight must be 1 or 16, got " + std::to_string(rows_in_flight));
  const bool vec = width % 8 == 0 && aligned16(drows) && aligned16(dembed) && (!head_grad || aligned16(head_grad));
  const bool fp16 = grad == core::DType::kF16;
  if (rows_in_flight == 16)
    launch_rowwise(fn, vocab, width, vec, TokenGradOp<16>{drows, starts, rows_by_token, head_grad, dembed, fp16},
                   stream);
  else
    launch_rowwise(fn, vocab, width, vec, TokenGradOp<1>{drows, starts, rows_by_token, head_grad, dembed, fp16},
                   stream);
}
int64_t token_embedding_grad_bytes(int64_t rows, int64_t vocab, int64_t width, bool head) {
  return 4 * (vocab + 1) + 4 * rows + 2 * rows * width + (head ? 4 : 0) * vocab * width + 2 * vocab * width;
}

// ---- layer norm ------------------------------------------------------------------------------------

void layer_norm_forward(const uint16_t* x, const uint16_t* w, const uint16_t* b, int64_t rows, int64_t n, float eps,
                        uint16_t* y, float* mean, float* rstd, cudaStream_t stream) {
  constexpr const char* fn = "layer_norm_forward";
  require_dims(rows, n, fn);
  require(n <= kLayerNormMaxWidth, fn,
          "n = " + std::to_string(n) + " exceeds kLayerNormMaxWidth = " + std::to_string(kLayerNormMaxWidth));
  require(eps >= 0.0f && std::isfinite(eps), fn, "eps must be finite and >= 0");
  require_ptr(x, fn, "x"), require_ptr(w, fn, "w"), require_ptr(b, fn, "b"), require_ptr(y, fn, "y");
  require_ptr(mean, fn, "mean"), require_ptr(rstd, fn, "rstd");
  const bool vec = n % 8 == 0 && aligned16(x) && aligned16(w) && aligned16(b) && aligned16(y);
  dispatch_layer_norm(n, vec, [&](auto wpr, auto vecs, auto v) {
    using S = LnShape<decltype(wpr)::value>;
    const int64_t grid = (rows + S::kRowsPerBlock - 1) / S::kRowsPerBlock;
    require(grid <= INT32_MAX, fn, "too many rows: " + std::to_string(rows));
    ln_forward_kernel<decltype(wpr)::value, decltype(vecs)::value, decltype(v)::value>
        <<<unsigned(grid), S::kBlockThreads, 0, stream>>>(x, w, b, rows, n, eps, y, mean, rstd);
  });
  check_launch(fn);
}
int64_t layer_norm_forward_bytes(int64_t rows, int64_t n) { return 2 * 2 * n + rows * (2 * 2 * n + 2 * 4); }

int64_t layer_norm_chunk_rows() { return kLnChunkRows; }
int64_t layer_norm_partial_floats(int64_t rows, int64_t n) {
  return core::decoder_layout::layer_norm_partial_floats(rows, n);
}

void layer_norm_backward(const uint16_t* dy, const uint16_t* x, const float* mean, const float* rstd, const uint16_t* w,
                         const uint16_t* dresid, int64_t rows, int64_t n, uint16_t* dx, float* partials,
                         core::DType grad, uint16_t* dw, uint16_t* db, cudaStream_t stream) {
  constexpr const char* fn = "layer_norm_backward";
  require_dims(rows, n, fn);
  require(n <= kLayerNormMaxWidth, fn,
          "n = " + std::to_string(n) + " exceeds kLayerNormMaxWidth = " + std::to_string(kLayerNormMaxWidth));
  require_grad(grad, fn);
  require_ptr(dy, fn, "dy"), require_ptr(x, fn, "x"), require_ptr(mean, fn, "mean"), require_ptr(rstd, fn, "rstd");
  require_ptr(w, fn, "w"), require_ptr(dx, fn, "dx"), require_ptr(partials, fn, "partials");
  require_ptr(dw, fn, "dw"), require_ptr(db, fn, "db");
  const bool vec =
      n % 8 == 0 && aligned16(dy) && aligned16(x) && aligned16(w) && aligned16(dx) && (!dresid || aligned16(dresid));
  const int64_t chunks = (rows + kLnChunkRows - 1) / kLnChunkRows;
  require(chunks <= INT32_MAX, fn, "too many rows: " + std::to_string(rows));
  dispatch_layer_norm(n, vec, [&](auto wpr, auto vecs, auto v) {
    ln_backward_kernel<decltype(wpr)::value, decltype(vecs)::value, decltype(v)::value>
        <<<unsigned(chunks), LnShape<decltype(wpr)::value>::kBlockThreads, 0, stream>>>(dy, x, mean, rstd, w, dresid,
                                                                                        rows, n, dx, partials);
  });
  check_launch(fn);
  fold_partials(fn, partials, chunks, 2 * n, n, dw, db, grad, stream);
}
int64_t layer_norm_backward_bytes(int64_t rows, int64_t n, bool dresid) {
  const int64_t partial_bytes = 4 * layer_norm_partial_floats(rows, n);
  return rows * (2 * n * (dresid ? 4 : 3) + 2 * 4) + 2 * n + 2 * partial_bytes + 2 * 2 * n;
}

// ---- bias, activation, residual ---------------------------------------------------------------------

void bias_act_forward(uint16_t* u, const uint16_t* b, int64_t rows, int64_t n, Activation act, uint16_t* g,
                      cudaStream_t stream) {
  constexpr const char* fn = "bias_act_forward";
  require_dims(rows, n, fn);
  require_ptr(u, fn, "u"), require_ptr(b, fn, "b");
  if (act != Activation::kNone) require_ptr(g, fn, "g");
  const bool vec = n % 8 == 0 && aligned16(u) && aligned16(b) && (!g || aligned16(g));
  switch (act) {
    case Activation::kNone: launch_rowwise(fn, rows, n, vec, BiasActOp<Activation::kNone>{u, b, g}, stream); break;
    case Activation::kRelu: launch_rowwise(fn, rows, n, vec, BiasActOp<Activation::kRelu>{u, b, g}, stream); break;
    case Activation::kGeluTanh:
      launch_rowwise(fn, rows, n, vec, BiasActOp<Activation::kGeluTanh>{u, b, g}, stream);
      break;
  }
}
int64_t bias_act_forward_bytes(int64_t rows, int64_t n, Activation act) {
  return 2 * n + rows * n * 2 * (act == Activation::kNone ? 2 : 3);
}

void bias_residual_forward(const uint16_t* y, const uint16_t* b, const uint16_t* r, int64_t rows, int64_t n,
                           uint16_t* out, cudaStream_t stream) {
  constexpr const char* fn = "bias_residual_forward";
  require_dims(rows, n, fn);
  require_ptr(y, fn, "y"), require_ptr(b, fn, "b"), require_ptr(r, fn, "r"), require_ptr(out, fn, "out");
  const bool vec = n % 8 == 0 && aligned16(y) && aligned16(b) && aligned16(r) && aligned16(out);
  launch_rowwise(fn, rows, n, vec, BiasResidualOp{y, b, r, out}, stream);
}
int64_t bias_residual_forward_bytes(int64_t rows, int64_t n) { return 2 * n + rows * n * 2 * 3; }

void add_bf16(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t* out, cudaStream_t stream) {
  constexpr const char* fn = "add_bf16";
  require(n >= 1, fn, "n must be >= 1, got " + std::to_string(n));
  require_ptr(a, fn, "a"), require_ptr(b, fn, "b"), require_ptr(out, fn, "out");
  launch_flat(fn, n, aligned16(a) && aligned16(b) && aligned16(out), AddOp{a, b, out}, stream);
}
int64_t add_bf16_bytes(int64_t n) { return 3 * 2 * n; }

void bias_act_backward(const uint16_t* dg, const uint16_t* u, int64_t rows, int64_t n, Activation act, uint16_t* du,
                       float* partials, core::DType grad, uint16_t* db, cudaStream_t stream) {
  constexpr const char* fn = "bias_act_backward";
  require_dims(rows, n, fn);
  require(act != Activation::kNone, fn, "act is kNone: use bias_grad");
  require_grad(grad, fn);
  require_ptr(dg, fn, "dg"), require_ptr(u, fn, "u"), require_ptr(du, fn, "du"), require_ptr(partials, fn, "partials");
  require_ptr(db, fn, "db");
  const bool vec = n % 8 == 0 && aligned16(dg) && aligned16(u) && aligned16(du);
  if (act == Activation::kRelu)
    launch_bias_grad<Activation::kRelu>(fn, dg, u, rows, n, du, partials, vec, stream);
  else
    launch_bias_grad<Activation::kGeluTanh>(fn, dg, u, rows, n, du, partials, vec, stream);
  fold_partials(fn, partials, (rows + kBiasChunkRows - 1) / kBiasChunkRows, n, n, db, nullptr, grad, stream);
}
int64_t bias_act_backward_bytes(int64_t rows, int64_t n) {
  return rows * n * 2 * 3 + 2 * 4 * bias_grad_partial_floats(rows, n) + 2 * n;
}

void bias_grad(const uint16_t* dy, int64_t rows, int64_t n, float* partials, core::DType grad, uint16_t* db,
               cudaStream_t stream) {
  constexpr const char* fn = "bias_grad";
  require_dims(rows, n, fn);
  require_grad(grad, fn);
  require_ptr(dy, fn, "dy"), require_ptr(partials, fn, "partials"), require_ptr(db, fn, "db");
  const bool vec = n % 8 == 0 && aligned16(dy);
  launch_bias_grad<Activation::kNone>(fn, dy, nullptr, rows, n, nullptr, partials, vec, stream);
  fold_partials(fn, partials, (rows + kBiasChunkRows - 1) / kBiasChunkRows, n, n, db, nullptr, grad, stream);
}
int64_t bias_grad_chunk_rows() { return kBiasChunkRows; }
int64_t bias_grad_partial_floats(int64_t rows, int64_t n) {
  return core::decoder_layout::bias_grad_partial_floats(rows, n);
}
int64_t bias_grad_bytes(int64_t rows, int64_t n) {
  return rows * n * 2 + 2 * 4 * bias_grad_partial_floats(rows, n) + 2 * n;
}

// ---- loss ------------------------------------------------------------------------------------------

void cross_entropy_forward_backward(uint16_t* logits, const int32_t* targets, int64_t rows, int64_t vocab, int64_t ld,
                                    float gscale, float* row_loss, float* loss_sum, cudaStream_t stream) {
  constexpr const char* fn = "cross_entropy_forward_backward";
  require_dims(rows, vocab, fn);
  require(ld >= vocab, fn, "the row stride ld = " + std::to_string(ld) + " is below vocab = " + std::to_string(vocab));
  require(rows <= INT32_MAX, fn, "too many rows: " + std::to_string(rows));
  require(std::isfinite(gscale), fn, "gscale must be finite");
  require_ptr(logits, fn, "logits"), require_ptr(targets, fn, "targets"), require_ptr(row_loss, fn, "row_loss");
  require(aligned16(logits), fn, "logits must be 16-byte aligned (a cudaMalloc'd buffer is)");
  cross_entropy_kernel<<<unsigned(rows), kCeThreads, 0, stream>>>(logits, targets, vocab, ld, gscale, row_loss);
  check_launch(fn);
  if (loss_sum) {
    loss_sum_kernel<<<1, kLossSumThreads, 0, stream>>>(row_loss, rows, loss_sum);
    check_launch(fn);
  }
}
int64_t cross_entropy_bytes(int64_t rows, int64_t vocab) { return rows * (2 * 2 * vocab + 4 + 4); }

// ---- conversions -----------------------------------------------------------------------------------

void f32_to_grad(const float* src, int64_t n, core::DType grad, uint16_t* out, cudaStream_t stream) {
  constexpr const char* fn = "f32_to_grad";
  require(n >= 1, fn, "n must be >= 1, got " + std::to_string(n));
  require_grad(grad, fn);
  require_ptr(src, fn, "src"), require_ptr(out, fn, "out");
  launch_flat(fn, n, aligned16(src) && aligned16(out), ToGradOp{src, out, grad == core::DType::kF16}, stream);
}
int64_t f32_to_grad_bytes(int64_t n) { return n * (4 + 2); }

}  // namespace tf::backend::cuda
