// troupe keygen: a CurveZMQ key pair for a server, a worker or a client.
// NAME.secret stays with its owner; NAME.key goes to the other side (a
// server's to its clients, a client's into the server's --clients-dir).
// --http-token adds a bearer token for the HTTP port: the token in
// NAME.secret, its SHA-256 in NAME.key (all the server keeps).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "messages/curve_auth.h"

namespace troupe::cli {

Run add_keygen(CLI::App& app) {
  auto base = std::make_shared<std::string>();
  auto http_token = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("keygen", "Write a CurveZMQ key pair: NAME.key (public) and NAME.secret (private)");
  cmd->add_option("name", *base, "Path and name of the pair, e.g. keys/alice")->required();
  cmd->add_flag("--http-token", *http_token,
                "Also a bearer token for `serve --http` under --auth curve: the token in NAME.secret (http-token), "
                "its SHA-256 in NAME.key");
  return [base, http_token] {
    const std::filesystem::path p(*base);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    messages::write_key_files(p, messages::generate_key_pair(), *http_token ? messages::generate_http_token() : "");
    std::printf("wrote %s.key (public: give it to the other side) and %s.secret (keep it; mode 600)%s\n", base->c_str(),
                base->c_str(), *http_token ? "; the HTTP bearer token is the http-token line of the .secret" : "");
    return 0;
  };
}

}  // namespace troupe::cli
