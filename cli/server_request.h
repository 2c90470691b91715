#pragma once
// One request, one reply: the shape of every query command (stats,
// sessions, batch). The reply's buffer is returned verified; an Error reply
// or no reply in time throws with the server's code and message.
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "messages/client_connection.h"

namespace CLI {
class App;
}

namespace troupe::cli {

// A connection whose server answered a Ping within `timeout_s`; otherwise
// throws one line naming the endpoint (a dead server must not cost a
// command's whole --timeout).
messages::ClientConnection connect_to_server(const std::string& endpoint, double timeout_s);
// --connect ENDPOINT, --connect-timeout SECONDS, and for a server under
// CURVE --client-key (this client's .secret) and --server-key (the
// server's .key), which every connection of the command then uses.
void add_connect_options(CLI::App* cmd, std::string& endpoint, double& timeout_s);
// The CURVE keys those flags named (empty: none), read once.
const messages::CurveKeys& client_curve_keys();

// An Error reply, with its code (callers may expect some, e.g. unknown_session).
class ServerError : public std::runtime_error {
 public:
  ServerError(wire::ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  wire::ErrorCode code() const { return code_; }

 private:
  wire::ErrorCode code_;
};

struct Reply {
  messages::Bytes bytes;  // owns the buffer `response` points into
  const wire::Response* response = nullptr;
};

Reply ask(messages::ClientConnection& conn, const messages::Bytes& request, uint64_t id, wire::ResponseBody expected,
          std::chrono::milliseconds timeout);

// "2026-11-30 04:12" in local time, from Unix milliseconds.
std::string local_time(int64_t unix_ms);

}  // namespace troupe::cli
