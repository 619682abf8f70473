// The /metrics endpoint over real loopback sockets: what it serves, what it refuses, and that it survives
// malformed requests, slow clients, connection floods and 100 concurrent scrapes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "metrics/http_server.h"
#include "metrics/step_metrics.h"

namespace tf::metrics {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A blocking loopback client socket.
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  bool connected() const { return connected_; }

  bool send(const std::string& s) {
    for (size_t off = 0; off < s.size();) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Reads until the server closes the connection or `timeout` passes; closed() says which.
  std::string read_all(milliseconds timeout) {
    std::string out;
    const auto end = Clock::now() + timeout;
    closed_ = false;
    while (Clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      const int left = int(std::chrono::duration_cast<milliseconds>(end - Clock::now()).count());
      if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        closed_ = true;
        close_reason_ = n == 0 ? "end of stream" : std::strerror(errno);
        break;
      }
      out.append(buf, size_t(n));
    }
    return out;
  }
  const std::string& close_reason() const { return close_reason_; }
  // Reads one response whose length is given by Content-Length (keep-alive connections).
  std::string read_response(milliseconds timeout) {
    const auto end = Clock::now() + timeout;
    while (Clock::now() < end) {
      const size_t head = pending_.find("\r\n\r\n");
      if (head != std::string::npos) {
        const size_t cl = pending_.find("Content-Length: ");
        const size_t len = cl < head ? std::stoul(pending_.substr(cl + 16)) : 0;
        if (pending_.size() >= head + 4 + len) {
          std::string r = pending_.substr(0, head + 4 + len);
          pending_.erase(0, head + 4 + len);
          return r;
        }
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      pending_.append(buf, size_t(n));
    }
    return {};
  }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  bool connected_ = false, closed_ = false;
  std::string close_reason_;  // read_all's: end of stream, or recv's error
  std::string pending_;
};

// Where `got` first differs from `want`, with both sides' next bytes ("" when equal).
std::string first_difference(const std::string& got, const std::string& want) {
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  if (at == got.size() && at == want.size()) return "";
  const size_t from = at < 80 ? 0 : at - 80;
  return "; first difference at byte " + std::to_string(at) + ": got \"" + got.substr(from, 160) + "\", want \"" +
         want.substr(from, 160) + "\"";
}

int status_of(const std::string& response) {
  return response.starts_with("HTTP/1.") && response.size() > 12 ? std::stoi(response.substr(9, 3)) : -1;
}
std::string body_of(const std::string& response) {
  const size_t p = response.find("\r\n\r\n");
  return p == std::string::npos ? "" : response.substr(p + 4);
}

std::string get(uint16_t port, const std::string& target, milliseconds timeout = milliseconds(5000)) {
  Client c(port);
  if (!c.connected()) return "connect failed";
  c.send("GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  return c.read_all(timeout);
}

// A registry the size of a simulated 8-rank run.
void fill(Registry& r) {
  StepSample s;
  s.step = 1;
  s.step_seconds = 3.4;
  s.phase_seconds.fill(0.2);
  s.queue_busy.fill(0.5);
  s.offload_ratio = 0.3;
  s.memory = {{"gpu", "params", 1 << 30}, {"host", "optimizer", 1 << 30}};
  for (int rank = 0; rank < 8; ++rank) publish(r, s, {rank, "opt-30b-dgx-h100", "sim"});
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { fill(registry); }
  Registry registry;
};

TEST_F(ServerTest, ServesMetricsAndHealthOnAnEphemeralPort) {
  MetricsServer server(registry, {});
  ASSERT_NE(server.port(), 0);
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");
  const std::string r = get(server.port(), "/metrics");
  EXPECT_EQ(status_of(r), 200) << r.substr(0, 200);
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos);
  EXPECT_EQ(body_of(r), registry.expose());
  EXPECT_EQ(status_of(get(server.port(), "/metrics?name[]=x")), 200);  // query strings are ignored
  const std::string h = get(server.port(), "/healthz");
  EXPECT_EQ(status_of(h), 200);
  EXPECT_EQ(body_of(h), "ok\n");
  EXPECT_EQ(server.stats().scrapes, 2u);
}

TEST_F(ServerTest, WrongPathIs404AndWrongMethodIs405) {
  MetricsServer server(registry, {});
  for (const char* path : {"/", "/metrics/", "/metricsx", "/../metrics", "/favicon.ico", "*"})
    EXPECT_EQ(status_of(get(server.port(), path)), 404) << path;
  for (const char* method : {"POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"}) {
    Client c(server.port());
    c.send(std::string(method) + " /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string r = c.read_all(milliseconds(5000));
    EXPECT_EQ(status_of(r), 405) << method;
    EXPECT_NE(r.find("Allow: GET\r\n"), std::string::npos) << r;
  }
  EXPECT_EQ(status_of(get(server.port(), "/metrics")), 200);
}

TEST_F(ServerTest, MalformedRequestsAreAnsweredAndTheServerKeepsServing) {
  ServerOptions o;
  o.read_timeout = milliseconds(2000);
  MetricsServer server(registry, o);
  const std::vector<std::string> garbage = {
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "GET /metrics HTTP/9.9\r\n\r\n",  // only HTTP/1.0 and 1.1
      "GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost x\r\n\r\n",                                // header without colon
      "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",                // a body on GET
      "GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n",                    // bad length
      "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",  // bad chunk
      std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) + std::string(300, '\xAB') + "\r\n\r\n",  // TLS
      std::string(4000, '\0') + "\r\n\r\n",
  };
  for (const std::string& g : garbage) {
    Client c(server.port());
    c.send(g);
    const std::string r = c.read_all(milliseconds(5000));
    EXPECT_EQ(status_of(r), 400) << "request " << ::testing::PrintToString(g.substr(0, 40)) << " got " << r;
    EXPECT_TRUE(c.closed());
  }
  {  // headers beyond the limit: 431
    Client c(server.port());
    c.send("GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
    EXPECT_EQ(status_of(c.read_all(milliseconds(5000))), 431);
  }
  {  // a client that gives up mid-request
    Client c(server.port());
    c.send("GET /met");
  }
  EXPECT_EQ(server.stats().bad_requests, garbage.size() + 1);
  EXPECT_EQ(status_of(get(server.port(), "/metrics")), 200);
}

TEST_F(ServerTest, SlowClientsAreCutOffByTheReadDeadlineWithoutBlockingOthers) {
  ServerOptions o;
  o.read_timeout = milliseconds(1500);
  o.idle_timeout = milliseconds(1500);  // `silent` below sends nothing: it is idle, not slow
  o.threads = 1;                        // even a single I/O thread is not held by a slow client
  MetricsServer server(registry, o);
  const auto t0 = Clock::now();
  Client silent(server.port());  // connects and sends nothing
  Client partial(server.port());
  partial.send("GET /metrics HTTP/1.1\r\nHost: x\r\n");  // never finishes its headers
  std::thread drip([&] {  // one byte every 50 ms: the request would take 7 s, far beyond the deadline
    Client c(server.port());
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(100, 'a') + "\r\n\r\n";
    for (char ch : req) {
      if (!c.send(std::string(1, ch))) break;  // fails once the server closed the connection
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  // Served while three slow clients hold connections, well before their deadline frees anything.
  EXPECT_EQ(status_of(get(server.port(), "/metrics")), 200);
  EXPECT_LT(Clock::now() - t0, milliseconds(1200));
  // The slow ones are closed by the deadline: each read sees EOF (no response) well before 5 s.
  EXPECT_TRUE(silent.read_all(milliseconds(5000)).empty());
  EXPECT_TRUE(silent.closed());
  EXPECT_TRUE(partial.read_all(milliseconds(5000)).empty());
  EXPECT_TRUE(partial.closed());
  EXPECT_LT(Clock::now() - t0, milliseconds(4000));
  drip.join();
  EXPECT_LT(Clock::now() - t0, milliseconds(6000));
  EXPECT_EQ(server.stats().timeouts, 3u);
  EXPECT_EQ(status_of(get(server.port(), "/metrics")), 200);
}

TEST_F(ServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  MetricsServer server(registry, {});
  Client c(server.port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_EQ(body_of(c.read_response(milliseconds(5000))), "ok\n");
  }
  ASSERT_TRUE(c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(body_of(c.read_response(milliseconds(5000))), registry.expose());
  EXPECT_EQ(server.stats().connections, 1u);
}

TEST_F(ServerTest, HundredConcurrentScrapes) {
  ServerOptions o;
  // Every client connects, then waits at the barrier for the 99 others: on a loaded 2-core CI machine under
  // ASan that wait outlasted the default 5 s idle timeout and the server closed the early ones (as it should).
  // This test is about serving 100 at once, not about idleness (IdleConnectionsAreClosedAfterTheIdleTimeout tests
  // that).
  o.idle_timeout = milliseconds(120000);
  o.read_timeout = milliseconds(120000);
  MetricsServer server(registry, o);
  const std::string want = registry.expose();
  constexpr int kClients = 100;
  std::vector<double> ms(kClients, -1);
  std::vector<int> status(kClients, -1);
  // char, not bool: std::vector<bool> packs 64 clients into one word, and the clients' concurrent writes to it
  // raced (lost updates made bodies that matched read as differing: the CI failure of 2026-11-24)
  std::vector<char> same(kClients, 0);
  std::vector<std::string> why(kClients);
  std::barrier start(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      Client c(server.port());  // all connected before anyone sends
      start.arrive_and_wait();
      const auto t0 = Clock::now();
      c.send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      const std::string r = c.read_all(milliseconds(20000));
      ms[size_t(i)] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      status[size_t(i)] = status_of(r);
      const bool equal = body_of(r) == want;
      same[size_t(i)] = equal;
      if (!equal)
        why[size_t(i)] = "body " + std::to_string(body_of(r).size()) + " of " + std::to_string(want.size()) +
                         " bytes, " + (c.closed() ? "closed: " + c.close_reason() : std::string("not closed")) +
                         first_difference(body_of(r), want);
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(status[size_t(i)], 200) << "client " << i;
    EXPECT_TRUE(same[size_t(i)]) << "client " << i << ": " << why[size_t(i)];
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  std::printf("100 concurrent scrapes of %zu bytes: latency p50 %.1f ms, p95 %.1f ms, max %.1f ms\n", want.size(),
              sorted[49], sorted[94], sorted[99]);
  EXPECT_EQ(server.stats().scrapes, uint64_t(kClients));
  EXPECT_LT(sorted[99], 10000.0);
}

TEST_F(ServerTest, AtTheLimitANewConnectionTakesTheLongestIdleOnesPlace) {
  ServerOptions o;
  o.max_connections = 2;
  MetricsServer server(registry, o);
  auto a = std::make_unique<Client>(server.port());
  auto b = std::make_unique<Client>(server.port());
  a->send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");  // both accepted, served, then idle (kept alive)
  EXPECT_EQ(status_of(a->read_response(milliseconds(5000))), 200);
  b->send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(b->read_response(milliseconds(5000))), 200);
  // Both idle again on the server's side (opened, then served: two idle waits each). A client has its
  // response before the server's write handler marks the connection idle: under load `a` could still be busy
  // when the third arrives, and `b` was taken instead (seen once in CI on a loaded 2-core machine).
  for (const auto deadline = Clock::now() + milliseconds(5000);
       server.stats().idle_waits < 4 && Clock::now() < deadline;)
    std::this_thread::sleep_for(milliseconds(1));
  ASSERT_EQ(server.stats().idle_waits, 4u);
  // a third is served; `a`, idle longest, is closed to make room
  EXPECT_EQ(status_of(get(server.port(), "/metrics")), 200);
  EXPECT_TRUE(a->read_all(milliseconds(5000)).empty());
  EXPECT_TRUE(a->closed());
  EXPECT_EQ(server.stats().evicted, 1u);
  EXPECT_EQ(server.stats().rejected, 0u);
}

TEST_F(ServerTest, ConnectionsBeyondTheLimitAreClosedWhenNoneIsIdle) {
  ServerOptions o;
  o.max_connections = 2;
  MetricsServer server(registry, o);
  // two connections in the middle of a request: busy, not idle
  auto a = std::make_unique<Client>(server.port());
  auto b = std::make_unique<Client>(server.port());
  a->send("GET /metrics HTTP/1.1\r\n");
  b->send("GET /metrics HTTP/1.1\r\n");
  for (int i = 0; i < 200 && server.stats().connections < 2; ++i) std::this_thread::sleep_for(milliseconds(5));
  std::this_thread::sleep_for(milliseconds(50));  // both sessions have seen their first bytes
  Client third(server.port());
  third.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(third.read_all(milliseconds(5000)), "");
  EXPECT_TRUE(third.closed());
  EXPECT_EQ(server.stats().rejected, 1u);
  a.reset();
  b.reset();
  std::string r;
  for (int i = 0; i < 100 && status_of(r) != 200; ++i) {  // the server notices the closed connections
    std::this_thread::sleep_for(milliseconds(20));
    r = get(server.port(), "/metrics");
  }
  EXPECT_EQ(status_of(r), 200);
}

// Issue 19: 600 idle connections (more than the default cap of 512) must not hold a real scrape back.
TEST_F(ServerTest, SixHundredIdleConnectionsDoNotDelayAScrape) {
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  const rlim_t need = 1400;  // 600 client sockets + up to 512 server sockets + the process's own
  if (lim.rlim_cur < need) {
    if (lim.rlim_max < need) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << lim.rlim_max << " < " << need;
    rlimit raised = lim;
    raised.rlim_cur = need;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &raised), 0);
  }
  ServerOptions o;
  o.idle_timeout = milliseconds(120000);  // the 600 stay idle however slowly this machine opens them
  MetricsServer server(registry, o);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 600; ++i) {
    idle.push_back(std::make_unique<Client>(server.port()));
    ASSERT_TRUE(idle.back()->connected()) << i;
  }
  for (int i = 0; i < 2000 && server.stats().connections < 600; ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(server.stats().connections, 600u);
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    const std::string r = get(server.port(), "/metrics");
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    EXPECT_EQ(status_of(r), 200);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("5 scrapes beside 600 idle connections: median %.1f ms, max %.1f ms; %llu evicted\n", ms[2], ms[4],
              static_cast<unsigned long long>(server.stats().evicted));
  EXPECT_LT(ms[2], 100.0);
  EXPECT_LT(ms[4], 1000.0);
  EXPECT_EQ(server.stats().rejected, 0u);
  EXPECT_GE(server.stats().evicted, 600u - 512u);  // the 88 beyond the cap took idle ones' places
  idle.clear();
  if (lim.rlim_cur < need) setrlimit(RLIMIT_NOFILE, &lim);
}

TEST_F(ServerTest, IdleConnectionsAreClosedAfterTheIdleTimeout) {
  ServerOptions o;
  o.idle_timeout = milliseconds(300);
  MetricsServer server(registry, o);
  Client c(server.port());
  ASSERT_TRUE(c.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(c.read_response(milliseconds(5000))), 200);
  const auto t0 = Clock::now();
  EXPECT_TRUE(c.read_all(milliseconds(5000)).empty());  // then nothing: closed while idle
  EXPECT_TRUE(c.closed());
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
  EXPECT_LT(Clock::now() - t0, milliseconds(3000));
  EXPECT_EQ(server.stats().timeouts, 0u);  // it had been served: an idle close, not a slow client
}

TEST(ServerHelpers, ExposureWarningForAddressesBeyondLoopback) {
  EXPECT_FALSE(exposure_warning("127.0.0.1", 9464).has_value());
  EXPECT_FALSE(exposure_warning("::1", 9464).has_value());
  const auto any = exposure_warning("0.0.0.0", 9464);
  ASSERT_TRUE(any.has_value());
  EXPECT_NE(any->find("metrics are served on 0.0.0.0:9464, every network interface of this machine: anyone who can "
                      "reach it can read /metrics"),
            std::string::npos)
      << *any;
  ASSERT_TRUE(exposure_warning("::", 1).has_value());
  ASSERT_TRUE(exposure_warning("192.168.1.5", 1).has_value());
  EXPECT_NE(exposure_warning("192.168.1.5", 1)->find("a network interface"), std::string::npos);
}

TEST(ServerHelpers, AnswerRequestRoutesAsTheServerDoes) {
  Registry reg;
  reg.gauge("twinflow_x", "x").with({}).set(2);
  const ServerOptions o;
  HttpAnswer a = answer_request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", reg, o);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, reg.expose());
  EXPECT_EQ(a.content_type, kTextContentType);
  EXPECT_TRUE(a.keep_alive);
  EXPECT_EQ(answer_request("GET /healthz HTTP/1.0\r\n\r\n", reg, o).body, "ok\n");
  EXPECT_EQ(answer_request("POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n", reg, o).status, 405);
  EXPECT_EQ(answer_request("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", reg, o).status, 404);
  EXPECT_EQ(answer_request("GARBAGE\r\n\r\n", reg, o).status, 400);
  EXPECT_EQ(answer_request("GET /metrics HTTP/1.1\r\nHost: x\r\n", reg, o).status, 0);  // not whole yet
  EXPECT_EQ(answer_request("GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n", reg, o).status, 431);
  EXPECT_EQ(answer_request("GET /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", reg, o).status, 400);
}

TEST_F(ServerTest, BindErrorsSayWhatToDo) {
  MetricsServer first(registry, {});
  ServerOptions o;
  o.port = first.port();
  try {
    MetricsServer second(registry, o);
    FAIL() << "bound the same port twice";
  } catch (const core::RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("pick another port, or 0 for a free one"), std::string::npos) << e.what();
  }
  o.address = "localhost:80";
  EXPECT_THROW(MetricsServer(registry, o), core::InputError);
  o.address = "::1";
  o.port = 0;
  try {
    MetricsServer v6(registry, o);
    EXPECT_EQ(v6.url(), "http://[::1]:" + std::to_string(v6.port()) + "/metrics");
  } catch (const core::RuntimeFailure&) {
    GTEST_SKIP() << "no IPv6 loopback on this machine";
  }
}

TEST_F(ServerTest, StopClosesEverythingAndIsIdempotent) {
  auto server = std::make_unique<MetricsServer>(registry, ServerOptions{});
  const uint16_t port = server->port();
  Client idle(port);
  idle.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(idle.read_response(milliseconds(5000))), 200);
  server->stop();
  server->stop();
  idle.read_all(milliseconds(2000));
  EXPECT_TRUE(idle.closed());
  EXPECT_FALSE(Client(port).connected());
  server.reset();
}

TEST_F(ServerTest, ScrapesWhilePublishing) {
  MetricsServer server(registry, {});
  std::atomic<bool> done{false};
  std::thread writer([&] {
    StepSample s;
    s.step_seconds = 0.1;
    for (int i = 0; !done; ++i) {
      s.step = i;
      publish(registry, s, {i % 4, "live", "sim"});
    }
  });
  for (int i = 0; i < 50; ++i) ASSERT_EQ(status_of(get(server.port(), "/metrics")), 200);
  done = true;
  writer.join();
}

}  // namespace
}  // namespace tf::metrics
