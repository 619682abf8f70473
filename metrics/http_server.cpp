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
#include <list>
#include <mutex>
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

constexpr const char* kPlain = "text/plain; charset=utf-8";

// What to answer: the routing every connection and answer_request() share.
struct Reply {
  http::status status = http::status::ok;
  bool keep_alive = false;
  const char* content_type = kPlain;
  std::string body;
  bool scrape = false;  // a 200 to GET /metrics
};

void configure(http::request_parser<http::empty_body>& parser, const ServerOptions& opt) {
  parser.header_limit(uint32_t(opt.max_header_bytes));
}

// A request that could not be parsed: 431 for headers over the limit, 400 otherwise; then close.
Reply error_reply(const ErrorCode& ec, const ServerOptions& opt) {
  if (ec == http::error::header_limit)
    return {http::status::request_header_fields_too_large, false, kPlain,
            "request line and headers exceed " + std::to_string(opt.max_header_bytes) + " bytes\n"};
  return {http::status::bad_request, false, kPlain,
          "bad request: " + ec.message() + "; this server answers GET /metrics and GET /healthz\n"};
}

Reply route(const http::request<http::empty_body>& req, const Registry& registry) {
  std::string_view target(req.target().data(), req.target().size());
  target = target.substr(0, target.find('?'));  // a query string is ignored
  const bool metrics = target == MetricsServer::kMetricsPath, health = target == MetricsServer::kHealthPath;
  const bool keep = req.keep_alive();
  if (!metrics && !health)
    return {http::status::not_found, keep, kPlain, "not found: this server answers GET /metrics and GET /healthz\n"};
  if (req.method() != http::verb::get)
    return {http::status::method_not_allowed, keep, kPlain,
            "method " + std::string(req.method_string()) + " not allowed: use GET\n"};
  if (health) return {http::status::ok, keep, kPlain, "ok\n"};
  return {http::status::ok, keep, kTextContentType, registry.expose(), true};
}

class Session;

// What the sessions share with the server.
struct Shared {
  Shared(const Registry& r, const ServerOptions& o) : registry(r), opt(o) {}
  const Registry& registry;
  const ServerOptions opt;
  std::atomic<uint64_t> connections{0}, requests{0}, scrapes{0}, bad_requests{0}, timeouts{0}, rejected{0}, evicted{0},
      idle_waits{0};
  std::atomic<int> live{0};  // open sessions
  std::mutex sessions_mutex;
  std::list<std::weak_ptr<Session>> sessions;  // oldest first
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
  void admit(tcp::socket socket);
  void stop();
};

namespace {

// One connection: wait for a request's first byte (idle, with the idle deadline), read it whole (with the read
// deadline), answer, repeat while the client keeps it alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class State : uint8_t { kIdle, kBusy, kEvicted };

  Session(tcp::socket&& socket, Shared& server)
      : stream_(std::move(socket)), idle_timer_(stream_.get_executor()), server_(server) {
    ++server_.live;
  }
  ~Session() {
    --server_.live;
    std::lock_guard<std::mutex> lock(server_.sessions_mutex);
    if (listed_) server_.sessions.erase(self_in_list_);
  }

