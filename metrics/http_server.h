// The metrics endpoint: a small HTTP/1.1 server (Boost.Beast) serving a Registry's exposition at GET /metrics
// and "ok" at GET /healthz; everything else is 404 (unknown path) or 405 (another method on a known path).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "metrics/registry.h"

namespace tf::metrics {

struct ServerOptions {
  std::string address = "127.0.0.1";  // numeric IPv4/IPv6 address to bind; "0.0.0.0" exposes it to the network
  uint16_t port = 0;                  // 0: an ephemeral port (MetricsServer::port() says which)
  int threads = 2;                    // I/O threads
  // A connection that sends nothing of a request for this long (a new one, or a kept-alive one between
  // requests) is idle and is closed.
  std::chrono::milliseconds idle_timeout{5000};
  // A request (its line and headers) must arrive complete within this time after its first byte;
  // otherwise the connection is closed (slow clients).
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds write_timeout{10000};  // a response must be taken by the client within this time
  // Open connections at most. A new one beyond it closes the longest-idle connection in its place (so idle
  // connections never lock out a scrape); only when none is idle is the new one closed at once.
  int max_connections = 512;
  size_t max_header_bytes = 8192;  // request line + headers; more is answered 431
};

// Counts since start (for tests and logs).
struct ServerStats {
  uint64_t connections = 0;   // accepted
  uint64_t requests = 0;      // parsed requests, whatever the answer
  uint64_t scrapes = 0;       // 200 answers to GET /metrics
  uint64_t bad_requests = 0;  // unparsable requests (answered 400/413/431, then closed)
  uint64_t timeouts = 0;      // connections closed by the read or write deadline, or idle without a request
  uint64_t rejected = 0;      // connections closed at once: max_connections open and none idle
  uint64_t evicted = 0;       // idle connections closed to make room for a new one
  // Times a connection began to wait idle for a request (once opened, and after each response it was kept
  // open for): from then on it may be evicted.
  uint64_t idle_waits = 0;
};

// The warning to print when metrics are served on `address` beyond this machine (0.0.0.0, ::, or any
// address that is not loopback): /metrics has no authentication. Nothing for a loopback address.
std::optional<std::string> exposure_warning(const std::string& address, uint16_t port);

// The server's answer to one request that arrives as these bytes: the same parser settings and routing as
// its connections (for tests and the fuzzer). status 0: the bytes are not a whole request yet.
struct HttpAnswer {
  int status = 0;
  std::string content_type;
  std::string body;
  bool keep_alive = false;
};
HttpAnswer answer_request(std::string_view bytes, const Registry& registry, const ServerOptions& options);

class MetricsServer {
 public:
  // Binds, listens and starts serving on background threads. The registry must outlive the server.
  // core::InputError for an address that is not numeric; core::RuntimeFailure when the port cannot be bound.
  MetricsServer(const Registry& registry, const ServerOptions& options);
  ~MetricsServer();  // stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const;    // the bound port
  std::string url() const;  // e.g. "http://127.0.0.1:9464/metrics" (IPv6 addresses in brackets)
  ServerStats stats() const;
  void stop();  // closes the listener and every connection, joins the threads; idempotent

  static constexpr const char* kMetricsPath = "/metrics";
  static constexpr const char* kHealthPath = "/healthz";

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::metrics
