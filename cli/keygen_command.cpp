// troupe keygen: a CurveZMQ key pair for a server, a worker or a client.
// NAME.secret stays with its owner; NAME.key goes to the other side (a
// server's to its clients, a client's into the server's --clients-dir).
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
  CLI::App* cmd = app.add_subcommand("keygen", "Write a CurveZMQ key pair: NAME.key (public) and NAME.secret (private)");
  cmd->add_option("name", *base, "Path and name of the pair, e.g. keys/alice")->required();
  return [base] {
    const std::filesystem::path p(*base);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    messages::write_key_files(p, messages::generate_key_pair());
    std::printf("wrote %s.key (public: give it to the other side) and %s.secret (keep it; mode 600)\n", base->c_str(),
                base->c_str());
    return 0;
  };
}

}  // namespace troupe::cli