  void start() {
    {
      std::lock_guard<std::mutex> lock(server_.sessions_mutex);
      self_in_list_ = server_.sessions.insert(server_.sessions.end(), weak_from_this());
      listed_ = true;
    }
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_for_request(); });
  }

  // Claims an idle session for eviction (from the accepting thread); true when it was idle.
  bool claim_idle() {
    State idle = State::kIdle;
    return state_.compare_exchange_strong(idle, State::kEvicted);
  }
  // Closes a claimed session on its own strand.
  void evict() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

 private:
  void wait_for_request() {
    if (buffer_.size() > 0) return read();  // a pipelined request is already here
    State busy = State::kBusy;
    if (state_.compare_exchange_strong(busy, State::kIdle))
      ++server_.idle_waits;
    else if (state_ == State::kEvicted)
      return close();
    idle_timer_.expires_after(server_.opt.idle_timeout);
    idle_timer_.async_wait([self = shared_from_this()](ErrorCode ec) {
      if (!ec) self->on_idle_timeout();
    });
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this()](ErrorCode ec) { self->on_readable(ec); });
  }

  void on_idle_timeout() {
    if (served_ == 0) ++server_.timeouts;  // a connection that never sent a request
    close();
  }

  void on_readable(ErrorCode ec) {
    idle_timer_.cancel();
    State idle = State::kIdle;
    if (ec || !state_.compare_exchange_strong(idle, State::kBusy)) return close();  // closed, or evicted
    read();
  }

  void read() {
    parser_.emplace();
    configure(*parser_, server_.opt);
    stream_.expires_after(server_.opt.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](ErrorCode ec, size_t) { self->on_read(ec); });
  }

  void on_read(ErrorCode ec) {
    if (ec == beast::error::timeout) {  // a slow client: its request did not arrive whole in time
      ++server_.timeouts;
      return close();
    }
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof)
      return close();  // the client closed the connection (possibly mid-request): nobody to answer
    if (ec && is_parse_error(ec)) {
      ++server_.requests;
      ++server_.bad_requests;
      return respond(error_reply(ec, server_.opt), 11);
    }
    if (ec) return close();  // reset, aborted by stop(), ...
    ++server_.requests;
    Reply r = route(parser_->get(), server_.registry);
    if (r.scrape) ++server_.scrapes;
    respond(std::move(r), parser_->get().version());
  }

  void respond(Reply r, unsigned version) {
    res_ = {};
    res_.result(r.status);
    res_.version(version);
    res_.set(http::field::server, "twinflow");
    res_.set(http::field::content_type, r.content_type);
    res_.set(http::field::cache_control, "no-store");
    if (r.status == http::status::method_not_allowed) res_.set(http::field::allow, "GET");
    res_.keep_alive(r.keep_alive);
    res_.body() = std::move(r.body);
    res_.prepare_payload();
    stream_.expires_after(server_.opt.write_timeout);
    http::async_write(stream_, res_, [self = shared_from_this()](ErrorCode ec, size_t) { self->on_write(ec); });
  }

  void on_write(ErrorCode ec) {
    if (ec == beast::error::timeout) ++server_.timeouts;
    if (ec || res_.need_eof()) return close();
    ++served_;
    stream_.expires_never();
    wait_for_request();
  }

  void close() {
    idle_timer_.cancel();
    ErrorCode ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  asio::steady_timer idle_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;  // one per request
  http::response<http::string_body> res_;                         // kept alive until written
  uint64_t served_ = 0;                                           // responses written on this connection
  std::atomic<State> state_{State::kBusy};
  std::list<std::weak_ptr<Session>>::iterator self_in_list_;
  bool listed_ = false;
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
    admit(std::move(socket));
    accept();
  });
}

void MetricsServer::Impl::admit(tcp::socket socket) {
  if (shared.live.load() >= shared.opt.max_connections) {
    // At the cap: the longest-idle connection makes room; with none idle, the new one is closed.
    std::shared_ptr<Session> victim;
    // The sessions looked at stay referenced until the lock is released: one whose last other reference went
    // away meanwhile is destroyed here, and ~Session takes sessions_mutex (destroyed under the lock, it
    // deadlocked the accepting thread: seen under 4 x 600 connections at once).
    std::vector<std::shared_ptr<Session>> looked_at;
    {
      std::lock_guard<std::mutex> lock(shared.sessions_mutex);
      for (const std::weak_ptr<Session>& w : shared.sessions) {
        std::shared_ptr<Session> s = w.lock();
        if (!s) continue;
        if (s->claim_idle()) {
          victim = std::move(s);
          break;
        }
        looked_at.push_back(std::move(s));
      }
    }
    looked_at.clear();
    if (!victim) {
      ++shared.rejected;
      ErrorCode ignored;
      socket.close(ignored);
      return;
    }
    ++shared.evicted;
    victim->evict();
  }
  std::make_shared<Session>(std::move(socket), shared)->start();
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
  return {m.connections.load(), m.requests.load(), m.scrapes.load(), m.bad_requests.load(),
          m.timeouts.load(),    m.rejected.load(), m.evicted.load(), m.idle_waits.load()};
}

std::optional<std::string> exposure_warning(const std::string& address, uint16_t port) {
  ErrorCode ec;
  const asio::ip::address a = asio::ip::make_address(address, ec);
  if (ec || a.is_loopback()) return std::nullopt;
  const std::string where = a.is_unspecified() ? "every network interface of this machine" : "a network interface";
  return "metrics are served on " + address + ":" + std::to_string(port) + ", " + where +
         ": anyone who can reach it can read /metrics (no authentication: scenario names, timings, memory); use "
         "127.0.0.1 to keep it on this machine";
}

HttpAnswer answer_request(std::string_view bytes, const Registry& registry, const ServerOptions& options) {
  http::request_parser<http::empty_body> parser;
  configure(parser, options);
  parser.eager(true);
  ErrorCode ec;
  while (!parser.is_done()) {
    const size_t used = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(used);
    if (ec == http::error::need_more) return {};  // not a whole request yet
    if (ec) break;
    if (used == 0) return {};
  }
  const Reply r = ec ? error_reply(ec, options) : route(parser.get(), registry);
  return {int(r.status), r.content_type, r.body, r.keep_alive};
}

}  // namespace tf::metrics
