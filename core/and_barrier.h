// An AND barrier for ranks that are threads of one process (the functional simulator's ranks, tests):
// the contract of core::CheckpointBarrier.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

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
  // As a callback (core::CheckpointBarrier); the barrier must outlive it.
  std::function<bool(bool)> callback() {
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
