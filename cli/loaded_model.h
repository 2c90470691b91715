#pragma once
// A model on its backend (CPU or CUDA) with its tokenizer, as the commands
// that run one need them, and the flags that choose the backend.
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/tokenizer.h"

namespace CLI {
class App;
}

namespace troupe::cli {

struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Tokenizer> tokenizer;
};

// --device, --weights, --gpu-memory, --threads (into options).
void add_backend_flags(CLI::App& cmd, BackendOptions& options, std::string& device, std::string& weights);
// Parses the device/weights names into options; throws std::invalid_argument.
void apply_backend_names(BackendOptions& options, const std::string& device, const std::string& weights);

LoadedModel load_model(const std::string& name_or_path, const BackendOptions& options);
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& name_or_path);
int default_threads();

}  // namespace troupe::cli
