// Persistent thread pool with static partitioning.
#include "backends/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <exception>

#include "backends/cpu/host_topology.h"

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

ThreadPool::ThreadPool(size_t threads, bool pin, std::vector<int> cpus) : cpus_(std::move(cpus)), pinned_(pin) {
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
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(size_t parts, const std::function<void(size_t)>& fn) {
  if (parts == 0) return;
  if (parts > size()) parts = size();
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    parts_ = parts;
    pending_ = parts;
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [this] { return pending_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker(size_t index) {
  size_t seen = 0;
  for (;;) {
    const std::function<void(size_t)>* job;
    size_t parts;
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
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
    std::lock_guard<std::mutex> lk(mu_);
    if (err && !error_) error_ = err;
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace tf::backend::cpu
