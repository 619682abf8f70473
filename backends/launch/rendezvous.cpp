// TCP rendezvous (Boost.Asio): rank 0 hands every rank a blob (e.g. the NCCL unique id), then barriers and a liveness
// watch.
#include "backends/launch/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>  // before Boost 1.74 Asio, which uses std::exchange without it

#include "core/error.h"

namespace tf::backend::launch {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using ErrorCode = boost::system::error_code;

namespace {

// Wire format: a 12-byte header (magic, version, type, payload length; big-endian), then the payload.
constexpr uint32_t kMagic = 0x54465256;  // "TFRV"
constexpr uint16_t kVersion = 3;  // 2: the hello carries the rank's place; 3: votes on channels replace the barrier's
                                  // arrive/release messages
constexpr size_t kHeaderBytes = 12;
constexpr uint32_t kMaxPayloadBytes = 16u << 20;
constexpr auto kErrorNoticeMs = std::chrono::milliseconds(200);  // best effort to tell peers why
// The longest a thread drives the connections before it lets another one (a vote, the watch) in.
constexpr auto kPumpSliceMs = std::chrono::milliseconds(20);

// kVote: a rank's `ok` on a channel, to rank 0; kVerdict: the AND of a channel's votes, from rank 0.
enum MsgType : uint16_t { kHello = 1, kBlob = 2, kVote = 3, kVerdict = 4, kError = 5 };

const char* type_name(uint16_t t) {
  switch (t) {
    case kHello: return "hello";
    case kBlob: return "blob";
    case kVote: return "vote";
    case kVerdict: return "verdict";
    case kError: return "error";
  }
  return "unknown";
}

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (24 - 8 * i));
}
void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}
uint16_t get_u16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

constexpr size_t kHelloFixedBytes = 16;  // rank, world, local rank, local world; then the host's name
constexpr size_t kMaxHostBytes = 1024;

std::vector<uint8_t> hello_payload(const RendezvousOptions& o, const std::string& host) {
  std::vector<uint8_t> out(kHelloFixedBytes);
  put_u32(out.data(), uint32_t(o.rank));
  put_u32(out.data() + 4, uint32_t(o.world_size));
  put_u32(out.data() + 8, uint32_t(o.local_rank));
  put_u32(out.data() + 12, uint32_t(o.local_world_size));
  out.insert(out.end(), host.begin(), host.begin() + std::ptrdiff_t(std::min(host.size(), kMaxHostBytes)));
  return out;
}

struct Msg {
  uint16_t type = 0;
  std::vector<uint8_t> payload;
};

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Runs `start(handler)` on io until the handler ran or the deadline passed; on a timeout `cancel()`
// aborts the operation and the handler is drained, so nothing refers to this frame afterwards.
template <class Start, class Cancel>
ErrorCode run_until(asio::io_context& io, Deadline deadline, Start start, Cancel cancel) {
  ErrorCode result;
  bool done = false;
  start([&](const ErrorCode& ec, auto&&...) {
    result = ec;
    done = true;
  });
  io.restart();
  while (!done && Clock::now() < deadline) {
    if (io.run_one_until(deadline) == 0 && io.stopped()) io.restart();
  }
  if (!done) {
    cancel();
    io.restart();
    for (int i = 0; !done && i < 1000; ++i)
      if (io.run_one_for(std::chrono::milliseconds(10)) == 0 && io.stopped()) io.restart();
    return asio::error::timed_out;
  }
  return result;
}

void close_socket(tcp::socket& s) {
  ErrorCode ignored;
  s.shutdown(tcp::socket::shutdown_both, ignored);
  s.close(ignored);
}

}  // namespace

struct Rendezvous::Impl {
  RendezvousOptions opt;
  asio::io_context io;
  std::vector<std::unique_ptr<tcp::socket>> sockets;  // rank 0: one per rank (index 0 unused); else [0] = rank 0
  std::vector<uint8_t> blob;
  std::optional<std::string> failure;  // set once a peer is lost; later calls rethrow it
  std::thread watcher;
  std::atomic<bool> stop_watching{false};

