// troupe perplexity: how well a model predicts a text, measured as llama.cpp's
// llama-perplexity measures it, so the two numbers compare directly: the
// text's tokens (with BOS where the vocabulary adds one) cut into chunks of
// --context tokens, each chunk run from an empty cache with its first token
// replaced by BOS (when there is one), and the mean negative log-likelihood
// of the second half of every chunk's tokens. PPL = e^(mean NLL).
//
// With --kv-budget the second half is read in steps of the budget's room to
// grow (engine/kv_budget.h), each after the cache is cut back to the
// budget's keep(): every scored token sees at most the budget's positions.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "engine/kv_budget.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"

namespace troupe::cli {
namespace {

struct PerplexityArgs {
  std::string model, file;
  int32_t context = 512;
  int32_t chunks = -1;  // all
  int32_t batch = 512;
  int32_t kv_budget = 0;
  BackendOptions backend;
  BackendNames names;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// -log softmax(row)[target], in double as llama.cpp's log_softmax does.
double nll_of(std::span<const float> row, int32_t target) {
  const float mx = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v - mx));
  return -(static_cast<double>(row[static_cast<size_t>(target)] - mx) - std::log(sum));
}

struct Tally {
  double nll = 0, nll2 = 0;
  int64_t count = 0;
};

// One chunk from an empty cache: the NLL of tokens [first + 1, n) given those before.
void score_chunk(Backend& backend, std::span<const int32_t> chunk, int32_t batch, const EvictionPolicy& policy, Tally& t) {
  const auto n = static_cast<int32_t>(chunk.size());
  const int32_t first = n / 2;
  KvSequence seq(backend.pages(), backend.page_size());
  KvBudget budget(backend, policy);
  Logits logits;
  for (int32_t pos = 0; pos < n;) {
    const bool scored = pos >= first || !budget.on();
    int32_t len = std::min(batch, n - pos);
    if (budget.on()) len = std::min(len, pos < first ? first - pos : policy.budget - policy.keep());
    budget.make_room(seq, budget.slot(pos), len);
    const int32_t at = budget.slot(pos);
    if (!seq.reserve(at + len))
      throw std::runtime_error("the KV cache cannot hold a chunk of " + std::to_string(n) + " tokens");
    const bool wanted = scored && pos + len > first;
    Batch b;
    b.sequences.push_back({chunk.subspan(static_cast<size_t>(pos), static_cast<size_t>(len)), at, seq.block_table(),
                           wanted ? LogitsWanted::all : LogitsWanted::none});
    budget.mark(b.sequences.back());
    backend.forward(b, logits);
    for (int32_t i = std::max(pos, first); wanted && i < pos + len && i + 1 < n; ++i) {
      const double v = nll_of(logits.row(i - pos), chunk[static_cast<size_t>(i) + 1]);
      t.nll += v, t.nll2 += v * v, ++t.count;
    }
    pos += len;
  }
}

int run_perplexity(const PerplexityArgs& a) {
  BackendOptions options = a.backend;
  apply_backend_names(options, a.names);
  if (a.context < 16) throw std::invalid_argument("--context must be at least 16 tokens");
  const EvictionPolicy policy{a.kv_budget};
  policy.check();
  options.kv_pages = (a.context + options.page_size - 1) / options.page_size + 1;
  options.max_batch_tokens = std::max<int64_t>(options.max_batch_tokens, a.batch);
  LoadedModel m = load_model(a.model, options);
  std::vector<int32_t> tokens = m.tokenizer->encode(read_text(a.file), m.tokenizer->add_bos_by_default(), false);
  const int32_t have = static_cast<int32_t>(tokens.size()) / a.context;
  if (have < 2)
    throw std::invalid_argument(a.file + ": " + std::to_string(tokens.size()) + " tokens; perplexity at a context of " +
                                std::to_string(a.context) + " needs at least " + std::to_string(2 * a.context));
  const int32_t n_chunks = a.chunks > 0 ? std::min(a.chunks, have) : have;
  const int32_t bos = m.tokenizer->add_bos_by_default() ? m.tokenizer->vocabulary().bos_id : kNoToken;
  std::fprintf(stderr, "perplexity: %zu tokens, %d chunks of %d; %s%s\n", tokens.size(), n_chunks, a.context,
               m.backend->describe().c_str(),
               policy.on() ? ("; KV budget " + std::to_string(policy.budget) + " positions").c_str() : "");
  Tally t;
  for (int32_t c = 0; c < n_chunks; ++c) {
    std::span<int32_t> chunk(tokens.data() + static_cast<size_t>(c) * a.context, static_cast<size_t>(a.context));
    if (bos != kNoToken) chunk[0] = bos;
    score_chunk(*m.backend, chunk, a.batch, policy, t);
    std::printf("[%d]%.4f,", c + 1, std::exp(t.nll / static_cast<double>(t.count)));
    std::fflush(stdout);
  }
  const double mean = t.nll / static_cast<double>(t.count);
  const double var = t.nll2 / static_cast<double>(t.count) - mean * mean;
  const double err = var > 0 ? std::sqrt(var / static_cast<double>(t.count - 1)) : 0.0;
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", std::exp(mean), err * std::exp(mean));
  return 0;
}

}  // namespace

Run add_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a model on a text file, as llama-perplexity measures it");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path")->required();
  cmd->add_option("file", a->file, "Text file")->required();
  cmd->add_option("--context,-c", a->context, "Tokens per chunk")->check(CLI::Range(16, 1 << 20))->capture_default_str();
  cmd->add_option("--chunks", a->chunks, "Chunks to score (default: all)");
  cmd->add_option("--kv-budget", a->kv_budget, "KV positions a scored token may see, the rest evicted by attention; 0: all")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--batch", a->batch, "Tokens per forward")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  a->backend.threads = default_threads();
  add_backend_flags(*cmd, a->backend, a->names);
  return [a] { return run_perplexity(*a); };
}

}  // namespace troupe::cli
