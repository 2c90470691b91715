// troupe bench: prefill and decode speed of a backend on one model, printed
// as one JSON line (ops/bench/engine.sh compares the CPU with llama.cpp,
// ops/bench/gpu.sh the CUDA backend with HF transformers).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"

namespace troupe::cli {
namespace {

struct BenchArgs {
  std::string model;
  int prompt_tokens = 512;
  int gen_tokens = 128;
  std::vector<int> batches{1};
  int repeat = 3;
  BackendOptions backend;
  BackendNames names;  // --device, --weights, --kv-type, --rope-*
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Prefills `batch` prompts (as many per forward as max_batch_tokens allows),
// then decodes gen tokens for all of them together, greedily (end of
// generation ignored, so every run does the same work). Returns seconds.
std::pair<double, double> run_once(Backend& be, const std::vector<int32_t>& prompt, int batch, int gen) {
  const auto n_prompt = static_cast<int32_t>(prompt.size());
  std::deque<KvSequence> seqs;
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    seqs.emplace_back(be.pages(), be.page_size());
    if (!seqs.back().reserve(n_prompt + gen)) throw std::runtime_error("KV pages exhausted");
    prompts[b] = prompt;
    std::rotate(prompts[b].begin(), prompts[b].begin() + b % n_prompt, prompts[b].end());  // distinct prompts
  }
  std::vector<TokenChoice> greedy(static_cast<size_t>(batch));
  std::vector<int32_t> next;
  std::vector<int32_t> tokens(static_cast<size_t>(batch));
  const int per_forward = std::max<int>(1, static_cast<int>(32768 / n_prompt));
  double t0 = now();
  for (int b0 = 0; b0 < batch; b0 += per_forward) {
    Batch pre;
    for (int b = b0; b < std::min(batch, b0 + per_forward); ++b)
      pre.sequences.push_back({prompts[b], 0, seqs[b].block_table(), LogitsWanted::last});
    be.forward_choose(pre, greedy, next);
    std::copy(next.begin(), next.end(), tokens.begin() + b0);
  }
  const double prefill = now() - t0;
  t0 = now();
  Batch step;
  step.sequences.resize(static_cast<size_t>(batch));
  for (int i = 0; i < gen; ++i) {
    for (int b = 0; b < batch; ++b)
      step.sequences[b] = {std::span<const int32_t>(&tokens[b], 1), n_prompt + i, seqs[b].block_table(), LogitsWanted::last};
    be.forward_choose(step, greedy, next);
    tokens = next;
  }
  return {prefill, now() - t0};
}

int run_bench(const BenchArgs& a) {
  BackendOptions options = a.backend;
  apply_backend_names(options, a.names);
  const int max_batch = *std::max_element(a.batches.begin(), a.batches.end());
  options.kv_pages = max_batch * ((a.prompt_tokens + a.gen_tokens) / options.page_size + 2) + 2;
  options.max_batch_tokens = std::clamp<int64_t>(static_cast<int64_t>(max_batch) * a.prompt_tokens, 256, 32768);
  LoadedModel m = load_model(a.model, options);
  std::string text;
  while (static_cast<int>(m.tokenizer->encode(text, false, false).size()) < a.prompt_tokens)
    text += "The quick brown fox jumps over the lazy dog while the server streams tokens to its clients. ";
  std::vector<int32_t> prompt = m.tokenizer->encode(text, false, false);
  prompt.resize(a.prompt_tokens);
  for (int batch : a.batches) {
    run_once(*m.backend, std::vector<int32_t>(prompt.begin(), prompt.begin() + 16), batch, 4);  // warm up
    double best_prefill = 1e9, best_decode = 1e9;
    for (int r = 0; r < a.repeat; ++r) {
      auto [p, d] = run_once(*m.backend, prompt, batch, a.gen_tokens);
      best_prefill = std::min(best_prefill, p);
      best_decode = std::min(best_decode, d);
    }
    const double total_prompt = static_cast<double>(batch) * a.prompt_tokens;
    const double total_gen = static_cast<double>(batch) * a.gen_tokens;
    std::printf("{\"engine\": \"troupe\", \"device\": \"%s\", \"weights\": \"%s\", \"threads\": %d, \"batch\": %d, "
                "\"prompt_tokens\": %d, \"gen_tokens\": %d, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, "
                "\"backend\": \"%s\"}\n",
                a.names.device.c_str(), a.names.weights.c_str(), options.threads, batch, a.prompt_tokens, a.gen_tokens,
                total_prompt / best_prefill, total_gen / best_decode, m.backend->describe().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

Run add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens/s of a model (JSON line)");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path")->required();
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length")->check(CLI::Range(16, 1 << 16));
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens to decode")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--batch", a->batches, "Sequences decoded together; several sizes run in turn (1,16,64)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--repeat", a->repeat, "Runs; the best is reported")->check(CLI::Range(1, 100));
  a->backend.threads = default_threads();
  add_backend_flags(*cmd, a->backend, a->names);
  return [a] { return run_bench(*a); };
}

}  // namespace troupe::cli