  // After the handshake every message is read by pump(), by whichever thread holds io_mu (a vote, the
  // watch): it keeps a header read armed on every connection and files votes and verdicts by channel,
  // so threads voting on different channels and the watch share the connections.
  std::mutex io_mu;                // io, the sockets and everything below
  std::atomic<int> io_waiters{0};  // threads waiting for io_mu: a pump slice ends early for them
  struct PendingRead {
    std::array<uint8_t, kHeaderBytes> header{};
    bool armed = false, done = false;
    ErrorCode ec;
  };
  std::vector<PendingRead> reads;                 // (sockets) one header read each
  std::map<uint32_t, std::vector<int8_t>> votes;  // rank 0: channel -> (world) -1 none, 0 false, 1 true
  std::map<uint32_t, bool> verdicts;              // ranks > 0: channel -> the AND rank 0 sent

  std::string host;               // this rank's host (opt.host or host_identity())
  std::vector<RankPlace> places;  // rank 0: every rank's, for check_rank_places

  explicit Impl(const RendezvousOptions& o) : opt(o), host(o.host.empty() ? host_identity() : o.host) {}
  ~Impl() {
    stop_watch();
    close_all();
  }

  std::string me() const {
    return "rendezvous rank " + std::to_string(opt.rank) + "/" + std::to_string(opt.world_size);
  }
  std::string peer_name(int r) const { return "rank " + std::to_string(r); }
  std::string timeout_text() const { return std::to_string(opt.timeout_ms.count()) + " ms"; }

  [[noreturn]] void fail(const std::string& what) const { throw core::RuntimeFailure(me() + ": " + what); }

  void close_all() {
    for (auto& s : sockets)
      if (s) close_socket(*s);
  }

  void stop_watch() {
    stop_watching = true;
    if (watcher.joinable()) watcher.join();
    stop_watching = false;
  }

  // ---- framed I/O, each with a deadline ----
  ErrorCode write_raw(tcp::socket& s, const std::vector<uint8_t>& bytes, Deadline d) {
    return run_until(
        io, d, [&](auto h) { asio::async_write(s, asio::buffer(bytes), h); }, [&] { s.cancel(); });
  }
  ErrorCode read_raw(tcp::socket& s, uint8_t* p, size_t n, Deadline d) {
    return run_until(
        io, d, [&](auto h) { asio::async_read(s, asio::buffer(p, n), h); }, [&] { s.cancel(); });
  }

  static std::vector<uint8_t> frame(uint16_t type, const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> out(kHeaderBytes + payload.size());
    put_u32(out.data(), kMagic);
    put_u16(out.data() + 4, kVersion);
    put_u16(out.data() + 6, type);
    put_u32(out.data() + 8, uint32_t(payload.size()));
    std::copy(payload.begin(), payload.end(), out.begin() + kHeaderBytes);
    return out;
  }

  void send(tcp::socket& s, uint16_t type, const std::vector<uint8_t>& payload, Deadline d, const std::string& who) {
    const ErrorCode ec = write_raw(s, frame(type, payload), d);
    if (ec == asio::error::timed_out)
      fail("timed out after " + timeout_text() + " sending " + type_name(type) + " to " + who);
    if (ec) fail("lost the connection to " + who + " while sending " + type_name(type) + ": " + ec.message());
  }

  // Reads one message; throws on a timeout, a closed connection or bytes that are not a message.
  Msg receive(tcp::socket& s, Deadline d, const std::string& who, const char* waiting_for) {
    std::array<uint8_t, kHeaderBytes> h{};
    ErrorCode ec = read_raw(s, h.data(), h.size(), d);
    check_read(ec, who, waiting_for);
    return parse_rest(s, h, d, who, waiting_for);
  }

