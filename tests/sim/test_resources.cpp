// Simulated resources: events, FIFO ops with dependencies, PCIe processor sharing and the CPU slowdown under DMA.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sim/cost_model.h"
#include "sim/event_queue.h"
#include "sim/resources.h"

using tf::sim::BusyInterval;
using tf::sim::Callback;
using tf::sim::CpuPool;
using tf::sim::Direction;
using tf::sim::DmaSlowdown;
using tf::sim::Event;
using tf::sim::EventQueue;
using tf::sim::HostCpuPool;
using tf::sim::PcieParams;
using tf::sim::Resource;
using tf::sim::SharedLink;
using tf::sim::SlowedServer;
using tf::sim::TimeNs;
using tf::sim::Work;

namespace {

// Our H100 host's PCIe (scenarios/hardware/MEASUREMENTS.md): 55 GB/s per direction alone, 83 GB/s both at once (41.5
// each).
constexpr PcieParams kH100Pcie{55.0, 55.0, 83.0, 0.0};

std::vector<std::pair<TimeNs, TimeNs>> spans(const Resource& r) {
  std::vector<std::pair<TimeNs, TimeNs>> out;
  for (const BusyInterval& b : r.intervals()) out.emplace_back(b.start_ns, b.end_ns);
  return out;
}

using Spans = std::vector<std::pair<TimeNs, TimeNs>>;

}  // namespace

// ---- Event ----------------------------------------------------------------------------------------

TEST(Event, FiresOnceAndRunsWaitersInOrder) {
  Event e = Event::create();
  EXPECT_TRUE(e.valid());
  EXPECT_FALSE(e.fired());
  EXPECT_THROW((void)e.time(), std::logic_error);
  std::string order;
  e.on_fire([&] { order += 'a'; });
  e.on_fire([&] { order += 'b'; });
  Event alias = e;  // a handle: both name the same event
  alias.fire(42);
  EXPECT_EQ(order, "ab");
  EXPECT_TRUE(e.fired());
  EXPECT_EQ(e.time(), 42);
  e.on_fire([&] { order += 'c'; });  // already fired: runs at once
  EXPECT_EQ(order, "abc");
  EXPECT_THROW(e.fire(50), std::logic_error);
  EXPECT_EQ(Event::fired_at(7).time(), 7);
  Event empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW((void)empty.fired(), std::logic_error);
}

// ---- Resource: FIFO, dependencies, completion order -------------------------------------------------

TEST(Resource, RunsOpsOneAtATimeInSubmissionOrder) {
  EventQueue q;
  Resource compute(q, "rank0.compute");
  Event a = compute.submit("a", 100);
  Event b = compute.submit("b", 50);
  Event c = compute.submit("c", 25);
  EXPECT_TRUE(compute.busy());
  EXPECT_EQ(compute.outstanding(), 3u);
  q.run();
  // a: [0, 100); b: [100, 150); c: [150, 175).
  EXPECT_EQ(spans(compute), (Spans{{0, 100}, {100, 150}, {150, 175}}));
  EXPECT_EQ(a.time(), 100);
  EXPECT_EQ(b.time(), 150);
  EXPECT_EQ(c.time(), 175);
  EXPECT_EQ(compute.intervals()[1].label, "b");
  EXPECT_EQ(compute.busy_ns(), 175);
  EXPECT_EQ(compute.ops_completed(), 3u);
  EXPECT_FALSE(compute.busy());
}

TEST(Resource, AnOpWaitsForItsDependenciesAndBlocksTheOpsBehindIt) {
  EventQueue q;
  Resource compute(q, "compute");
  Resource comm(q, "comm");
  Event fwd = compute.submit("fwd", 100);           // [0, 100)
  Event ag = comm.submit("ag", 50, {fwd});          // waits for fwd: [100, 150)
  Event rs = comm.submit("rs", 10);                 // no deps, but behind ag on a FIFO: [150, 160)
  Event bwd = compute.submit("bwd", 30, {ag, rs});  // after fwd (FIFO) and both: [160, 190)
  q.run();
  EXPECT_EQ(spans(compute), (Spans{{0, 100}, {160, 190}}));
  EXPECT_EQ(spans(comm), (Spans{{100, 150}, {150, 160}}));
  EXPECT_EQ(bwd.time(), 190);
  // Utilization over [0, 200): compute busy 130 ns, comm 60 ns.
  EXPECT_DOUBLE_EQ(compute.utilization(0, 200), 0.65);
  EXPECT_DOUBLE_EQ(comm.utilization(0, 200), 0.30);
  EXPECT_DOUBLE_EQ(comm.utilization(120, 170), 0.8);  // [120, 160) of [120, 170)
}

