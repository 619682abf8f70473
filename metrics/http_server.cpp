// The metrics endpoint: a small HTTP/1.1 server (Boost.Beast) serving a Registry's exposition at GET /metrics
// and "ok" at GET /healthz.
#include "metrics/http_server.h"

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <exception>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>  // before Boost 1.74 Asio, which uses std::exchange without it
#include <vector>

#include "core/error.h"

namespace tf::metrics {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using ErrorCode = beast::error_code;

namespace {

bool is_parse_error(const ErrorCode& ec) {
  return &ec.category() == &http::make_error_code(http::error::bad_method).category();
}

// What the sessions share with the server.
struct Shared {
  const Registry& registry;
  const ServerOptions opt;
  std::atomic<uint64_t> connections{0}, requests{0}, scrapes{0}, bad_requests{0}, timeouts{0}, rejected{0};
  std::atomic<int> live{0};  // open sessions
};

}  // namespace

struct MetricsServer::Impl {
  Shared shared;  // declared before the I/O objects: sessions destroyed with the io_context still update it
  uint16_t bound_port = 0;
  std::string bound_address;

  std::unique_ptr<asio::io_context> io;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<asio::steady_timer> retry_timer;  // re-arms accept after a transient failure (e.g. EMFILE)
  std::vector<std::thread> threads;
  std::mutex stop_mutex;
  bool stopped = false;

  Impl(const Registry& r, const ServerOptions& o) : shared{r, o} {}

  void accept();
  void stop();
};

namespace {

// One connection: read a request (with a deadline), answer it, repeat while the client keeps it alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, Shared& server) : stream_(std::move(socket)), server_(server) { ++server_.live; }
  ~Session() { --server_.live; }

  void start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(uint32_t(server_.opt.max_header_bytes));
    stream_.expires_after(server_.opt.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](ErrorCode ec, size_t) { self->on_read(ec); });
  }

  void on_read(ErrorCode ec) {
    if (ec == beast::error::timeout) {
      // A slow client (nothing complete in time) counts; an idle keep-alive connection is just closed.
      if (served_ == 0 || parser_->got_some()) ++server_.timeouts;
      return close();
    }
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof)
      return close();  // the client closed the connection (possibly mid-request): nobody to answer
    if (ec && is_parse_error(ec)) {
      ++server_.requests;
      ++server_.bad_requests;
      if (ec == http::error::header_limit)
        return respond(http::status::request_header_fields_too_large, 11, false, "text/plain; charset=utf-8",
                       "request line and headers exceed " + std::to_string(server_.opt.max_header_bytes) + " bytes\n");
      return respond(http::status::bad_request, 11, false, "text/plain; charset=utf-8",
                     "bad request: " + ec.message() + "; this server answers GET /metrics and GET /healthz\n");
    }
    if (ec) return close();  // reset, aborted by stop(), ...
    ++server_.requests;
    handle(parser_->get());
  }

  void handle(const http::request<http::empty_body>& req) {
    std::string_view target(req.target().data(), req.target().size());
    target = target.substr(0, target.find('?'));  // a query string is ignored
    const bool metrics = target == MetricsServer::kMetricsPath, health = target == MetricsServer::kHealthPath;
    const bool keep = req.keep_alive();
    const char* plain = "text/plain; charset=utf-8";
    if (!metrics && !health)
      return respond(http::status::not_found, req.version(), keep, plain,
                     "not found: this server answers GET /metrics and GET /healthz\n");
    if (req.method() != http::verb::get)
      return respond(http::status::method_not_allowed, req.version(), keep, plain,
                     "method " + std::string(req.method_string()) + " not allowed: use GET\n");
    if (health) return respond(http::status::ok, req.version(), keep, plain, "ok\n");
    std::string body = server_.registry.expose();
    ++server_.scrapes;
    respond(http::status::ok, req.version(), keep, kTextContentType, std::move(body));
  }

  void respond(http::status status, unsigned version, bool keep_alive, const char* content_type, std::string body) {
    res_ = {};
    res_.result(status);
    res_.version(version);
    res_.set(http::field::server, "twinflow");
    res_.set(http::field::content_type, content_type);
    res_.set(http::field::cache_control, "no-store");
    if (status == http::status::method_not_allowed) res_.set(http::field::allow, "GET");
    res_.keep_alive(keep_alive);
    res_.body() = std::move(body);
    res_.prepare_payload();
    stream_.expires_after(server_.opt.write_timeout);
    http::async_write(stream_, res_, [self = shared_from_this()](ErrorCode ec, size_t) { self->on_write(ec); });
  }

  void on_write(ErrorCode ec) {
    if (ec == beast::error::timeout) ++server_.timeouts;
    if (ec || res_.need_eof()) return close();
    ++served_;
    read();
  }

  void close() {
    ErrorCode ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;  // one per request
  http::response<http::string_body> res_;                         // kept alive until written
  uint64_t served_ = 0;                                           // responses written on this connection
  Shared& server_;
};

}  // namespace

