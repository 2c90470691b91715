#include "cli/model_path.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace troupe::cli {

std::string troupe_home() {
  if (const char* h = std::getenv("TROUPE_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/troupe";
}

std::string resolve_model(const std::string& name) {
  if (name.empty()) throw std::invalid_argument("no model given (--model NAME|PATH)");
  if (std::filesystem::exists(name)) return name;
  if (name.find('/') == std::string::npos) {
    const std::string installed = troupe_home() + "/models/" + name + ".gguf";
    if (std::filesystem::exists(installed)) return installed;
    throw std::runtime_error("model '" + name + "' is not installed (run: troupe pull " + name + ")");
  }
  throw std::runtime_error("model file '" + name + "' does not exist");
}

}  // namespace troupe::cli
