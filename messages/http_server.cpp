#include "messages/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

namespace troupe::messages {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if ((a[i] | 0x20) != (b[i] | 0x20)) return false;
  return true;
}

std::string status_line(int status) {
  const beast::string_view reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) + "\r\n";
}

std::string head(int status, std::string_view content_type, std::optional<size_t> length, bool keep_alive,
                 const HttpHeaders& extra) {
  std::string h = status_line(status);
  h.append("Content-Type: ").append(content_type).append("\r\n");
  if (length) h.append("Content-Length: ").append(std::to_string(*length)).append("\r\n");
  else h.append("Transfer-Encoding: chunked\r\n");
  h.append(keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
  for (const auto& [k, v] : extra) h.append(k).append(": ").append(v).append("\r\n");
  return h.append("\r\n");
}

// A refusal the server makes on its own: OpenAI's error object, then close.
std::string refusal(int status, const std::string& why, const char* code) {
  std::string escaped;
  for (char c : why) {
    if (c == '"' || c == '\\') escaped.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) escaped.push_back(c);
  }
  const std::string body = std::string("{\"error\":{\"message\":\"") + escaped + "\",\"type\":\"invalid_request_error\"," +
                           "\"param\":null,\"code\":\"" + code + "\"}}";
  return head(status, "application/json", body.size(), false, {}) + body;
}

class Connection;

