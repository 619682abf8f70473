// A persistent pool of host threads with static partitioning (the same split every call, so a
// thread touches the same memory each step: NUMA first-touch friendly and deterministic).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tf::backend::cpu {

class ThreadPool {
 public:
  // `cpus`: the CPUs the workers may use (a rank's share, host_topology.h: the first CPU of each core,
  // then their SMT siblings); empty: this process's affinity mask in that order. threads == 0: one per
  // CPU of that list. pin: bind worker i to cpus[i % cpus.size()]. All work runs on the pool's own
  // threads; the caller is never pinned (threads it creates later inherit its affinity, so pinning it
  // would squeeze them onto one CPU). spin_us: after a part, a worker polls this long for the next call
  // (yielding its core now and then) before it sleeps (0: sleep at once): a call that finds its workers
  // polling starts them without a futex wake-up each. run()'s caller always sleeps. nice: each worker
  // raises its own nice value by this much (at most 19) when it starts (core::lower_thread_priority);
  // idle: each worker then moves to the idle scheduling class (core::run_thread_when_idle).
  explicit ThreadPool(size_t threads = 0, bool pin = false, std::vector<int> cpus = {}, uint32_t spin_us = 0,
                      uint32_t nice = 0, bool idle = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }
  // The CPUs worker i is bound to (cpus()[i % cpus().size()]) when pinned; the CPUs it may use otherwise.
  const std::vector<int>& cpus() const { return cpus_; }
  bool pinned() const { return pinned_; }
  uint32_t spin_us() const { return spin_us_; }
  uint32_t nice() const { return nice_; }
  bool idle() const { return idle_; }

  // Runs fn(w) for w in [0, parts) on workers 0..parts-1 (parts <= size()) and waits for all.
  // Exceptions from any part are rethrown (the first one).
  void run(size_t parts, const std::function<void(size_t)>& fn);

  // The static split of [0, n) into `parts` contiguous ranges: part w gets [begin, end).
  static void split(size_t n, size_t parts, size_t w, size_t& begin, size_t& end) {
    begin = n * w / parts;
    end = n * (w + 1) / parts;
  }

 private:
  void worker(size_t index);
  // Polls `ready` for up to spin_us_; true when it held in time.
  template <class Ready>
  bool spin(Ready&& ready) const;

  std::vector<int> cpus_;
  bool pinned_ = false;
  uint32_t spin_us_ = 0;
  uint32_t nice_ = 0;
  bool idle_ = false;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t parts_ = 0;
  std::atomic<uint64_t> generation_{0};  // written under mu_; polled without it
  std::atomic<size_t> pending_{0};       // parts not yet done
  bool stop_ = false;
  std::exception_ptr error_;
};

// Number of CPUs this process may run on.
size_t available_cpus();

}  // namespace tf::backend::cpu