TEST(Resource, DependenciesAlreadyFiredDoNotDelay) {
  EventQueue q;
  Resource r(q, "r");
  Event done = r.submit("x", 5, {Event::fired_at(0)});
  q.run();
  EXPECT_EQ(done.time(), 5);
}

TEST(Resource, AnExternallyFiredEventReleasesTheOp) {
  EventQueue q;
  Resource r(q, "r");
  Event gate = Event::create();
  std::vector<Event> deps = {gate};  // a span of dependencies
  Event done = r.submit("x", 10, deps);
  q.schedule_at(1000, [&] { gate.fire(q.now()); });
  q.run();
  EXPECT_EQ(spans(r), (Spans{{1000, 1010}}));
  EXPECT_EQ(done.time(), 1010);
}

TEST(Resource, OnDoneRunsBeforeDependentsStartAndTheNextOpFollows) {
  EventQueue q;
  Resource a(q, "a");
  Resource b(q, "b");
  std::vector<std::string> log;
  Event first = a.submit("first", 10, {}, [&] { log.push_back("first.on_done@" + std::to_string(q.now())); });
  b.submit("dep", Work([&]() -> TimeNs {
             log.push_back("dep.start@" + std::to_string(q.now()));
             return 5;
           }),
           {first});
  a.submit("second", Work([&]() -> TimeNs {
             log.push_back("second.start@" + std::to_string(q.now()));
             return 5;
           }));
  q.run();
  EXPECT_EQ(log, (std::vector<std::string>{"first.on_done@10", "dep.start@10", "second.start@10"}));
}

TEST(Resource, ACostFunctionIsEvaluatedWhenTheOpStarts) {
  EventQueue q;
  Resource r(q, "r");
  r.submit("wait", 300);
  TimeNs started = -1;
  r.submit("cost", [&]() -> TimeNs {
    started = q.now();
    return started / 3;  // 300 / 3 = 100
  });
  q.run();
  EXPECT_EQ(started, 300);
  EXPECT_EQ(spans(r), (Spans{{0, 300}, {300, 400}}));
}

TEST(Resource, ZeroDurationOpsKeepFifoOrder) {
  EventQueue q;
  Resource r(q, "r");
  std::string order;
  for (char c : std::string("abc")) r.submit(std::string(1, c), 0, {}, [&order, c] { order += c; });
  q.run();
  EXPECT_EQ(order, "abc");
  EXPECT_EQ(q.now(), 0);
  EXPECT_EQ(r.ops_completed(), 3u);
}

TEST(Resource, AsyncWorkThatEndsAtOnceKeepsTheStackFlat) {
  EventQueue q;
  Resource r(q, "r");
  constexpr int kOps = 100000;
  int ended = 0;
  for (int i = 0; i < kOps; ++i) r.submit("instant", Work::async([](Callback done) { done(); }), {}, [&] { ++ended; });
  EXPECT_EQ(ended, kOps);  // all ended inside submit, without recursion
  EXPECT_EQ(r.outstanding(), 0u);
}

TEST(Resource, BadInputIsRefused) {
  EventQueue q;
  Resource r(q, "rank3.d2h");
  const Event empty;
  try {
    r.submit("copy", 10, {empty});
    FAIL() << "an empty dependency was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank3.d2h"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("empty Event handle"), std::string::npos) << e.what();
  }
  EXPECT_THROW(r.submit("neg", -1), std::invalid_argument);
  // The cost function runs when the op starts: here at once, inside submit. The failing op is dropped.
  EXPECT_THROW(r.submit("neg cost", [] { return TimeNs{-3}; }), std::invalid_argument);
  EXPECT_EQ(r.outstanding(), 0u);
  r.submit("busy", 10);
  r.submit("throws later", [&]() -> TimeNs { throw std::runtime_error("cost model failed"); });
  EXPECT_THROW(q.run(), std::runtime_error);  // at t = 10, when it starts
  EXPECT_EQ(r.outstanding(), 0u);
  Event after = r.submit("after", 5);  // the resource is still usable
  q.run();
  EXPECT_EQ(after.time(), 15);
  EXPECT_THROW((void)r.utilization(10, 10), std::invalid_argument);
}

TEST(Resource, DoneCalledTwiceIsAnError) {
  EventQueue q;
  Resource r(q, "r");
  Callback kept;
  r.submit("twice", Work::async([&](Callback done) {
             done();
             kept = std::move(done);
           }));
  EXPECT_THROW(kept(), std::logic_error);
}

