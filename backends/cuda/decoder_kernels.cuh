// Host-callable launches of the GPT-2/OPT decoder's CUDA kernels other than GEMMs (docs/decoder.md).
#pragma once

// Host code only: no device code in this header, so plain .cpp files (the workload, tests, benchmarks)
// include it. Every pointer is device memory; bf16 and fp16 values are uint16_t bit patterns. Every
// launch runs on `stream`, allocates nothing, checks its arguments (core::InputError naming the
// function and the argument, before any GPU work) and its launch (core::RuntimeFailure).
//
// Folds: a column's per-chunk fp32 partials are added in chunk order, 32 lanes each adding a contiguous
// run of ceil(chunks / 32) chunks, then the 32 runs in lane order; the sum is rounded once.
//
// Numerics (docs/decoder.md "Rounding"): bf16 storage, fp32 arithmetic with no contraction (-fmad=false:
// a*b + c is a rounded product then a rounded sum), IEEE division and square root, one round-to-
// nearest-even per stored value through core/optim/dtype.h. Deterministic: no atomics; every sum has
// a fixed order that depends on the shapes only (stated at each function), so the same inputs give
// the same bits on every run.
//
// Which kernel covers each line of docs/decoder.md (the rest are cuBLAS GEMMs, cublas_gemm.cuh):
//   forward   x0 = bf16(E'[tok] + Pos[t + off])     embedding_forward (e = h); e != h: gather_rows,
//                                                    project_in GEMM, add_positions
//             a = LN1(x), c = LN2(x2), z = LNf(x_L)  layer_norm_forward
//             qkv = bf16(bf16(a·Wqkvᵀ) + bqkv)      GEMM, bias_act_forward (Activation::kNone)
//             o, lse = attention(qkv)               attention_forward
//             x2 = bf16(x + (bf16(o·Woᵀ) + bo))     GEMM, bias_residual_forward
//             u = bf16(bf16(c·W1ᵀ) + b1), g = act(u) GEMM, bias_act_forward (kGeluTanh | kRelu)
//             x3 = bf16(x2 + (bf16(g·W2ᵀ) + b2))    GEMM, bias_residual_forward
//             post-LN (opt-350m): x + attn(x), x2 + mlp(x2) with bias_residual_forward, then LN
//             loss (per row lse - logit[target])    cross_entropy_forward_backward (+ its sum)
//   backward  dlogit = bf16((softmax - onehot)·gscale)  cross_entropy_forward_backward (in place)
//             LNf backward -> dx_L                   layer_norm_backward (dresid = null)
//             db2 = Σ dx3, dbo = Σ dx2, dbqkv = Σ dqkv  bias_grad
//             du = bf16(dg·act'(u)), db1 = Σ du     bias_act_backward (fused)
//             dx2 = bf16(dx3 + LN2'(dc)), dx = bf16(dx2 + LN1'(da))  layer_norm_backward (dresid)
//             post-LN residual gradient sums        add_bf16
//             dq, dk, dv = attention'(do)           attention_backward (D = rowsum(dO∘O) inside)
//             dPos rows                             position_grad
//             dE = bf16(dE_head + Σ dx0[r])         sort_token_rows (host) + token_embedding_grad
//             fp16 weight gradients from fp32 GEMMs f32_to_grad
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/optim/dtype.h"

