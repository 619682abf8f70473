// The decoder's CUDA kernels (backends/cuda/decoder_kernels.cuh, attention.cu) against plain double-precision
// CPU implementations of docs/decoder.md written here: elementwise bounds derived from bf16/fp16 rounding
// and fp32 summation, every output element written (poisoned outputs, guard zones past each buffer),
// run-to-run bit equality. Host-only tests (no GPU): the token sort, argument checks, the attention tile
// schedule, and the mma.m16n8k16 / ldmatrix fragment index math run through an emulation of the PTX ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/attention_tiles.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/decoder_kernels.cuh"
#include "core/decoder_layout.h"
#include "core/error.h"
#include "core/optim/dtype.h"
#include "core/random.h"

using namespace tf;
using namespace tf::backend::cuda;
using core::DType;

namespace {

#define SKIP_WITHOUT_GPU()                                                                        \
  do {                                                                                            \
    std::string why_;                                                                             \
    if (!backend::cuda::cuda_available(&why_)) GTEST_SKIP() << "no usable CUDA device: " << why_; \
  } while (0)

// A stored format: p significant bits (the stored ones and the implicit one), the exponent of its
// smallest ulp (that of the subnormals), and its largest finite value.
struct Format {
  int p, min_ulp_exp;
  double max;
};
constexpr Format format_of(DType t) {
  if (t == DType::kF16) return {11, -24, 65504.0};
  if (t == DType::kBF16) return {8, -133, 0x1.FEp127};
  return {24, -149, 0x1.FFFFFEp127};  // fp32
}
// Unit roundoff u = 2^-p: one round-to-nearest moves x by at most half an ulp, and half an ulp of a value
// in [2^e, 2^(e+1)) is 2^(e-p) <= 2^-p·|x|. bf16 has p = 8 (7 stored bits), so its u is 2^-8, not 2^-9
// (the first device run, with 2^-9, failed exactly the elements that the kernels had rounded correctly
// but that lie more than 2^-9·|x| from their bf16 neighbour, e.g. 0.822265625 -> 0.8203125: half an
// ulp, 2^-9, in [0.5, 1), where 2^-9·|x| = 0.0016).
constexpr double unit_roundoff(DType t) { return 1.0 / double(uint64_t(1) << format_of(t).p); }
constexpr double kU32 = unit_roundoff(DType::kF32);
constexpr double kUBf16 = unit_roundoff(DType::kBF16);

// ---- data --------------------------------------------------------------------------------------------

double uniform(uint64_t seed, uint64_t i, double lo, double hi) {
  const double u = double(core::splitmix64(seed * 0x9E3779B97F4A7C15ull + i) >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}
uint16_t bf(double v) { return core::f32_to_bf16(float(v)); }
double fb(uint16_t h) { return double(core::bf16_to_f32(h)); }
std::vector<uint16_t> rand_bf16(size_t n, double lo, double hi, uint64_t seed) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bf(uniform(seed, i, lo, hi));
  return v;
}
std::vector<double> as_double(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = fb(v[i]);
  return d;
}
double from_grad(uint16_t h, DType t) { return t == DType::kF16 ? double(core::f16_to_f32(h)) : fb(h); }
std::vector<double> grads_as_double(const std::vector<uint16_t>& v, DType t) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = from_grad(v[i], t);
  return d;
}
// |round(x) - x| for one rounding to bf16 or fp16: the unit roundoff times |x|, plus half the smallest
// subnormal.
double rounding(DType t, double x) {
  return unit_roundoff(t) * std::fabs(x) + std::ldexp(1.0, format_of(t).min_ulp_exp - 1);
}
// The ulp of format t at x, and x rounded to nearest even in t: the diagnostics of expect_within.
double ulp_at(DType t, double x) {
  const Format f = format_of(t);
  if (!std::isfinite(x)) return INFINITY;
  if (x == 0) return std::ldexp(1.0, f.min_ulp_exp);
  int e = 0;
  (void)std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - f.p, f.min_ulp_exp));
}
double round_to_format(DType t, double x) {
  if (!std::isfinite(x) || x == 0) return x;
  const double u = ulp_at(t, x);
  const double r = std::nearbyint(x / u) * u;  // x / u is exact; nearbyint rounds half to even
  return std::fabs(r) > format_of(t).max ? std::copysign(INFINITY, x) : r;
}

// ---- device buffers with a poisoned guard zone -----------------------------------------------------------

