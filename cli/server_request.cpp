#include "cli/server_request.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "messages/client_validation.h"

namespace troupe::cli {

messages::ClientConnection connect_to_server(const std::string& endpoint, double timeout_s) {
  messages::ClientConnection conn(endpoint);
  if (!conn.ping(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)))) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", timeout_s);
    throw std::runtime_error("no troupe server answers at " + endpoint + " (waited " + secs +
                             " s; is `troupe serve` running there?)");
  }
  return conn;
}

void add_connect_options(CLI::App* cmd, std::string& endpoint, double& timeout_s) {
  cmd->add_option("--connect", endpoint, "Server endpoint")->capture_default_str();
  cmd->add_option("--connect-timeout", timeout_s, "Seconds to wait for the server to answer at all")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
}

Reply ask(messages::ClientConnection& conn, const messages::Bytes& request, uint64_t id, wire::ResponseBody expected,
          std::chrono::milliseconds timeout) {
  conn.send(request);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto frame = conn.receive(left);
    if (!frame) break;
    Reply r{std::move(*frame), nullptr};
    r.response = messages::check_response(r.bytes);
    if (!r.response || r.response->client_request_id() != id) continue;
    if (const auto* e = r.response->body_as_Error())
      throw ServerError(e->code(), std::string("server: ") + messages::error_code_name(e->code()) + ": " +
                                       (e->message() ? e->message()->str() : ""));
    if (r.response->body_type() != expected)
      throw std::runtime_error(std::string("unexpected answer from the server: ") +
                               wire::EnumNameResponseBody(r.response->body_type()));
    return r;
  }
  throw std::runtime_error("no answer from the server in time");
}

std::string local_time(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

}  // namespace troupe::cli
