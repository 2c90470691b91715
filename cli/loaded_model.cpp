#include "cli/loaded_model.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <thread>

#include "cli/model_path.h"
#include "engine/gguf_file.h"
#include "engine/vocabulary.h"

namespace troupe::cli {

int default_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

void add_backend_flags(CLI::App& cmd, BackendOptions& options, std::string& device, std::string& weights) {
  cmd.add_option("--device", device, "cpu or cuda")->capture_default_str();
  cmd.add_option("--weights", weights, "CUDA weight format: auto (the file's), bf16, int8 or int4")
      ->capture_default_str();
  cmd.add_option("--gpu-memory", options.memory_fraction, "CUDA: share of free device memory for KV pages")
      ->check(CLI::Range(0.01, 0.98))
      ->capture_default_str();
  cmd.add_option("--threads", options.threads, "CPU threads (CUDA: for converting weights at load)")
      ->check(CLI::Range(1, 256));
}

void apply_backend_names(BackendOptions& options, const std::string& device, const std::string& weights) {
  options.device = device_from_name(device);
  options.weights = device_weights_from_name(weights);
}

LoadedModel load_model(const std::string& name_or_path, const BackendOptions& options) {
  LoadedModel m;
  m.backend = open_backend(resolve_model(name_or_path), options);
  m.tokenizer = std::make_unique<Tokenizer>(load_vocabulary(m.backend->file()));
  return m;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& name_or_path) {
  GgufFile file = GgufFile::open(resolve_model(name_or_path));
  return std::make_unique<Tokenizer>(load_vocabulary(file));
}

}  // namespace troupe::cli