constexpr size_t kGuard = 64;  // elements past every buffer that no kernel may write
template <class T>
T poison_value() {
  if constexpr (sizeof(T) == 2) {
    return T(0x7FA1);  // a NaN no conversion produces (core's canonical NaN is 0x7FC0)
  } else {
    const uint32_t bits = 0x7FA00001u;
    T v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
}
template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// n elements of T on the device followed by kGuard poisoned ones.
template <class T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n), mem_((n + kGuard) * sizeof(T)) { poison(); }
  explicit DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
  T* get() const { return mem_.as<T>(); }
  void poison() {
    const std::vector<T> p(n_ + kGuard, poison_value<T>());
    TF_CUDA_CHECK(cudaMemcpy(mem_.get(), p.data(), p.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& h) {
    ASSERT_EQ(h.size(), n_);
    TF_CUDA_CHECK(cudaMemcpy(mem_.get(), h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  // The n elements. Fails the test if an element is still poison (never written) when `whole`, or if a
  // guard element changed (a write past the end).
  std::vector<T> download(const std::string& what, bool whole = true) const {
    std::vector<T> all(n_ + kGuard);
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    TF_CUDA_CHECK(cudaMemcpy(all.data(), mem_.get(), all.size() * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = n_; i < all.size(); ++i)
      if (!same_bits(all[i], poison_value<T>())) {
        ADD_FAILURE() << what << ": element " << i << " past the end (" << n_ << ") was written";
        break;
      }
    all.resize(n_);
    if (whole) {
      const size_t unwritten =
          size_t(std::count_if(all.begin(), all.end(), [](const T& v) { return same_bits(v, poison_value<T>()); }));
      EXPECT_EQ(unwritten, 0u) << what << ": " << unwritten << " of " << n_ << " elements never written";
    }
    return all;
  }

 private:
  size_t n_;
  DeviceMemory mem_;
};

template <class T>
void expect_same_bits(const std::string& what, const std::vector<T>& a, const std::vector<T>& b) {
  ASSERT_EQ(a.size(), b.size());
  size_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += !same_bits(a[i], b[i]);
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " elements differ between two runs on the same inputs";
}

const char* format_name(DType t) { return t == DType::kF16 ? "fp16" : t == DType::kBF16 ? "bf16" : "fp32"; }

// Every |got - ref| <= tol (a NaN fails). `stored` is the format the kernel wrote (bf16, fp16 or fp32).
// Each failure prints what decides between a wrong kernel and a wrong bound: the reference rounded to
// the stored format (a kernel that rounds correctly returns it; an fp32 error may move it by one ulp
// near a midpoint) and the error in half-ulps of that format. The summary line gives, over all elements
// (failures included), the worst error / tolerance, the worst error in half-ulps, and how many elements
// are not the rounded reference, with the largest distance in ulps.
void expect_within(const std::string& what, const std::vector<double>& got, const std::vector<double>& ref,
                   const std::vector<double>& tol, DType stored) {
  ASSERT_EQ(got.size(), ref.size());
  ASSERT_EQ(tol.size(), ref.size());
  size_t bad = 0, not_rounded = 0;
  double worst = 0, worst_half_ulps = 0, worst_ulps_off = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    const double rounded = round_to_format(stored, ref[i]), ulp = ulp_at(stored, ref[i]);
    const double half_ulps = err / (0.5 * ulp), ulps_off = std::fabs(got[i] - rounded) / ulp;
    if (got[i] != rounded) ++not_rounded, worst_ulps_off = std::max(worst_ulps_off, ulps_off);
    worst_half_ulps = std::max(worst_half_ulps, half_ulps);
    if (tol[i] > 0) worst = std::max(worst, err / tol[i]);
    if (!(err <= tol[i])) {
      if (bad < 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", reference " << ref[i] << " ("
                      << format_name(stored) << ": " << rounded << ", got is " << ulps_off << " ulps from it), |error| "
                      << err << " = " << half_ulps << " half-ulps > tolerance " << tol[i];
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements outside the tolerance";
  std::printf(
      "    %-44s %8zu elements, max |error| / tolerance %.3f, max |error| %.3f half-ulps (%s), %zu not the "
      "rounded reference (max %.0f ulps off)\n",
      what.c_str(), got.size(), worst, worst_half_ulps, format_name(stored), not_rounded, worst_ulps_off);
}

}  // namespace

// =====================================================================================================
// Host-only: token sort, argument checks, attention tiles, fragment layouts
// =====================================================================================================

TEST(TokenRowIndex, GroupsRowsByTokenInAscendingRowOrder) {
  const int64_t rows = 1000, vocab = 50;
  std::vector<int32_t> tok(rows);
  for (int64_t r = 0; r < rows; ++r) tok[size_t(r)] = int32_t(core::splitmix64(uint64_t(r)) % 37);  // 13 ids unused
  const TokenRowIndex ix = sort_token_rows(tok.data(), rows, vocab);
  ASSERT_EQ(ix.starts.size(), size_t(vocab + 1));
  ASSERT_EQ(ix.rows.size(), size_t(rows));
  EXPECT_EQ(ix.starts[0], 0);
  EXPECT_EQ(ix.starts[size_t(vocab)], rows);
  std::vector<int> seen(rows, 0);
  for (int64_t v = 0; v < vocab; ++v) {
    int64_t count = 0;
    for (int64_t r = 0; r < rows; ++r) count += tok[size_t(r)] == v;
    ASSERT_EQ(ix.starts[size_t(v) + 1] - ix.starts[size_t(v)], count) << "token " << v;
    for (int32_t k = ix.starts[size_t(v)]; k < ix.starts[size_t(v) + 1]; ++k) {
      const int32_t r = ix.rows[size_t(k)];
      EXPECT_EQ(tok[size_t(r)], v);
      if (k > ix.starts[size_t(v)]) {
        EXPECT_LT(ix.rows[size_t(k) - 1], r) << "rows of token " << v << " not ascending";
      }
      ++seen[size_t(r)];
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), rows) << "every row exactly once";
}

// OPT's padding token (core::DecoderShape::pad_token): its rows are left out, so its list is empty and
// its dE row is the head's part alone; the other tokens keep their rows in ascending order.
TEST(TokenRowIndex, LeavesOutThePaddingTokensRows) {
  const std::vector<int32_t> tok = {3, 1, 4, 1, 5, 9, 2, 6, 1, 3};
  const TokenRowIndex ix = sort_token_rows(tok.data(), int64_t(tok.size()), 10, 1);
  EXPECT_EQ(ix.starts[1], ix.starts[2]) << "token 1 has no rows";
  EXPECT_EQ(ix.starts[10], 7) << "10 rows less the 3 of token 1";
  const std::vector<int32_t> rows3(ix.rows.begin() + ix.starts[3], ix.rows.begin() + ix.starts[4]);
  EXPECT_EQ(rows3, (std::vector<int32_t>{0, 9}));
  const TokenRowIndex all = sort_token_rows(tok.data(), int64_t(tok.size()), 10);
  EXPECT_EQ(all.starts[2] - all.starts[1], 3);
}

TEST(TokenRowIndex, RejectsAnIdOutsideTheVocabularyNamingTheRow) {
  std::vector<int32_t> tok = {3, 1, 4, 1, 5, 9, 2, 6};
  tok[6] = 10;
  try {
    (void)sort_token_rows(tok.data(), int64_t(tok.size()), 10);
    FAIL() << "no InputError";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("row 6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("token id 10"), std::string::npos) << e.what();
  }
  tok[6] = -1;
  EXPECT_THROW((void)sort_token_rows(tok.data(), int64_t(tok.size()), 10), core::InputError);
}

// Argument checks run before any GPU work, so they are testable here. Pointers are never dereferenced.
TEST(DecoderKernels, RejectBadArgumentsBeforeAnyGpuWork) {
  alignas(16) static uint16_t b16[64];
  alignas(16) static float f32[64];
  alignas(16) static int32_t i32[64];
  uint16_t* p = b16;
  const auto expect_input_error = [](auto&& call, const char* fragment) {
    try {
      call();
      ADD_FAILURE() << "no InputError (expected one mentioning '" << fragment << "')";
    } catch (const core::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_input_error([&] { layer_norm_forward(p, p, p, 4, kLayerNormMaxWidth + 1, 1e-5f, p, f32, f32, nullptr); },
                     "kLayerNormMaxWidth");
  expect_input_error([&] { layer_norm_forward(p, p, p, 4, 16, 1e-5f, nullptr, f32, f32, nullptr); }, "y is null");
  expect_input_error([&] { bias_act_backward(p, p, 4, 8, Activation::kNone, p, f32, DType::kBF16, p, nullptr); },
                     "bias_grad");
  expect_input_error([&] { bias_grad(p, 4, 8, f32, DType::kF32, p, nullptr); }, "bf16 or fp16");
  AttentionDims d{1, 16, 2, 96};
  expect_input_error([&] { attention_forward(p, d, p, f32, nullptr); }, "head_dim");
  d.head_dim = 64;
  expect_input_error([&] { attention_forward(p + 1, d, p, f32, nullptr); }, "16-byte aligned");
  for (const int64_t head_dim : {80, 128}) {  // the wgmma forward is d = 64 only, on any machine
    const AttentionDims dw{1, 16, 2, head_dim};
    expect_input_error([&] { attention_forward(p, dw, p, f32, nullptr, ForwardTiles::kWgmma); },
                       "kWgmma takes head_dim 64 only");
    expect_input_error(  // so is the wgmma dK/dV
        [&] { attention_backward(p, p, p, f32, dw, f32, p, nullptr, BackwardKernel::kWgmma); },
        "BackwardKernel::kWgmma takes head_dim 64 only");
  }
  EmbeddingDims e{2, 8, 16, 10, 9, 2};  // needs 8 + 2 position rows
  expect_input_error([&] { embedding_forward(reinterpret_cast<int32_t*>(f32), p, p, e, p, nullptr); }, "pos_rows");
  expect_input_error([&] { cross_entropy_forward_backward(p + 1, nullptr, 4, 8, 8, 1.0f, f32, nullptr, nullptr); },
                     "targets is null");
  expect_input_error([&] { cross_entropy_forward_backward(p, i32, 4, 8, 7, 1.0f, f32, nullptr, nullptr); },
                     "below vocab");
}

// Every (query, key) pair with key <= query < s is computed by exactly one visited tile and survives its
// mask; nothing else survives; skipped tiles hold no visible pair. For the forward's query tiles (128 or
// 64 rows over 64-key tiles), the dK/dV blocks (64 keys over 64-query tiles) and the dQ blocks.
TEST(AttentionTiles, CausalScheduleCoversEveryVisiblePairOnce) {
  using namespace attn;
  enum class Pass { kFwd, kDkdv, kDq };
  for (const int64_t s : {1, 2, 63, 64, 65, 127, 128, 129, 200, 300}) {
    for (const Pass pass : {Pass::kFwd, Pass::kDkdv, Pass::kDq}) {
      for (const int fwd_rows : {fwd_query_tile(64), fwd_query_tile(128)}) {
        const int64_t qt = pass == Pass::kFwd ? fwd_rows : kBwdQueryTile;
        std::vector<int> hits(size_t(s * s), 0);
        std::set<std::pair<int64_t, int64_t>> visited;  // (query tile, key tile)
        const auto visit = [&](int64_t i, int64_t j) {
          visited.insert({i, j});
          const int64_t q0 = i * qt, k0 = j * kKeyTile;
          const bool mask = tile_needs_mask(q0, qt, k0, kKeyTile, s);
          for (int64_t q = q0; q < q0 + qt; ++q)
            for (int64_t k = k0; k < k0 + kKeyTile; ++k) {
              if (mask ? !element_visible(q, k, s) : false) continue;
              ASSERT_TRUE(q < s && k <= q) << "an unmasked tile holds (" << q << ", " << k << "), s = " << s;
              ++hits[size_t(q * s + k)];
            }
        };
        if (pass == Pass::kDkdv) {
          for (int64_t j = 0; j < ceil_div(s, kKeyTile); ++j)
            for (int64_t i = causal_first_query_tile(j * kKeyTile, qt); i < ceil_div(s, qt); ++i) visit(i, j);
        } else {
          for (int64_t i = 0; i < ceil_div(s, qt); ++i)
            for (int64_t j = 0; j < causal_key_tiles(i * qt, qt, s, kKeyTile); ++j) visit(i, j);
        }
        for (int64_t q = 0; q < s; ++q)
          for (int64_t k = 0; k < s; ++k)
            ASSERT_EQ(hits[size_t(q * s + k)], k <= q ? 1 : 0) << "pair (" << q << ", " << k << "), s = " << s;
        for (int64_t i = 0; i < ceil_div(s, qt); ++i)
          for (int64_t j = 0; j < ceil_div(s, kKeyTile); ++j) {
            if (visited.count({i, j})) continue;
            for (int64_t q = i * qt; q < std::min(s, (i + 1) * qt); ++q)
              EXPECT_GT(j * kKeyTile, q) << "skipped tile (" << i << ", " << j << ") has a visible pair, s = " << s;
          }
      }
    }
  }
}

// The forward's warps: within every visited block tile, a warp's rows (16 or 32 of the block's 128 or
// 64) skip the tile exactly when none of their pairs is visible, and run without the mask only when all
// of their pairs are visible.
TEST(AttentionTiles, ForwardWarpsSkipAndMaskExactlyTheirOwnRows) {
  using namespace attn;
  for (const int64_t s : {1, 2, 63, 64, 65, 127, 128, 129, 200, 300})
    for (const int block_rows : {fwd_query_tile(64), fwd_query_tile(128)})
      for (const int warp_rows : {16, 32}) {
        if (warp_rows > block_rows / 4) continue;
        for (int64_t i = 0; i < ceil_div(s, block_rows); ++i)
          for (int64_t j = 0; j < causal_key_tiles(i * block_rows, block_rows, s, kKeyTile); ++j)
            for (int64_t w = 0; w < block_rows / warp_rows; ++w) {
              const int64_t q0 = i * block_rows + w * warp_rows, k0 = j * kKeyTile;
              int64_t visible = 0;
              for (int64_t q = q0; q < q0 + warp_rows; ++q)
                for (int64_t k = k0; k < k0 + kKeyTile; ++k) visible += element_visible(q, k, s);
              EXPECT_EQ(tile_has_visible(q0, warp_rows, k0, s), visible > 0)
                  << "s " << s << ", rows " << q0 << " + " << warp_rows << ", keys " << k0;
              if (!tile_needs_mask(q0, warp_rows, k0, kKeyTile, s)) {
                EXPECT_EQ(visible, int64_t(warp_rows) * kKeyTile) << "s " << s << ", unmasked rows " << q0;
              }
            }
      }
}

// The kernels' block order is a bijection onto (pair, tile rank); each group of kHeadGroup pairs takes its
// ranks in order (heaviest first) with all its pairs per rank, and groups do not interleave.
TEST(AttentionTiles, GroupedBlockOrderCoversEveryPairAndTileOnce) {
  using namespace attn;
  for (const int bh : {1, 5, kHeadGroup, kHeadGroup + 1, 3 * kHeadGroup - 7})
    for (const int tiles : {1, 2, 7, 16}) {
      std::vector<int> seen(size_t(bh * tiles), 0);
      BlockTile prev{-1, -1};
      for (int blk = 0; blk < bh * tiles; ++blk) {
        const BlockTile t = grouped_block(blk, bh, tiles);
        ASSERT_TRUE(t.bh >= 0 && t.bh < bh && t.rank >= 0 && t.rank < tiles)
            << "block " << blk << " of " << bh << " x " << tiles << " -> (" << t.bh << ", " << t.rank << ")";
        ++seen[size_t(t.bh * tiles + t.rank)];
        if (blk > 0 && t.bh / kHeadGroup == prev.bh / kHeadGroup) {
          EXPECT_GE(t.rank, prev.rank) << "ranks go down inside a group at block " << blk;
        }
        if (blk > 0) {
          EXPECT_GE(t.bh / kHeadGroup, prev.bh / kHeadGroup) << "groups interleave at block " << blk;
        }
        prev = t;
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), bh * tiles) << bh << " pairs x " << tiles << " tiles";
    }
}

// ---- an emulation of ldmatrix and mma.m16n8k16 written from the PTX ISA -------------------------------

namespace {

using Pair = std::array<double, 2>;                   // one .b32 register holding two bf16 (low, high)
using LaneRegs = std::array<Pair, 4>;                 // ldmatrix.x4 result or an A fragment
using Warp4 = std::array<LaneRegs, 32>;               // 32 lanes
using WarpC = std::array<std::array<double, 4>, 32>;  // C/D fragments

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (.bf16), element i of a lane:
// A (a0..a7): row groupID for i in {0, 1, 4, 5}, else groupID + 8; col 2·tig + (i & 1), + 8 for i >= 4.
// B (b0..b3): row 2·tig + (i & 1), + 8 for i >= 2; col groupID.
// C (c0..c3): row groupID, + 8 for i >= 2; col 2·tig + (i & 1).
int ptx_a_row(int lane, int i) { return (lane >> 2) + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0); }
int ptx_a_col(int lane, int i) { return 2 * (lane % 4) + (i & 1) + (i >= 4 ? 8 : 0); }
int ptx_b_row(int lane, int i) { return 2 * (lane % 4) + (i & 1) + (i >= 2 ? 8 : 0); }
int ptx_b_col(int lane) { return lane >> 2; }
int ptx_c_row(int lane, int i) { return (lane >> 2) + (i >= 2 ? 8 : 0); }
int ptx_c_col(int lane, int i) { return 2 * (lane % 4) + (i & 1); }

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 (PTX ISA): lanes 8m .. 8m + 7 give the addresses of rows
// 0..7 of matrix m, which lands in register m. Without .trans lane l receives row l / 4, elements 2·(l % 4)
// and 2·(l % 4) + 1; with .trans, element l / 4 of rows 2·(l % 4) and 2·(l % 4) + 1. `offset` is the
// kernel's per-lane address helper, from (row0, col0) of a row-major tile with `stride` elements per row.
Warp4 emulate_ldmatrix(const std::vector<double>& tile, int stride, int row0, int col0, bool trans,
                       attn::FragCoord (*offset)(int)) {
  const auto row_addr = [&](int lane) {
    const attn::FragCoord o = offset(lane);
    return size_t((row0 + o.row) * stride + col0 + o.col);
  };
  Warp4 r{};
  for (int l = 0; l < 32; ++l)
    for (int m = 0; m < 4; ++m)
      for (int h = 0; h < 2; ++h)
        r[size_t(l)][size_t(m)][size_t(h)] = trans ? tile[row_addr(8 * m + 2 * (l % 4) + h) + size_t(l / 4)]
                                                   : tile[row_addr(8 * m + l / 4) + size_t(2 * (l % 4) + h)];
  return r;
}

// c += a·b for one m16n8k16: a from registers 0..3 of each lane, b from registers (b0, b1) of each lane.
void emulate_mma(WarpC& c, const Warp4& a, const Warp4& b, int b0, int b1) {
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 8; ++i) A[ptx_a_row(l, i)][ptx_a_col(l, i)] = a[size_t(l)][size_t(i / 2)][size_t(i & 1)];
    for (int i = 0; i < 4; ++i) B[ptx_b_row(l, i)][ptx_b_col(l)] = b[size_t(l)][size_t(i < 2 ? b0 : b1)][size_t(i & 1)];
  }
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      double acc = 0;
      for (int k = 0; k < 16; ++k) acc += A[ptx_c_row(l, i)][k] * B[k][ptx_c_col(l, i)];
      c[size_t(l)][size_t(i)] += acc;
    }
}

std::vector<double> small_ints(size_t n, uint64_t seed) {  // exact in bf16, products and sums exact in double
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = double(int(core::splitmix64(seed + i) % 9) - 4);
  return v;
}

}  // namespace

TEST(AttentionFragments, CoordinateHelpersMatchThePtxTables) {
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(attn::mma_a_coord(l, r).row, ptx_a_row(l, 2 * r));
      EXPECT_EQ(attn::mma_a_coord(l, r).col, ptx_a_col(l, 2 * r));
      EXPECT_EQ(attn::mma_c_coord(l, r).row, ptx_c_row(l, r));
      EXPECT_EQ(attn::mma_c_coord(l, r).col, ptx_c_col(l, r));
    }
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(attn::mma_b_coord(l, r).row, ptx_b_row(l, 2 * r));
      EXPECT_EQ(attn::mma_b_coord(l, r).col, ptx_b_col(l));
    }
  }
}

// S = Q·Kᵀ the way the kernels compute it (A = Q rows via ldsm_a_offset, B = K rows via ldsm_b_nk_offset,
// two n-tiles per ldmatrix, k-steps of 16), read back through mma_c_coord: exactly the matrix product.
TEST(AttentionFragments, QKTransposeThroughLdmatrixAndMma) {
  constexpr int kD = 48, kStride = kD + 8, kKeys = 16;
  const std::vector<double> q = small_ints(16 * kStride, 1), k = small_ints(kKeys * kStride, 2);
  WarpC c0{}, c1{};
  for (int ks = 0; ks < kD / 16; ++ks) {
    const Warp4 a = emulate_ldmatrix(q, kStride, 0, ks * 16, false, attn::ldsm_a_offset);
    const Warp4 b = emulate_ldmatrix(k, kStride, 0, ks * 16, false, attn::ldsm_b_nk_offset);
    emulate_mma(c0, a, b, 0, 1);  // keys 0..7
    emulate_mma(c1, a, b, 2, 3);  // keys 8..15
  }
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i)
      for (int nt = 0; nt < 2; ++nt) {
        const attn::FragCoord at = attn::mma_c_coord(l, i);
        const int key = 8 * nt + at.col;
        double ref = 0;
        for (int x = 0; x < kD; ++x) ref += q[size_t(at.row * kStride + x)] * k[size_t(key * kStride + x)];
        EXPECT_EQ((nt ? c1 : c0)[size_t(l)][size_t(i)], ref) << "lane " << l << " c" << i << " n-tile " << nt;
      }
}

