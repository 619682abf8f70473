// The TCP rendezvous on loopback: ranks as threads, the blob reaches all, and missing, dropped or garbage peers fail
// fast.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <utility>

#include "backends/launch/rendezvous.h"
#include "core/error.h"
#include "core/output_file.h"
#include "tests/temp_dir.h"

namespace tf::backend::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;

constexpr uint32_t kSharedFileChannel = 3;  // rank_barrier's all_ok channel in these tests

// An ephemeral loopback port: bound, read and released (rank 0 rebinds it with SO_REUSEADDR).
uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

RendezvousOptions options(uint16_t port, int rank, int world, std::chrono::milliseconds timeout_ms = 2000ms) {
  RendezvousOptions o;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.rank = rank;
  o.world_size = world;
  o.timeout_ms = timeout_ms;
  o.local_rank = rank;  // every rank on this host, as `twinflow launch` starts them
  o.local_world_size = world;
  return o;
}

std::vector<uint8_t> unique_id() {
  std::vector<uint8_t> b(128);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 37 + 11);
  return b;
}

// What one rank's thread saw: the blob, or the error text.
struct Outcome {
  std::vector<uint8_t> blob;
  std::string error;
  double seconds = 0;
};

Outcome run_rank(const RendezvousOptions& o, std::vector<uint8_t> blob) {
  Outcome out;
  const auto t0 = Clock::now();
  try {
    Rendezvous rv(o, std::move(blob));
    out.blob = rv.blob();
    rv.barrier();
  } catch (const core::RuntimeFailure& e) {
    out.error = e.what();
  } catch (const core::InputError& e) {
    out.error = std::string("input: ") + e.what();
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

TEST(Rendezvous, FourRanksGetTheBlob) {
  const uint16_t port = free_port();
  std::vector<std::future<Outcome>> ranks;
  for (int r = 3; r >= 0; --r)  // peers first: they retry until rank 0 listens
    ranks.push_back(std::async(std::launch::async, run_rank, options(port, r, 4),
                               r == 0 ? unique_id() : std::vector<uint8_t>{1, 2, 3}));
  for (auto& f : ranks) {
    const Outcome o = f.get();
    EXPECT_EQ(o.error, "");
    EXPECT_EQ(o.blob, unique_id());
  }
}

TEST(Rendezvous, SingleRankNeedsNoNetwork) {
  Rendezvous rv(options(1, 0, 1), {7, 8});
  EXPECT_EQ(rv.blob(), (std::vector<uint8_t>{7, 8}));
  rv.barrier();
  EXPECT_EQ(rv.watch_for(10ms), std::nullopt);
}

TEST(Rendezvous, MissingRankFailsEveryoneWithinTheDeadline) {
  const uint16_t port = free_port();
  std::vector<std::future<Outcome>> ranks;
  for (int r : {0, 1, 3})  // rank 2 never shows up
    ranks.push_back(std::async(std::launch::async, run_rank, options(port, r, 4), unique_id()));
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Outcome o = ranks[i].get();
    EXPECT_NE(o.error, "") << "rank index " << i;
    EXPECT_LT(o.seconds, 3.0);
    if (i == 0) {
      EXPECT_NE(o.error.find("missing ranks {2}"), std::string::npos) << o.error;
    }
  }
}

TEST(Rendezvous, NoRankZeroFailsWithinTheDeadline) {
  const Outcome o = run_rank(options(free_port(), 1, 2, 500ms), {});
  EXPECT_NE(o.error.find("could not connect to rank 0"), std::string::npos) << o.error;
  EXPECT_LT(o.seconds, 2.0);
}

TEST(Rendezvous, MismatchedWorldSizeIsRefused) {
  const uint16_t port = free_port();
  auto r0 = std::async(std::launch::async, run_rank, options(port, 0, 2), unique_id());
  auto r1 = std::async(std::launch::async, run_rank, options(port, 1, 3), std::vector<uint8_t>{});
  const Outcome o0 = r0.get(), o1 = r1.get();
  EXPECT_NE(o0.error.find("WORLD_SIZE=3 but rank 0 has 2"), std::string::npos) << o0.error;
  EXPECT_NE(o1.error.find("WORLD_SIZE=3 but rank 0 has 2"), std::string::npos) << o1.error;
}

TEST(Rendezvous, DuplicateRankIsRefused) {
  const uint16_t port = free_port();
  std::vector<std::future<Outcome>> ranks;
  for (int r : {0, 1, 1}) ranks.push_back(std::async(std::launch::async, run_rank, options(port, r, 3), unique_id()));
  const Outcome o0 = ranks[0].get();
  EXPECT_NE(o0.error.find("rank 1 joined twice"), std::string::npos) << o0.error;
  for (size_t i = 1; i < ranks.size(); ++i) {
    const Outcome o = ranks[i].get();
    EXPECT_NE(o.error, "");
    EXPECT_LT(o.seconds, 3.0);
  }
}

// LOCAL_WORLD_SIZE is what cuts the host's cores among its ranks: a launcher that says 1 where it
// started 2 ranks on one host would make both pin to the same cores; rank 0 refuses, naming both.
TEST(Rendezvous, LocalWorldSizeThatDisagreesWithTheRanksOnTheHostIsRefused) {
  const uint16_t port = free_port();
  RendezvousOptions a = options(port, 0, 2), b = options(port, 1, 2);
  a.host = b.host = "gpu-a";
  a.local_world_size = b.local_world_size = 1;
  b.local_rank = 0;
  auto r0 = std::async(std::launch::async, run_rank, a, unique_id());
  auto r1 = std::async(std::launch::async, run_rank, b, std::vector<uint8_t>{});
  const Outcome o0 = r0.get(), o1 = r1.get();
  EXPECT_NE(o0.error.find("input: "), std::string::npos) << o0.error;
  EXPECT_NE(o0.error.find("LOCAL_WORLD_SIZE=1, but the launcher started 2 rank(s) there (ranks 0,1)"),
            std::string::npos)
      << o0.error;
  EXPECT_NE(o1.error.find("LOCAL_WORLD_SIZE=1"), std::string::npos) << o1.error;
}

TEST(Rendezvous, RanksOnTwoHostsCountPerHost) {
  const uint16_t port = free_port();
  std::vector<std::future<Outcome>> ranks;
  for (int r = 3; r >= 0; --r) {
    RendezvousOptions o = options(port, r, 4);
    o.host = r < 2 ? "gpu-a" : "gpu-b";
    o.local_rank = r % 2;
    o.local_world_size = 2;
    ranks.push_back(std::async(std::launch::async, run_rank, o, r == 0 ? unique_id() : std::vector<uint8_t>{}));
  }
  for (auto& f : ranks) EXPECT_EQ(f.get().error, "");
}

TEST(RankPlaces, EachDisagreementIsNamed) {
  using P = std::vector<RankPlace>;
  EXPECT_EQ(check_rank_places(P{{0, 0, 2, "a"}, {1, 1, 2, "a"}, {2, 0, 1, "b"}}), "");
  EXPECT_EQ(check_rank_places(P{{0, 0, 2, "a"}, {1, 0, 1, "b"}, {2, 1, 2, "a"}}), "");
  EXPECT_EQ(check_rank_places(P{{0, 0, 2, "a"}, {1, 1, 2, "a"}, {2, 1, 2, "b"}}),
            "rank 2 on host 'b' has LOCAL_WORLD_SIZE=2, but the launcher started 1 rank(s) there (ranks 2): set "
            "LOCAL_WORLD_SIZE to the ranks per host");
  EXPECT_EQ(check_rank_places(P{{0, 1, 2, "a"}, {1, 1, 2, "a"}}), "ranks 0 and 1 on host 'a' both have LOCAL_RANK=1");
  EXPECT_EQ(check_rank_places(P{{0, 0, 1, "a"}, {3, 5, 1, "b"}}), "rank 3 on host 'b' has LOCAL_RANK=5, outside 0..0");
  EXPECT_FALSE(host_identity().empty());
}

TEST(Rendezvous, GarbageBytesAreAClearError) {
  const uint16_t port = free_port();
  auto r0 = std::async(std::launch::async, run_rank, options(port, 0, 3), unique_id());
  auto r1 = std::async(std::launch::async, run_rank, options(port, 1, 3), std::vector<uint8_t>{});
  // A stranger connects as the third peer and speaks HTTP.
  {
    asio::io_context io;
    asio::ip::tcp::socket s(io);
    boost::system::error_code ec;
    for (int i = 0; i < 100; ++i) {
      s.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
      if (!ec) break;
      s.close();
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_FALSE(ec) << ec.message();
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    asio::write(s, asio::buffer(junk), ec);
    const Outcome o0 = r0.get();
    EXPECT_NE(o0.error.find("not a Twin-Flow rendezvous message"), std::string::npos) << o0.error;
  }
  const Outcome o1 = r1.get();
  EXPECT_NE(o1.error, "");
  EXPECT_LT(o1.seconds, 3.0);
}

TEST(Rendezvous, DroppedPeerAfterRendezvousIsReportedByTheWatch) {
  const uint16_t port = free_port();
  constexpr int kWorld = 3;
  std::promise<void> done_with_rv;
  std::shared_future<void> drop_now = done_with_rv.get_future().share();
  // rank 2 joins, then "dies" (its Rendezvous is destroyed, closing the socket)
  auto dropper = std::async(std::launch::async, [&] {
    Rendezvous rv(options(port, 2, kWorld), {});
    drop_now.wait_for(5s);
  });
  std::vector<std::future<std::optional<std::string>>> watchers;
  std::atomic<int> ready{0};
  for (int r : {0, 1}) {
    watchers.push_back(std::async(std::launch::async, [&, r]() -> std::optional<std::string> {
      Rendezvous rv(options(port, r, kWorld), unique_id());
      EXPECT_EQ(rv.blob(), unique_id());
      ++ready;
      const auto t0 = Clock::now();
      while (Clock::now() - t0 < 3s)  // bounded
        if (auto what = rv.watch_for(100ms)) return what;
      return std::nullopt;
    }));
  }
  for (int i = 0; i < 200 && ready < 2; ++i) std::this_thread::sleep_for(10ms);
  done_with_rv.set_value();
  dropper.get();
  const auto w0 = watchers[0].get();
  const auto w1 = watchers[1].get();
  ASSERT_TRUE(w0.has_value());
  ASSERT_TRUE(w1.has_value());
  EXPECT_NE(w0->find("rank 2 closed the connection"), std::string::npos) << *w0;
  EXPECT_NE(w1->find("rank 2 closed the connection"), std::string::npos) << *w1;  // told by rank 0
}

TEST(Rendezvous, BackgroundWatchCallsBack) {
  const uint16_t port = free_port();
  std::promise<std::string> reported;
  auto peer = std::async(std::launch::async, [&] { Rendezvous rv(options(port, 1, 2), {}); });
  Rendezvous rv0(options(port, 0, 2), unique_id());
  peer.get();  // rank 1 is gone
  rv0.start_watch([&](const std::string& what) { reported.set_value(what); });
  auto f = reported.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  EXPECT_NE(f.get().find("rank 1"), std::string::npos);
  rv0.stop_watch();
  EXPECT_THROW(rv0.barrier(), core::RuntimeFailure);
}

TEST(Rendezvous, BarrierAfterRendezvous) {
  const uint16_t port = free_port();
  std::vector<std::future<int>> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      Rendezvous rv(options(port, r, 3), unique_id());
      for (int i = 0; i < 5; ++i) rv.barrier();
      EXPECT_EQ(rv.watch_for(50ms), std::nullopt);
      rv.barrier();
      return rv.rank();
    }));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ranks[size_t(r)].get(), r);
}

