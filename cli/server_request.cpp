#include "cli/server_request.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "messages/client_validation.h"
#include "messages/curve_auth.h"

namespace troupe::cli {

namespace {

// One command per process: its key flags hold for all its connections.
std::string client_key_file, server_key_file;

}  // namespace

const messages::CurveKeys& client_curve_keys() {
  static const messages::CurveKeys keys = [] {
    if (client_key_file.empty() != server_key_file.empty())
      throw std::invalid_argument("a server under CURVE needs both --client-key (yours, .secret) and --server-key (its .key)");
    return client_key_file.empty() ? messages::CurveKeys{} : messages::client_curve(client_key_file, server_key_file);
  }();
  return keys;
}

messages::ClientConnection connect_to_server(const std::string& endpoint, double timeout_s) {
  const messages::CurveKeys& curve = client_curve_keys();
  messages::ClientConnection conn(endpoint, messages::client_socket_limits(), curve);
  if (!conn.ping(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)))) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", timeout_s);
    throw std::runtime_error("no troupe server answers at " + endpoint + " (waited " + secs + " s; " +
                             (curve.enabled() ? "is `troupe serve` running there, and is your key in its --clients-dir?)"
                                              : "is `troupe serve` running there?)"));
  }
  return conn;
}

void add_connect_options(CLI::App* cmd, std::string& endpoint, double& timeout_s) {
  cmd->add_option("--connect", endpoint, "Server endpoint")->capture_default_str();
  cmd->add_option("--connect-timeout", timeout_s, "Seconds to wait for the server to answer at all")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  cmd->add_option("--client-key", client_key_file, "Your CURVE key pair (.secret from troupe keygen), for a server under --auth curve")
      ->check(CLI::ExistingFile);
  cmd->add_option("--server-key", server_key_file, "The server's CURVE public key (.key), with --client-key")
      ->check(CLI::ExistingFile);
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
