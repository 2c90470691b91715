#pragma once
// The HTTP/1.1 front door under `troupe serve --http`: an event-driven
// server (Boost.Asio's event loop, Boost.Beast's request parser) on one I/O
// thread. A connection costs a file descriptor and a few KiB until its
// request is complete; only then does a handler thread take it. Everything
// that protects the port happens before any handler (so before
// authentication):
//
//   connections   at most max_connections in all and
//                 max_connections_per_address from one address; past
//                 either, a new connection is answered 503 and closed
//   deadlines     a request's header must arrive within header_timeout of
//                 its first byte, its body within body_timeout; a kept-alive
//                 connection may idle idle_timeout between requests; a
//                 response (or one streamed chunk) that the client does not
//                 take within write_timeout ends the connection
//   sizes         a header over max_header_bytes: 431; a Content-Length
//                 over max_body_bytes: 413 at once, the body unread; bodies
//                 waiting for a handler over max_pending_body_bytes: 503
//
// Pipelined requests are read one after another and answered in order (the
// next is read once the previous response is written). Boost's headers
// stay in http_server.cpp: they are heavy.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::messages {

struct HttpServerLimits {
  int max_connections = 4096;
  int max_connections_per_address = 64;
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds body_timeout{10000};
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 4 << 20;
  size_t max_pending_body_bytes = 64 << 20;
  int handler_threads = 64;  // requests handled at once (a stream holds one)
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target up to '?'
  std::string query;   // after '?', "" when none
  HttpHeaders headers;
  std::string body;
  std::string peer_address;
  // The first header of that name (case-insensitive); "" when none.
  std::string header(std::string_view name) const;
};

// How a handler answers its request: once whole, or as a chunked stream.
// Called from the handler's thread; each call returns once the bytes are
// with the kernel (or the connection failed).
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  virtual void send(int status, std::string_view content_type, std::string_view body, const HttpHeaders& extra = {}) = 0;
  // Starts a chunked response; false when the client is gone.
  virtual bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra = {}) = 0;
  // One chunk; false when the client is gone or did not take it in time.
  virtual bool write(std::string_view chunk) = 0;
  virtual void end_stream() = 0;
  // False once the client closed its side (checked without reading).
  virtual bool connected() const = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;

// What the front door turned away, for /metrics and the tests.
struct HttpServerCounts {
  int64_t open = 0;                    // connections now
  int64_t refused_connections = 0;     // over max_connections or the per-address cap
  int64_t header_timeouts = 0, body_timeouts = 0, idle_closed = 0;
  int64_t too_large = 0;               // 413 and 431
  int64_t bad_requests = 0;            // 400
};

class HttpServer {
 public:
  // Binds `host`:`port` (0: any free port); throws std::runtime_error.
  HttpServer(const std::string& host, int port, HttpServerLimits limits, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  void start();
  // Closes the port and every connection; waits for the handlers.
  void stop();
  HttpServerCounts counts() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace troupe::messages