// O = P·V the way the kernels compute it: P's C fragments of two key n-tiles become an A fragment
// (c_pair_to_a, bf16), V rows (keys) come through ldmatrix.trans with ldsm_a_offset, two head-dim n-tiles
// per load. The result is the product of bf16(P) and V.
TEST(AttentionFragments, PVThroughCFragmentReuseAndTransposedLdmatrix) {
  constexpr int kD = 32, kStride = kD + 8;
  const std::vector<double> v = small_ints(16 * kStride, 3);
  double p[16][16];  // multiples of 1/64 in [-1, 1]: exact in bf16, so the products are exact in double
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) p[r][c] = double(int(core::splitmix64(uint64_t(r * 16 + c)) % 129) - 64) / 64.0;
  WarpC pc0{}, pc1{};
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      pc0[size_t(l)][size_t(i)] = p[ptx_c_row(l, i)][ptx_c_col(l, i)];
      pc1[size_t(l)][size_t(i)] = p[ptx_c_row(l, i)][8 + ptx_c_col(l, i)];
    }
  Warp4 a{};
  for (int l = 0; l < 32; ++l) {
    float f0[4], f1[4];
    uint32_t packed[4];
    for (int i = 0; i < 4; ++i) f0[i] = float(pc0[size_t(l)][size_t(i)]), f1[i] = float(pc1[size_t(l)][size_t(i)]);
    attn::c_pair_to_a(f0, f1, packed);
    for (int r = 0; r < 4; ++r)
      a[size_t(l)][size_t(r)] = {fb(uint16_t(packed[r] & 0xFFFFu)), fb(uint16_t(packed[r] >> 16))};
  }
  for (int np = 0; np < kD / 16; ++np) {
    const Warp4 b = emulate_ldmatrix(v, kStride, 0, np * 16, true, attn::ldsm_a_offset);
    WarpC o0{}, o1{};
    emulate_mma(o0, a, b, 0, 1);
    emulate_mma(o1, a, b, 2, 3);
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i)
        for (int nt = 0; nt < 2; ++nt) {
          const attn::FragCoord at = attn::mma_c_coord(l, i);
          const int col = np * 16 + 8 * nt + at.col;
          double ref = 0;
          for (int key = 0; key < 16; ++key) ref += fb(bf(p[at.row][key])) * v[size_t(key * kStride + col)];
          EXPECT_EQ((nt ? o1 : o0)[size_t(l)][size_t(i)], ref) << "lane " << l << " c" << i << " column " << col;
        }
  }
}

// =====================================================================================================
// GPU: embedding
// =====================================================================================================

namespace {

std::vector<int32_t> random_tokens(int64_t n, int64_t below, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t(core::splitmix64(seed * 7919 + uint64_t(i)) % uint64_t(below));
  return t;
}

// bf16(a + b) for bf16 a, b: one rounding of the fp32 sum y = fl(a + b). |y - (a + b)| <= kU32·|a + b|, and
// rounding y to bf16 moves it by at most kUBf16/(1 + kUBf16)·|y| <= kUBf16·|a + b| (|y| <= (1 + kU32)·|a + b|),
// so |bf16(y) - (a + b)| <= kUBf16·|a + b| + kU32·(|a| + |b|): half an ulp of the result plus the fp32 error.
double sum_tol(double exact, double a, double b) {
  return rounding(DType::kBF16, exact) + kU32 * (std::fabs(a) + std::fabs(b));
}

}  // namespace

namespace {

// embedding_forward, add_positions and gather_rows at one shape, each against its formula, and each
// run twice for the same bits.
void embedding_case(const EmbeddingDims& d, cudaStream_t stream) {
  const int64_t T = d.rows(), h = d.width;
  std::vector<int32_t> tok = random_tokens(T, d.vocab, 1);
  tok[5] = -1;  // outside [0, V): a NaN row, never a wild read
  const auto E = rand_bf16(size_t(d.vocab * h), -1, 1, 10), Pos = rand_bf16(size_t(d.pos_rows * h), -0.5, 0.5, 11);
  const auto x_in = rand_bf16(size_t(T * h), -2, 2, 12);
  DevBuf<int32_t> dtok(tok);
  DevBuf<uint16_t> dE(E), dP(Pos), out(size_t(T * h));
  const std::string tag = " h=" + std::to_string(h) + " off=" + std::to_string(d.pos_offset);
  for (int which = 0; which < 3; ++which) {
    std::vector<uint16_t> first;
    for (int run = 0; run < 2; ++run) {
      out.poison();
      if (which == 0) embedding_forward(dtok.get(), dE.get(), dP.get(), d, out.get(), stream);
      if (which == 1) {
        out.upload(x_in);
        add_positions(out.get(), dP.get(), d, stream);
      }
      if (which == 2) gather_rows(dtok.get(), dE.get(), T, d.vocab, h, out.get(), stream);
      const std::vector<uint16_t> got = out.download("embedding kernel " + std::to_string(which) + tag);
      if (run == 1) {
        expect_same_bits("embedding kernel " + std::to_string(which) + tag, first, got);
        break;
      }
      first = got;
      std::vector<double> g(got.size()), ref(got.size()), tol(got.size());
      for (int64_t r = 0; r < T; ++r)
        for (int64_t c = 0; c < h; ++c) {
          const size_t i = size_t(r * h + c);
          const double pos = fb(Pos[size_t((r % d.seq + d.pos_offset) * h + c)]);
          g[i] = fb(got[i]);
          if (which != 1 && tok[size_t(r)] < 0) {
            EXPECT_TRUE(std::isnan(g[i])) << "row " << r << " has an invalid token";
            g[i] = ref[i] = tol[i] = 0;
            continue;
          }
          const double e = which == 1 ? fb(x_in[i]) : fb(E[size_t(tok[size_t(r)] * h + c)]);
          ref[i] = which == 2 ? e : e + pos;
          tol[i] = which == 2 ? 0.0 : sum_tol(ref[i], e, pos);
        }
      const char* name = which == 0 ? "embedding_forward" : which == 1 ? "add_positions" : "gather_rows";
      expect_within(name + tag, g, ref, tol, DType::kBF16);
    }
  }
}

}  // namespace

TEST(DecoderKernels, EmbeddingForwardPositionsAndGather) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  for (const int64_t width : {72, 75})  // 75: the scalar path
    for (const int64_t off : {0, 2})    // GPT-2, OPT
      embedding_case({.batch = 3, .seq = 37, .width = width, .vocab = 101, .pos_rows = 37 + off + 5, .pos_offset = off},
                     stream.get());
}