  void check_read(const ErrorCode& ec, const std::string& who, const char* waiting_for) const {
    if (ec == asio::error::timed_out)
      fail("timed out after " + timeout_text() + " waiting for " + waiting_for + " from " + who);
    if (ec == asio::error::eof || ec == asio::error::connection_reset)
      fail(who + " closed the connection (exited or died) while we waited for " + waiting_for);
    if (ec) fail("connection to " + who + " failed while waiting for " + waiting_for + ": " + ec.message());
  }

  Msg parse_rest(tcp::socket& s, const std::array<uint8_t, kHeaderBytes>& h, Deadline d, const std::string& who,
                 const char* waiting_for) {
    const uint32_t magic = get_u32(h.data());
    if (magic != kMagic)
      fail(who + " sent bytes that are not a Twin-Flow rendezvous message (magic " + hex32(magic) + ", expected " +
           hex32(kMagic) + "); is another program using port " + std::to_string(opt.master_port) + "?");
    const uint16_t version = get_u16(h.data() + 4);
    if (version != kVersion)
      fail(who + " speaks rendezvous protocol version " + std::to_string(version) + ", this build speaks " +
           std::to_string(kVersion) + ": run the same twinflow build on every rank");
    Msg m;
    m.type = get_u16(h.data() + 6);
    const uint32_t n = get_u32(h.data() + 8);
    if (n > kMaxPayloadBytes)
      fail(who + " announced a " + std::to_string(n) + "-byte message; at most " + std::to_string(kMaxPayloadBytes) +
           " bytes are accepted");
    m.payload.resize(n);
    if (n > 0) check_read(read_raw(s, m.payload.data(), n, d), who, waiting_for);
    if (m.type == kError) fail(who + " aborted the rendezvous: " + std::string(m.payload.begin(), m.payload.end()));
    return m;
  }

  Msg expect(tcp::socket& s, uint16_t type, Deadline d, const std::string& who) {
    Msg m = receive(s, d, who, type_name(type));
    if (m.type != type)
      fail(who + " sent a " + type_name(m.type) + " message (type " + std::to_string(m.type) + ") where " +
           type_name(type) + " was expected");
    return m;
  }

  // Rank 0: tell every connected peer why we stop (best effort), then close everything.
  void abort_all(const std::string& reason) {
    const std::string text = reason;
    const std::vector<uint8_t> payload(text.begin(), text.end());
    const Deadline d = Clock::now() + kErrorNoticeMs;
    for (auto& s : sockets)
      if (s && s->is_open()) write_raw(*s, frame(kError, payload), d);
    close_all();
  }

  tcp::endpoint resolve() {
    tcp::resolver resolver(io);
    ErrorCode ec;
    auto results =
        resolver.resolve(opt.master_addr, std::to_string(opt.master_port), tcp::resolver::numeric_service, ec);
    if (ec || results.empty())
      throw core::InputError(me() + ": cannot resolve MASTER_ADDR '" + opt.master_addr + "': " + ec.message());
    return results.begin()->endpoint();
  }

