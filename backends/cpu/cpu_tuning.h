// The CPU optimizer's tuning defaults, in one place: the lead sets them from the device sweep
// (bench/device/cpukern-h100.sh prints the best variant per rank count). None of them changes a bit of
// the results (docs/ARCHITECTURE.md, "Numerics"); they change memory traffic and synchronisation only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tf::backend::cpu {

struct CpuTuningDefaults {
  // Software prefetch distance in elements on every stream (0: off). H100 host, 2026-11-22: 1024 gave
  // +10-20% over none (bench/results/2026-11-24-cpu-optimizer-h100: 2048 within noise of 1024).
  uint32_t prefetch_elems = 1024;
  // Where the prefetches put the lines: 0 = L1 (prefetcht0, and prefetchw for the streams written back),
  // 1 = L2 only (prefetcht1 on every stream: the L1 fill buffers stay free for the demand loads).
  uint32_t prefetch_level = 0;
  // Vectors per stream loaded before any is computed (1, 2 or 4): more independent loads in flight.
  uint32_t unroll = 1;
  // Tiles updated in lockstep (1 or 2): 2 walks the first and second half of a worker's tiles at once,
  // twice the streams (and DRAM pages) in flight per core. Only with unroll 1.
  uint32_t interleave = 1;
  // Non-temporal stores for the write-only bf16/fp16 copy (no read for ownership; the copy is only read
  // later by the H2D DMA). H100 host, 2026-11-24 (bench/results/2026-11-24-cpukern-h100): with a 50 us
  // spin, the best variant at k = 1 and 2 ranks (1.14x / 1.06x the old defaults in the sweep) and 1.25x
  // in a real engine step (4.66 against 3.73 Gparam/s); alone within noise.
  bool stream_copy = true;
  // Non-temporal stores for an out-of-place update's master and states (a speculative update into a
  // spare slot, which it only writes): without them each written line is read first.
  bool stream_out_of_place = true;
  // Work stealing in blocks of this many 2048-element tiles (0: the static split alone).
  size_t steal_block_tiles = 16;
  // The pool's workers spin this long (microseconds) for the next call before they sleep (0: sleep at
  // once: a condition variable, the pool before these knobs). The caller never spins: it would take a
  // worker's core (backends/cpu/thread_pool.cpp). 50 with stream_copy: see stream_copy.
  uint32_t pool_spin_us = 50;
  // The pool's workers run this many nice levels below their process (0-19; Linux nice values are per
  // thread). The workers fill every core of a rank's share; the rank's issuing threads (the engine's, one
  // per queue) then wait for a core behind them, and the GPU idles while its next kernels wait to be
  // issued. 10 lets the scheduler run an issuer as it wakes; the workers keep every cycle the issuers
  // leave. H100 host, OPT-1.3B with every speculation holding, 3 interleaved rounds
  // (bench/results/2026-11-25-threads-h100): ratio 0.4 0.887x -> 0.937x ratio 0, ratio 1 22.3k -> 23.2k
  // tokens/s against 0; 15 workers without it: 0.940x and 22.1k.
  uint32_t pool_nice = 10;
  // The pool's workers run in the idle scheduling class (Linux SCHED_IDLE) on top of pool_nice: a
  // thread of the normal class that wakes on a worker's core (an issuer after its CUDA wait, the engine's
  // thread of the next step) takes the core at once. At nice 10 it still waited for the worker's slice:
  // on two H200s (bench/results/2026-11-28-h200x2-pages, call J) the next step's first op started 2-14 ms
  // after the step's last GPU op whenever the CPU pass ran across the step boundary (0.2 ms when it did
  // not); 1.7 ms in the idle class, 1.1-1.3 on one H200 (bench/results/2026-11-28-h200x2-sched-idle).
  bool pool_idle = true;
  // madvise(MADV_HUGEPAGE) on the host regions (2 MiB pages where THP is "madvise").
  bool huge_pages = true;
  // Vectors holding values near the subnormal range (states that decayed, tiny gradients) take the update
  // rules in double, rounded once per operation to fp32 (backends/cpu/exact_ops.h: the same bits): 0 never,
  // 1 always, 2 where this CPU's probe finds it faster than the fp32 instructions' subnormal handling (once
  // per process and ISA, ~1 ms: CpuBackend). On the H200 host's Xeon each fp32 instruction with a
  // subnormal operand or result takes a ~62 ns assist and the pass ran 5-6x slower on such data; an AMD
  // EPYC handles them in 1.1-2.3x and its double path is the slower one.
  uint32_t exact_path = 2;
};

inline constexpr CpuTuningDefaults kCpuTuning{};

}  // namespace tf::backend::cpu
