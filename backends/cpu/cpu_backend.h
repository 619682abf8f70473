// The CPU optimizer backend: SIMD kernels (AVX-512 / AVX2 / scalar, chosen at run time) on a
// persistent thread pool, over host memory.
#pragma once

#include <memory>
#include <string>
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
// The ISA's exact path (backends/cpu/exact_ops.h: the rules in double, taken by vectors near the
// subnormals) against its fp32 instructions on n operand triples, bit for bit: the mismatches, the first
// in *first. Throws core::InputError for an ISA that is not available or has no exact path (scalar).
uint64_t check_exact_path(Isa isa, uint64_t n, uint64_t seed, std::string* first);

struct CpuOptions {
  // The leading knobs in order (the remaining members take their defaults).
  CpuOptions(size_t threads_ = 0, bool pin_threads_ = false, int isa_ = -1, size_t min_tiles_per_thread_ = 4,
             KernelTuning tuning_ = {})
      : threads(threads_),
        pin_threads(pin_threads_),
        isa(isa_),
        min_tiles_per_thread(min_tiles_per_thread_),
        tuning(tuning_) {}
  size_t threads = 0;               // 0: one per CPU of `cpus`
  bool pin_threads = false;         // bind each worker to one CPU
  int isa = -1;                     // -1: select_isa(); else an Isa value
  size_t min_tiles_per_thread = 4;  // small chunks use fewer threads (8192 elements each at least)
  KernelTuning tuning;              // memory-access knobs (bits do not depend on them)
  std::vector<int> cpus;            // the workers' CPUs (a rank's CpuShare::worker_cpus); empty: the affinity mask
  // Work stealing: each worker updates its own static part of a call in blocks of this many tiles, then
  // takes blocks from the parts of workers not yet done, so one preempted or slow core no longer holds
  // the whole pass back (the bits do not depend on who updates a tile). 0: the static split alone.
  size_t steal_block_tiles = kCpuTuning.steal_block_tiles;
  uint32_t pool_spin_us = kCpuTuning.pool_spin_us;  // ThreadPool's spin before sleeping (cpu_tuning.h)
  uint32_t pool_nice = kCpuTuning.pool_nice;        // the workers' nice levels below the process (cpu_tuning.h)
  bool pool_idle = kCpuTuning.pool_idle;            // the workers in the idle scheduling class (cpu_tuning.h)
  bool huge_pages = kCpuTuning.huge_pages;          // allocate(): 2 MiB pages requested (HostRegion)
};

// The tuning knobs of `o` (KernelTuning, steal_block_tiles, pool_spin_us, huge_pages) from a spec of
// comma-separated key=value pairs, any subset, "default" for none: prefetch=ELEMS level=0|1 unroll=1|2|4
// interleave=1|2 nt=0|1 (streamed copy) block=TILES spin=US nice=0..19 idle=0|1 huge=0|1. Throws core::InputError
// naming `option`, the pair and the keys.
void apply_tuning_spec(CpuOptions& o, std::string_view spec, const std::string& option);
// KernelTuning::exact_path as the kernels will run it: 0 or 1, the auto setting (2) decided by the ISA's
// probe (once per process and ISA; CpuBackend resolves its own the same way).
uint32_t resolved_exact_path(const CpuOptions& o);
// Every knob of `o` as such a spec (the keys in the order above).
std::string tuning_spec(const CpuOptions& o);

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
  // The optimizer's memory traffic over the chunks without its arithmetic (kernels.h StreamTilesFn),
  // split over the workers as step() splits them: the read-modify-write bound a pass is held to.
  // Master and states change (p += g ...): run it on scratch or refill afterwards.
  void stream_pass(std::span<const OptimChunk> chunks);
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
  // Splits the global tile sequence over the workers (the static split; with `steal`, in blocks of
  // steal_block_tiles that idle workers take over) and calls fn(work) for every run of tiles, each tile
  // exactly once, from the worker threads.
  template <class Fn>
  void for_tiles(const std::vector<size_t>& tiles_per_chunk, bool steal, Fn&& fn);

  Capabilities caps_;
  Isa isa_;
  KernelTable k_;
  ThreadPool pool_;
  CpuOptions opt_;
  std::vector<double> sums_;  // tile sums scratch, reused
};

}  // namespace tf::backend::cpu
