// The CPU optimizer backend: SIMD kernels (AVX-512 / AVX2 / scalar, chosen at run time) on a
// persistent thread pool, over host memory.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"

namespace tf::backend::cpu {

std::string_view isa_name(Isa isa);
// "scalar" | "avx2" | "avx512". Throws core::InputError naming the accepted values.
Isa parse_isa(std::string_view s);
// Compiled in and supported by this CPU (cpuid).
bool isa_available(Isa isa);
// The best available ISA, unless TWINFLOW_SIMD forces one (an error if that one is not available).
Isa select_isa();

struct CpuOptions {
  size_t threads = 0;               // 0: all CPUs of the affinity mask
  bool pin_threads = false;         // bind each worker to one CPU
  int isa = -1;                     // -1: select_isa(); else an Isa value
  size_t min_tiles_per_thread = 4;  // small chunks use fewer threads (8192 elements each at least)
  KernelTuning tuning;              // memory-access knobs (bits do not depend on them)
};

// One call at a time per backend object (the pool and the tile-sum scratch are shared by its calls);
// use one CpuBackend per issuing thread.
class CpuBackend final : public OptimizerBackend {
 public:
  explicit CpuBackend(const CpuOptions& opt = {});
  const Capabilities& caps() const override { return caps_; }
  Isa isa() const { return isa_; }
  size_t threads() const { return pool_.size(); }
  // The backend's own workers (for measurements that must run under identical conditions).
  ThreadPool& pool() { return pool_; }
  const KernelTuning& tuning() const { return opt_.tuning; }

  std::unique_ptr<Buffer> allocate(size_t bytes) override;
  void upload(Buffer& dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, Buffer& src, size_t bytes) override;

  GradStats step(OptimizerKind k, std::span<const OptimChunk> chunks, const StepScalars& s) override;
  GradStats grad_stats(std::span<const BufferView> grads) override;
  // The canonical tile sums (core/optim/grad_stats.h) of each gradient, unfolded: grad c's tiles go
  // to out[o_c .. o_c + stats_tiles(count_c)), o_c the tiles of the grads before it. Returns the
  // non-finite count. For engines that fold tiles across chunks and ranks themselves.
  uint64_t tile_sums(std::span<const BufferView> grads, double* out);

  // Writes zeros over every buffer of the chunks with the same thread split as step(), so that each
  // page is first touched (and placed) by the thread that will update it.
  void first_touch(std::span<const OptimChunk> chunks);

 private:
  struct Work {  // a run of tiles of one chunk
    size_t chunk, tile_begin, tile_end, sum_offset;
  };
  // Splits the global tile sequence over parts; calls fn(part, work-items of that part).
  template <class Fn>
  void for_tiles(const std::vector<size_t>& tiles_per_chunk, Fn&& fn);

  Capabilities caps_;
  Isa isa_;
  KernelTable k_;
  ThreadPool pool_;
  CpuOptions opt_;
  std::vector<double> sums_;  // tile sums scratch, reused
};

}  // namespace tf::backend::cpu
