// The discrete-event core: time order, FIFO at equal times, run_until, errors, and the inline callable.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sim/event_queue.h"

using tf::sim::Callback;
using tf::sim::ceil_ns;
using tf::sim::EventQueue;
using tf::sim::InlineFunction;
using tf::sim::TimeNs;

namespace {

// Runs fn and returns the message of the std::invalid_argument it throws ("" if none).
template <class F>
std::string invalid_argument_message(F&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(EventQueue, StartsEmptyAtTimeZero) {
  EventQueue q;
  EXPECT_EQ(q.now(), 0);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pending(), 0u);
  EXPECT_EQ(q.events_processed(), 0u);
  EXPECT_FALSE(q.next_time().has_value());
  EXPECT_EQ(q.run(), 0u);
  EXPECT_FALSE(q.step());
}

TEST(EventQueue, RunsInTimeOrderAndAdvancesTheClock) {
  EventQueue q;
  std::vector<std::pair<char, TimeNs>> seen;
  q.schedule_at(300, [&] { seen.emplace_back('c', q.now()); });
  q.schedule_at(100, [&] { seen.emplace_back('a', q.now()); });
  q.schedule_at(200, [&] { seen.emplace_back('b', q.now()); });
  EXPECT_EQ(q.next_time(), 100);
  EXPECT_EQ(q.run(), 3u);
  const std::vector<std::pair<char, TimeNs>> want = {{'a', 100}, {'b', 200}, {'c', 300}};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(q.now(), 300);  // left at the last event's time
  EXPECT_EQ(q.events_processed(), 3u);
}

TEST(EventQueue, FifoAtEqualTimes) {
  EventQueue q;
  std::string order;
  // Five events at t = 10 scheduled in the order 0..4, one earlier at t = 5 scheduled last.
  for (char c = '0'; c < '5'; ++c) q.schedule_at(10, [&order, c] { order += c; });
  q.schedule_at(5, [&] {
    order += 'e';
    // Scheduled at 5 for 10: runs after the five already queued for 10, in this order.
    q.schedule_at(10, [&] { order += 'x'; });
    q.schedule_at(10, [&] { order += 'y'; });
  });
  q.run();
  EXPECT_EQ(order, "e01234xy");
}

TEST(EventQueue, EventsScheduledAtNowRunAfterThoseAlreadyQueuedForNow) {
  EventQueue q;
  std::string order;
  q.schedule_at(7, [&] {
    order += 'a';
    q.schedule_after(0, [&] { order += 'c'; });  // same time, but queued after 'b'
  });
  q.schedule_at(7, [&] { order += 'b'; });
  q.run();
  EXPECT_EQ(order, "abc");
  EXPECT_EQ(q.now(), 7);
}

TEST(EventQueue, ScheduleAfterIsRelativeToNow) {
  EventQueue q;
  std::vector<TimeNs> at;
  q.schedule_at(1000, [&] {
    at.push_back(q.now());
    q.schedule_after(250, [&] { at.push_back(q.now()); });  // 1000 + 250
  });
  q.run();
  EXPECT_EQ(at, (std::vector<TimeNs>{1000, 1250}));
}

TEST(EventQueue, RunUntilIncludesEventsAtTheLimitAndSetsTheClock) {
  EventQueue q;
  std::vector<TimeNs> at;
  for (TimeNs t : {10, 20, 30, 40}) q.schedule_at(t, [&] { at.push_back(q.now()); });
  EXPECT_EQ(q.run_until(30), 3u);  // 10, 20 and 30 (at the limit) run; 40 does not
  EXPECT_EQ(at, (std::vector<TimeNs>{10, 20, 30}));
  EXPECT_EQ(q.now(), 30);
  EXPECT_EQ(q.run_until(35), 0u);
  EXPECT_EQ(q.now(), 35);  // the clock moves to the limit even with no event there
  EXPECT_EQ(q.pending(), 1u);
  EXPECT_EQ(q.run(), 1u);
  EXPECT_EQ(q.now(), 40);
  EXPECT_EQ(q.events_processed(), 4u);
}

TEST(EventQueue, RunUntilRunsEventsScheduledMeanwhileUpToTheLimit) {
  EventQueue q;
  int chain = 0;
  std::function<void()> tick = [&] {
    ++chain;
    q.schedule_after(10, [&] { tick(); });
  };
  q.schedule_at(0, [&] { tick(); });
  q.run_until(100);  // ticks at 0, 10, ..., 100
  EXPECT_EQ(chain, 11);
  EXPECT_EQ(q.pending(), 1u);  // the tick at 110
}

TEST(EventQueue, StepRunsOneEvent) {
  EventQueue q;
  int n = 0;
  q.schedule_at(3, [&] { ++n; });
  q.schedule_at(4, [&] { ++n; });
  EXPECT_TRUE(q.step());
  EXPECT_EQ(n, 1);
  EXPECT_EQ(q.now(), 3);
  EXPECT_TRUE(q.step());
  EXPECT_FALSE(q.step());
  EXPECT_EQ(q.events_processed(), 2u);
}

TEST(EventQueue, NegativeOrPastTimesAreErrors) {
  EventQueue q;
  EXPECT_NE(invalid_argument_message([&] { q.schedule_at(-1, [] {}); }).find("-1 ns is negative"), std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { q.schedule_after(-5, [] {}); }).find("delay -5 ns is negative"),
            std::string::npos);
  q.schedule_at(100, [] {});
  q.run();
  const std::string past = invalid_argument_message([&] { q.schedule_at(99, [] {}); });
  EXPECT_NE(past.find("99 ns is in the past (now is 100 ns)"), std::string::npos) << past;
  EXPECT_NE(invalid_argument_message([&] { q.run_until(50); }).find("in the past"), std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { q.schedule_at(200, Callback{}); }).find("empty callback"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { q.schedule_after(INT64_MAX, [] {}); }).find("overflows"), std::string::npos);
  EXPECT_TRUE(q.empty());     // nothing was queued by the failed calls
  q.schedule_at(100, [] {});  // now itself is allowed
  EXPECT_EQ(q.run(), 1u);
}

