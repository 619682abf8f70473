// wgmma_probe: do Hopper's warpgroup MMAs (wgmma.mma_async, sm_90a) read the operands we think they read? The
// attention kernels run at FlashAttention-2's rates on mma.sync (bench/results/attention-notes.md); cuDNN's, 1.5-1.7x
// faster, use wgmma. This checks, on one warpgroup, the two products a wgmma attention forward needs, against a
// double-precision reference, before a kernel is built on them:
//   S = Q·Kᵀ  Q (64 x 64) and K (64 x 64) both K-major in shared memory, 128-byte swizzle, descriptors;
//   O = P·V   P (64 x 64) from registers (the S accumulator's layout, rounded to bf16), V (64 keys x 64) in its
//             row-major layout, read transposed (MN-major, 128-byte swizzle).
// Prints the largest error against the reference, the accumulator layout's first mismatch if any, and exits 1 on a
// mismatch. Run on the GPU machine: build/bench/wgmma_probe.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kM = 64, kN = 64, kK = 64;  // one warpgroup tile: M x N, K in 4 steps of 16

#define CHECK(call)                                                                 \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "wgmma_probe: %s: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                 \
    }                                                                               \
  } while (0)

// Byte offset of element (row, col) of a (rows x 64) bf16 tile stored with the 128-byte swizzle: a row is 128 bytes,
// its 16-byte chunk c lands at chunk c ^ (row % 8).
__host__ __device__ inline uint32_t swizzled(int row, int col) {
  const int chunk = (col * 2) / 16;
  return uint32_t(row * 128 + ((chunk ^ (row % 8)) * 16) + (col * 2) % 16);
}

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in bits 0-13,
// leading-dimension byte offset >> 4 in 16-29, stride-dimension byte offset >> 4 in 32-45, swizzle mode in 62-63
// (1: 128-byte).
__device__ inline uint64_t descriptor(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t d = 0;
  d |= uint64_t((addr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo & 0x3FFFF) >> 4) << 16;
  d |= uint64_t((sbo & 0x3FFFF) >> 4) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

// The m64n64 accumulator: 32 fp32 registers a thread, operands %0 .. %31 of both MMAs below.
#define TF_WGMMA_D32                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define TF_WGMMA_ACC32(d)                                                                                     \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

__device__ inline void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void commit_and_wait() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// d (32 fp32 a thread) += A·B, m64n64k16, A and B from shared memory (both K-major: no transposes).
__device__ inline void mma_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TF_WGMMA_D32 "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : TF_WGMMA_ACC32(d)
      : "l"(da), "l"(db), "r"(accumulate));
}

// d += A·B, m64n64k16, A from registers (4 x b32: 8 bf16 a thread), B from shared memory transposed (MN-major).
__device__ inline void mma_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TF_WGMMA_D32 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : TF_WGMMA_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

// The accumulator layout of m64nNk16 (PTX ISA, "wgmma register fragments"): warp w of the warpgroup holds rows
// 16w .. 16w + 15; lane l, register 4j + i: row 16w + l/4 + 8·(i/2), column 8j + 2·(l%4) + i%2.
__device__ inline int acc_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2); }
__device__ inline int acc_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }

__device__ inline uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// q, k, v: (64, 64) bf16 row-major in global memory. s: (64, 64) fp32 = q·kᵀ; o: (64, 64) fp32 = bf16(s)·v.
__global__ void __launch_bounds__(128)
    probe(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* s, float* o) {
  __shared__ __align__(1024) uint8_t sq[kM * 128];
  __shared__ __align__(1024) uint8_t sk[kN * 128];
  __shared__ __align__(1024) uint8_t sv[kK * 128];
  const int t = threadIdx.x;
  for (int e = t; e < 64 * 64; e += 128) {
    const int r = e / 64, c = e % 64;
    *reinterpret_cast<__nv_bfloat16*>(sq + swizzled(r, c)) = q[e];
    *reinterpret_cast<__nv_bfloat16*>(sk + swizzled(r, c)) = k[e];
    *reinterpret_cast<__nv_bfloat16*>(sv + swizzled(r, c)) = v[e];  // row = key (the product's K), col = d (its N)
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy stores, seen by the async proxy
  __syncthreads();

  // S = Q·Kᵀ: K-major A and B; a K step of 16 elements is 32 bytes further along the 128-byte rows
  float acc[32];
  for (float& x : acc) x = 0.0f;
  fence();
  for (int ks = 0; ks < kK / 16; ++ks)
    mma_ss(acc, descriptor(sq + 32 * ks, 16, 1024), descriptor(sk + 32 * ks, 16, 1024), ks > 0);
  commit_and_wait();
  for (int i = 0; i < 32; ++i) s[acc_row(t, i) * kN + acc_col(t, i)] = acc[i];

  // O = P·V with P = bf16(S) from the accumulator registers: the k16 A fragment of step ks is the accumulator's
  // columns 16ks .. 16ks + 15, i.e. registers 8ks .. 8ks + 7 (two 8-column groups), packed in pairs
  float out[32];
  for (float& x : out) x = 0.0f;
  for (int ks = 0; ks < kK / 16; ++ks) {
    const float* p = acc + 8 * ks;
    const uint32_t a[4] = {pack(p[0], p[1]), pack(p[2], p[3]), pack(p[4], p[5]), pack(p[6], p[7])};
    // V's rows are the product's K: step ks starts 16 rows (2048 bytes) further; MN-major, 128-byte swizzle.
    // The fence orders this step's A registers (written just above) before the MMA reads them.
    fence();
    mma_rs_tb(out, a, descriptor(sv + 2048 * ks, 8192, 1024), ks > 0);
  }
  commit_and_wait();
  for (int i = 0; i < 32; ++i) o[acc_row(t, i) * kN + acc_col(t, i)] = out[i];
}

float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

}  // namespace