namespace tf::backend::cuda {

// --- embedding ------------------------------------------------------------------------------------

// A micro-batch's token rows and the position table (docs/decoder.md "Shapes and names").
struct EmbeddingDims {
  int64_t batch = 0;       // B samples
  int64_t seq = 0;         // s tokens per sample; rows T = B·s, row b·s + t
  int64_t width = 0;       // h: columns of x0 and of the position table
  int64_t vocab = 0;       // V rows of the token table
  int64_t pos_rows = 0;    // P + off rows of the position table
  int64_t pos_offset = 0;  // off: 2 for OPT, 0 for GPT-2
  int64_t rows() const { return batch * seq; }
};

// x0 (T, h) bf16 = bf16(E[tok[r]] + Pos[t + off]) in fp32, for e == h. tok (T) int32 (validated on
// the host, docs/decoder.md "Data"; an id outside [0, V) gives a NaN row rather than a wild read),
// E (V, h) bf16, Pos (P + off, h) bf16.
void embedding_forward(const int32_t* tok, const uint16_t* embed, const uint16_t* pos, const EmbeddingDims& d,
                       uint16_t* x0, cudaStream_t stream);
int64_t embedding_forward_bytes(const EmbeddingDims& d);

// In place, x (T, h) bf16 = bf16(x + Pos[t + off]): the positions after project_in (e != h).
void add_positions(uint16_t* x, const uint16_t* pos, const EmbeddingDims& d, cudaStream_t stream);
int64_t add_positions_bytes(const EmbeddingDims& d);

// out (T, e) bf16 = E[tok[r]] (V, e): project_in's input when e != h (a NaN row for an id outside [0, V)).
void gather_rows(const int32_t* tok, const uint16_t* table, int64_t rows, int64_t vocab, int64_t width, uint16_t* out,
                 cudaStream_t stream);
int64_t gather_rows_bytes(int64_t rows, int64_t width);

// dPos (P + off, h) in the grad dtype (bf16 | fp16): row t + off = one rounding of the fp32 sum over
// b = 0, 1, ... of dx0[b·s + t] (starting from +0); every other row 0. dx0 (T, h) bf16.
void position_grad(const uint16_t* dx0, const EmbeddingDims& d, core::DType grad, uint16_t* dpos, cudaStream_t stream);
int64_t position_grad_bytes(const EmbeddingDims& d);

// The token rows of a micro-batch grouped by token: rows[starts[v] .. starts[v + 1]) are the rows r
// with tok[r] == v, ascending. A counting sort on the host, O(T + V) (the host has the tokens; the
// workload copies both arrays to the device). Throws InputError naming the row of an id outside [0, V).
struct TokenRowIndex {
  std::vector<int32_t> starts;  // (V + 1)
  std::vector<int32_t> rows;    // (T)
};
// Rows of `pad_token` (OPT's padding_idx; -1: none) are left out: that token's row list is empty, so its
// dE row is the head's part alone (core::DecoderShape::pad_token).
TokenRowIndex sort_token_rows(const int32_t* tok, int64_t rows, int64_t vocab, int64_t pad_token = -1);

// dE (V, e) in the grad dtype, written whole into a flat (V·e) buffer:
//   dE[v] = round(dE_head[v] + S_v),  S_v = fp32 sum over the rows r of token v in ascending r of
//   drows[r] (starting from +0); a token with no rows gets round(dE_head[v]) (or 0 without a head).
// drows (T, e) bf16: dx0 (e == h) or the project_in data gradient (e != h). dE_head (V, e) fp32, the
// tied LM head's gradient (null when untied). starts (V + 1), rows (T) int32: sort_token_rows's arrays.
// A token's rows are loaded `rows_in_flight` at a time (16, or 1: one load after another, for the bench's
// comparison); either gives the same bits.
void token_embedding_grad(const uint16_t* drows, const int32_t* starts, const int32_t* rows_by_token,
                          const float* head_grad, int64_t rows, int64_t vocab, int64_t width, core::DType grad,
                          uint16_t* dembed, cudaStream_t stream, int rows_in_flight = 16);
int64_t token_embedding_grad_bytes(int64_t rows, int64_t vocab, int64_t width, bool head);

// --- layer norm -----------------------------------------------------------------------------------

// Widest row the layer-norm kernels take (each thread keeps its share of a row in registers).
inline constexpr int64_t kLayerNormMaxWidth = 16384;

// y (T, n) bf16 = bf16(((x - mean)·rstd)·w + b); mean, rstd (T) fp32: mean = Σx / n, var = Σ(x -
// mean)² / n (two passes), rstd = 1 / sqrt(var + eps). x (T, n), w, b (n) bf16; n <= kLayerNormMaxWidth.
// Sums: each thread adds its columns in ascending order, then a fixed butterfly and warp order.
void layer_norm_forward(const uint16_t* x, const uint16_t* w, const uint16_t* b, int64_t rows, int64_t n, float eps,
                        uint16_t* y, float* mean, float* rstd, cudaStream_t stream);
int64_t layer_norm_forward_bytes(int64_t rows, int64_t n);

// Backward of y = LN(x), with the residual gradient added before the one rounding:
//   xhat = (x - mean)·rstd, g = dy·w, dx = ((g - Σg/n) - xhat·(Σ(g·xhat)/n))·rstd
//   out  = bf16(dresid + dx) (dresid (T, n) bf16) or bf16(dx) when dresid is null
//   dw = Σ_rows dy·xhat, db = Σ_rows dy: fp32 partials per chunk of layer_norm_chunk_rows() rows (row
//        groups of a block added in group order), folded in chunk order (see "Folds" at the top), rounded once
//        to the grad dtype.
// dy, x (T, n) bf16; mean, rstd (T) fp32 from the forward; w (n) bf16; dx (T, n) bf16 may alias dy or
// dresid; partials: layer_norm_partial_floats(rows, n) fp32 of scratch; dw, db (n) grad dtype.
void layer_norm_backward(const uint16_t* dy, const uint16_t* x, const float* mean, const float* rstd, const uint16_t* w,
                         const uint16_t* dresid, int64_t rows, int64_t n, uint16_t* dx, float* partials,
                         core::DType grad, uint16_t* dw, uint16_t* db, cudaStream_t stream);
int64_t layer_norm_chunk_rows();
int64_t layer_norm_partial_floats(int64_t rows, int64_t n);
int64_t layer_norm_backward_bytes(int64_t rows, int64_t n, bool dresid);

// --- bias, activation, residual ---------------------------------------------------------------------

enum class Activation : uint8_t { kNone, kRelu, kGeluTanh };

// In place, u (T, n) bf16 = bf16(u + b) (u holds the GEMM's bf16 output); then g (T, n) bf16 =
// bf16(act(u)): GELU (tanh) 0.5·u·(1 + tanh(0.7978845608·(u + 0.044715·u³))) in fp32 with the product
// u³ = (u·u)·u, or ReLU (negative values and -0 -> +0, NaN kept). g may be null for kNone; g may alias
// u (u is then lost). b (n) bf16.
void bias_act_forward(uint16_t* u, const uint16_t* b, int64_t rows, int64_t n, Activation act, uint16_t* g,
                      cudaStream_t stream);
int64_t bias_act_forward_bytes(int64_t rows, int64_t n, Activation act);

// out (T, n) bf16 = bf16(r + (y + b)) with one rounding (docs/decoder.md's x2 and x3): y (T, n) bf16
// the GEMM's output, r (T, n) bf16 the residual, b (n) bf16. out may alias y or r.
void bias_residual_forward(const uint16_t* y, const uint16_t* b, const uint16_t* r, int64_t rows, int64_t n,
                           uint16_t* out, cudaStream_t stream);
int64_t bias_residual_forward_bytes(int64_t rows, int64_t n);

// out (n) bf16 = bf16(a + b) elementwise (post-LN residual gradients); out may alias a or b.
void add_bf16(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t* out, cudaStream_t stream);
int64_t add_bf16_bytes(int64_t n);

// du (T, n) bf16 = bf16(dg·act'(u)) and db (n) = Σ_rows du (the bf16 du values) in the grad dtype.
// GELU' = 0.5·(1 + t) + (0.5·u)·((1 - t·t)·(k·(1 + 3c·u²))) with t = tanh(k·(u + c·u³)), k =
// 0.7978845608, c = 0.044715; ReLU' = 1 where u > 0, else 0 (so du = +0). act != kNone (kNone:
// bias_grad). dg, u (T, n) bf16; du may alias dg; partials: bias_grad_partial_floats(rows, n) fp32.
void bias_act_backward(const uint16_t* dg, const uint16_t* u, int64_t rows, int64_t n, Activation act, uint16_t* du,
                       float* partials, core::DType grad, uint16_t* db, cudaStream_t stream);
int64_t bias_act_backward_bytes(int64_t rows, int64_t n);

// db (n) in the grad dtype = Σ_rows dy (T, n) bf16: fp32 partials per chunk of bias_grad_chunk_rows()
// rows (within a chunk, 8 lanes take every 8th row in ascending order and are added in lane order),
// folded in chunk order (see "Folds" at the top), rounded once.
void bias_grad(const uint16_t* dy, int64_t rows, int64_t n, float* partials, core::DType grad, uint16_t* db,
               cudaStream_t stream);
int64_t bias_grad_chunk_rows();
int64_t bias_grad_partial_floats(int64_t rows, int64_t n);
int64_t bias_grad_bytes(int64_t rows, int64_t n);

// --- loss -----------------------------------------------------------------------------------------

// Fused softmax cross-entropy over logits (T, V) bf16, row r at logits + r·ld (ld >= V; any V and ld:
// rows need not be 16-byte aligned; the ld - V columns past a row's end are neither read nor written):
//   m = max_j x_j, S = Σ_j exp(x_j - m) (each thread keeps an online (max, sum) of its columns,
//   merged in a fixed tree), lse = m + log(S), row_loss[r] = lse - x[target_r] (fp32),
//   in place: logits[r][j] = bf16((exp(x_j - m) / S - [j == target_r])·gscale).
// targets (T) int32 in [0, V) (an id outside gives a NaN loss and no onehot). loss_sum (1) fp32, when
// not null, = Σ_r row_loss[r] in a fixed order (thread t adds rows t, t + 1024, ...; then a tree).
void cross_entropy_forward_backward(uint16_t* logits, const int32_t* targets, int64_t rows, int64_t vocab, int64_t ld,
                                    float gscale, float* row_loss, float* loss_sum, cudaStream_t stream);
// Bytes that must cross DRAM: the logits read and written once (the second pass re-reads a row from L2).
int64_t cross_entropy_bytes(int64_t rows, int64_t vocab);

// --- conversions and folds ---------------------------------------------------------------------------

// out (n) in the grad dtype = one rounding of src (n) fp32 (fp16 weight gradients from fp32 GEMMs).
void f32_to_grad(const float* src, int64_t n, core::DType grad, uint16_t* out, cudaStream_t stream);
int64_t f32_to_grad_bytes(int64_t n);

// --- attention ------------------------------------------------------------------------------------

struct AttentionDims {
  int64_t batch = 0;     // B
  int64_t seq = 0;       // s >= 1 (any; tails are masked)
  int64_t heads = 0;     // H
  int64_t head_dim = 0;  // d in {64, 80, 128}; h = H·d
  int64_t hidden() const { return heads * head_dim; }
  int64_t rows() const { return batch * seq; }
};

// The forward's tile shape for d = 64 (d = 80 and 128 have one): 128 query rows a block as 4 warps of
// 32 rows (two m16 tiles a warp: each K/V fragment read from shared memory serves two products) or as
// 8 warps of 16 rows (twice the warps an SM to hide latency, half the registers a thread, twice the
// shared-memory reads a product). Both give the same bits; 4 x 32 is the one measured faster on the
// H100 (bench/results/attention-notes.md), the other stays for the comparison on a new GPU.
// kWgmma: Hopper's warpgroup MMAs (wgmma.mma_async, sm_90a code: attention_wgmma.cu), 128 query rows a
// block as 2 warpgroups of 64, d = 64 only, compute capability 9.0 only (an InputError elsewhere: use
// kDefault). Same contract, same l and lse definitions. The order of the tensor core's additions inside a
// product is not documented: DecoderKernels.AttentionForward prints whether its bits are the 4 x 32 shape's
// (on an H200 they were, at every test shape) and holds it to the bounds and to itself run to run. On an H200
// it ran 1.19-1.21x the 4 x 32 shape (bench/results/attention-notes.md, "v3").
// kDefault: kWgmma where it runs (d = 64, a build with sm_90a code, a compute capability 9.0 device), else
// 4 x 32 for d = 64 and the one shape of d = 80 and 128.
enum class ForwardTiles : uint8_t { kDefault, kWarps4x32, kWarps8x16, kWgmma };

// Causal flash attention forward (docs/decoder.md): per (sample, head), S = (q·kᵀ)·d^-½ in fp32
// (scaled in base 2: S·log2(e) = (q·kᵀ)·(d^-½·log2 e), one fp32 constant), online softmax in fp32,
// o = (Σ_k bf16(p_k)·v_k) / l with l = Σ_k p_k of the fp32 p, lse = max + log(l) (natural log). The
// order of l's fp32 additions: per 64-key tile and thread, a tree over the thread's 16 keys of the row,
// added to the running l·alpha; at the end the 4 threads of the row in a butterfly.
// qkv (T, 3h) bf16: q at column j·d, k at h + j·d, v at 2h + j·d for head j; o (T, h) bf16;
// lse (B, H, s) fp32. Key tiles above the diagonal are skipped, not masked.
void attention_forward(const uint16_t* qkv, const AttentionDims& d, uint16_t* o, float* lse, cudaStream_t stream,
                       ForwardTiles tiles = ForwardTiles::kDefault);

// The backward's dK/dV kernel (D = rowsum(dO∘O) and dQ are the mma.sync kernels for every choice). kMmaSync: one
// block of 4 warps per 64-key tile, mma.sync m16n8k16 (every d). kWgmma: Hopper's warpgroup MMAs (wgmma.mma_async,
// sm_90a code: attention_wgmma_bwd.cu), one warpgroup per 64-key tile, d = 64 only, compute capability 9.0 only
// (an InputError elsewhere: use kDefault). Same contract and the same elementwise steps (P, the exponential path,
// dS, their bf16 operand rounding, the scale, core's rounding of dk and dv); the order of the tensor core's
// additions inside a product is not documented, so the bits might differ from kMmaSync's:
// DecoderKernels.AttentionBackwardWgmma holds it to the same bounds and to its own bits run to run, and prints
// whether they are kMmaSync's (on an H200 they were, at every test shape). On an H200 the whole backward ran
// 1.21-1.26x faster with it (bench/results/attention-notes.md, "v4"). kDefault: kWgmma where it runs (d = 64, a
// build with sm_90a code, a compute capability 9.0 device), else kMmaSync.
enum class BackwardKernel : uint8_t { kDefault, kMmaSync, kWgmma };

// Backward: D = rowsum(dO ∘ O) (fp32, ascending columns) into `delta`, then dK, dV with one block per
// key tile looping over query tiles and dQ with one block per query tile looping over key tiles (no
// atomics), P = 2^(S·log2 e - lse·log2 e), dS = P ∘ (dP - D), dK and dQ scaled by d^-½ at the end.
// qkv (T, 3h), o (T, h), dout (T, h) bf16; lse (B, H, s) fp32 from the forward; delta (B, H, s) fp32
// scratch; dqkv (T, 3h) bf16 in qkv's layout, every element written.
void attention_backward(const uint16_t* qkv, const uint16_t* o, const uint16_t* dout, const float* lse,
                        const AttentionDims& d, float* delta, uint16_t* dqkv, cudaStream_t stream,
                        BackwardKernel kernel = BackwardKernel::kDefault);

// out (n) uint32 = bf16x2 of src[2i] (low half) and src[2i + 1] (high half), src (2n) fp32: the rounding
// that turns P and dS into tensor-core operands (attn::pack_bf16x2_operand) on its own, so that a test
// can hold its bits to core::f32_to_bf16.
void attention_operand_pack(const float* src, int64_t n, uint32_t* out, cudaStream_t stream);

// FLOPs as counted for throughput: causal forward = half of 4·s²·d per (sample, head); backward 2.5x.
double attention_forward_flops(const AttentionDims& d);
double attention_backward_flops(const AttentionDims& d);

}  // namespace tf::backend::cuda