// ---- SharedLink: PCIe as a processor-sharing link ---------------------------------------------------

TEST(SharedLink, OneTransferAloneRunsAtTheDirectionRate) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  Resource d2h(q, "d2h");
  // 2 GiB at 55 GB/s = 2147483648 / 55 ns = 39045157.236 ns, rounded up: 39045158 ns (39.045 ms).
  Event e = d2h.submit("2GiB", link.transfer(Direction::kD2H, int64_t{1} << 31));
  q.run();
  EXPECT_EQ(e.time(), 39045158);
  EXPECT_EQ(spans(d2h), (Spans{{0, 39045158}}));
}

TEST(SharedLink, OppositeDirectionsShareOnlyWhileTheyOverlap) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  Resource d2h(q, "d2h");
  Resource h2d(q, "h2d");
  // A: D2H 965 MB from t = 0. B: H2D 965 MB from t = 10 ms.
  // [0, 10 ms): A alone at 55 B/ns moves 550e6 B; 415e6 B left.
  // [10, 20 ms): both at 83/2 = 41.5 B/ns; A's 415e6 B take 415e6 / 41.5 = 10e6 ns: A ends at 20 ms
  //   (alone it would have ended at 965e6 / 55 = 17.545 ms). B moved 415e6 B; 550e6 B left.
  // [20, 30 ms): B alone at 55 B/ns: 550e6 / 55 = 10e6 ns: B ends at 30 ms (alone: 17.545 ms after start).
  Event a = d2h.submit("A", link.transfer(Direction::kD2H, 965'000'000));
  Event gate = Event::create();
  q.schedule_at(10'000'000, [&] { gate.fire(q.now()); });
  Event b = h2d.submit("B", link.transfer(Direction::kH2D, 965'000'000), {gate});

  q.run_until(5'000'000);
  EXPECT_DOUBLE_EQ(link.current_gbps(Direction::kD2H), 55.0);
  EXPECT_DOUBLE_EQ(link.current_gbps(Direction::kH2D), 0.0);
  q.run_until(15'000'000);
  EXPECT_DOUBLE_EQ(link.current_gbps(Direction::kD2H), 41.5);
  EXPECT_DOUBLE_EQ(link.current_gbps(Direction::kH2D), 41.5);
  q.run_until(25'000'000);
  EXPECT_DOUBLE_EQ(link.current_gbps(Direction::kH2D), 55.0);
  q.run();
  EXPECT_EQ(a.time(), 20'000'000);
  EXPECT_EQ(b.time(), 30'000'000);
  EXPECT_EQ(spans(d2h), (Spans{{0, 20'000'000}}));
  EXPECT_EQ(spans(h2d), (Spans{{10'000'000, 30'000'000}}));
  EXPECT_FALSE(link.active());
}

TEST(SharedLink, RecomputesFinishTimesWithInexactRates) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  TimeNs a_end = -1, b_end = -1;
  // A: D2H 1.1e9 B from 0; B: H2D 0.83e9 B from 10 ms.
  // At 10 ms A has 1.1e9 - 55 * 1e7 = 0.55e9 B left; at 41.5 B/ns that is 13253012.048 ns:
  //   A ends at ceil(10e6 + 13253012.048) = 23253013 ns.
  // B moved 41.5 * 13253013 = 550000039.5 B by then; 279999960.5 B left at 55 B/ns = 5090908.37 ns:
  //   B ends at ceil(23253013 + 5090908.37) = 28343922 ns.
  link.start(Direction::kD2H, 1'100'000'000, [&] { a_end = q.now(); });
  q.schedule_at(10'000'000, [&] { link.start(Direction::kH2D, 830'000'000, [&] { b_end = q.now(); }); });
  q.run();
  EXPECT_EQ(a_end, 23253013);
  EXPECT_EQ(b_end, 28343922);
}