TEST(DecoderKernels, PositionGradient) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  for (const int64_t width : {72, 75})
    for (const DType grad : {DType::kBF16, DType::kF16}) {
      // OPT's offset 2 and 5 rows past the last position: rows 0, 1 and the last 5 get +0
      const EmbeddingDims d{
          .batch = 4, .seq = 37, .width = width, .vocab = 101, .pos_rows = 2 + 37 + 5, .pos_offset = 2};
      const int64_t h = width;
      const auto dx0 = rand_bf16(size_t(d.rows() * h), -1, 1, 20);
      DevBuf<uint16_t> in(dx0), out(size_t(d.pos_rows * h));
      const std::string tag = "position_grad h=" + std::to_string(width) + (grad == DType::kF16 ? " fp16" : " bf16");
      position_grad(in.get(), d, grad, out.get(), stream.get());
      const auto got = out.download(tag);
      std::vector<double> g = grads_as_double(got, grad), ref(got.size(), 0.0), tol(got.size(), 0.0);
      for (int64_t p = 0; p < d.pos_rows; ++p)
        for (int64_t c = 0; c < h; ++c) {
          const size_t i = size_t(p * h + c);
          const int64_t t = p - d.pos_offset;
          if (t < 0 || t >= d.seq) {
            EXPECT_EQ(got[i], 0u) << "position row " << p << " has no token: +0";
            continue;
          }
          double mag = 0;
          for (int64_t b = 0; b < d.batch; ++b) {
            const double v = fb(dx0[size_t((b * d.seq + t) * h + c)]);
            ref[i] += v, mag += std::fabs(v);
          }
          tol[i] = rounding(grad, ref[i]) + double(d.batch) * kU32 * mag;
        }
      expect_within(tag, g, ref, tol, grad);
      out.poison();
      position_grad(in.get(), d, grad, out.get(), stream.get());
      expect_same_bits(tag, got, out.download(tag));
    }
}

TEST(DecoderKernels, TokenEmbeddingGradient) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  const int64_t T = 3 * 37, V = 101;
  std::vector<int32_t> tok = random_tokens(T, 40, 2);  // repeated ids; 40 .. 100 have no rows
  for (int64_t r = 0; r < T; r += 2)
    tok[size_t(r)] = 3;  // a frequent id (56+ rows): batches of loads in flight, then the rest
  const TokenRowIndex ix = sort_token_rows(tok.data(), T, V);
  DevBuf<int32_t> starts(ix.starts), rows(ix.rows);
  for (const int64_t width : {72, 75})
    for (const bool with_head : {false, true}) {
      const DType grad = with_head ? DType::kF16 : DType::kBF16;
      const auto drows = rand_bf16(size_t(T * width), -1, 1, 30);
      std::vector<float> head(size_t(V * width));
      for (size_t i = 0; i < head.size(); ++i) head[i] = float(uniform(31, i, -2, 2));
      DevBuf<uint16_t> din(drows), out(size_t(V * width));
      DevBuf<float> dhead(head);
      const std::string tag = "token_embedding_grad h=" + std::to_string(width) + (with_head ? " head fp16" : " bf16");
      const auto run = [&](int in_flight = 16) {
        out.poison();
        token_embedding_grad(din.get(), starts.get(), rows.get(), with_head ? dhead.get() : nullptr, T, V, width, grad,
                             out.get(), stream.get(), in_flight);
        return out.download(tag);
      };
      const auto got = run();
      std::vector<double> g = grads_as_double(got, grad), ref(got.size()), tol(got.size());
      for (int64_t v = 0; v < V; ++v)
        for (int64_t c = 0; c < width; ++c) {
          const size_t i = size_t(v * width + c);
          const double hv = with_head ? double(head[i]) : 0.0;
          double sum = 0, mag = std::fabs(hv);
          int64_t count = 0;
          for (int64_t r = 0; r < T; ++r)
            if (tok[size_t(r)] == v)
              sum += fb(drows[size_t(r * width + c)]), mag += std::fabs(fb(drows[size_t(r * width + c)])), ++count;
          if (count == 0) {  // exactly round(head) (or +0)
            const uint16_t want = !with_head ? 0 : core::f32_to_f16(head[i]);
            EXPECT_EQ(got[i], want) << tag << " row " << v << " has no tokens";
          } else {  // the contract's order (docs/decoder.md): fp32, r ascending, then dE_head + the sum, one rounding
            float acc = 0;
            for (int64_t r = 0; r < T; ++r)
              if (tok[size_t(r)] == v) acc = acc + core::bf16_to_f32(drows[size_t(r * width + c)]);
            const float total = with_head ? head[i] + acc : acc;
            const uint16_t want = with_head ? core::f32_to_f16(total) : core::f32_to_bf16(total);
            EXPECT_EQ(got[i], want) << tag << " row " << v << " col " << c << " (" << count << " tokens)";
          }
          ref[i] = hv + sum;
          tol[i] = rounding(grad, ref[i]) + double(count + 1) * kU32 * mag;
        }
      expect_within(tag, g, ref, tol, grad);
      expect_same_bits(tag, got, run());
      expect_same_bits(tag + " one row in flight", got, run(1));
    }
}

// =====================================================================================================
// GPU: layer norm
// =====================================================================================================

namespace {

struct LnCase {
  int64_t rows, n;
};
// warp-per-row (n <= 1024), block-per-row (256 and 512 threads), each with 1 to 4 8-column groups a
// thread (768 and 6144: 3); n % 8 != 0 takes the scalar path
constexpr LnCase kLnCases[] = {{37, 64},   {37, 75},  {37, 768}, {37, 1001}, {19, 1500},
                               {19, 4096}, {7, 6144}, {7, 7168}, {5, 9000},  {5, 12345}};
constexpr float kEps = 1e-5f;
// The kernels' fp32 sums are at most this deep: <= 32 terms a thread, 5 butterfly levels, <= 16 warps.
constexpr double kLnSumDepth = 64;

struct LnInputs {
  std::vector<uint16_t> x, w, b;
  std::vector<float> mean, rstd;  // double statistics of x, rounded to fp32 (the backward's inputs)
};
LnInputs ln_inputs(const LnCase& c, uint64_t seed) {
  LnInputs in;
  in.x = rand_bf16(size_t(c.rows * c.n), 2, 4, seed);  // mean ~3: the two passes matter
  in.w = rand_bf16(size_t(c.n), 0.5, 1.5, seed + 1);
  in.b = rand_bf16(size_t(c.n), -0.5, 0.5, seed + 2);
  for (int64_t r = 0; r < c.rows; ++r) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < c.n; ++j) m += fb(in.x[size_t(r * c.n + j)]);
    m /= double(c.n);
    for (int64_t j = 0; j < c.n; ++j) v += (fb(in.x[size_t(r * c.n + j)]) - m) * (fb(in.x[size_t(r * c.n + j)]) - m);
    in.mean.push_back(float(m));
    in.rstd.push_back(float(1.0 / std::sqrt(v / double(c.n) + double(kEps))));
  }
  return in;
}

}  // namespace

TEST(DecoderKernels, LayerNormForward) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  for (const LnCase& c : kLnCases) {
    const LnInputs in = ln_inputs(c, 40 + uint64_t(c.n));
    DevBuf<uint16_t> x(in.x), w(in.w), b(in.b), y(size_t(c.rows * c.n));
    DevBuf<float> mean(size_t(c.rows)), rstd(size_t(c.rows));
    const std::string tag = "layer_norm_forward " + std::to_string(c.rows) + "x" + std::to_string(c.n);
    layer_norm_forward(x.get(), w.get(), b.get(), c.rows, c.n, kEps, y.get(), mean.get(), rstd.get(), stream.get());
    const auto gy = y.download(tag + " y");
    const auto gm = mean.download(tag + " mean"), gr = rstd.download(tag + " rstd");
    std::vector<double> ry(gy.size()), ty(gy.size()), rm, tm, rr, tr;
    for (int64_t r = 0; r < c.rows; ++r) {
      double m = 0, absx = 0, v = 0;
      for (int64_t j = 0; j < c.n; ++j)
        m += fb(in.x[size_t(r * c.n + j)]), absx += std::fabs(fb(in.x[size_t(r * c.n + j)]));
      m /= double(c.n);
      for (int64_t j = 0; j < c.n; ++j) v += std::pow(fb(in.x[size_t(r * c.n + j)]) - m, 2);
      v /= double(c.n);
      const double rs = 1.0 / std::sqrt(v + double(kEps));
      const double m_tol = kLnSumDepth * kU32 * absx / double(c.n) + kU32 * std::fabs(m);
      const double rs_rel = 2 * (kLnSumDepth / 2 + 5) * kU32;  // var to depth u, halved by sqrt, plus the ops
      rm.push_back(m), tm.push_back(m_tol), rr.push_back(rs), tr.push_back(rs_rel * rs);
      for (int64_t j = 0; j < c.n; ++j) {
        const size_t i = size_t(r * c.n + j);
        const double xv = fb(in.x[i]), wv = fb(in.w[size_t(j)]), bv = fb(in.b[size_t(j)]);
        ry[i] = (xv - m) * rs * wv + bv;
        const double pre = std::fabs(wv) * (std::fabs(xv - m) * rs_rel * rs + rs * m_tol) +
                           4 * kU32 * (std::fabs((xv - m) * rs * wv) + std::fabs(bv));
        ty[i] = rounding(DType::kBF16, ry[i]) + 2 * pre;
      }
    }
    std::vector<double> dm(gm.begin(), gm.end()), dr(gr.begin(), gr.end());
    expect_within(tag + " mean", dm, rm, tm, DType::kF32);
    expect_within(tag + " rstd", dr, rr, tr, DType::kF32);
    expect_within(tag + " y", as_double(gy), ry, ty, DType::kBF16);
    y.poison(), mean.poison(), rstd.poison();
    layer_norm_forward(x.get(), w.get(), b.get(), c.rows, c.n, kEps, y.get(), mean.get(), rstd.get(), stream.get());
    expect_same_bits(tag + " y", gy, y.download(tag));
    expect_same_bits(tag + " rstd", gr, rstd.download(tag));
  }
}

