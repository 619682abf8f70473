// An AND barrier for ranks that are threads of one process (the functional simulator's ranks, tests):
// core::RankBarrier's contract (core/io_hooks.h; core::CheckpointBarrier is its name for checkpoints).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/io_hooks.h"

namespace tf::core {

// A reusable barrier for `n` threads: each arrives with its own `ok`, and all return the AND of the
// round's flags once the n-th has arrived.
class AndBarrier {
 public:
  explicit AndBarrier(int n) : n_(n) {}
  AndBarrier(const AndBarrier&) = delete;
  AndBarrier& operator=(const AndBarrier&) = delete;

  bool arrive(bool ok) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    all_ok_ = all_ok_ && ok;
    if (++arrived_ == n_) {
      result_ = all_ok_;
      arrived_ = 0;
      all_ok_ = true;
      ++gen_;
      cv_.notify_all();
      return result_;
    }
    cv_.wait(lock, [&] { return gen_ != gen; });
    return result_;
  }
  // As a callback (a checkpoint's, a shared output file's); the barrier must outlive it.
  RankBarrier callback() {
    return [this](bool ok) { return arrive(ok); };
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
  bool all_ok_ = true;
  bool result_ = true;
  uint64_t gen_ = 0;
};

}  // namespace tf::core
