#include "cli/server_auth.h"

#include <CLI/CLI.hpp>

#include <stdexcept>

namespace troupe::cli {

void add_server_auth_options(CLI::App* cmd, ServerAuthArgs& a) {
  cmd->add_option("--auth", a.mode, "none, or curve: CurveZMQ on every socket, clients admitted by key (troupe keygen)")
      ->check(CLI::IsMember({"none", "curve"}))
      ->capture_default_str();
  cmd->add_option("--server-key", a.server_key, "This server's CURVE key pair (a .secret file), with --auth curve")
      ->check(CLI::ExistingFile);
  cmd->add_option("--clients-dir", a.clients_dir,
                  "Directory of NAME.key files, one per client admitted (weight, max-priority, admin inside)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--insecure", a.insecure, "Serve a non-loopback endpoint without authentication (anyone reaching it may use it)");
}

void check_server_auth(const ServerAuthArgs& a) {
  const bool keys = !a.server_key.empty() || !a.clients_dir.empty();
  if (a.mode == "curve" && (a.server_key.empty() || a.clients_dir.empty()))
    throw std::invalid_argument("--auth curve needs --server-key (this server's .secret) and --clients-dir");
  if (a.mode == "none" && keys) throw std::invalid_argument("--server-key and --clients-dir need --auth curve");
  if (a.mode == "curve" && a.insecure) throw std::invalid_argument("--insecure means no authentication; not with --auth curve");
}

}  // namespace troupe::cli
