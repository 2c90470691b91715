// troupe bench: prefill and decode speed of the local engine on one model,
// printed as one JSON line (ops/bench/engine.sh compares it with llama.cpp).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "engine/kv_cache.h"

namespace troupe::cli {
namespace {

struct BenchArgs {
  std::string model;
  int prompt_tokens = 512;
  int gen_tokens = 128;
  int threads = default_threads();
  int repeat = 3;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Prefill `prompt` in one forward, then decode gen_tokens greedily (end of
// generation ignored, so every run does the same work). Returns seconds.
std::pair<double, double> run_once(Model& m, KvCache& cache, const std::vector<int32_t>& prompt, int gen) {
  KvSequence seq(cache);
  seq.reserve(static_cast<int32_t>(prompt.size()) + gen);
  Logits logits;
  double t0 = now();
  Batch b;
  b.sequences.push_back({prompt, 0, seq.block_table(), LogitsWanted::last});
  m.forward(b, cache, logits);
  const double prefill = now() - t0;
  int32_t token = 0;
  t0 = now();
  for (int i = 0; i < gen; ++i) {
    const auto row = logits.row(0);
    token = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    Batch step;
    step.sequences.push_back({std::span<const int32_t>(&token, 1), static_cast<int32_t>(prompt.size()) + i,
                              seq.block_table(), LogitsWanted::last});
    m.forward(step, cache, logits);
  }
  return {prefill, now() - t0};
}

int run_bench(const BenchArgs& a) {
  LoadedModel m = load_model(a.model, a.threads);
  std::string text;
  while (static_cast<int>(m.tokenizer->encode(text, false, false).size()) < a.prompt_tokens)
    text += "The quick brown fox jumps over the lazy dog while the server streams tokens to its clients. ";
  std::vector<int32_t> prompt = m.tokenizer->encode(text, false, false);
  prompt.resize(a.prompt_tokens);
  KvCache cache(m.model->config(), (a.prompt_tokens + a.gen_tokens) / 16 + 2);
  run_once(*m.model, cache, std::vector<int32_t>(prompt.begin(), prompt.begin() + 16), 4);  // warm up
  double best_prefill = 1e9, best_decode = 1e9;
  for (int r = 0; r < a.repeat; ++r) {
    auto [p, d] = run_once(*m.model, cache, prompt, a.gen_tokens);
    best_prefill = std::min(best_prefill, p);
    best_decode = std::min(best_decode, d);
  }
  std::printf("{\"engine\": \"troupe\", \"threads\": %d, \"prompt_tokens\": %d, \"gen_tokens\": %d, "
              "\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f}\n",
              a.threads, a.prompt_tokens, a.gen_tokens, a.prompt_tokens / best_prefill, a.gen_tokens / best_decode);
  return 0;
}

}  // namespace

Run add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens/s of a model (JSON line)");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path")->required();
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length")->check(CLI::Range(16, 1 << 16));
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens to decode")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--threads", a->threads, "CPU threads")->check(CLI::Range(1, 256));
  cmd->add_option("--repeat", a->repeat, "Runs; the best is reported")->check(CLI::Range(1, 100));
  return [a] { return run_bench(*a); };
}

}  // namespace troupe::cli