// --save-master's protocol over the real rendezvous (rank_barrier: all_ok on its own channel): three
// ranks, each watching for lost peers all along, write their interleaved 4-byte slots of one file,
// twice; the file holds every slot and no watch reported a failure.
TEST(Rendezvous, RankBarrierCarriesASharedFileWrite) {
  const uint16_t port = free_port();
  tf::test::TempDir dir("tf_rdv");
  constexpr int kWorld = 3;
  constexpr uint32_t kSlots = 3000;
  std::vector<std::future<std::string>> ranks;
  for (int r = kWorld - 1; r >= 0; --r)
    ranks.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      Rendezvous rv(options(port, r, kWorld, 5000ms), unique_id());
      std::promise<std::string> lost;
      bool reported = false;
      const auto on_lost = [&](const std::string& what) {
        if (!reported) reported = true, lost.set_value(what);
      };
      rv.start_watch(on_lost);
      const core::RankBarrier barrier = rank_barrier(rv, kSharedFileChannel, 5000ms);
      for (const char* name : {"a.bin", "b.bin"})
        core::write_shared_output_file(dir.path() / name, "--save-master", kSlots * 4, r, kWorld, barrier,
                                       [&](core::OutputFile& f) {
                                         for (uint32_t i = uint32_t(r); i < kSlots; i += kWorld) {
                                           const uint32_t v = i ^ 0x5a5a5a5au;
                                           f.write_at(&v, 4, uint64_t(i) * 4);
                                         }
                                       });
      rv.stop_watch();
      rv.barrier();  // every rank's watch stopped before any Rendezvous goes away
      return reported ? lost.get_future().get() : std::string();
    }));
  for (auto& f : ranks) EXPECT_EQ(f.get(), "");
  for (const char* name : {"a.bin", "b.bin"}) {
    std::ifstream in(dir.path() / name, std::ios::binary);
    std::vector<uint32_t> got(kSlots + 1);
    in.read(reinterpret_cast<char*>(got.data()), std::streamsize(got.size() * 4));
    ASSERT_EQ(in.gcount(), std::streamsize(kSlots) * 4) << name;
    for (uint32_t i = 0; i < kSlots; ++i) ASSERT_EQ(got[i], i ^ 0x5a5a5a5au) << name << " slot " << i;
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 2);
}