TEST(SharedLink, TransfersInOneDirectionSplitItsRate) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);  // e.g. two GPUs behind one switch, both copying D2H
  std::vector<TimeNs> ends;
  // Two 110 MB D2H transfers from 0 share 55 B/ns: 27.5 each, 110e6 / 27.5 = 4e6 ns; both end at 4 ms.
  link.start(Direction::kD2H, 110'000'000, [&] { ends.push_back(q.now()); });
  link.start(Direction::kD2H, 110'000'000, [&] { ends.push_back(q.now()); });
  q.run();
  EXPECT_EQ(ends, (std::vector<TimeNs>{4'000'000, 4'000'000}));

  // Now from t = 4 ms: X = 110 MB alone; Y = 55 MB joins at 5 ms.
  // [4, 5 ms): X alone at 55: 55e6 B moved, 55e6 left. [5 ms, ...): both at 27.5: both have 55e6 left,
  // 55e6 / 27.5 = 2e6 ns: both end at 7 ms (ended in start order: X first).
  ends.clear();
  std::string order;
  link.start(Direction::kD2H, 110'000'000, [&] {
    ends.push_back(q.now());
    order += 'X';
  });
  q.schedule_at(5'000'000, [&] {
    link.start(Direction::kD2H, 55'000'000, [&] {
      ends.push_back(q.now());
      order += 'Y';
    });
  });
  q.run();
  EXPECT_EQ(ends, (std::vector<TimeNs>{7'000'000, 7'000'000}));
  EXPECT_EQ(order, "XY");
}

TEST(SharedLink, CopyEnginesRunTheirTransfersOneAtATime) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  Resource d2h(q, "d2h");
  // Two 55 MB D2H copies on one copy engine: FIFO, each alone on the link at 55 B/ns: 1 ms each.
  d2h.submit("c0", link.transfer(Direction::kD2H, 55'000'000));
  d2h.submit("c1", link.transfer(Direction::kD2H, 55'000'000));
  q.run();
  EXPECT_EQ(spans(d2h), (Spans{{0, 1'000'000}, {1'000'000, 2'000'000}}));
}

TEST(SharedLink, LatencyComesFirstAndDoesNotShare) {
  EventQueue q;
  SharedLink link(q, PcieParams{55.0, 55.0, 83.0, 2000.0});
  Resource h2d(q, "h2d");
  // 2 us latency, then 55e6 B at 55 B/ns = 1e6 ns: ends at 1002000 ns (pcie_copy_ns gives the same).
  Event e = h2d.submit("c", link.transfer(Direction::kH2D, 55'000'000));
  q.run_until(1000);
  EXPECT_FALSE(link.active());
  q.run();
  EXPECT_EQ(e.time(), 1'002'000);
  EXPECT_EQ(tf::sim::pcie_copy_ns(link.params(), Direction::kH2D, 55'000'000), 1'002'000);
}

TEST(SharedLink, ZeroBytesEndAtOnce) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  Resource d2h(q, "d2h");
  Event e = d2h.submit("empty", link.transfer(Direction::kD2H, 0));
  q.run();
  EXPECT_EQ(e.time(), 0);
  EXPECT_THROW(link.transfer(Direction::kD2H, -1), std::invalid_argument);
  EXPECT_THROW(SharedLink(q, PcieParams{0.0, 55.0, 83.0, 0.0}), std::invalid_argument);
}

// ---- CpuPool: the CPU optimizer slowed by concurrent DMA --------------------------------------------

TEST(CpuPool, RunsAtItsRateWithoutDma) {
  EventQueue q;
  CpuPool pool(q, 5.2, 1.68);  // 5.2 Gparam/s = 5.2 params/ns
  Resource cpu(q, "cpu");
  // 52e6 params / 5.2 params/ns = 10e6 ns.
  Event e = cpu.submit("adam", pool.work(52'000'000));
  q.run();
  EXPECT_EQ(e.time(), 10'000'000);
}

TEST(CpuPool, SlowsDownExactlyWhileATransferFlows) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  CpuPool pool(q, 5.2, 2.0);
  pool.watch(link);
  Resource cpu(q, "cpu");
  Resource h2d(q, "h2d");
  // CPU: 52e6 params from 0. DMA: H2D 220e6 B from 2 ms at 55 B/ns = 4e6 ns: [2, 6 ms).
  // [0, 2 ms): 5.2 params/ns -> 10.4e6 params. [2, 6 ms): 5.2 / 2 = 2.6 -> 10.4e6 params.
  // [6 ms, ...): 31.2e6 params left at 5.2 -> 6e6 ns: ends at 12 ms (2 ms later than without DMA).
  Event adam = cpu.submit("adam", pool.work(52'000'000));
  Event gate = Event::create();
  q.schedule_at(2'000'000, [&] { gate.fire(q.now()); });
  Event copy = h2d.submit("params", link.transfer(Direction::kH2D, 220'000'000), {gate});
  q.run_until(3'000'000);
  EXPECT_TRUE(pool.slowed());
  EXPECT_DOUBLE_EQ(pool.current_gparam_s(), 2.6);
  q.run();
  EXPECT_EQ(copy.time(), 6'000'000);
  EXPECT_EQ(adam.time(), 12'000'000);
  EXPECT_FALSE(pool.slowed());
}