TEST(EventQueue, AnExceptionFromACallbackPropagatesAndTheQueueStaysUsable) {
  EventQueue q;
  int after = 0;
  q.schedule_at(1, [] { throw std::runtime_error("boom"); });
  q.schedule_at(2, [&] { ++after; });
  EXPECT_THROW(q.run(), std::runtime_error);
  EXPECT_EQ(q.now(), 1);
  EXPECT_EQ(q.events_processed(), 1u);
  EXPECT_EQ(q.run(), 1u);
  EXPECT_EQ(after, 1);
}

TEST(EventQueue, RunIsNotReentrant) {
  EventQueue q;
  q.schedule_at(1, [&] { q.run(); });
  EXPECT_THROW(q.run(), std::logic_error);
}

TEST(EventQueue, ManyRandomEventsComeOutSortedByTimeThenScheduleOrder) {
  EventQueue q;
  q.reserve(64);
  std::mt19937_64 rng(12345);
  struct Seen {
    TimeNs t;
    int id;
  };
  std::vector<Seen> seen;
  constexpr int kEvents = 20000;
  for (int i = 0; i < kEvents; ++i) {
    const TimeNs t = static_cast<TimeNs>(rng() % 500);  // many ties
    q.schedule_at(t, [&seen, &q, i] { seen.push_back({q.now(), i}); });
  }
  EXPECT_EQ(q.run(), static_cast<uint64_t>(kEvents));
  ASSERT_EQ(seen.size(), static_cast<size_t>(kEvents));
  for (size_t i = 1; i < seen.size(); ++i) {
    ASSERT_LE(seen[i - 1].t, seen[i].t);
    if (seen[i - 1].t == seen[i].t) {
      ASSERT_LT(seen[i - 1].id, seen[i].id);  // FIFO among ties
    }
  }
}

TEST(EventQueue, CallbackSlotsAreReused) {
  // A chain of events, each scheduling the next, keeps one slot in use: the table does not grow.
  EventQueue q;
  int left = 1000;
  std::function<void()> next = [&] {
    if (--left > 0) q.schedule_after(1, [&] { next(); });
  };
  q.schedule_at(0, [&] { next(); });
  q.run();
  EXPECT_EQ(left, 0);
  EXPECT_EQ(q.now(), 999);
  EXPECT_EQ(q.events_processed(), 1000u);
}

TEST(CeilNs, RoundsUpForgivingFloatingPointNoise) {
  EXPECT_EQ(ceil_ns(0.0), 0);
  EXPECT_EQ(ceil_ns(1.0), 1);
  EXPECT_EQ(ceil_ns(1.2), 2);
  // 2 GiB at 55 GB/s = 2147483648 / 55 ns = 39045157.236 ns -> 39045158.
  EXPECT_EQ(ceil_ns(2147483648.0 / 55.0), 39045158);
  EXPECT_EQ(ceil_ns(1000000.0000001), 1000000);  // noise below 1e-3 ns is forgiven
  EXPECT_EQ(ceil_ns(1000000.01), 1000001);
  EXPECT_EQ(ceil_ns(-1e-9), 0);
  EXPECT_THROW(ceil_ns(-1.0), std::invalid_argument);
  EXPECT_THROW(ceil_ns(std::nan("")), std::invalid_argument);
  EXPECT_THROW(ceil_ns(1e19), std::invalid_argument);
}

TEST(InlineFunction, SmallCapturesLargeCapturesAndMoveOnlyCaptures) {
  int hits = 0;
  InlineFunction<void()> small = [&hits] { ++hits; };
  small();
  struct Big {
    char pad[200];
  };
  Big big{};
  big.pad[199] = 7;
  InlineFunction<int()> large = [big] { return int(big.pad[199]); };  // over 48 bytes: on the heap
  EXPECT_EQ(large(), 7);
  auto owned = std::make_unique<int>(41);
  InlineFunction<int(int)> move_only = [p = std::move(owned)](int x) { return *p + x; };
  InlineFunction<int(int)> moved = std::move(move_only);
  EXPECT_FALSE(static_cast<bool>(move_only));
  EXPECT_EQ(moved(1), 42);
  InlineFunction<int()> moved_large = std::move(large);
  EXPECT_EQ(moved_large(), 7);
  EXPECT_EQ(hits, 1);
}

TEST(InlineFunction, DestroysItsCaptureExactlyOnce) {
  auto counter = std::make_shared<int>(0);
  {
    Callback a = [counter] {};
    EXPECT_EQ(counter.use_count(), 2);
    Callback b = std::move(a);
    EXPECT_EQ(counter.use_count(), 2);
    b = Callback{};
    EXPECT_EQ(counter.use_count(), 1);
    Callback c = [counter] {};
    EXPECT_EQ(counter.use_count(), 2);
  }
  EXPECT_EQ(counter.use_count(), 1);
}

TEST(InlineFunction, EmptyOnesThrowWhenCalled) {
  Callback empty;
  EXPECT_FALSE(static_cast<bool>(empty));
  EXPECT_THROW(empty(), std::bad_function_call);
  void (*null_fn)() = nullptr;
  Callback from_null = null_fn;
  EXPECT_FALSE(static_cast<bool>(from_null));
}