// How long a refused connection drains what the client still sends.
constexpr std::chrono::seconds kLinger{2};

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  HttpServerLimits limits;
  HttpHandler handler;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_pause{io};
  std::thread io_thread;
  bool started = false;

  // Handler threads and the requests waiting for one.
  std::mutex queue_mutex;
  std::condition_variable queued;
  std::deque<std::function<void()>> queue;
  std::vector<std::thread> workers;
  bool stopping = false;

  mutable std::mutex count_mutex;
  HttpServerCounts counts;
  std::map<std::string, int> per_address;
  size_t pending_body = 0;
  std::map<const void*, std::weak_ptr<Connection>> connections;

  void accept();
  void admit(tcp::socket socket);
  void post_handler(std::function<void()> job) {
    {
      std::lock_guard lock(queue_mutex);
      queue.push_back(std::move(job));
    }
    queued.notify_one();
  }
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(queue_mutex);
        queued.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      job();
    }
  }
  bool reserve_body(size_t n) {
    std::lock_guard lock(count_mutex);
    if (pending_body + n > limits.max_pending_body_bytes) return false;
    pending_body += n;
    return true;
  }
  void release_body(size_t n) {
    std::lock_guard lock(count_mutex);
    pending_body -= n;
  }
  void count(int64_t HttpServerCounts::*field) {
    std::lock_guard lock(count_mutex);
    ++(counts.*field);
  }
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket, std::string address)
      : server_(std::move(server)), stream_(std::move(socket)), address_(std::move(address)) {}

  ~Connection() {
    server_->release_body(reserved_);
    std::lock_guard lock(server_->count_mutex);
    --server_->counts.open;
    if (auto it = server_->per_address.find(address_); it != server_->per_address.end() && --it->second <= 0)
      server_->per_address.erase(it);
    server_->connections.erase(this);
  }

  void start() { next_request(); }

  // From any thread: ends the connection (the server stops).
  void shut() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

  // A handler's writes, from its thread: the bytes go out on the I/O thread,
  // and the handler waits for them to reach the kernel (or fail).
  bool write_from_handler(std::string bytes) {
    auto done = std::make_shared<std::promise<bool>>();
    auto result = done->get_future();
    asio::post(stream_.get_executor(), [self = shared_from_this(), data = std::make_shared<std::string>(std::move(bytes)),
                                        done] {
      if (!self->stream_.socket().is_open()) return done->set_value(false);
      self->stream_.expires_after(self->server_->limits.write_timeout);
      asio::async_write(self->stream_, asio::buffer(*data), [data, done](error_code ec, size_t) { done->set_value(!ec); });
    });
    try {
      return result.get();
    } catch (const std::future_error&) {
      return false;  // the I/O thread went away first
    }
  }

  bool peer_open() const {
    char c;
    const ssize_t n = ::recv(const_cast<Connection*>(this)->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
  }

  // After the handler: the next pipelined or kept-alive request, or the end.
  void handled(bool keep_open) {
    server_->release_body(reserved_);
    reserved_ = 0;
    asio::post(stream_.get_executor(), [self = shared_from_this(), keep_open] {
      if (keep_open && self->stream_.socket().is_open()) self->next_request();
      else self->close();
    });
  }

  const std::string& address() const { return address_; }

 private:
  void next_request() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_->limits.max_header_bytes));
    parser_->body_limit(server_->limits.max_body_bytes);
    if (buffer_.size() > 0) return read_header();  // pipelined: already here
    // Between requests a kept-alive connection may idle; the header's
    // deadline starts with its first byte.
    stream_.expires_after(server_->limits.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
      if (ec) {
        if (ec == beast::error::timeout) self->server_->count(&HttpServerCounts::idle_closed);
        return self->close();
      }
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  void read_header() {
    stream_.expires_after(server_->limits.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (ec) return failed(ec, &HttpServerCounts::header_timeouts);
    const auto length = parser_->content_length();
    const size_t want = length ? static_cast<size_t>(*length) : 0;
    if (want > server_->limits.max_body_bytes) return failed(http::error::body_limit, nullptr);
    if (!server_->reserve_body(want))
      return refuse(503, "the server holds too many request bodies already; retry shortly", "overloaded");
    reserved_ = want;
    if (parser_->is_done()) return dispatch();
    if (iequals(std::string(parser_->get()[http::field::expect]), "100-continue")) {
      auto interim = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      stream_.expires_after(server_->limits.write_timeout);
      return asio::async_write(stream_, asio::buffer(*interim), [self = shared_from_this(), interim](error_code e, size_t) {
        if (e) return self->close();
        self->read_body();
      });
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(server_->limits.body_timeout);
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->failed(ec, &HttpServerCounts::body_timeouts);
      self->dispatch();
    });
  }

  // A read that failed: a deadline passed, the client left, or what it sent
  // is refused with a status that says why.
  void failed(error_code ec, int64_t HttpServerCounts::*timeout_counter) {
    if (ec == beast::error::timeout) {
      if (timeout_counter) server_->count(timeout_counter);
      return close();
    }
    if (ec == http::error::body_limit) {
      server_->count(&HttpServerCounts::too_large);
      return refuse(413, "the request body is larger than the server takes (" +
                             std::to_string(server_->limits.max_body_bytes) + " bytes)", "too_long");
    }
    if (ec == http::error::header_limit) {
      server_->count(&HttpServerCounts::too_large);
      return refuse(431, "the request's header is larger than the server takes (" +
                             std::to_string(server_->limits.max_header_bytes) + " bytes)", "too_long");
    }
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
      return close();
    server_->count(&HttpServerCounts::bad_requests);
    refuse(400, "not an HTTP/1.1 request: " + ec.message(), "malformed");
  }

  void dispatch() {
    stream_.expires_never();
    auto req = std::make_shared<HttpRequest>();
    auto& m = parser_->get();
    req->method = std::string(m.method_string());
    const std::string target(m.target());
    const size_t q = target.find('?');
    req->path = target.substr(0, q);
    if (q != std::string::npos) req->query = target.substr(q + 1);
    for (const auto& f : m) req->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req->body = std::move(m.body());
    req->peer_address = address_;
    const bool keep_alive = m.keep_alive();
    parser_.reset();
    server_->post_handler([self = shared_from_this(), req, keep_alive] { self->handle(*req, keep_alive); });
  }

  void handle(const HttpRequest& req, bool keep_alive);

  void refuse(int status, const std::string& why, const char* code) {
    auto bytes = std::make_shared<std::string>(refusal(status, why, code));
    stream_.expires_after(kLinger);
    asio::async_write(stream_, asio::buffer(*bytes), [self = shared_from_this(), bytes](error_code ec, size_t) {
      if (ec) return self->close();
      error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->linger();
    });
  }

  // After a refusal, what the client still sends (the rest of a body too
  // large) is read and dropped for a moment before the close: closing on
  // unread bytes would reset the connection, and the client, still sending,
  // would never read the refusal.
  void linger() {
    stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->close();
      self->linger();
    });
  }

  void close() {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  std::shared_ptr<HttpServer::Impl> server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string address_;
  size_t reserved_ = 0;
  std::array<char, 16384> discard_;
};

class Responder final : public HttpResponder {
 public:
  Responder(Connection& c, bool keep_alive) : c_(c), keep_alive_(keep_alive) {}

  void send(int status, std::string_view content_type, std::string_view body, const HttpHeaders& extra) override {
    if (state_ != State::none) return;
    state_ = State::done;
    std::string bytes = head(status, content_type, body.size(), keep_alive_, extra);
    bytes.append(body);
    ok_ = c_.write_from_handler(std::move(bytes));
  }
  bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra) override {
    if (state_ != State::none) return false;
    state_ = State::streaming;
    return ok_ = c_.write_from_handler(head(status, content_type, std::nullopt, keep_alive_, extra));
  }
  bool write(std::string_view chunk) override {
    if (state_ != State::streaming || !ok_) return false;
    if (chunk.empty()) return true;  // an empty chunk would end the stream
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
    std::string bytes(size);
    bytes.append(chunk).append("\r\n");
    return ok_ = c_.write_from_handler(std::move(bytes));
  }
  void end_stream() override {
    if (state_ != State::streaming) return;
    state_ = State::done;
    if (ok_) ok_ = c_.write_from_handler("0\r\n\r\n");
  }
  bool connected() const override { return ok_ && c_.peer_open(); }

  // The handler answered nothing: a 500, so the client is not left waiting.
  void finish() {
    if (state_ == State::none) send(500, "application/json", R"({"error":{"message":"the request was not answered","type":"server_error","param":null,"code":"internal"}})", {});
    if (state_ == State::streaming) end_stream();
  }
  bool keep_open() const { return ok_ && keep_alive_ && state_ == State::done; }

 private:
  enum class State { none, streaming, done };
  Connection& c_;
  bool keep_alive_;
  State state_ = State::none;
  bool ok_ = true;
};