namespace {

// The layer-norm backward of docs/decoder.md in double from the kernel's inputs (mean, rstd as given),
// with each element's bound: bf16/fp16 rounding plus the fp32 operations and sums of the kernel's formula.
struct LnBackwardRef {
  std::vector<double> dx, dx_tol, dw, dw_tol, db, db_tol;
};
LnBackwardRef ln_backward_ref(const LnCase& c, const LnInputs& in, const std::vector<uint16_t>& dy,
                              const std::vector<uint16_t>* dres, DType grad) {
  const int64_t n = c.n;
  LnBackwardRef r;
  r.dx.resize(size_t(c.rows * n)), r.dx_tol.resize(r.dx.size());
  std::vector<double> dw(size_t(n), 0), dw_mag(size_t(n), 0), db(size_t(n), 0), db_mag(size_t(n), 0);
  for (int64_t row = 0; row < c.rows; ++row) {
    const double m = in.mean[size_t(row)], rs = in.rstd[size_t(row)];
    double sg = 0, sgx = 0, ag = 0, agx = 0;
    std::vector<double> xh(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = size_t(row * n + j);
      xh[size_t(j)] = (fb(in.x[i]) - m) * rs;
      g[size_t(j)] = fb(dy[i]) * fb(in.w[size_t(j)]);
      sg += g[size_t(j)], sgx += g[size_t(j)] * xh[size_t(j)];
      ag += std::fabs(g[size_t(j)]), agx += std::fabs(g[size_t(j)] * xh[size_t(j)]);
      dw[size_t(j)] += fb(dy[i]) * xh[size_t(j)], dw_mag[size_t(j)] += std::fabs(fb(dy[i]) * xh[size_t(j)]);
      db[size_t(j)] += fb(dy[i]), db_mag[size_t(j)] += std::fabs(fb(dy[i]));
    }
    const double c1 = sg / double(n), c2 = sgx / double(n);
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = size_t(row * n + j);
      const double d = (g[size_t(j)] - c1 - xh[size_t(j)] * c2) * rs;
      r.dx[i] = (dres ? fb((*dres)[i]) : 0.0) + d;
      const double pre = rs * (8 * kU32 * (std::fabs(g[size_t(j)]) + std::fabs(c1) + std::fabs(xh[size_t(j)] * c2)) +
                               (kLnSumDepth + 2) * kU32 * (ag + std::fabs(xh[size_t(j)]) * agx) / double(n)) +
                         2 * kU32 * (std::fabs(r.dx[i]) + std::fabs(d));
      r.dx_tol[i] = rounding(DType::kBF16, r.dx[i]) + 2 * pre;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const double depth = double(c.rows) + 16;  // rows of a chunk, groups, chunks, fold lanes
    r.dw.push_back(dw[size_t(j)]);
    r.dw_tol.push_back(rounding(grad, dw[size_t(j)]) + (depth + 4) * kU32 * dw_mag[size_t(j)]);
    r.db.push_back(db[size_t(j)]);
    r.db_tol.push_back(rounding(grad, db[size_t(j)]) + depth * kU32 * db_mag[size_t(j)]);
  }
  return r;
}

}  // namespace

TEST(DecoderKernels, LayerNormBackward) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  for (const LnCase& c : kLnCases)
    for (const bool with_resid : {false, true}) {
      const DType grad = with_resid ? DType::kF16 : DType::kBF16;
      const LnInputs in = ln_inputs(c, 60 + uint64_t(c.n));
      const auto dy = rand_bf16(size_t(c.rows * c.n), -1, 1, 70), dres = rand_bf16(dy.size(), -1, 1, 71);
      DevBuf<uint16_t> x(in.x), w(in.w), ddy(dy), ddres(dres), dx(dy.size()), dw(size_t(c.n)), db(size_t(c.n));
      DevBuf<float> mean(in.mean), rstd(in.rstd), partials(size_t(layer_norm_partial_floats(c.rows, c.n)));
      const std::string tag = "layer_norm_backward " + std::to_string(c.rows) + "x" + std::to_string(c.n) +
                              (with_resid ? " +dresid fp16" : " bf16");
      const auto run = [&](uint16_t* out) {
        dw.poison(), db.poison();
        layer_norm_backward(ddy.get(), x.get(), mean.get(), rstd.get(), w.get(), with_resid ? ddres.get() : nullptr,
                            c.rows, c.n, out, partials.get(), grad, dw.get(), db.get(), stream.get());
      };
      run(dx.get());
      const auto gdx = dx.download(tag + " dx"), gdw = dw.download(tag + " dw"), gdb = db.download(tag + " db");
      const LnBackwardRef ref = ln_backward_ref(c, in, dy, with_resid ? &dres : nullptr, grad);
      expect_within(tag + " dx", as_double(gdx), ref.dx, ref.dx_tol, DType::kBF16);
      expect_within(tag + " dw", grads_as_double(gdw, grad), ref.dw, ref.dw_tol, grad);
      expect_within(tag + " db", grads_as_double(gdb, grad), ref.db, ref.db_tol, grad);
      dx.poison();
      run(dx.get());
      expect_same_bits(tag + " dx", gdx, dx.download(tag));
      expect_same_bits(tag + " dw", gdw, dw.download(tag));
      // in place: dx written over dresid (or over dy) gives the same bits
      run(with_resid ? ddres.get() : ddy.get());
      expect_same_bits(tag + " dx in place", gdx, (with_resid ? ddres : ddy).download(tag + " in place"));
      expect_same_bits(tag + " db in place", gdb, db.download(tag));
    }
}

// =====================================================================================================
// GPU: bias, activation, residual
// =====================================================================================================

namespace {

constexpr double kGeluK = 0.7978845608, kGeluC = 0.044715;
double gelu(double u) { return 0.5 * u * (1 + std::tanh(kGeluK * (u + kGeluC * u * u * u))); }
double gelu_grad(double u) {
  const double t = std::tanh(kGeluK * (u + kGeluC * u * u * u));
  return 0.5 * (1 + t) + 0.5 * u * (1 - t * t) * kGeluK * (1 + 3 * kGeluC * u * u);
}
// fp32 error of the kernels' GELU before its rounding: the argument z = k(u + c·u³) to a few ulps, tanhf
// to 2 ulps (CUDA's documented bound), then 0.5·u·(1 + t).
double gelu_pre_tol(double u) {
  const double z = kGeluK * (u + kGeluC * u * u * u), t = std::tanh(z);
  const double dz = 5 * kU32 * kGeluK * (std::fabs(u) + kGeluC * std::fabs(u * u * u));
  return 0.5 * std::fabs(u) * ((1 - t * t) * dz + 4 * kU32) + 3 * kU32 * std::fabs(gelu(u));
}
// The same for gelu_grad: t's error enters 0.5·(1 + t) and (1 - t·t) times u's polynomial.
double gelu_grad_pre_tol(double u) {
  const double z = kGeluK * (u + kGeluC * u * u * u), t = std::tanh(z);
  const double dz = 5 * kU32 * kGeluK * (std::fabs(u) + kGeluC * std::fabs(u * u * u));
  const double dt = (1 - t * t) * dz + 4 * kU32;
  const double poly = 0.5 * std::fabs(u) * kGeluK * (1 + 3 * kGeluC * u * u);
  return 0.5 * dt + poly * (2 * dt + 6 * kU32 * (1 - t * t) + 4 * kU32) + 4 * kU32 * std::fabs(gelu_grad(u));
}

const char* act_name(Activation a) {
  return a == Activation::kNone ? "none" : a == Activation::kRelu ? "relu" : "gelu";
}

}  // namespace

TEST(DecoderKernels, BiasActivationForward) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  const int64_t rows = 37;
  for (const int64_t n : {72, 75, 3072})
    for (const Activation act : {Activation::kNone, Activation::kRelu, Activation::kGeluTanh}) {
      const auto y0 = rand_bf16(size_t(rows * n), -4, 4, 80), b = rand_bf16(size_t(n), -1, 1, 81);
      DevBuf<uint16_t> u(y0), db(b), g(y0.size());
      const std::string tag = std::string("bias_act_forward ") + act_name(act) + " n=" + std::to_string(n);
      const auto run = [&] {
        u.upload(y0), g.poison();
        bias_act_forward(u.get(), db.get(), rows, n, act, act == Activation::kNone ? nullptr : g.get(), stream.get());
      };
      run();
      const auto gu = u.download(tag + " u");
      std::vector<double> ru(gu.size()), tu(gu.size()), rg(gu.size()), tg(gu.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const size_t i = size_t(r * n + j);
          ru[i] = fb(y0[i]) + fb(b[size_t(j)]);
          tu[i] = sum_tol(ru[i], fb(y0[i]), fb(b[size_t(j)]));
          const double us = fb(gu[i]);  // g is act of the stored u
          rg[i] = act == Activation::kGeluTanh ? gelu(us) : std::max(us, 0.0);
          tg[i] = act == Activation::kGeluTanh ? rounding(DType::kBF16, rg[i]) + 2 * gelu_pre_tol(us) : 0.0;
        }
      expect_within(tag + " u", as_double(gu), ru, tu, DType::kBF16);
      std::vector<uint16_t> gg;
      if (act != Activation::kNone) {
        gg = g.download(tag + " g");
        expect_within(tag + " g", as_double(gg), rg, tg, DType::kBF16);
        if (act == Activation::kRelu) {
          for (size_t i = 0; i < gg.size(); ++i)
            ASSERT_EQ(gg[i], (gu[i] & 0x8000u) ? uint16_t(0) : gu[i]) << tag << ": ReLU keeps u's bits or gives +0";
        }
      }
      run();
      expect_same_bits(tag + " u", gu, u.download(tag));
      if (act != Activation::kNone) expect_same_bits(tag + " g", gg, g.download(tag));
    }
}

TEST(DecoderKernels, BiasResidualAndAdd) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  const int64_t rows = 37;
  for (const int64_t n : {72, 75, 2048}) {
    const auto y = rand_bf16(size_t(rows * n), -4, 4, 90), b = rand_bf16(size_t(n), -1, 1, 91),
               r = rand_bf16(y.size(), -8, 8, 92);
    DevBuf<uint16_t> dy(y), dbias(b), dr(r), out(y.size());
    const std::string tag = "bias_residual_forward n=" + std::to_string(n);
    bias_residual_forward(dy.get(), dbias.get(), dr.get(), rows, n, out.get(), stream.get());
    const auto got = out.download(tag);
    std::vector<double> ref(got.size()), tol(got.size());
    for (int64_t i = 0; i < rows * n; ++i) {
      const double yv = fb(y[size_t(i)]), bv = fb(b[size_t(i % n)]), rv = fb(r[size_t(i)]);
      ref[size_t(i)] = rv + (yv + bv);
      tol[size_t(i)] =
          rounding(DType::kBF16, ref[size_t(i)]) + 2 * kU32 * (std::fabs(rv) + std::fabs(yv) + std::fabs(bv));
    }
    expect_within(tag, as_double(got), ref, tol, DType::kBF16);
    bias_residual_forward(dy.get(), dbias.get(), dr.get(), rows, n, dy.get(), stream.get());  // in place over y
    expect_same_bits(tag + " in place", got, dy.download(tag));
  }
  // add_bf16: a vector body and a scalar tail (n % 8 = 3); misaligned pointers take the scalar path
  const int64_t n = 1003;
  const auto a = rand_bf16(size_t(n + 1), -4, 4, 93), c = rand_bf16(size_t(n + 1), -4, 4, 94);
  DevBuf<uint16_t> da(a), dc(c), out(size_t(n + 1));
  add_bf16(da.get(), dc.get(), n, out.get(), stream.get());
  const auto got = out.download("add_bf16", false);
  std::vector<double> g(static_cast<size_t>(n)), ref(g.size()), tol(g.size());
  for (int64_t i = 0; i < n; ++i) {
    g[size_t(i)] = fb(got[size_t(i)]);
    ref[size_t(i)] = fb(a[size_t(i)]) + fb(c[size_t(i)]);
    tol[size_t(i)] = sum_tol(ref[size_t(i)], fb(a[size_t(i)]), fb(c[size_t(i)]));
  }
  expect_within("add_bf16", g, ref, tol, DType::kBF16);
  EXPECT_EQ(got[size_t(n)], poison_value<uint16_t>()) << "add_bf16 wrote element n";
  out.poison();
  add_bf16(da.get() + 1, dc.get() + 1, n, out.get() + 1, stream.get());
  const auto shifted = out.download("add_bf16 misaligned", false);
  for (int64_t i = 0; i < n; ++i) {
    const double want = fb(a[size_t(i + 1)]) + fb(c[size_t(i + 1)]);
    ASSERT_LE(std::fabs(fb(shifted[size_t(i + 1)]) - want), sum_tol(want, fb(a[size_t(i + 1)]), fb(c[size_t(i + 1)])))
        << "add_bf16 misaligned element " << i;
  }
}

