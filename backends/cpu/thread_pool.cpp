// Persistent thread pool with static partitioning.
#include "backends/cpu/thread_pool.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "backends/cpu/host_topology.h"
#include "core/thread_priority.h"

namespace tf::backend::cpu {

namespace {
void pin_to(std::thread::native_handle_type h, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(h, sizeof set, &set);  // best effort
}
}  // namespace

size_t available_cpus() { return affinity_cpus().size(); }

ThreadPool::ThreadPool(size_t threads, bool pin, std::vector<int> cpus, uint32_t spin_us, uint32_t nice, bool idle)
    : cpus_(std::move(cpus)), pinned_(pin), spin_us_(spin_us), nice_(std::min(nice, 19u)), idle_(idle) {
  if (cpus_.empty()) cpus_ = rank_cpu_share(host_topology(), 0, 1).worker_cpus;
  if (threads == 0) threads = cpus_.size();
  for (size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([this, i] { worker(i); });
    if (pin) pin_to(workers_.back().native_handle(), cpus_[i % cpus_.size()]);
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);  // pollers see it and take the mutex
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

// Polls with pause, and yields the core now and then: the pool's caller (the rank's issuing thread)
// shares the rank's cores and must get one to issue the next call.
template <class Ready>
bool ThreadPool::spin(Ready&& ready) const {
  if (spin_us_ == 0) return ready();
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
  for (unsigned i = 0;; ++i) {
    if (ready()) return true;
    _mm_pause();
    if ((i & 63u) == 63u) {
      if (std::chrono::steady_clock::now() >= until) return ready();
      sched_yield();
    }
  }
}

void ThreadPool::run(size_t parts, const std::function<void(size_t)>& fn) {
  if (parts == 0) return;
  if (parts > size()) parts = size();
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    parts_ = parts;
    pending_.store(parts, std::memory_order_relaxed);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  std::unique_lock<std::mutex> lk(mu_);  // the caller sleeps: a spinning caller would take a worker's core
  done_cv_.wait(lk, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker(size_t index) {
  core::name_this_thread(("tf-cpu" + std::to_string(index)).c_str());
  core::lower_thread_priority(int(nice_));
  if (idle_) (void)core::run_thread_when_idle();
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t)>* job;
    size_t parts;
    {
      (void)spin([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lk(mu_);
      start_cv_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
      parts = parts_;
    }
    if (index >= parts) continue;  // not needed for this job
    std::exception_ptr err;
    try {
      (*job)(index);
    } catch (...) {
      err = std::current_exception();
    }
    if (err) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = err;
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(mu_);  // a run() that went to sleep cannot miss this
      done_cv_.notify_one();
    }
  }
}

}  // namespace tf::backend::cpu