// A rank that cannot write its part votes false: every rank learns it from the vote (not from a lost
// peer) and fails with a RuntimeFailure saying so, and the old file is left as it was, with no
// temporary file.
TEST(Rendezvous, RankBarrierAFailedRankFailsTheOthers) {
  const uint16_t port = free_port();
  tf::test::TempDir dir("tf_rdv");
  const std::filesystem::path p = dir.write("m.bin", "old");
  constexpr int kWorld = 3;
  std::vector<std::future<std::string>> ranks;
  for (int r = kWorld - 1; r >= 0; --r)
    ranks.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      try {
        Rendezvous rv(options(port, r, kWorld, 5000ms), unique_id());
        const core::FaultHook hook = [r](const core::FaultPoint& f) { return r == 2 && f.op == "write" ? EIO : 0; };
        core::write_shared_output_file(
            p, "--save-master", 12, r, kWorld, rank_barrier(rv, kSharedFileChannel, 5000ms),
            [&](core::OutputFile& f) {
              const float v = float(r);
              f.write_at(&v, 4, uint64_t(r) * 4);
            },
            hook);
      } catch (const core::RuntimeFailure& e) {
        return e.what();
      }
      return "(no failure)";
    }));
  std::vector<std::string> errors;
  for (auto& f : ranks) errors.push_back(f.get());  // ranks 2, 1, 0
  EXPECT_NE(errors[0].find("--save-master " + p.string() + ": cannot write"), std::string::npos) << errors[0];
  for (size_t i : {1, 2})
    EXPECT_NE(errors[i].find("another rank failed to write its part; the file was left as it was"), std::string::npos)
        << errors[i];
  std::ifstream in(p);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
}