TEST(DecoderKernels, BiasActivationBackwardAndBiasGradient) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  for (const int64_t rows : {37, 200})  // one partial chunk, and four (64 rows each) with a tail
    for (const int64_t n : {72, 75, 3072})
      for (const Activation act : {Activation::kNone, Activation::kRelu, Activation::kGeluTanh}) {
        const DType grad = act == Activation::kRelu ? DType::kF16 : DType::kBF16;
        const auto dg = rand_bf16(size_t(rows * n), -1, 1, 100), u = rand_bf16(dg.size(), -4, 4, 101);
        DevBuf<uint16_t> ddg(dg), du_u(u), du(dg.size()), db(static_cast<size_t>(n));
        DevBuf<float> partials(size_t(bias_grad_partial_floats(rows, n)));
        const std::string tag = std::string(act == Activation::kNone ? "bias_grad" : "bias_act_backward ") +
                                (act == Activation::kNone ? "" : act_name(act)) + " " + std::to_string(rows) + "x" +
                                std::to_string(n);
        const auto run = [&] {
          du.poison(), db.poison();
          if (act == Activation::kNone)
            bias_grad(ddg.get(), rows, n, partials.get(), grad, db.get(), stream.get());
          else
            bias_act_backward(ddg.get(), du_u.get(), rows, n, act, du.get(), partials.get(), grad, db.get(),
                              stream.get());
        };
        run();
        // du, then db as the sum of the stored du (or of dy)
        std::vector<uint16_t> gdu = dg;
        if (act != Activation::kNone) {
          gdu = du.download(tag + " du");
          std::vector<double> ref(gdu.size()), tol(gdu.size());
          for (size_t i = 0; i < gdu.size(); ++i) {
            const double uv = fb(u[i]), gv = fb(dg[i]);
            if (act == Activation::kRelu) {
              ASSERT_EQ(gdu[i], uv > 0 ? dg[i] : uint16_t(0)) << tag << " element " << i;
              ref[i] = fb(gdu[i]);
              continue;
            }
            ref[i] = gv * gelu_grad(uv);
            tol[i] = rounding(DType::kBF16, ref[i]) + 2 * std::fabs(gv) * gelu_grad_pre_tol(uv) +
                     2 * kU32 * std::fabs(ref[i]);
          }
          expect_within(tag + " du", as_double(gdu), ref, tol, DType::kBF16);
        }
        const auto gdb = db.download(tag + " db");
        std::vector<double> rdb(size_t(n), 0), tdb(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          double mag = 0;
          for (int64_t r = 0; r < rows; ++r)
            rdb[size_t(j)] += fb(gdu[size_t(r * n + j)]), mag += std::fabs(fb(gdu[size_t(r * n + j)]));
          tdb[size_t(j)] = rounding(grad, rdb[size_t(j)]) + (double(rows) + 16) * kU32 * mag;
        }
        expect_within(tag + " db", grads_as_double(gdb, grad), rdb, tdb, grad);
        run();
        expect_same_bits(tag + " db", gdb, db.download(tag));
        if (act != Activation::kNone) expect_same_bits(tag + " du", gdu, du.download(tag));
      }
}

// =====================================================================================================
// GPU: loss and conversions
// =====================================================================================================

TEST(DecoderKernels, SoftmaxCrossEntropy) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  const int64_t rows = 37;
  const float gscale = float(1.0 / (rows * 3));
  const uint16_t pad = bf(100);  // past a row's end: above every logit, so a read of it shows; never written
  // odd packed rows (every row at a different 16-byte phase), and GPT-2's vocabulary in the workload's
  // padded rows (core::decoder_layout::logits_stride)
  for (const auto& [V, ld] :
       {std::pair<int64_t, int64_t>{1003, 1003}, {50257, 50257}, {50257, core::decoder_layout::logits_stride(50257)}}) {
    std::vector<uint16_t> logits = rand_bf16(size_t(rows * ld), -8, 8, 110);
    for (int64_t r = 0; r < rows; ++r) {  // dominant logits at a row's ends and middle: a missed one shows
      for (int64_t j = V; j < ld; ++j) logits[size_t(r * ld + j)] = pad;
      if (r % 3 == 0) logits[size_t(r * ld + V - 1)] = bf(12);
      if (r % 3 == 1) logits[size_t(r * ld)] = bf(12);
      if (r % 5 == 2) logits[size_t(r * ld + V / 2)] = bf(11);
    }
    std::vector<int32_t> target = random_tokens(rows, V, 111);
    target[0] = 0, target[1] = int32_t(V - 1);
    const bool invalid = V == 1003;  // a target outside [0, V): NaN loss, no onehot
    if (invalid) target[2] = int32_t(V);
    DevBuf<uint16_t> dl(logits);
    DevBuf<int32_t> dt(target);
    DevBuf<float> loss(static_cast<size_t>(rows)), sum(1);
    const std::string tag = "cross_entropy V=" + std::to_string(V) + " ld=" + std::to_string(ld);
    const auto run = [&] {
      dl.upload(logits), loss.poison(), sum.poison();
      cross_entropy_forward_backward(dl.get(), dt.get(), rows, V, ld, gscale, loss.get(), invalid ? nullptr : sum.get(),
                                     stream.get());
    };
    run();
    const auto gd = dl.download(tag + " dlogit");
    const auto gl = loss.download(tag + " loss");
    std::vector<double> gdv(size_t(rows * V)), rd(gdv.size()), td(gdv.size()), rl(static_cast<size_t>(rows)),
        tl(static_cast<size_t>(rows)), glv(static_cast<size_t>(rows));
    double loss_sum = 0, loss_sum_tol = 0, abs_sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* x = logits.data() + r * ld;
      for (int64_t j = V; j < ld; ++j) ASSERT_EQ(gd[size_t(r * ld + j)], pad) << tag << " row " << r << " pad " << j;
      double m = -INFINITY, S = 0;
      for (int64_t j = 0; j < V; ++j) m = std::max(m, fb(x[j]));
      for (int64_t j = 0; j < V; ++j) S += std::exp(fb(x[j]) - m);
      const double lse = m + std::log(S);
      const bool ok = target[size_t(r)] >= 0 && target[size_t(r)] < V;
      if (ok) {
        rl[size_t(r)] = lse - fb(x[target[size_t(r)]]);
        tl[size_t(r)] = 0x1p-16 * (1 + std::fabs(lse));  // fp32 sums <= 512 deep, expf and logf to 2 ulps
        glv[size_t(r)] = gl[size_t(r)];
        loss_sum += rl[size_t(r)], loss_sum_tol += tl[size_t(r)], abs_sum += std::fabs(rl[size_t(r)]);
      } else {
        EXPECT_TRUE(std::isnan(gl[size_t(r)])) << tag << " row " << r << " has an invalid target";
      }
      for (int64_t j = 0; j < V; ++j) {
        const double p = std::exp(fb(x[j]) - m) / S, onehot = j == target[size_t(r)] ? 1.0 : 0.0;
        const size_t i = size_t(r * V + j);
        gdv[i] = fb(gd[size_t(r * ld + j)]);
        rd[i] = (p - onehot) * double(gscale);
        td[i] = rounding(DType::kBF16, rd[i]) + double(gscale) * (0x1p-14 * p + 0x1p-23 * onehot);
      }
    }
    expect_within(tag + " dlogit", gdv, rd, td, DType::kBF16);
    expect_within(tag + " loss", glv, rl, tl, DType::kF32);
    if (!invalid) {
      const auto gs = sum.download(tag + " sum");
      expect_within(tag + " loss sum", {double(gs[0])}, {loss_sum}, {loss_sum_tol + double(rows) * kU32 * abs_sum},
                    DType::kF32);
    }
    run();
    expect_same_bits(tag + " dlogit", gd, dl.download(tag));
    expect_same_bits(tag + " loss", gl, loss.download(tag));
  }
}

// One rounding of fp32 to fp16/bf16 per element: the bits of core/optim/dtype.h's conversions (themselves
// tested against independent references in tests/unit/test_dtype.cpp), on both the vector and scalar paths
// (the vector path's bf16 is attn::pack_bf16x2: a cvt and a NaN fix-up on the device), for random values
// and for NaNs (quiet, signalling, negative: core's canonical NaN), infinities, signed zeros, values that
// round to Inf, and exact ties between two bf16 or fp16 neighbours with even and odd lower neighbours.
TEST(DecoderKernels, F32ToGradDtype) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  const int64_t n = 1003;
  std::vector<float> src(size_t(n + 1));
  for (size_t i = 0; i < src.size(); ++i) {
    const double scale = i % 3 == 0 ? 1e5 : i % 3 == 1 ? 1.0 : 1e-6;  // fp16 overflow, normal, subnormal
    src[i] = float(uniform(120, i, -scale, scale));
  }
  const uint32_t special[] = {0x7FC00000u, 0x7F800001u, 0xFFC00001u, 0x7FFFFFFFu, 0x7F800000u, 0xFF800000u,
                              0x00000000u, 0x80000000u, 0x7F7F8000u, 0x7F7FFFFFu, 0xFF7F8000u, 0x3F808000u,
                              0x3F818000u, 0xBF808000u, 0x00008000u, 0x00018000u, 0x3F801000u, 0x3F803000u,
                              0x477FF000u, 0x477FEFFFu, 0x33000000u, 0x33000001u};
  for (size_t k = 0; k < std::size(special); ++k) {
    float v;
    std::memcpy(&v, &special[k], 4);
    src[10 + 16 * k] = v, src[11 + 16 * k] = v;  // both halves of a bf16 pair, even and odd position
  }
  DevBuf<float> dsrc(src);
  for (const DType grad : {DType::kBF16, DType::kF16})
    for (const int64_t shift : {0, 1}) {
      DevBuf<uint16_t> out(size_t(n + 1));
      f32_to_grad(dsrc.get() + shift, n, grad, out.get() + shift, stream.get());
      const auto got = out.download("f32_to_grad", false);
      for (int64_t i = 0; i < n; ++i) {
        const float v = src[size_t(i + shift)];
        ASSERT_EQ(got[size_t(i + shift)], grad == DType::kF16 ? core::f32_to_f16(v) : core::f32_to_bf16(v))
            << "f32_to_grad element " << i << " shift " << shift;
      }
      EXPECT_EQ(got[size_t(shift ? 0 : n)], poison_value<uint16_t>()) << "f32_to_grad wrote outside [0, n)";
    }
}

