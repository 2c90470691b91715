// troupe logits: the logits of every position of a token sequence, as raw
// float32 rows. For checking the engine against independent references.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"

namespace troupe::cli {
namespace {

struct LogitsArgs {
  std::string model, tokens, out;
  int chunk = 0;  // 0 = the whole sequence in one forward
  BackendOptions backend;
  BackendNames names;  // --device, --weights, --kv-type, --rope-*
};

int run_logits(const LogitsArgs& a) {
  std::vector<int32_t> ids;
  std::istringstream in(a.tokens);
  for (int32_t t; in >> t;) ids.push_back(t);
  if (ids.empty()) throw std::invalid_argument("--tokens is empty");
  BackendOptions options = a.backend;
  apply_backend_names(options, a.names);
  options.kv_pages = static_cast<int32_t>(ids.size() / options.page_size + 1);
  options.max_batch_tokens = std::max<int64_t>(options.max_batch_tokens, static_cast<int64_t>(ids.size()));
  LoadedModel m = load_model(a.model, options);
  KvSequence seq(m.backend->pages(), m.backend->page_size());
  if (!seq.reserve(static_cast<int32_t>(ids.size()))) throw std::runtime_error("KV cache too small");
  const int32_t n = static_cast<int32_t>(ids.size()), chunk = a.chunk > 0 ? a.chunk : n;
  std::FILE* f = std::fopen(a.out.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + a.out);
  Logits logits;
  for (int32_t pos = 0; pos < n; pos += chunk) {
    const int32_t len = std::min(chunk, n - pos);
    Batch batch;
    batch.sequences.push_back({std::span<const int32_t>(ids).subspan(pos, len), pos, seq.block_table(), LogitsWanted::all});
    m.backend->forward(batch, logits);
    std::fwrite(logits.values.data(), sizeof(float), logits.values.size(), f);
  }
  if (std::fclose(f) != 0) throw std::runtime_error("cannot write " + a.out);
  return 0;
}

}  // namespace

Run add_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every position of a token sequence (float32)");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path")->required();
  cmd->add_option("--tokens", a->tokens, "Space-separated token ids")->required();
  cmd->add_option("--out,-o", a->out, "Output file: n_tokens x n_vocab float32")->required();
  cmd->add_option("--chunk", a->chunk, "Prefill in chunks of this many tokens");
  a->backend.threads = default_threads();
  add_backend_flags(*cmd, a->backend, a->names);
  return [a] { return run_logits(*a); };
}

}  // namespace troupe::cli