TEST(CpuPool, MeasuredSlowdownFactorRoundsUpToWholeNanoseconds) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  CpuPool pool(q, 5.2, 1.68);  // CPU Adam ran 1.68x slower during copies on our H100 host
  pool.watch(link);
  // Same as above with 1.68: during [2, 6 ms) the CPU does 4e6 / 1.68 ns worth of its work, so it ends
  // 4e6 * (1 - 1/1.68) = 1619047.619 ns late: 10e6 + 1619047.619 = 11619047.619 -> 11619048 ns.
  TimeNs adam_end = -1;
  pool.start(52'000'000, [&] { adam_end = q.now(); });
  q.schedule_at(2'000'000, [&] { link.start(Direction::kD2H, 220'000'000, [] {}); });
  q.run();
  EXPECT_EQ(adam_end, 11'619'048);
}

TEST(CpuPool, DmaAlreadyRunningAndDmaOnUnwatchedLinks) {
  EventQueue q;
  SharedLink watched(q, kH100Pcie);
  SharedLink other(q, kH100Pcie);
  // A copy that is already flowing when the pool starts watching counts from then on.
  watched.start(Direction::kD2H, 55'000'000, [] {});  // [0, 1 ms)
  other.start(Direction::kH2D, 550'000'000, [] {});   // [0, 10 ms), not watched
  CpuPool pool(q, 1.0, 2.0);
  pool.watch(watched);
  EXPECT_TRUE(pool.slowed());
  // 2e6 params at 1 param/ns: [0, 1 ms) at 0.5 -> 0.5e6; then 1.5e6 at 1.0 -> ends at 2.5 ms.
  TimeNs end = -1;
  pool.start(2'000'000, [&] { end = q.now(); });
  q.run();
  EXPECT_EQ(end, 2'500'000);
  EXPECT_THROW(CpuPool(q, 1.0, 0.5), std::invalid_argument);
  EXPECT_THROW(CpuPool(q, 0.0, 1.0), std::invalid_argument);
}

TEST(CpuPool, ChunksPipelineBehindTheirGradientCopies) {
  // A miniature of the Twin-Flow CPU path: two gradient chunks go D2H, the CPU updates each as it
  // lands, and the updated params go H2D. Rates: PCIe 55/41.5 B/ns, CPU 1 param/ns, slowdown 2.
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  CpuPool pool(q, 1.0, 2.0);
  pool.watch(link);
  Resource d2h(q, "d2h"), cpu(q, "cpu"), h2d(q, "h2d");
  // g0, g1: 55e6 B each, D2H back to back: [0, 1 ms), [1, 2 ms) (the link carries one transfer at a time).
  Event g0 = d2h.submit("g0", link.transfer(Direction::kD2H, 55'000'000));
  Event g1 = d2h.submit("g1", link.transfer(Direction::kD2H, 55'000'000));
  // u0: 1.5e6 params after g0, from 1 ms; [1, 2 ms) slowed by g1's copy: 0.5e6 done; 1e6 left at 1/ns:
  //   ends at 3 ms.
  Event u0 = cpu.submit("u0", pool.work(1'500'000), {g0});
  // p0: H2D 55e6 B after u0, [3, 4 ms) alone. u1: after g1 and u0 (CPU FIFO), starts at 3 ms, slowed by
  //   p0 during [3, 4 ms): 0.5e6 done, 0.5e6 left at 1/ns: ends at 4.5 ms.
  Event p0 = h2d.submit("p0", link.transfer(Direction::kH2D, 55'000'000), {u0});
  Event u1 = cpu.submit("u1", pool.work(1'000'000), {g1});
  Event p1 = h2d.submit("p1", link.transfer(Direction::kH2D, 55'000'000), {u1});  // [4.5, 5.5 ms)
  q.run();
  EXPECT_EQ(spans(d2h), (Spans{{0, 1'000'000}, {1'000'000, 2'000'000}}));
  EXPECT_EQ(spans(cpu), (Spans{{1'000'000, 3'000'000}, {3'000'000, 4'500'000}}));
  EXPECT_EQ(spans(h2d), (Spans{{3'000'000, 4'000'000}, {4'500'000, 5'500'000}}));
  EXPECT_EQ(p1.time(), 5'500'000);
  (void)p0;
}

// ---- HostCpuPool: the ranks of one host share its CPU optimizer rate ----------------------------------