void Connection::handle(const HttpRequest& req, bool keep_alive) {
  Responder r(*this, keep_alive);
  try {
    server_->handler(req, r);
  } catch (const std::exception&) {
    // As an unanswered request: a 500 (or the stream's end).
  }
  r.finish();
  handled(r.keep_open());
}

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](error_code ec, tcp::socket socket) {
    if (!self->acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (or another passing failure): pause instead of spinning.
      self->accept_pause.expires_after(std::chrono::milliseconds(100));
      return self->accept_pause.async_wait([self](error_code) {
        if (self->acceptor.is_open()) self->accept();
      });
    }
    self->admit(std::move(socket));
    self->accept();
  });
}

void HttpServer::Impl::admit(tcp::socket socket) {
  error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  if (ec) return;
  const std::string address = peer.address().to_string();
  std::string why;
  {
    std::lock_guard lock(count_mutex);
    if (counts.open >= limits.max_connections)
      why = "the server holds " + std::to_string(counts.open) + " connections, its most";
    else if (per_address[address] >= limits.max_connections_per_address)
      why = "this address holds " + std::to_string(limits.max_connections_per_address) + " connections, the most one may";
    if (!why.empty()) {
      ++counts.refused_connections;
      if (per_address[address] == 0) per_address.erase(address);
    } else {
      ++counts.open;
      ++per_address[address];
    }
  }
  if (!why.empty()) {
    // Best effort and never blocking: the answer fits the socket's buffer.
    const std::string bytes = refusal(503, why + "; retry shortly", "overloaded");
    (void)::send(socket.native_handle(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    socket.close(ec);
    return;
  }
  auto c = std::make_shared<Connection>(shared_from_this(), std::move(socket), address);
  {
    std::lock_guard lock(count_mutex);
    connections[c.get()] = c;
  }
  c->start();
}

HttpServer::HttpServer(const std::string& host, int port, HttpServerLimits limits, HttpHandler handler)
    : impl_(std::make_shared<Impl>()) {
  impl_->limits = limits;
  impl_->handler = std::move(handler);
  // A connection is a descriptor: let the process hold as many as the cap asks.
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
    const rlim_t want = static_cast<rlim_t>(limits.max_connections) + 1024;
    if (r.rlim_cur < want) {
      r.rlim_cur = r.rlim_max == RLIM_INFINITY ? want : std::min(want, r.rlim_max);
      (void)setrlimit(RLIMIT_NOFILE, &r);
    }
  }
  error_code ec;
  const auto address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) throw std::runtime_error("--http: '" + host + "' is not an IP address");
  const tcp::endpoint at(address, static_cast<unsigned short>(port));
  impl_->acceptor.open(at.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(at, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("--http: cannot bind " + host + ":" + std::to_string(port) + " (" + ec.message() + ")");
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const {
  error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void HttpServer::start() {
  if (impl_->started) return;
  impl_->started = true;
  for (int i = 0; i < std::max(1, impl_->limits.handler_threads); ++i)
    impl_->workers.emplace_back([impl = impl_] { impl->work(); });
  impl_->accept();
  impl_->io_thread = std::thread([impl = impl_] { impl->io.run(); });
}

void HttpServer::stop() {
  if (!impl_->started) return;
  impl_->started = false;
  asio::post(impl_->io, [impl = impl_] {
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_pause.cancel();
  });
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard lock(impl_->count_mutex);
    for (auto& [key, weak] : impl_->connections)
      if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->shut();
  open.clear();  // outside the lock: the last owner's destructor takes it
  {
    std::lock_guard lock(impl_->queue_mutex);
    impl_->stopping = true;
  }
  impl_->queued.notify_all();
  for (auto& t : impl_->workers) t.join();
  impl_->workers.clear();
  // Every socket is closed: the loop runs out of work and returns by itself
  // (which also frees the connections its handlers hold); stopped after 2 s
  // only if something still waits.
  for (int i = 0; i < 200 && !impl_->io.stopped(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->io.stop();
  if (impl_->io_thread.joinable()) impl_->io_thread.join();
}

HttpServerCounts HttpServer::counts() const {
  std::lock_guard lock(impl_->count_mutex);
  return impl_->counts;
}

}  // namespace troupe::messages
