// The persistent pool: every part runs once, static split, exceptions propagate.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <stdexcept>
#include <vector>

#include "backends/cpu/thread_pool.h"

using tf::backend::cpu::ThreadPool;

TEST(ThreadPool, RunsEveryPartOnceManyTimes) {
  ThreadPool pool(4);
  for (int round = 0; round < 200; ++round) {
    const size_t parts = 1 + size_t(round) % 4;
    std::vector<std::atomic<int>> hits(parts);
    pool.run(parts, [&](size_t w) { hits[w]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, SplitCoversRangeContiguously) {
  for (size_t n : {0u, 1u, 7u, 100u})
    for (size_t parts = 1; parts <= 5; ++parts) {
      size_t prev = 0;
      for (size_t w = 0; w < parts; ++w) {
        size_t b, e;
        ThreadPool::split(n, parts, w, b, e);
        EXPECT_EQ(b, prev);
        prev = e;
      }
      EXPECT_EQ(prev, n);
    }
}

TEST(ThreadPool, PropagatesWorkerException) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.run(3,
                        [](size_t w) {
                          if (w == 2) throw std::runtime_error("boom");
                        }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.run(3, [&](size_t) { n++; });  // still usable
  EXPECT_EQ(n.load(), 3);
}

// Workers that spin between calls (the tuning's pool_spin_us) run every part once, see every call's
// job, propagate exceptions and shut down while spinning.
TEST(ThreadPool, SpinningWorkersRunEveryPartOnce) {
  ThreadPool pool(3, false, {}, 200);
  EXPECT_EQ(pool.spin_us(), 200u);
  for (int round = 0; round < 500; ++round) {
    const size_t parts = 1 + size_t(round) % 3;
    std::vector<std::atomic<int>> hits(parts);
    pool.run(parts, [&](size_t w) { hits[w] += round + 1; });
    for (auto& h : hits) ASSERT_EQ(h.load(), round + 1);
  }
  EXPECT_THROW(pool.run(3,
                        [](size_t w) {
                          if (w == 1) throw std::runtime_error("boom");
                        }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.run(3, [&](size_t) { n++; });
  EXPECT_EQ(n.load(), 3);
}

// nice: every worker runs that many nice levels below the caller (the issuing threads keep their
// priority); it never passes 19.
TEST(ThreadPool, WorkersRaiseTheirNiceValue) {
  errno = 0;
  const int base = getpriority(PRIO_PROCESS, id_t(gettid()));
  ASSERT_EQ(errno, 0);
  for (uint32_t nice : {0u, 3u, 40u}) {
    ThreadPool pool(3, false, {}, 0, nice);
    EXPECT_EQ(pool.nice(), std::min(nice, 19u));
    std::vector<int> seen(3, -100);
    pool.run(3, [&](size_t w) { seen[w] = getpriority(PRIO_PROCESS, id_t(gettid())); });
    for (int v : seen) EXPECT_EQ(v, std::min(19, base + int(std::min(nice, 19u)))) << "nice " << nice;
  }
  EXPECT_EQ(getpriority(PRIO_PROCESS, id_t(gettid())), base);  // the caller's own is untouched
}

// idle: every worker runs in the idle scheduling class (a thread of the normal class that wakes takes its
// core at once), on top of its nice value; without it the workers stay in the caller's class. The caller
// (an issuing thread) keeps its own.
TEST(ThreadPool, IdleWorkersRunInTheIdleClassAndTheCallerDoesNot) {
  const int base = sched_getscheduler(0);
  ASSERT_GE(base, 0);
  ASSERT_NE(base, SCHED_IDLE) << "the test runs in the idle class already";
  for (bool idle : {false, true}) {
    ThreadPool pool(3, false, {}, 0, 2, idle);
    EXPECT_EQ(pool.idle(), idle);
    std::vector<int> policy(3, -1);
    pool.run(3, [&](size_t w) { policy[w] = sched_getscheduler(0); });
    for (int p : policy) EXPECT_EQ(p, idle ? SCHED_IDLE : base) << "idle " << idle;
  }
  EXPECT_EQ(sched_getscheduler(0), base);
}
