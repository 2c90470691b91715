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

// What the backend flags say as text, before it is checked.
struct BackendNames {
  std::string device = "cpu", weights = "auto", kv_type = "f16", attention_precision = "fp32";
  std::string rope_scaling;  // empty: the file's
  double rope_factor = 0;    // 0: unset
  int64_t rope_orig_ctx = 0;
};

// --device, --weights, --gpu-memory, --threads, --kv-type,
// --attention-precision, --rope-scaling, --rope-factor, --rope-orig-ctx.
void add_backend_flags(CLI::App& cmd, BackendOptions& options, BackendNames& names);
// Parses the names into options; throws std::invalid_argument naming the flag.
void apply_backend_names(BackendOptions& options, const BackendNames& names);

LoadedModel load_model(const std::string& name_or_path, const BackendOptions& options);
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& name_or_path);
int default_threads();

}  // namespace troupe::cli