int main() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0) {
    std::printf("wgmma_probe: no CUDA device; skipped\n");
    return 0;
  }
  CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) {
    std::printf("wgmma_probe: %s is sm_%d%d; wgmma needs sm_90; skipped\n", prop.name, prop.major, prop.minor);
    return 0;
  }
  std::vector<__nv_bfloat16> q(64 * 64), k(64 * 64), v(64 * 64);
  uint64_t state = 12345;
  const auto next = [&] {  // uniform in [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(double(state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  };
  for (auto* m : {&q, &k, &v})
    for (auto& x : *m) x = __float2bfloat16_rn(next());
  __nv_bfloat16 *dq, *dk, *dv;
  float *ds, *dout;
  CHECK(cudaMalloc(&dq, 8192));
  CHECK(cudaMalloc(&dk, 8192));
  CHECK(cudaMalloc(&dv, 8192));
  CHECK(cudaMalloc(&ds, 16384));
  CHECK(cudaMalloc(&dout, 16384));
  CHECK(cudaMemcpy(dq, q.data(), 8192, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dk, k.data(), 8192, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dv, v.data(), 8192, cudaMemcpyHostToDevice));
  probe<<<1, 128>>>(dq, dk, dv, ds, dout);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> s(64 * 64), o(64 * 64);
  CHECK(cudaMemcpy(s.data(), ds, 16384, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(o.data(), dout, 16384, cudaMemcpyDeviceToHost));

  // references in double: S = Q Kᵀ; O = bf16(S) V (the kernel's P is its own fp32 S rounded to bf16)
  const auto f = [](__nv_bfloat16 x) { return double(__bfloat162float(x)); };
  double s_err = 0, o_err = 0, s_mag = 0, o_mag = 0;
  int bad = 0;
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      double ref = 0, mag = 0;
      for (int x = 0; x < 64; ++x)
        ref += f(q[r * 64 + x]) * f(k[c * 64 + x]), mag += std::fabs(f(q[r * 64 + x]) * f(k[c * 64 + x]));
      const double e = std::fabs(double(s[r * 64 + c]) - ref);
      s_err = std::max(s_err, e), s_mag = std::max(s_mag, mag);
      if (e > 1e-5 * (mag + 1) && bad++ < 5)
        std::printf("S mismatch at (%d, %d): got %.6f, want %.6f\n", r, c, double(s[r * 64 + c]), ref);
    }
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      double ref = 0, mag = 0;
      for (int x = 0; x < 64; ++x) {
        const double p = double(bf16_round(s[r * 64 + x]));
        ref += p * f(v[x * 64 + c]), mag += std::fabs(p * f(v[x * 64 + c]));
      }
      const double e = std::fabs(double(o[r * 64 + c]) - ref);
      o_err = std::max(o_err, e), o_mag = std::max(o_mag, mag);
      if (e > 1e-5 * (mag + 1) && bad++ < 10)
        std::printf("O mismatch at (%d, %d): got %.6f, want %.6f\n", r, c, double(o[r * 64 + c]), ref);
    }
  std::printf(
      "wgmma_probe on %s: S = Q·K^T (smem, K-major, 128B swizzle) max abs error %.3g (max |terms| %.3g); "
      "O = P·V (P in registers, V transposed) max abs error %.3g (max |terms| %.3g); %s\n",
      prop.name, s_err, s_mag, o_err, o_mag, bad ? "MISMATCH" : "both match");
  return bad ? 1 : 0;
}