// all_ok is an AND over the ranks' flags, round after round.
TEST(Rendezvous, AllOkIsAnAndOverRanks) {
  const uint16_t port = free_port();
  constexpr int kWorld = 3, kRounds = 8;
  std::vector<std::future<std::vector<bool>>> ranks;
  for (int r = 0; r < kWorld; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      Rendezvous rv(options(port, r, kWorld), unique_id());
      std::vector<bool> got;
      for (int round = 0; round < kRounds; ++round) got.push_back(rv.all_ok(round % (kWorld + 1) != r));
      return got;
    }));
  // round k: rank k % 4 passes false (none when k % 4 == 3)
  const std::vector<bool> want = {false, false, false, true, false, false, false, true};
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(ranks[size_t(r)].get(), want) << "rank " << r;
}

// Two threads per rank vote on two channels at once while the background watch runs (a checkpoint
// writer's barrier beside the training loop's stop vote), each channel in its own order.
TEST(Rendezvous, AllOkOnTwoChannelsFromTwoThreadsWhileTheWatchRuns) {
  const uint16_t port = free_port();
  constexpr int kWorld = 3, kRounds = 30;
  std::vector<std::future<int>> ranks;
  for (int r = 0; r < kWorld; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      Rendezvous rv(options(port, r, kWorld, 5000ms), unique_id());
      std::atomic<bool> lost{false};
      rv.start_watch([&](const std::string&) { lost = true; });
      int wrong = 0;
      auto voter = [&](uint32_t channel, int false_every) {
        for (int i = 0; i < kRounds; ++i) {
          const bool mine = !(r == 1 && i % false_every == 0);  // rank 1 says no now and then
          wrong += rv.all_ok(mine, channel) != (i % false_every != 0);
        }
      };
      std::thread writer(voter, 2u, 3);
      voter(1u, 5);
      writer.join();
      rv.stop_watch();
      rv.barrier();
      return wrong + (lost ? 1000 : 0);
    }));
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(ranks[size_t(r)].get(), 0) << "rank " << r;
}