// =====================================================================================================
// GPU: attention
// =====================================================================================================

namespace {

// (B, s, H, d): s = 1, tails of every tile size, a sequence of exactly one key tile, d = 64, 80, 128
constexpr AttentionDims kAttnCases[] = {{2, 1, 3, 64},   {2, 37, 2, 64},  {1, 130, 2, 64}, {1, 300, 1, 64},
                                        {2, 200, 1, 80}, {1, 64, 1, 128}, {1, 129, 2, 128}};

// One (sample, head) of qkv (T, 3h) as doubles: q, k, v rows of d columns.
struct HeadView {
  const std::vector<double>& qkv;
  int64_t h, d, row0, col;  // row0 = b·s, col = head·d
  double q(int64_t t, int64_t c) const { return qkv[size_t((row0 + t) * 3 * h + col + c)]; }
  double k(int64_t t, int64_t c) const { return qkv[size_t((row0 + t) * 3 * h + h + col + c)]; }
  double v(int64_t t, int64_t c) const { return qkv[size_t((row0 + t) * 3 * h + 2 * h + col + c)]; }
};

// The exact causal softmax row of query t: p[k] for k <= t, its lse, and the bound on the kernels' fp32
// error of any score: d products summed by the tensor cores (whose fp32 accumulation need not round to
// nearest: 2 units per addition), the scale constant and the base-2 shift.
struct SoftmaxRow {
  std::vector<double> p;
  double lse = 0, score_tol = 0;
};
SoftmaxRow softmax_row(const HeadView& hv, int64_t t) {
  const double scale = 1.0 / std::sqrt(double(hv.d));
  SoftmaxRow r;
  std::vector<double> s(size_t(t + 1));
  double m = -INFINITY, max_mag = 0, max_abs = 0;
  for (int64_t k = 0; k <= t; ++k) {
    double dot = 0, mag = 0;
    for (int64_t c = 0; c < hv.d; ++c) dot += hv.q(t, c) * hv.k(k, c), mag += std::fabs(hv.q(t, c) * hv.k(k, c));
    s[size_t(k)] = dot * scale;
    m = std::max(m, s[size_t(k)]), max_mag = std::max(max_mag, mag * scale),
    max_abs = std::max(max_abs, std::fabs(s[size_t(k)]));
  }
  double z = 0;
  for (int64_t k = 0; k <= t; ++k) z += std::exp(s[size_t(k)] - m);
  r.lse = m + std::log(z);
  for (int64_t k = 0; k <= t; ++k) r.p.push_back(std::exp(s[size_t(k)] - m) / z);
  r.score_tol = 2 * double(hv.d) * kU32 * max_mag + 4 * kU32 * (max_abs + std::fabs(m));
  return r;
}

struct AttnForwardRef {
  std::vector<double> o, o_tol;      // (T, h)
  std::vector<double> lse, lse_tol;  // (B, H, s)
};
// o = Σ_k p_k·v_k within kUBf16·(|o| + Σ p|v|): bf16(P) (kUBf16 relative per term) and the bf16 output
// (kUBf16), plus what a score error does to P and the fp32 sum l of t + 1 terms (and its rescalings) does
// to all of them; lse within the score error, l's error and the fp32 log/exp.
AttnForwardRef attention_forward_ref(const std::vector<double>& qkv, const AttentionDims& d) {
  const int64_t h = d.hidden();
  AttnForwardRef r;
  r.o.assign(size_t(d.rows() * h), 0), r.o_tol.assign(r.o.size(), 0);
  r.lse.assign(size_t(d.batch * d.heads * d.seq), 0), r.lse_tol.assign(r.lse.size(), 0);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t j = 0; j < d.heads; ++j) {
      const HeadView hv{qkv, h, d.head_dim, b * d.seq, j * d.head_dim};
      for (int64_t t = 0; t < d.seq; ++t) {
        const SoftmaxRow sr = softmax_row(hv, t);
        const size_t li = size_t((b * d.heads + j) * d.seq + t);
        r.lse[li] = sr.lse;
        const double l_rel = 2 * double(t + 1) * kU32;  // l: t + 1 fp32 additions and rescalings
        r.lse_tol[li] = sr.score_tol + l_rel + 4 * kU32 * (std::fabs(sr.lse) + 1) + 0x1p-21;
        for (int64_t c = 0; c < d.head_dim; ++c) {
          double o = 0, mag = 0;
          for (int64_t k = 0; k <= t; ++k)
            o += sr.p[size_t(k)] * hv.v(k, c), mag += sr.p[size_t(k)] * std::fabs(hv.v(k, c));
          const size_t oi = size_t((b * d.seq + t) * h + j * d.head_dim + c);
          r.o[oi] = o;
          r.o_tol[oi] = kUBf16 * (std::fabs(o) + mag) + 2 * (sr.score_tol + l_rel + 0x1p-21) * mag;
        }
      }
    }
  return r;
}

struct AttnBackwardRef {
  std::vector<double> dqkv, tol;  // (T, 3h)
};
// The backward from the kernels' inputs: o (bf16) and lse (fp32) as given, P the exact softmax. Bounds:
// kUBf16·(|g| + Σ|terms|) for the bf16 P and dS operands and the bf16 output, plus the fp32 error of dP and
// D (d products each) and of P (score and lse errors) carried through dS.
AttnBackwardRef attention_backward_ref(const std::vector<double>& qkv, const std::vector<double>& o,
                                       const std::vector<double>& dout, const std::vector<float>& lse,
                                       const AttentionDims& d) {
  const int64_t h = d.hidden(), dh = d.head_dim;
  const double scale = 1.0 / std::sqrt(double(dh));
  AttnBackwardRef r;
  r.dqkv.assign(size_t(d.rows() * 3 * h), 0);
  std::vector<double> mag(r.dqkv.size(), 0), eabs(r.dqkv.size(), 0);
  const auto at = [&](int64_t row, int64_t col) { return size_t(row * 3 * h + col); };
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t j = 0; j < d.heads; ++j) {
      const HeadView hv{qkv, h, dh, b * d.seq, j * dh};
      const auto dO = [&](int64_t t, int64_t c) { return dout[size_t((b * d.seq + t) * h + j * dh + c)]; };
      for (int64_t t = 0; t < d.seq; ++t) {
        const SoftmaxRow sr = softmax_row(hv, t);
        const double p_rel =
            sr.score_tol + 4 * kU32 * std::fabs(double(lse[size_t((b * d.heads + j) * d.seq + t)])) + 0x1p-21;
        double D = 0, D_mag = 0;
        for (int64_t c = 0; c < dh; ++c) {
          const double ov = o[size_t((b * d.seq + t) * h + j * dh + c)];
          D += dO(t, c) * ov, D_mag += std::fabs(dO(t, c) * ov);
        }
        for (int64_t k = 0; k <= t; ++k) {
          const double p = sr.p[size_t(k)];
          double dp = 0, dp_mag = 0;
          for (int64_t c = 0; c < dh; ++c) dp += dO(t, c) * hv.v(k, c), dp_mag += std::fabs(dO(t, c) * hv.v(k, c));
          const double ds = p * (dp - D);
          const double ds_err = p * (2 * double(dh) * kU32 * (dp_mag + D_mag)) + p_rel * std::fabs(ds);
          for (int64_t c = 0; c < dh; ++c) {
            const size_t iq = at(b * d.seq + t, j * dh + c), ik = at(b * d.seq + k, h + j * dh + c),
                         iv = at(b * d.seq + k, 2 * h + j * dh + c);
            r.dqkv[iv] += p * dO(t, c), mag[iv] += p * std::fabs(dO(t, c)), eabs[iv] += p_rel * p * std::fabs(dO(t, c));
            r.dqkv[ik] += scale * ds * hv.q(t, c), mag[ik] += scale * std::fabs(ds * hv.q(t, c));
            eabs[ik] += scale * ds_err * std::fabs(hv.q(t, c));
            r.dqkv[iq] += scale * ds * hv.k(k, c), mag[iq] += scale * std::fabs(ds * hv.k(k, c));
            eabs[iq] += scale * ds_err * std::fabs(hv.k(k, c));
          }
        }
      }
    }
  r.tol.resize(r.dqkv.size());
  for (size_t i = 0; i < r.tol.size(); ++i) r.tol[i] = kUBf16 * (std::fabs(r.dqkv[i]) + mag[i]) + 2 * eabs[i];
  return r;
}

std::string attn_tag(const char* what, const AttentionDims& d) {
  return std::string(what) + " B" + std::to_string(d.batch) + " s" + std::to_string(d.seq) + " H" +
         std::to_string(d.heads) + " d" + std::to_string(d.head_dim);
}

// Whether the current device runs ForwardTiles::kWgmma (compute capability 9.0); otherwise why not.
bool wgmma_device(std::string* why) {
  int dev = 0, major = 0, minor = 0;
  TF_CUDA_CHECK(cudaGetDevice(&dev));
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  *why = "ForwardTiles::kWgmma needs compute capability 9.0, the device is " + std::to_string(major) + "." +
         std::to_string(minor);
  return major == 9 && minor == 0;
}

const char* tiles_name(ForwardTiles t) {
  switch (t) {
    case ForwardTiles::kWarps8x16: return " 8x16";
    case ForwardTiles::kWgmma: return " wgmma";
    case ForwardTiles::kDefault: return " default";
    default: return " 4x32";
  }
}

}  // namespace

