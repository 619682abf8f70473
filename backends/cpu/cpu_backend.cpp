// CPU backend: ISA selection, host buffers, and the threaded fused optimizer pass.
#include "backends/cpu/cpu_backend.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/host_region.h"
#include "core/error.h"
#include "core/optim/grad_stats.h"
#include "core/optim/step_values.h"

namespace tf::backend::cpu {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

Isa parse_isa(std::string_view s) {
  if (s == "scalar") return Isa::kScalar;
  if (s == "avx2") return Isa::kAvx2;
  if (s == "avx512") return Isa::kAvx512;
  throw core::InputError("unknown SIMD path '" + std::string(s) + "' (expected scalar, avx2 or avx512)");
}

namespace {
KernelTable table(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return kernels_scalar();
    case Isa::kAvx2: return kernels_avx2();
    case Isa::kAvx512: return kernels_avx512();
  }
  return {};
}
}  // namespace

namespace {
// cpuid + xgetbv: the CPU has the instructions and the OS saves their registers.
struct CpuFeatures {
  bool avx2 = false, avx512 = false;
};
CpuFeatures cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
  if (!osxsave || !avx) return f;
  unsigned xlo = 0, xhi = 0;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool ymm_state = (xlo & 0x6u) == 0x6u, zmm_state = (xlo & 0xE6u) == 0xE6u;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31);
  f.avx2 = ymm_state && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512dq && avx512bw && avx512vl;
  return f;
}
}  // namespace

uint64_t check_exact_path(Isa isa, uint64_t n, uint64_t seed, std::string* first) {
  const KernelTable t = table(isa);
  if (!isa_available(isa) || t.check_exact == nullptr)
    throw core::InputError("check_exact_path: " + std::string(isa_name(isa)) +
                           " is not available here or has no exact path");
  return t.check_exact(n, seed, first);
}

bool isa_available(Isa isa) {
  if (table(isa).step == nullptr) return false;
  static const CpuFeatures f = cpu_features();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return f.avx2;
    case Isa::kAvx512: return f.avx512;
  }
  return false;
}