// A rank that dies while the others wait in all_ok makes them fail, naming it, well before the timeout.
TEST(Rendezvous, AllOkFailsWhenAPeerDies) {
  const uint16_t port = free_port();
  constexpr int kWorld = 3;
  auto dying = std::async(std::launch::async, [&] {
    Rendezvous rv(options(port, 2, kWorld, 10000ms), {});
    std::this_thread::sleep_for(100ms);  // then its connection closes
  });
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      Rendezvous rv(options(port, r, kWorld, 10000ms), unique_id());
      const auto t0 = Clock::now();
      try {
        rv.all_ok(true, 7);
      } catch (const core::RuntimeFailure& e) {
        EXPECT_LT(Clock::now() - t0, 3s);
        EXPECT_THROW(rv.all_ok(true, 7), core::RuntimeFailure);  // every later call fails too
        return e.what();
      }
      return "no error";
    }));
  dying.get();
  for (auto& f : ranks) EXPECT_NE(f.get().find("rank 2 closed the connection"), std::string::npos);
}

// A rank that never votes: rank 0 times out naming it.
TEST(Rendezvous, AllOkTimesOutNamingTheRanksThatDidNotVote) {
  const uint16_t port = free_port();
  std::promise<void> done;
  std::shared_future<void> release = done.get_future().share();
  auto silent = std::async(std::launch::async, [&] {
    Rendezvous rv(options(port, 1, 2), {});
    release.wait_for(5s);
  });
  Rendezvous rv0(options(port, 0, 2), unique_id());
  try {
    rv0.all_ok(true, 3, 300ms);
    ADD_FAILURE() << "no timeout";
  } catch (const core::RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("ranks {1} to vote on channel 3"), std::string::npos) << e.what();
  }
  done.set_value();
  silent.get();
}

}  // namespace
}  // namespace tf::backend::launch