void MetricsServer::Impl::accept() {
  acceptor->async_accept(asio::make_strand(*io), [this](ErrorCode ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {  // e.g. too many open files: try again shortly instead of spinning
      retry_timer->expires_after(std::chrono::milliseconds(50));
      retry_timer->async_wait([this](ErrorCode e) {
        if (!e) accept();
      });
      return;
    }
    ++shared.connections;
    if (shared.live.load() >= shared.opt.max_connections) {
      ++shared.rejected;
      ErrorCode ignored;
      socket.close(ignored);
    } else {
      std::make_shared<Session>(std::move(socket), shared)->start();
    }
    accept();
  });
}

void MetricsServer::Impl::stop() {
  std::lock_guard<std::mutex> lock(stop_mutex);
  if (stopped) return;
  stopped = true;
  io->stop();
  for (auto& t : threads) t.join();
  threads.clear();
  // Destroying the io_context destroys the pending handlers, and with them every session and its socket.
  retry_timer.reset();
  acceptor.reset();
  io.reset();
}

MetricsServer::MetricsServer(const Registry& registry, const ServerOptions& options)
    : impl_(std::make_unique<Impl>(registry, options)) {
  Impl& m = *impl_;
  if (options.threads < 1 || options.threads > 64)
    throw core::InputError("metrics server: threads " + std::to_string(options.threads) + " is not in [1, 64]");
  if (options.max_connections < 1) throw core::InputError("metrics server: max_connections must be >= 1");
  ErrorCode ec;
  const asio::ip::address addr = asio::ip::make_address(options.address, ec);
  if (ec)
    throw core::InputError("metrics address '" + options.address +
                           "' is not a numeric IP address; use e.g. 127.0.0.1 (this machine only), 0.0.0.0 or ::");
  m.io = std::make_unique<asio::io_context>(options.threads);
  m.acceptor = std::make_unique<tcp::acceptor>(asio::make_strand(*m.io));
  m.retry_timer = std::make_unique<asio::steady_timer>(m.acceptor->get_executor());
  const tcp::endpoint ep(addr, options.port);
  m.acceptor->open(ep.protocol(), ec);
  if (!ec) m.acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) m.acceptor->bind(ep, ec);
  if (!ec) m.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw core::RuntimeFailure("metrics server: cannot listen on " + options.address + ":" +
                               std::to_string(options.port) + ": " + ec.message() +
                               (ec == asio::error::address_in_use ? "; pick another port, or 0 for a free one" : ""));
  m.bound_port = m.acceptor->local_endpoint().port();
  m.bound_address = addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
  m.accept();
  for (int i = 0; i < options.threads; ++i)
    m.threads.emplace_back([io = m.io.get()] {
      for (;;) {
        try {
          io->run();
          return;
        } catch (const std::exception& e) {  // e.g. bad_alloc while exposing: drop that connection, keep serving
          std::fprintf(stderr, "metrics server: %s\n", e.what());
        }
      }
    });
}

MetricsServer::~MetricsServer() { stop(); }

void MetricsServer::stop() { impl_->stop(); }

uint16_t MetricsServer::port() const { return impl_->bound_port; }

std::string MetricsServer::url() const {
  return "http://" + impl_->bound_address + ":" + std::to_string(impl_->bound_port) + kMetricsPath;
}

ServerStats MetricsServer::stats() const {
  const Shared& m = impl_->shared;
  return {m.connections.load(),  m.requests.load(), m.scrapes.load(),
          m.bad_requests.load(), m.timeouts.load(), m.rejected.load()};
}

}  // namespace tf::metrics