// Two ranks on one host: alone a pass runs at 4 params/ns; with both active each gets 2.5 (the host
// moves 5). Rank 0: 20e6 params from 0; rank 1: 10e6 params from 2 ms.
// [0, 2 ms): rank 0 alone at 4 -> 8e6 done. [2 ms, ...): both at 2.5; rank 1 needs 4 ms -> ends at
// 6 ms, when rank 0 has done 8e6 + 10e6 = 18e6; its last 2e6 alone at 4 -> 0.5 ms: ends at 6.5 ms.
TEST(HostCpuPool, RanksShareTheHostByHowManyRunAtOnce) {
  EventQueue q;
  HostCpuPool host(q, 2, [](int active) { return active == 1 ? 4.0 : 2.5; });
  TimeNs end0 = -1, end1 = -1;
  host.start(0, 20'000'000, [&] { end0 = q.now(); });
  q.schedule_at(2'000'000, [&] { host.start(1, 10'000'000, [&] { end1 = q.now(); }); });
  q.run_until(3'000'000);
  EXPECT_EQ(host.active(), 2);
  EXPECT_DOUBLE_EQ(host.current_gparam_s(0), 2.5);
  EXPECT_DOUBLE_EQ(host.current_gparam_s(1), 2.5);
  q.run();
  EXPECT_EQ(end1, 6'000'000);
  EXPECT_EQ(end0, 6'500'000);
}

// DMA on a rank's own link slows that rank's pass alone; the other rank of the host keeps its rate.
TEST(HostCpuPool, DmaSlowsOnlyTheRankWhoseLinkCarriesIt) {
  EventQueue q;
  SharedLink link0(q, kH100Pcie), link1(q, kH100Pcie);
  HostCpuPool host(
      q, 2, [](int active) { return 6.0 / active; }, 2.0);
  host.watch(0, link0);
  host.watch(1, link1);
  link0.start(Direction::kD2H, 55'000'000, [] {});  // [0, 1 ms) on rank 0's link
  EXPECT_TRUE(host.slowed(0));
  EXPECT_FALSE(host.slowed(1));
  TimeNs end0 = -1, end1 = -1;
  // both active: 3 params/ns each, rank 0 halved while its link is busy: rank 1 does 3e6 at 3 -> 1 ms;
  // rank 0 does 1.5e6 by then, and its last 1.5e6 alone (6 params/ns, the link idle) take 0.25 ms.
  host.start(0, 3'000'000, [&] { end0 = q.now(); });
  host.start(1, 3'000'000, [&] { end1 = q.now(); });
  q.run();
  EXPECT_EQ(end1, 1'000'000);
  EXPECT_EQ(end0, 1'250'000);
}

// The slowdown follows what the rank's link carries: D2H only, H2D only, both (the largest of the three).
// One rank at 1 param/ns alone, a pass of 1e7 from 0, factors both 1.5, D2H 2, H2D 1.25 (55 GB/s each way
// alone, 83 together). [0, 1 ms) a D2H of 55 MB: 0.5e6 done; [1, 2) idle link: 1e6; [2, 3) an H2D of 55 MB:
// 0.8e6; [3, 4): 1e6; [4, 5) a D2H and an H2D of 41.5 MB each at 41.5 GB/s: the factor is max(1.5, 2, 1.25)
// = 2, 0.5e6; 3.8e6 done at 5 ms, the other 6.2e6 alone: the pass ends at 11.2 ms.
TEST(HostCpuPool, TheSlowdownFollowsTheDirectionsTheLinkCarries) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  HostCpuPool host(
      q, 1, [](int) { return 1.0; }, DmaSlowdown{1.5, 2.0, 1.25});
  host.watch(0, link);
  TimeNs end = -1;
  host.start(0, 10'000'000, [&] { end = q.now(); });
  link.start(Direction::kD2H, 55'000'000, [] {});
  q.schedule_at(2'000'000, [&] { link.start(Direction::kH2D, 55'000'000, [] {}); });
  q.schedule_at(4'000'000, [&] {
    link.start(Direction::kD2H, 41'500'000, [] {});
    link.start(Direction::kH2D, 41'500'000, [] {});
  });
  q.run_until(500'000);
  EXPECT_DOUBLE_EQ(host.current_gparam_s(0), 0.5);
  q.run_until(1'500'000);
  EXPECT_FALSE(host.slowed(0));
  EXPECT_DOUBLE_EQ(host.current_gparam_s(0), 1.0);
  q.run_until(2'500'000);
  EXPECT_DOUBLE_EQ(host.current_gparam_s(0), 0.8);
  q.run_until(4'500'000);
  EXPECT_DOUBLE_EQ(host.current_gparam_s(0), 0.5);
  q.run();
  EXPECT_EQ(end, 11'200'000);
  EXPECT_DOUBLE_EQ((DmaSlowdown{1.5, 1.25, 1.125}.factor(true, true)), 1.5);  // both: at least the both-ways one
  EXPECT_THROW(HostCpuPool(
                   q, 1, [](int) { return 1.0; }, DmaSlowdown{1, 0.5, 1}),
               std::invalid_argument);
}