  // ---- rank 0 ----
  void serve(Deadline d) {
    const tcp::endpoint ep = resolve();
    tcp::acceptor acceptor(io);
    ErrorCode ec;
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) fail("cannot listen on " + opt.master_addr + ":" + std::to_string(opt.master_port) + ": " + ec.message());
    sockets.resize(size_t(opt.world_size));
    for (int joined = 1; joined < opt.world_size;) {
      auto s = std::make_unique<tcp::socket>(io);
      ec = run_until(
          io, d, [&](auto h) { acceptor.async_accept(*s, h); }, [&] { acceptor.cancel(); });
      if (ec == asio::error::timed_out) fail("timed out after " + timeout_text() + ": " + missing_ranks());
      if (ec) fail("accept failed: " + ec.message());
      const std::string who = "a connection from " + s->remote_endpoint(ec).address().to_string();
      Msg m = expect(*s, kHello, d, who);
      if (m.payload.size() < kHelloFixedBytes || m.payload.size() > kHelloFixedBytes + kMaxHostBytes)
        fail(who + " sent a " + std::to_string(m.payload.size()) + "-byte hello; expected " +
             std::to_string(kHelloFixedBytes) + " bytes and a host name");
      const int64_t r = get_u32(m.payload.data());
      const int64_t w = get_u32(m.payload.data() + 4);
      std::string refusal;
      if (w != opt.world_size)
        refusal = "rank " + std::to_string(r) + " has WORLD_SIZE=" + std::to_string(w) + " but rank 0 has " +
                  std::to_string(opt.world_size);
      else if (r <= 0 || r >= opt.world_size)
        refusal = "a peer announced rank " + std::to_string(r) + "; expected 1.." + std::to_string(opt.world_size - 1);
      else if (sockets[size_t(r)])
        refusal = "rank " + std::to_string(r) + " joined twice (duplicate RANK)";
      if (!refusal.empty()) {
        const std::vector<uint8_t> text(refusal.begin(), refusal.end());
        write_raw(*s, frame(kError, text), Clock::now() + kErrorNoticeMs);
        close_socket(*s);
        fail(refusal);
      }
      sockets[size_t(r)] = std::move(s);
      places.push_back({int(r), int(get_u32(m.payload.data() + 8)), int(get_u32(m.payload.data() + 12)),
                        std::string(m.payload.begin() + kHelloFixedBytes, m.payload.end())});
      ++joined;
    }
    places.push_back({0, opt.local_rank, opt.local_world_size, host});
    if (const std::string bad = check_rank_places(places); !bad.empty()) {
      abort_all(bad);
      throw core::InputError(me() + ": " + bad);
    }
    for (int r = 1; r < opt.world_size; ++r) send(*sockets[size_t(r)], kBlob, blob, d, peer_name(r));
  }

  std::string missing_ranks() const {
    std::string joined, missing;
    for (int r = 1; r < opt.world_size; ++r) {
      std::string& list = sockets[size_t(r)] ? joined : missing;
      if (!list.empty()) list += ',';
      list += std::to_string(r);
    }
    return "ranks {" + (joined.empty() ? std::string() : joined) + "} of " + std::to_string(opt.world_size) +
           " joined rank 0; missing ranks {" + missing + "}";
  }

  // ---- ranks > 0 ----
  void join(Deadline d) {
    const tcp::endpoint ep = resolve();
    auto s = std::make_unique<tcp::socket>(io);
    ErrorCode ec;
    for (int attempt = 0;; ++attempt) {
      const Deadline attempt_end = std::min(d, Clock::now() + std::chrono::seconds(2));
      ec = run_until(
          io, attempt_end, [&](auto h) { s->async_connect(ep, h); }, [&] { s->cancel(); });
      if (!ec) break;
      close_socket(*s);
      if (Clock::now() + std::chrono::milliseconds(50) >= d)
        fail("could not connect to rank 0 at " + opt.master_addr + ":" + std::to_string(opt.master_port) + " within " +
             timeout_text() + " (" + std::to_string(attempt + 1) + " attempts; last: " + ec.message() + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    sockets.push_back(std::move(s));
    send(*sockets[0], kHello, hello_payload(opt, host), d, "rank 0");
    blob = expect(*sockets[0], kBlob, d, "rank 0").payload;
  }

  // ---- after the handshake: one pump for every reader ----

  // io_mu, taken promptly: a thread pumping (the watch) ends its slice when someone waits.
  std::unique_lock<std::mutex> lock_io() {
    ++io_waiters;
    asio::post(io, [] {});  // wakes a pump blocked in run_one_until
    std::unique_lock<std::mutex> lk(io_mu);
    --io_waiters;
    return lk;
  }
  // Between slices: lets a waiting thread take io_mu. A vote comes back `urgent` (its return ends the
  // watch's slice); the watch comes back behind the votes.
  void yield_io(std::unique_lock<std::mutex>& lk, bool urgent) {
    lk.unlock();
    if (io_waiters > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    else
      std::this_thread::yield();
    if (urgent)
      lk = lock_io();
    else
      lk.lock();
  }

  // Records the first failure; rank 0 tells every peer why. Holds io_mu.
  void record_failure(const std::string& what) {
    if (failure) return;
    failure = what;
    if (opt.rank == 0) abort_all(what);
    close_all();
  }

  // Drives the connections until a message arrives or `until` (or another thread waits for io_mu),
  // then files every message that arrived. Holds io_mu.
  void pump(Deadline until) {
    if (failure) return;
    reads.resize(sockets.size());
    for (size_t i = 0; i < sockets.size(); ++i) {
      PendingRead& p = reads[i];
      if (p.armed || !sockets[i] || !sockets[i]->is_open()) continue;
      p.armed = true;
      p.done = false;
      asio::async_read(*sockets[i], asio::buffer(p.header), [pp = &p](const ErrorCode& ec, size_t) {
        pp->ec = ec;
        pp->done = true;
      });
    }
    const auto any_done = [&] {
      return std::any_of(reads.begin(), reads.end(), [](const PendingRead& p) { return p.armed && p.done; });
    };
    io.restart();
    while (!any_done() && Clock::now() < until && io_waiters == 0)
      if (io.run_one_until(until) == 0 && io.stopped()) io.restart();
    for (size_t i = 0; i < reads.size() && !failure; ++i) {
      PendingRead& p = reads[i];
      if (!p.armed || !p.done) continue;
      p.armed = false;
      if (p.ec == asio::error::operation_aborted) continue;  // a send's timeout cancelled it: re-armed next time
      const int peer = opt.rank == 0 ? int(i) : 0;
      try {
        check_read(p.ec, peer_name(peer), "a message (liveness watch or vote)");
        file(peer, parse_rest(*sockets[i], p.header, Clock::now() + opt.timeout_ms, peer_name(peer), "a message"));
      } catch (const core::RuntimeFailure& e) {
        record_failure(e.what());
      }
    }
  }

  static std::vector<uint8_t> vote_payload(uint32_t channel, bool ok) {
    std::vector<uint8_t> out(5);
    put_u32(out.data(), channel);
    out[4] = ok ? 1 : 0;
    return out;
  }

  // A vote (rank 0) or a verdict (ranks > 0) into its channel's box.
  void file(int peer, const Msg& m) {
    const std::string who = peer_name(peer);
    if ((m.type != kVote && m.type != kVerdict) || m.payload.size() != 5 || m.payload[4] > 1)
      fail(who + " sent an unexpected " + type_name(m.type) + " message (" + std::to_string(m.payload.size()) +
           " bytes)");
    const uint32_t channel = get_u32(m.payload.data());
    const bool ok = m.payload[4] == 1;
    if (opt.rank == 0 && m.type == kVote) {
      std::vector<int8_t>& box = votes[channel];
      box.resize(size_t(opt.world_size), -1);
      if (box[size_t(peer)] != -1)
        fail(who + " voted twice on channel " + std::to_string(channel) +
             " before the verdict (do all ranks run the "
             "same command?)");
      box[size_t(peer)] = ok ? 1 : 0;
    } else if (opt.rank != 0 && m.type == kVerdict) {
      if (!verdicts.emplace(channel, ok).second) fail("rank 0 sent two verdicts on channel " + std::to_string(channel));
    } else {
      fail(who + " sent a " + std::string(type_name(m.type)) + " message to rank " + std::to_string(opt.rank));
    }
  }

  // Rank 0: the AND of every rank's vote on `channel` once all voted (sent to each), else nothing.
  std::optional<bool> decide(uint32_t channel, bool own, Deadline d) {
    std::vector<int8_t>& box = votes[channel];
    box.resize(size_t(opt.world_size), -1);
    bool all = own;
    for (int r = 1; r < opt.world_size; ++r) {
      if (box[size_t(r)] < 0) return std::nullopt;
      all = all && box[size_t(r)] == 1;
    }
    votes.erase(channel);
    for (int r = 1; r < opt.world_size; ++r)
      send(*sockets[size_t(r)], kVerdict, vote_payload(channel, all), d, peer_name(r));
    return all;
  }

  std::string missing_votes(uint32_t channel) {
    std::string missing;
    const std::vector<int8_t>& box = votes[channel];
    for (int r = 1; r < opt.world_size; ++r)
      if (size_t(r) >= box.size() || box[size_t(r)] < 0) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    return "ranks {" + missing + "}";
  }

  // Every rank's `ok` on `channel`, ANDed by rank 0; RuntimeFailure on a timeout or a lost peer.
  bool vote(uint32_t channel, bool ok, Deadline d) {
    std::unique_lock<std::mutex> lk = lock_io();
    try {
      if (failure) fail("earlier failure: " + *failure);
      if (opt.rank != 0) send(*sockets[0], kVote, vote_payload(channel, ok), d, "rank 0");
      for (;;) {
        if (failure) throw core::RuntimeFailure(*failure);
        if (opt.rank == 0) {
          if (const std::optional<bool> all = decide(channel, ok, d)) return *all;
        } else if (auto it = verdicts.find(channel); it != verdicts.end()) {
          const bool all = it->second;
          verdicts.erase(it);
          return all;
        }
        if (Clock::now() >= d)
          fail("timed out after " + timeout_text() + " waiting for " +
               (opt.rank == 0 ? missing_votes(channel) + " to vote" : std::string("rank 0's verdict")) +
               " on channel " + std::to_string(channel));
        pump(std::min(d, Clock::now() + kPumpSliceMs));
        yield_io(lk, true);
      }
    } catch (const core::RuntimeFailure& e) {
      record_failure(e.what());
      throw;
    }
  }

  std::optional<std::string> watch_for(std::chrono::milliseconds timeout_ms) {
    const Deadline d = Clock::now() + timeout_ms;
    if (opt.world_size == 1) {  // nothing to watch
      while (Clock::now() < d && !stop_watching) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return std::nullopt;
    }
    std::unique_lock<std::mutex> lk(io_mu);
    while (!failure && Clock::now() < d && !stop_watching) {
      pump(std::min(d, Clock::now() + kPumpSliceMs));
      yield_io(lk, false);
    }
    return failure;
  }
};

Rendezvous::Rendezvous(const RendezvousOptions& options, std::vector<uint8_t> blob)
    : impl_(std::make_unique<Impl>(options)) {
  const RendezvousOptions& o = options;
  if (o.world_size < 1)
    throw core::InputError("rendezvous: world_size " + std::to_string(o.world_size) + ": expected >= 1");
  if (o.rank < 0 || o.rank >= o.world_size)
    throw core::InputError("rendezvous: rank " + std::to_string(o.rank) + ": expected 0.." +
                           std::to_string(o.world_size - 1));
  if (o.local_world_size < 1 || o.local_rank < 0 || o.local_rank >= o.local_world_size)
    throw core::InputError("rendezvous: local rank " + std::to_string(o.local_rank) + " of local world size " +
                           std::to_string(o.local_world_size) + ": expected 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE");
  if (o.timeout_ms.count() <= 0)
    throw core::InputError("rendezvous: timeout_ms " + std::to_string(o.timeout_ms.count()) + ": expected > 0");
  if (o.rank == 0 && blob.size() > kMaxPayloadBytes)
    throw core::InputError("rendezvous: blob of " + std::to_string(blob.size()) + " bytes; at most " +
                           std::to_string(kMaxPayloadBytes));
  if (o.world_size == 1) {
    impl_->blob = std::move(blob);
    return;
  }
  const Deadline d = Clock::now() + o.timeout_ms;
  try {
    if (o.rank == 0) {
      impl_->blob = std::move(blob);
      impl_->serve(d);
    } else {
      impl_->join(d);
    }
  } catch (const core::RuntimeFailure& e) {
    if (o.rank == 0) impl_->abort_all(e.what());
    impl_->close_all();
    throw;
  }
  impl_->vote(kBarrierChannel, true, d);
}

Rendezvous::~Rendezvous() = default;

const std::vector<uint8_t>& Rendezvous::blob() const { return impl_->blob; }
int Rendezvous::rank() const { return impl_->opt.rank; }
int Rendezvous::world_size() const { return impl_->opt.world_size; }

void Rendezvous::barrier() { barrier(impl_->opt.timeout_ms); }
void Rendezvous::barrier(std::chrono::milliseconds timeout_ms) {
  if (impl_->opt.world_size > 1) impl_->vote(kBarrierChannel, true, Clock::now() + timeout_ms);
}

bool Rendezvous::all_ok(bool ok, uint32_t channel) { return all_ok(ok, channel, impl_->opt.timeout_ms); }
bool Rendezvous::all_ok(bool ok, uint32_t channel, std::chrono::milliseconds timeout_ms) {
  if (channel == kBarrierChannel) throw std::logic_error("Rendezvous::all_ok: channel 0 is barrier()'s");
  if (impl_->opt.world_size == 1) return ok;
  return impl_->vote(channel, ok, Clock::now() + timeout_ms);
}

std::optional<std::string> Rendezvous::watch_for(std::chrono::milliseconds timeout_ms) {
  if (impl_->watcher.joinable()) throw std::logic_error("Rendezvous::watch_for() while a background watch runs");
  return impl_->watch_for(timeout_ms);
}

void Rendezvous::start_watch(std::function<void(const std::string&)> on_failure) {
  if (impl_->watcher.joinable()) throw std::logic_error("Rendezvous::start_watch(): a watch already runs");
  Impl* impl = impl_.get();
  impl->stop_watching = false;
  impl->watcher = std::thread([impl, cb = std::move(on_failure)] {
    while (!impl->stop_watching) {
      if (auto what = impl->watch_for(std::chrono::milliseconds(100))) {
        if (cb) cb(*what);
        return;
      }
    }
  });
}

void Rendezvous::stop_watch() { impl_->stop_watch(); }

std::string check_rank_places(const std::vector<RankPlace>& places) {
  std::map<std::string, std::vector<const RankPlace*>> by_host;
  for (const RankPlace& p : places) by_host[p.host].push_back(&p);
  for (auto& [host, ranks] : by_host) {
    std::sort(ranks.begin(), ranks.end(), [](const RankPlace* a, const RankPlace* b) { return a->rank < b->rank; });
    std::string list;
    for (const RankPlace* p : ranks) {
      if (!list.empty()) list += ',';
      list += std::to_string(p->rank);
    }
    const std::string where = "host '" + host + "'";
    for (const RankPlace* p : ranks)
      if (p->local_world_size != int(ranks.size()))
        return "rank " + std::to_string(p->rank) + " on " + where +
               " has LOCAL_WORLD_SIZE=" + std::to_string(p->local_world_size) + ", but the launcher started " +
               std::to_string(ranks.size()) + " rank(s) there (ranks " + list +
               "): set LOCAL_WORLD_SIZE to the ranks per host";
    std::map<int, int> seen;  // local rank -> rank
    for (const RankPlace* p : ranks) {
      if (p->local_rank < 0 || p->local_rank >= int(ranks.size()))
        return "rank " + std::to_string(p->rank) + " on " + where + " has LOCAL_RANK=" + std::to_string(p->local_rank) +
               ", outside 0.." + std::to_string(ranks.size() - 1);
      if (auto [it, fresh] = seen.emplace(p->local_rank, p->rank); !fresh)
        return "ranks " + std::to_string(it->second) + " and " + std::to_string(p->rank) + " on " + where +
               " both have LOCAL_RANK=" + std::to_string(p->local_rank);
    }
  }
  return {};
}

std::string host_identity() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) std::snprintf(name, sizeof name, "unknown");
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  return std::string(name) + (boot.empty() ? "" : " (boot " + boot.substr(0, 8) + ")");
}

core::RankBarrier rank_barrier(Rendezvous& rdv, uint32_t channel, std::chrono::milliseconds timeout_ms) {
  return [&rdv, channel, timeout_ms](bool ok) { return rdv.all_ok(ok, channel, timeout_ms); };
}

}  // namespace tf::backend::launch
