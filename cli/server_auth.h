#pragma once
// The authentication flags of the commands that bind sockets (serve,
// worker): --auth none|curve, --server-key, --clients-dir, --insecure.
#include <string>

namespace CLI {
class App;
}

namespace troupe::cli {

struct ServerAuthArgs {
  std::string mode = "none";  // none | curve
  std::string server_key;     // this process's .secret
  std::string clients_dir;    // NAME.key of each client it admits
  bool insecure = false;      // serve a non-loopback endpoint without CURVE
};

void add_server_auth_options(CLI::App* cmd, ServerAuthArgs& a);
// Throws one line when the flags do not go together.
void check_server_auth(const ServerAuthArgs& a);

}  // namespace troupe::cli