TEST(HostCpuPool, BadInput) {
  EventQueue q;
  EXPECT_THROW(HostCpuPool(q, 0, [](int) { return 1.0; }), std::invalid_argument);
  EXPECT_THROW(HostCpuPool(q, 2, nullptr), std::invalid_argument);
  EXPECT_THROW(HostCpuPool(
                   q, 2, [](int) { return 1.0; }, 0.5),
               std::invalid_argument);
  HostCpuPool host(q, 2, [](int active) { return active > 1 ? 0.0 : 1.0; });
  EXPECT_THROW(host.start(2, 10, [] {}), std::invalid_argument);
  EXPECT_THROW(host.start(0, -1, [] {}), std::invalid_argument);
  host.start(0, 10, [] {});
  EXPECT_THROW(host.start(1, 10, [] {}), std::invalid_argument);  // the rate with 2 active is 0
}

// ---- SharedLink under the CPU pass: copies slowed while a pass of the link's host runs ----------------

// 110e6 bytes each way at 55 B/ns alone take 2 ms. A pass of 4e6 params at 4 params/ns runs [1, 2 ms).
// H2D (factor 1.25): [0, 1 ms) 55e6 at 55; [1, 2 ms) 44e6 at 44; the last 11e6 alone at 55 -> 0.2 ms:
// ends at 2.2 ms. D2H (factor 2) on another link of the same host: 55e6, then 27.5e6 at 27.5, the last
// 27.5e6 at 55 -> 0.5 ms: ends at 2.5 ms. A third link, not slowed, ends at 2 ms.
TEST(SharedLinkUnderCpuPass, SlowedExactlyWhileAPassOfItsHostRuns) {
  EventQueue q;
  SharedLink up(q, kH100Pcie), down(q, kH100Pcie), other(q, kH100Pcie);
  HostCpuPool host(q, 1, [](int) { return 4.0; });
  up.slow_while_cpu_pass(host, 1.25, 2.0);
  down.slow_while_cpu_pass(host, 1.25, 2.0);
  TimeNs end_up = -1, end_down = -1, end_other = -1, end_pass = -1;
  up.start(Direction::kH2D, 110'000'000, [&] { end_up = q.now(); });
  down.start(Direction::kD2H, 110'000'000, [&] { end_down = q.now(); });
  other.start(Direction::kH2D, 110'000'000, [&] { end_other = q.now(); });
  q.schedule_at(1'000'000, [&] { host.start(0, 4'000'000, [&] { end_pass = q.now(); }); });
  q.run_until(1'500'000);
  EXPECT_DOUBLE_EQ(up.current_gbps(Direction::kH2D), 44.0);
  EXPECT_DOUBLE_EQ(down.current_gbps(Direction::kD2H), 27.5);
  EXPECT_DOUBLE_EQ(up.cpu_pass_factor(Direction::kD2H), 2.0);
  q.run();
  EXPECT_EQ(end_pass, 2'000'000);
  EXPECT_EQ(end_up, 2'200'000);
  EXPECT_EQ(end_down, 2'500'000);
  EXPECT_EQ(end_other, 2'000'000);
  EXPECT_DOUBLE_EQ(up.cpu_pass_factor(Direction::kH2D), 1.0);
}