// Every case against the double reference and run twice for the same bits; d = 64 in both mma.sync tile
// shapes, which must give the same bits (each row's products, tree sums and exponentials do not depend on how
// rows are spread over warps), and on a compute-capability-9.0 GPU in the wgmma shape too: its products
// accumulate in another order, so it is held to the reference's bounds and to its own bits run to run only
// (elsewhere it must be refused with an InputError).
TEST(DecoderKernels, AttentionForward) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  std::string no_wgmma;
  const bool wgmma = wgmma_device(&no_wgmma);
  for (const AttentionDims& d : kAttnCases) {
    const auto qkv = rand_bf16(size_t(d.rows() * 3 * d.hidden()), -2, 2, 130 + uint64_t(d.seq));
    DevBuf<uint16_t> dqkv(qkv), o(size_t(d.rows() * d.hidden()));
    DevBuf<float> lse(size_t(d.batch * d.heads * d.seq));
    const AttnForwardRef ref = attention_forward_ref(as_double(qkv), d);
    std::vector<uint16_t> first_o, wgmma_o;
    std::vector<float> first_lse, wgmma_lse;
    for (const ForwardTiles tiles :
         {ForwardTiles::kWarps4x32, ForwardTiles::kWarps8x16, ForwardTiles::kWgmma, ForwardTiles::kDefault}) {
      if (d.head_dim != 64 && tiles != ForwardTiles::kWarps4x32 && tiles != ForwardTiles::kDefault)
        continue;  // one shape for d = 80, 128
      const std::string tag = attn_tag("attention_forward", d) + tiles_name(tiles);
      if (tiles == ForwardTiles::kWgmma && !wgmma) {
        std::printf("[   NOTE   ] %s skipped: %s\n", tag.c_str(), no_wgmma.c_str());
        EXPECT_THROW(attention_forward(dqkv.get(), d, o.get(), lse.get(), stream.get(), tiles), core::InputError)
            << tag;
        continue;
      }
      o.poison(), lse.poison();
      attention_forward(dqkv.get(), d, o.get(), lse.get(), stream.get(), tiles);
      const auto go = o.download(tag + " o");
      const auto gl = lse.download(tag + " lse");
      expect_within(tag + " o", as_double(go), ref.o, ref.o_tol, DType::kBF16);
      expect_within(tag + " lse", std::vector<double>(gl.begin(), gl.end()), ref.lse, ref.lse_tol, DType::kF32);
      o.poison(), lse.poison();
      attention_forward(dqkv.get(), d, o.get(), lse.get(), stream.get(), tiles);
      expect_same_bits(tag + " o", go, o.download(tag));
      expect_same_bits(tag + " lse", gl, lse.download(tag));
      if (tiles == ForwardTiles::kWgmma) {  // its own bits (see above)
        wgmma_o = go, wgmma_lse = gl;
        const bool same = go == first_o && gl == first_lse;
        std::printf("[   NOTE   ] %s: the bits of the 4x32 shape too: %s\n", tag.c_str(), same ? "yes" : "no");
        continue;
      }
      if (tiles == ForwardTiles::kDefault && wgmma && d.head_dim == 64) {  // kDefault is kWgmma where it runs
        expect_same_bits(tag + " o against wgmma", wgmma_o, go);
        expect_same_bits(tag + " lse against wgmma", wgmma_lse, gl);
        continue;
      }
      if (first_o.empty()) {
        first_o = go, first_lse = gl;
      } else {
        expect_same_bits(tag + " o against 4x32", first_o, go);
        expect_same_bits(tag + " lse against 4x32", first_lse, gl);
      }
    }
  }
}

// The bf16 rounding of P and dS (cvt.rn.bf16x2.f32 on the device) gives core::f32_to_bf16's bits for
// every non-NaN fp32 value: random bit patterns (normal, subnormal, Inf), exact ties between two bf16
// values (even and odd lower neighbours), values that round up to Inf, signed zeros; a NaN stays a NaN.
TEST(DecoderKernels, AttentionOperandRoundingIsCoreRounding) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  std::vector<float> src;
  const auto from_bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (uint64_t i = 0; i < 200000; ++i) src.push_back(from_bits(uint32_t(core::splitmix64(i + 170))));
  for (uint32_t hi = 0; hi < 0x10000u; hi += 7) {  // ties: a bf16 value plus half its ulp, both signs
    src.push_back(from_bits((hi << 16) | 0x8000u));
    src.push_back(from_bits((hi << 16) | 0x7FFFu));
  }
  for (const uint32_t u : {0x7F7F8000u, 0x7F7FFFFFu, 0xFF7F8000u, 0x00008000u, 0x00000001u, 0x80000000u, 0x00000000u,
                           0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu})
    src.push_back(from_bits(u));
  if (src.size() % 2) src.push_back(1.0f);
  const int64_t n = int64_t(src.size() / 2);
  DevBuf<float> dsrc(src);
  DevBuf<uint32_t> out{size_t(n)};
  attention_operand_pack(dsrc.get(), n, out.get(), stream.get());
  const auto got = out.download("attention_operand_pack");
  size_t bad = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    const uint16_t g = uint16_t(i % 2 ? got[i / 2] >> 16 : got[i / 2] & 0xFFFFu);
    const bool ok = std::isnan(src[i]) ? std::isnan(fb(g)) : g == core::f32_to_bf16(src[i]);
    if (!ok && bad++ < 5) ADD_FAILURE() << "fp32 " << src[i] << " (element " << i << ") -> bf16 bits " << g;
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << src.size() << " values rounded differently from core::f32_to_bf16";
}

// A backward test's inputs for `d`: qkv and dout drawn from the case's seeds, and the forward's outputs o and lse
// from the double reference, rounded as the kernel stores them.
namespace {

struct BackwardInputs {
  std::vector<uint16_t> qkv, dout, o;
  std::vector<float> lse;
};
BackwardInputs backward_inputs(const AttentionDims& d) {
  BackwardInputs in;
  in.qkv = rand_bf16(size_t(d.rows() * 3 * d.hidden()), -2, 2, 140 + uint64_t(d.seq));
  in.dout = rand_bf16(size_t(d.rows() * d.hidden()), -1, 1, 141 + uint64_t(d.seq));
  const AttnForwardRef fwd = attention_forward_ref(as_double(in.qkv), d);
  for (const double x : fwd.o) in.o.push_back(bf(x));
  for (const double x : fwd.lse) in.lse.push_back(float(x));
  return in;
}

}  // namespace

TEST(DecoderKernels, AttentionBackward) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  for (const AttentionDims& d : kAttnCases) {
    const auto [qkv, dout, o, lse] = backward_inputs(d);
    DevBuf<uint16_t> dqkv_in(qkv), dd_o(o), ddout(dout), dqkv(qkv.size());
    DevBuf<float> dlse(lse), delta(lse.size());
    const std::string tag = attn_tag("attention_backward", d);
    attention_backward(dqkv_in.get(), dd_o.get(), ddout.get(), dlse.get(), d, delta.get(), dqkv.get(), stream.get());
    const auto got = dqkv.download(tag + " dqkv");
    const AttnBackwardRef ref = attention_backward_ref(as_double(qkv), as_double(o), as_double(dout), lse, d);
    expect_within(tag + " dqkv", as_double(got), ref.dqkv, ref.tol, DType::kBF16);
    dqkv.poison();
    attention_backward(dqkv_in.get(), dd_o.get(), ddout.get(), dlse.get(), d, delta.get(), dqkv.get(), stream.get());
    expect_same_bits(tag + " dqkv", got, dqkv.download(tag));
  }
}

// BackwardKernel::kWgmma (the wgmma dK/dV; D and dQ are the mma.sync kernels) on a compute-capability-9.0 GPU for
// every d = 64 case (ragged lengths included): the inputs of AttentionBackward, the same reference and bounds, its
// own bits run to run, and a NOTE saying whether its dqkv bits are kMmaSync's (the tensor core's order of additions
// inside a product may differ). Elsewhere it must be refused with an InputError.
TEST(DecoderKernels, AttentionBackwardWgmma) {
  SKIP_WITHOUT_GPU();
  std::string no_wgmma;
  const bool wgmma = wgmma_device(&no_wgmma);
  Stream stream;
  for (const AttentionDims& d : kAttnCases) {
    if (d.head_dim != 64) continue;
    const auto [qkv, dout, o, lse] = backward_inputs(d);
    DevBuf<uint16_t> dqkv_in(qkv), dd_o(o), ddout(dout), dqkv(qkv.size());
    DevBuf<float> dlse(lse), delta(lse.size());
    const std::string tag = attn_tag("attention_backward wgmma dkdv", d);
    const auto run = [&](BackwardKernel kernel) {
      dqkv.poison();
      attention_backward(dqkv_in.get(), dd_o.get(), ddout.get(), dlse.get(), d, delta.get(), dqkv.get(), stream.get(),
                         kernel);
      return dqkv.download(tag + " dqkv");
    };
    if (!wgmma) {
      std::printf("[   NOTE   ] %s skipped: %s\n", tag.c_str(), no_wgmma.c_str());
      EXPECT_THROW((void)run(BackwardKernel::kWgmma), core::InputError) << tag;
      continue;
    }
    const auto mma_sync = run(BackwardKernel::kMmaSync);
    const auto got = run(BackwardKernel::kWgmma);
    const AttnBackwardRef ref = attention_backward_ref(as_double(qkv), as_double(o), as_double(dout), lse, d);
    expect_within(tag + " dqkv", as_double(got), ref.dqkv, ref.tol, DType::kBF16);
    expect_same_bits(tag + " dqkv", got, run(BackwardKernel::kWgmma));
    expect_same_bits(tag + " dqkv of kDefault (the wgmma dK/dV here)", got, run(BackwardKernel::kDefault));
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != mma_sync[i];
    std::printf("[   NOTE   ] %s: the bits of the mma.sync backward too: %s (%zu of %zu values differ)\n", tag.c_str(),
                differ == 0 ? "yes" : "no", differ, got.size());
  }
}

// The backward (the mma.sync and the wgmma dK/dV) fed the wgmma forward's o and lse (as training would run them):
// its gradients within the backward's bounds against the exact softmax, o and lse taken as the forward gave them.
// d = 64 cases (the wgmma forward's only head dimension), tails of a 64-key tile included.
TEST(DecoderKernels, AttentionBackwardFromWgmmaForward) {
  SKIP_WITHOUT_GPU();
  std::string why;
  if (!wgmma_device(&why)) GTEST_SKIP() << why;
  Stream stream;
  for (const AttentionDims& d : kAttnCases) {
    if (d.head_dim != 64) continue;
    const int64_t h = d.hidden();
    const auto qkv = rand_bf16(size_t(d.rows() * 3 * h), -2, 2, 140 + uint64_t(d.seq));
    const auto dout = rand_bf16(size_t(d.rows() * h), -1, 1, 141 + uint64_t(d.seq));
    DevBuf<uint16_t> dqkv_in(qkv), dd_o(size_t(d.rows() * h)), ddout(dout), dqkv(qkv.size());
    DevBuf<float> dlse(size_t(d.batch * d.heads * d.seq)), delta(size_t(d.batch * d.heads * d.seq));
    const std::string tag = attn_tag("attention_backward after the wgmma forward", d);
    attention_forward(dqkv_in.get(), d, dd_o.get(), dlse.get(), stream.get(), ForwardTiles::kWgmma);
    const auto o = dd_o.download(tag + " o");
    const auto lse = dlse.download(tag + " lse");
    const AttnBackwardRef ref = attention_backward_ref(as_double(qkv), as_double(o), as_double(dout), lse, d);
    for (const BackwardKernel kernel : {BackwardKernel::kMmaSync, BackwardKernel::kWgmma}) {
      const std::string ktag = tag + (kernel == BackwardKernel::kWgmma ? " (wgmma dkdv)" : " (mma.sync dkdv)");
      dqkv.poison();
      attention_backward(dqkv_in.get(), dd_o.get(), ddout.get(), dlse.get(), d, delta.get(), dqkv.get(), stream.get(),
                         kernel);
      expect_within(ktag + " dqkv", as_double(dqkv.download(ktag + " dqkv")), ref.dqkv, ref.tol, DType::kBF16);
    }
  }
}
