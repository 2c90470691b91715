#include "cli/loaded_model.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <thread>

#include "cli/model_path.h"
#include "engine/gguf_file.h"
#include "engine/vocabulary.h"

namespace troupe::cli {

int default_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

void add_backend_flags(CLI::App& cmd, BackendOptions& options, BackendNames& names) {
  cmd.add_option("--device", names.device, "cpu or cuda")->capture_default_str();
  cmd.add_option("--weights", names.weights, "CUDA weight format: auto (the file's), bf16, int8 or int4")
      ->capture_default_str();
  cmd.add_option("--kv-type", names.kv_type, "KV cache in memory: f16, q8_0 (~0.54 of f16), k8v4 (~0.42) or q4_0 (~0.30)")
      ->capture_default_str();
  cmd.add_option("--attention-precision", names.attention_precision,
                 "Attention's products: fp32, or bf16 (pairs of bfloat16 products; fast with AVX512_BF16)")
      ->capture_default_str();
  cmd.add_option("--rope-scaling", names.rope_scaling, "RoPE scaling over the file's: none, linear, ntk or yarn");
  cmd.add_option("--rope-factor", names.rope_factor, "RoPE scaling factor (context multiple; > 0)");
  cmd.add_option("--rope-orig-ctx", names.rope_orig_ctx, "yarn: the context the model was trained at (default: the file's)");
  cmd.add_option("--gpu-memory", options.memory_fraction, "CUDA: share of free device memory for KV pages")
      ->check(CLI::Range(0.01, 0.98))
      ->capture_default_str();
  cmd.add_option("--threads", options.threads, "CPU threads (CUDA: for converting weights at load)")
      ->check(CLI::Range(1, 256));
}

void apply_backend_names(BackendOptions& options, const BackendNames& names) {
  options.device = device_from_name(names.device);
  options.weights = device_weights_from_name(names.weights);
  try {
    options.kv_type = kv_type_from_name(names.kv_type);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--kv-type: ") + e.what());
  }
  try {
    options.attention_precision = attention_precision_from_name(names.attention_precision);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--attention-precision: ") + e.what());
  }
  if (names.rope_scaling.empty()) {
    if (names.rope_factor != 0 || names.rope_orig_ctx != 0)
      throw std::invalid_argument("--rope-factor and --rope-orig-ctx need --rope-scaling linear|ntk|yarn");
    return;
  }
  RopeScaling& r = options.overrides.rope_scaling;
  try {
    r.type = rope_scaling_from_name(names.rope_scaling);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--rope-scaling: ") + e.what());
  }
  r.factor = r.type == RopeScalingType::none ? 1.0 : names.rope_factor;
  r.orig_ctx = names.rope_orig_ctx;
  options.overrides.rope = true;
  // The rest (yarn's original context defaults to the file's) is checked with the model.
  if (r.type != RopeScalingType::none && (!std::isfinite(r.factor) || r.factor <= 0))
  {
    char factor[32];
    std::snprintf(factor, sizeof factor, "%g", names.rope_factor);
    throw std::invalid_argument(std::string("--rope-factor: ") + factor + " must be a finite number above 0 (with --rope-scaling " +
                                names.rope_scaling + ")");
  }
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