Isa select_isa() {
  if (const char* env = std::getenv("TWINFLOW_SIMD"); env != nullptr && *env != '\0') {
    Isa forced;
    try {
      forced = parse_isa(env);
    } catch (const core::InputError& e) {
      throw core::InputError(std::string("environment variable TWINFLOW_SIMD: ") + e.what());
    }
    if (!isa_available(forced))
      throw core::InputError("TWINFLOW_SIMD=" + std::string(env) +
                             " is not available on this CPU or build; unset it or choose scalar");
    return forced;
  }
  if (isa_available(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_available(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

void check_tuning(const KernelTuning& t, const char* where) {
  const auto bad = [&](const char* knob, uint32_t v, const char* allowed) {
    throw core::InputError(std::string(where) + ": " + knob + " " + std::to_string(v) + " is not implemented (" +
                           allowed + ")");
  };
  if (t.unroll != 1 && t.unroll != 2 && t.unroll != 4) bad("unroll", t.unroll, "1, 2 or 4");
  if (t.interleave != 1 && t.interleave != 2) bad("interleave", t.interleave, "1 or 2");
  if (t.prefetch_level > 1) bad("prefetch level", t.prefetch_level, "0: L1, 1: L2");
  if (t.interleave == 2 && t.unroll != 1) bad("unroll", t.unroll, "only 1 with interleave 2");
  if (t.exact_path > 2) bad("exact path", t.exact_path, "0: off, 1: on, 2: auto");
}

namespace {
uint64_t spec_value(std::string_view pair, std::string_view value, uint64_t hi, const std::string& option) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty() || v > hi)
    throw core::InputError(option + ": '" + std::string(pair) + "': the value must be an integer in [0, " +
                           std::to_string(hi) + "]");
  return v;
}
}  // namespace

void apply_tuning_spec(CpuOptions& o, std::string_view spec, const std::string& option) {
  if (spec == "default") return;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view pair = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = pair.find('=');
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    const auto num = [&](uint64_t hi) { return spec_value(pair, value, hi, option); };
    if (key == "prefetch")
      o.tuning.prefetch_elems = uint32_t(num(uint64_t(1) << 20));
    else if (key == "level")
      o.tuning.prefetch_level = uint32_t(num(1));
    else if (key == "unroll")
      o.tuning.unroll = uint32_t(num(4));
    else if (key == "interleave")
      o.tuning.interleave = uint32_t(num(2));
    else if (key == "nt")
      o.tuning.stream_copy = num(1) != 0;
    else if (key == "ntoop")
      o.tuning.stream_out_of_place = num(1) != 0;
    else if (key == "block")
      o.steal_block_tiles = size_t(num(uint64_t(1) << 20));
    else if (key == "spin")
      o.pool_spin_us = uint32_t(num(100000));
    else if (key == "nice")
      o.pool_nice = uint32_t(num(19));
    else if (key == "idle")
      o.pool_idle = num(1) != 0;
    else if (key == "huge")
      o.huge_pages = num(1) != 0;
    else if (key == "exact")
      o.tuning.exact_path = uint32_t(num(2));
    else
      throw core::InputError(option + ": unknown knob '" + std::string(pair) +
                             "' (expected key=value pairs of prefetch, level, unroll, interleave, nt, ntoop, block, "
                             "spin, nice, idle, huge, exact; "
                             "or 'default')");
  }
  check_tuning(o.tuning, option.c_str());
}

std::string tuning_spec(const CpuOptions& o) {
  const KernelTuning& t = o.tuning;
  return "prefetch=" + std::to_string(t.prefetch_elems) + ",level=" + std::to_string(t.prefetch_level) +
         ",unroll=" + std::to_string(t.unroll) + ",interleave=" + std::to_string(t.interleave) +
         ",nt=" + (t.stream_copy ? "1" : "0") + ",ntoop=" + (t.stream_out_of_place ? "1" : "0") +
         ",block=" + std::to_string(o.steal_block_tiles) + ",spin=" + std::to_string(o.pool_spin_us) +
         ",nice=" + std::to_string(o.pool_nice) + ",idle=" + (o.pool_idle ? "1" : "0") +
         ",huge=" + (o.huge_pages ? "1" : "0") + ",exact=" + std::to_string(resolved_exact_path(o));
}

namespace {
class HostBuffer final : public Buffer {
 public:
  HostBuffer(size_t bytes, bool huge_pages) : region_(bytes, huge_pages) {}
  void* data() override { return region_.data(); }
  size_t bytes() const override { return region_.bytes(); }

 private:
  HostRegion region_;  // 2 MiB aligned, huge pages requested, untouched until first written
};

void check_range(Buffer& b, size_t bytes, const char* what) {
  if (bytes > b.bytes())
    throw core::InputError(std::string(what) + ": " + std::to_string(bytes) + " bytes exceed the buffer's " +
                           std::to_string(b.bytes()));
}
}  // namespace

namespace {
// KernelTuning::exact_path 2: whether the ISA's exact path updates data that decayed (g = 0 on subnormal m
// and v, core::StepValues::kDecayed) faster than its fp32 instructions do, by 20% or more. One thread, 16384
// elements (L2-resident), the best of 5 alternating passes of each; once per process and ISA.
bool exact_path_pays(Isa isa, const KernelTable& k) {
  static std::once_flag once[3];
  static bool pays[3] = {false, false, false};
  const size_t i = size_t(isa);
  std::call_once(once[i], [&] {
    if (k.check_exact == nullptr) return;
    constexpr size_t n = 8 * core::kStatsTile;
    std::vector<float> p(n), m(n), v(n, core::kDecayedV), g(n, 0.f);
    OptimChunk c;
    c.param = {p.data(), n, DType::kF32};
    c.state1 = {m.data(), n, DType::kF32};
    c.state2 = {v.data(), n, DType::kF32};
    c.grad = {g.data(), n, DType::kF32};
    const StepScalars s =
        core::make_step_scalars(OptimizerKind::kAdamW, core::default_hyper_params(OptimizerKind::kAdamW), 10, 1.0);
    double sums[8];
    const auto pass = [&](uint32_t exact) {
      for (size_t j = 0; j < n; ++j) {
        p[j] = float(int(j % 201) - 100) * 1e-3f;
        m[j] = (j & 1) ? -core::kDecayedM : core::kDecayedM;
        v[j] = core::kDecayedV;
      }
      KernelTuning t;
      t.exact_path = exact;
      const auto t0 = std::chrono::steady_clock::now();
      k.step(OptimizerKind::kAdamW, c, s, t, 0, 8, sums);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    double off = 1e30, on = 1e30;
    for (int r = 0; r < 5; ++r) off = std::min(off, pass(0)), on = std::min(on, pass(1));
    pays[i] = on < 0.8 * off;
  });
  return pays[i];
}
}  // namespace

uint32_t resolved_exact_path(const CpuOptions& o) {
  if (o.tuning.exact_path != 2) return o.tuning.exact_path;
  const Isa isa = o.isa < 0 ? select_isa() : static_cast<Isa>(o.isa);
  return isa_available(isa) && exact_path_pays(isa, table(isa)) ? 1 : 0;
}

CpuBackend::CpuBackend(const CpuOptions& opt)
    : isa_(opt.isa < 0 ? select_isa() : static_cast<Isa>(opt.isa)),
      k_(table(isa_)),
      pool_(opt.threads, opt.pin_threads, opt.cpus, opt.pool_spin_us, opt.pool_nice, opt.pool_idle),
      opt_(opt) {
  check_tuning(opt.tuning, "cpu backend");
  if (!isa_available(isa_))
    throw core::InputError("SIMD path '" + std::string(isa_name(isa_)) + "' is not available on this CPU");
  opt_.tuning.exact_path = resolved_exact_path(opt_);
  caps_.name = "cpu-" + std::string(isa_name(isa_));
  caps_.functional_math = true;
  caps_.device_memory = false;
  caps_.bitwise_contract = true;
  caps_.buffer_alignment = 4;
}

std::unique_ptr<Buffer> CpuBackend::allocate(size_t bytes) {
  return std::make_unique<HostBuffer>(bytes, opt_.huge_pages);
}

void CpuBackend::upload(Buffer& dst, const void* src, size_t bytes) {
  check_range(dst, bytes, "upload");
  if (bytes) std::memcpy(dst.data(), src, bytes);
}

void CpuBackend::download(void* dst, Buffer& src, size_t bytes) {
  check_range(src, bytes, "download");
  if (bytes) std::memcpy(dst, src.data(), bytes);
}

namespace {
// One worker's static part of the global tile sequence, claimed in blocks (its own line: no false sharing).
struct alignas(64) PartCursor {
  std::atomic<size_t> next{0};
  size_t end = 0;
};
}  // namespace

template <class Fn>
void CpuBackend::for_tiles(const std::vector<size_t>& tiles_per_chunk, bool steal, Fn&& fn) {
  std::vector<size_t> first(tiles_per_chunk.size() + 1, 0);  // global index of each chunk's tile 0
  for (size_t c = 0; c < tiles_per_chunk.size(); ++c) first[c + 1] = first[c] + tiles_per_chunk[c];
  const size_t total = first.back();
  size_t parts = (total + opt_.min_tiles_per_thread - 1) / std::max<size_t>(opt_.min_tiles_per_thread, 1);
  parts = std::max<size_t>(1, std::min(parts, pool_.size()));
  // Global tiles [b, e) as runs within chunks.
  const auto run = [&](size_t b, size_t e) {
    for (size_t c = size_t(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1;
         c < tiles_per_chunk.size() && first[c] < e; ++c) {
      const size_t lo = std::max(b, first[c]), hi = std::min(e, first[c + 1]);
      if (lo < hi) fn(Work{c, lo - first[c], hi - first[c], lo});
    }
  };
  const size_t block = steal ? opt_.steal_block_tiles : 0;
  std::vector<PartCursor> cursor(block ? parts : 0);
  for (size_t w = 0; w < cursor.size(); ++w) {
    size_t b, e;
    ThreadPool::split(total, parts, w, b, e);
    cursor[w].next.store(b, std::memory_order_relaxed);
    cursor[w].end = e;
  }
  pool_.run(parts, [&](size_t w) {
    if (!block) {
      size_t b, e;
      ThreadPool::split(total, parts, w, b, e);
      return run(b, e);
    }
    for (size_t i = 0; i < parts; ++i) {  // its own part first, then the others' leftovers
      PartCursor& c = cursor[(w + i) % parts];
      for (size_t b; (b = c.next.fetch_add(block, std::memory_order_relaxed)) < c.end;)
        run(b, std::min(b + block, c.end));
    }
  });
}

GradStats CpuBackend::step(OptimizerKind k, std::span<const OptimChunk> chunks, const StepScalars& s) {
  std::vector<size_t> tiles(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    validate_chunk(k, chunks[c], caps_.buffer_alignment, "cpu step, chunk " + std::to_string(c));
    tiles[c] = core::stats_tiles(chunks[c].param.count);
  }
  size_t total = 0;
  for (size_t t : tiles) total += t;
  sums_.assign(total, 0.0);
  std::atomic<uint64_t> bad{0};
  for_tiles(tiles, true, [&](const Work& w) {
    bad += k_.step(k, chunks[w.chunk], s, opt_.tuning, w.tile_begin, w.tile_end, sums_.data() + w.sum_offset);
  });
  GradStats out;
  out.nonfinite = bad.load();
  size_t off = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    out.sumsq = out.sumsq + core::fold_tile_sums(sums_.data() + off, tiles[c]);
    off += tiles[c];
  }
  out.sumsq = core::canonical_nan(out.sumsq);
  return out;
}

void CpuBackend::stream_pass(std::span<const OptimChunk> chunks) {
  std::vector<size_t> tiles(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) tiles[c] = core::stats_tiles(chunks[c].param.count);
  for_tiles(tiles, true, [&](const Work& w) { k_.streams(chunks[w.chunk], opt_.tuning, w.tile_begin, w.tile_end); });
}

GradStats CpuBackend::grad_stats(std::span<const BufferView> grads) {
  size_t total = 0;
  for (const BufferView& g : grads) total += core::stats_tiles(g.count);
  sums_.assign(total, 0.0);
  GradStats out;
  out.nonfinite = tile_sums(grads, sums_.data());
  size_t off = 0;
  for (const BufferView& g : grads) {
    const size_t t = core::stats_tiles(g.count);
    out.sumsq = out.sumsq + core::fold_tile_sums(sums_.data() + off, t);
    off += t;
  }
  out.sumsq = core::canonical_nan(out.sumsq);
  return out;
}

uint64_t CpuBackend::tile_sums(std::span<const BufferView> grads, double* out) {
  std::vector<size_t> tiles(grads.size());
  for (size_t c = 0; c < grads.size(); ++c) {
    const BufferView& g = grads[c];
    if (g.dtype == DType::kNone || (g.count > 0 && g.data == nullptr))
      throw core::InputError("cpu grad_stats, grad " + std::to_string(c) + ": needs fp32/bf16/fp16 data");
    if (reinterpret_cast<uintptr_t>(g.data) % core::dtype_bytes(g.dtype) != 0)
      throw core::InputError("cpu grad_stats, grad " + std::to_string(c) + ": pointer not aligned to its dtype");
    tiles[c] = core::stats_tiles(g.count);
  }
  std::atomic<uint64_t> bad{0};
  for_tiles(tiles, true,
            [&](const Work& w) { bad += k_.stats(grads[w.chunk], w.tile_begin, w.tile_end, out + w.sum_offset); });
  return bad.load();
}

void CpuBackend::first_touch(std::span<const OptimChunk> chunks) {
  std::vector<size_t> tiles(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) tiles[c] = core::stats_tiles(chunks[c].param.count);
  for_tiles(tiles, false, [&](const Work& w) {  // the static split: each tile's owner touches it
    const OptimChunk& c = chunks[w.chunk];
    const size_t b = w.tile_begin * core::kStatsTile;
    const size_t e = std::min(c.param.count, w.tile_end * core::kStatsTile);
    for (const BufferView* v : {&c.param, &c.state1, &c.state2, &c.grad, &c.param_copy}) {
      if (v->data == nullptr || v->dtype == DType::kNone) continue;
      const size_t eb = core::dtype_bytes(v->dtype);
      std::memset(static_cast<char*>(v->data) + b * eb, 0, (e - b) * eb);
    }
  });
}

}  // namespace tf::backend::cpu