// The host is shared: a pass of either rank slows the link (here rank 1's, already running when the
// link starts watching), and the link slows that rank's pass back when the pool watches it (factor 2).
// Rank 0 watches the link: its pass is not running; rank 1's pass (8e6 params at 4 params/ns) is not
// slowed by rank 0's link. H2D 110e6 from 0 at 55 / 1.25 = 44 while rank 1's pass runs [0, 2 ms): 88e6;
// the last 22e6 at 55 -> 0.4 ms: 2.4 ms. Then rank 0's pass of 2e6 from 3 ms with a copy of 55e6 from
// 3 ms: both slowed, the pass at 4 / 2 = 2 -> 1 ms; the copy at 44 -> 44e6 by 4 ms, the last 11e6 at 55
// -> 0.2 ms: 4.2 ms.
TEST(SharedLinkUnderCpuPass, AnyRankOfTheHostSlowsItAndTheTwoSlowEachOther) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  HostCpuPool host(
      q, 2, [](int) { return 4.0; }, 2.0);
  host.watch(0, link);
  TimeNs end_pass1 = -1, end_copy1 = -1, end_pass0 = -1, end_copy0 = -1;
  host.start(1, 8'000'000, [&] { end_pass1 = q.now(); });
  link.slow_while_cpu_pass(host, 1.25, 1.5);
  EXPECT_DOUBLE_EQ(link.cpu_pass_factor(Direction::kH2D), 1.25);
  link.start(Direction::kH2D, 110'000'000, [&] { end_copy1 = q.now(); });
  q.schedule_at(3'000'000, [&] {
    host.start(0, 2'000'000, [&] { end_pass0 = q.now(); });
    link.start(Direction::kH2D, 55'000'000, [&] { end_copy0 = q.now(); });
  });
  q.run();
  EXPECT_EQ(end_pass1, 2'000'000);
  EXPECT_EQ(end_copy1, 2'400'000);
  EXPECT_EQ(end_pass0, 4'000'000);
  EXPECT_EQ(end_copy0, 4'200'000);
}

// Factors of 1 change nothing: the same copy ends at the same ns as on a link that watches no host.
TEST(SharedLinkUnderCpuPass, FactorsOfOneChangeNothingAndBadFactorsAreRefused) {
  EventQueue q;
  SharedLink watched(q, kH100Pcie), plain(q, kH100Pcie);
  HostCpuPool host(q, 1, [](int) { return 3.0; });
  watched.slow_while_cpu_pass(host, 1, 1);
  TimeNs a = -1, b = -1;
  host.start(0, 1'000'000, [] {});
  watched.start(Direction::kH2D, 100'000'001, [&] { a = q.now(); });
  plain.start(Direction::kH2D, 100'000'001, [&] { b = q.now(); });
  q.run();
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, 1'818'182);  // ceil(100000001 / 55)
  EXPECT_THROW(watched.slow_while_cpu_pass(host, 0.5, 1), std::invalid_argument);
  EXPECT_THROW(watched.slow_while_cpu_pass(host, 1, std::nan("")), std::invalid_argument);
}

// ---- SlowedServer: work measured alone, slowed while contention is active -------------------------------

// 10 ms of alone-work; a source of factor 2 active during [2, 4 ms): those 2 ms do 1 ms of work, so it
// ends 1 ms late. Then a link (factor 1.5) carries [12, 13 ms) during a second job of 3 ms from 11 ms:
// [11, 12) 1 ms done, [12, 13) 2/3 ms, the last 4/3 ms alone: ends at 14.333... -> 14333334 ns.
TEST(SlowedServer, ContentionStretchesTheWorkInProgress) {
  EventQueue q;
  SharedLink link(q, kH100Pcie);
  SlowedServer gpu(q);
  const int coll = gpu.add_source(2.0);
  gpu.watch(link, 1.5);
  Resource compute(q, "compute");
  Event a = compute.submit("bwd", gpu.work(10'000'000));
  q.schedule_at(2'000'000, [&] { gpu.set_active(coll, true); });
  q.schedule_at(4'000'000, [&] { gpu.set_active(coll, false); });
  Event gate = Event::create();
  q.schedule_at(11'000'000, [&] { gate.fire(q.now()); });
  Event b = compute.submit("bwd 2", gpu.work(3'000'000), {gate});
  q.schedule_at(12'000'000, [&] { link.start(Direction::kD2H, 55'000'000, [] {}); });
  q.run_until(3'000'000);
  EXPECT_DOUBLE_EQ(gpu.current_factor(), 2.0);
  // 2 ms alone, then 1 ms at half speed: 2.5 ms of the 10 done (settled at 2 ms, read at 3 ms)
  EXPECT_DOUBLE_EQ(gpu.remaining_alone_ns(), 7'500'000);
  q.run();
  EXPECT_EQ(gpu.remaining_alone_ns(), 0);  // nothing in flight
  EXPECT_EQ(a.time(), 11'000'000);
  EXPECT_EQ(b.time(), 14'333'334);
  EXPECT_THROW(gpu.add_source(0.9), std::invalid_argument);
  EXPECT_THROW(gpu.set_active(coll, false), std::logic_error);  // more ends than starts
  EXPECT_THROW(gpu.set_active(7, true), std::invalid_argument);
}
