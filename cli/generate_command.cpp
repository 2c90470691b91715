// troupe generate: run one prompt on the local engine and stream the answer.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "cli/sampling_options.h"
#include "engine/chat_template.h"
#include "engine/generator.h"
#include "engine/grammar/constraint.h"
#include "engine/grammar/matcher.h"
#include "engine/model_config.h"
#include "engine/speculation/model_drafter.h"
#include "engine/vocabulary.h"

namespace troupe::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string chat;
  std::string system;
  SamplingOptions sampling;
  BackendOptions backend;
  BackendNames names;  // --device, --weights, --kv-type, --rope-*
  int context = 4096;
  bool special = false;
  bool print_ids = false;
  bool quiet = false;
  std::string speculation = "off";
  int max_draft = 8;
  std::string draft_model;
  int32_t kv_budget = 0;
};

std::vector<int32_t> prompt_tokens(const GenerateArgs& a, const LoadedModel& m) {
  const Tokenizer& tok = *m.tokenizer;
  if (!a.chat.empty()) {
    std::vector<ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", a.chat});
    const ChatFormat format = detect_chat_format(tok.vocabulary(), m.backend->config().architecture);
    return encode_chat(tok, format, messages, true);
  }
  return tok.encode(a.prompt, tok.add_bos_by_default(), a.special);
}

int run_generate(const GenerateArgs& a) {
  if (a.prompt.empty() == a.chat.empty()) throw std::invalid_argument("give exactly one of --prompt and --chat");
  a.sampling.params.validate();  // before the model loads, so a typo fails at once
  EvictionPolicy{a.kv_budget}.check();
  BackendOptions options = a.backend;
  apply_backend_names(options, a.names);
  options.context_tokens = a.context;
  options.kv_pages = static_cast<int32_t>((a.context + options.page_size - 1) / options.page_size);
  BackendOptions target = options;
  target.window_sequences = 1;  // a sliding-window model keeps one window of local KV (engine/kv_cache.h)
  target.window_chunk = GenerateOptions{}.prefill_chunk + a.max_draft + 1;
  LoadedModel m = load_model(a.model, target);
  const std::vector<int32_t> prompt = prompt_tokens(a, m);
  const int64_t ctx = std::min<int64_t>(a.context, m.backend->config().context_limit());
  if (static_cast<int64_t>(prompt.size()) >= ctx)
    throw std::invalid_argument("the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                                std::to_string(ctx));

  GenerateOptions opts;
  if (const messages::ConstraintFields c = constraint_of(a.sampling); c.kind != 0) {
    const grammar::Constraint k{static_cast<grammar::ConstraintKind>(c.kind), c.text, c.choices};
    opts.grammar = std::make_shared<grammar::GrammarIndex>(grammar::compile_gbnf(grammar::constraint_gbnf(k)),
                                                           grammar::token_trie_of(*m.tokenizer));
  }
  opts.max_tokens = a.sampling.max_tokens;
  opts.sampling = a.sampling.params;
  opts.stop = a.sampling.stop;
  if (a.speculation == "ngram") opts.speculation = SpeculationMode::ngram;
  else if (a.speculation == "auto") opts.speculation = SpeculationMode::automatic;
  else if (a.speculation == "draft") opts.speculation = SpeculationMode::draft;
  else if (a.speculation == "suffix") opts.speculation = SpeculationMode::suffix;
  if (opts.speculation == SpeculationMode::draft && a.draft_model.empty())
    throw std::invalid_argument("--speculation draft needs --draft-model NAME");
  opts.max_draft = a.max_draft;
  opts.eviction.budget = a.kv_budget;
  // The draft model: its own backend and pages, the target's tokenizer.
  LoadedModel draft;
  std::unique_ptr<ModelDrafter> drafter;
  if (!a.draft_model.empty() && (opts.speculation == SpeculationMode::draft || opts.speculation == SpeculationMode::automatic)) {
    draft = load_model(a.draft_model, options);
    const std::string why = draft_pair_mismatch(m.tokenizer->vocabulary(), draft.tokenizer->vocabulary());
    if (!why.empty()) throw std::invalid_argument(a.draft_model + " cannot draft for " + a.model + ": " + why);
    drafter = std::make_unique<ModelDrafter>(*draft.backend);
    drafter->calibrate();  // the controller weighs its cost from the first step
    opts.drafter = drafter.get();
  }
  GenerateCallbacks cb;
  if (a.print_ids) {
    cb.on_token = [](int32_t t) { std::printf("%d ", t), std::fflush(stdout); };
  } else {
    cb.on_text = [](std::string_view s) { std::fwrite(s.data(), 1, s.size(), stdout), std::fflush(stdout); };
  }
  const GenerateResult r = generate(*m.backend, *m.tokenizer, prompt, opts, cb);
  std::printf("\n");
  std::fflush(stdout);
  if (!a.quiet) {
    const double n = static_cast<double>(r.tokens.size());
    std::fprintf(stderr, "[%d prompt tokens, %.1f tok/s prefill; %zu tokens, %.1f tok/s decode; finish: %s]\n",
                 r.prompt_tokens, r.prompt_tokens / std::max(r.prefill_seconds, 1e-9), r.tokens.size(),
                 n > 1 ? (n - 1) / std::max(r.decode_seconds, 1e-9) : 0.0, finish_reason_name(r.finish));
    std::fprintf(stderr, "[%s]\n", m.backend->describe().c_str());
    const auto& sp = r.speculation;
    if (opts.speculation != SpeculationMode::off)
      std::fprintf(stderr, "[speculation %s: %d forward steps for %zu tokens; %lld drafted, %lld accepted (%.0f%%), %.2f per window]\n",
                   a.speculation.c_str(), r.forward_steps, r.tokens.size(), static_cast<long long>(sp.drafted),
                   static_cast<long long>(sp.accepted), sp.drafted ? 100.0 * sp.accepted / sp.drafted : 0.0, sp.mean_accepted());
    if (opts.eviction.on())
      std::fprintf(stderr, "[kv budget %d: %d evictions, %d positions evicted]\n", opts.eviction.budget, r.evictions, r.evicted);
  }
  return 0;
}

}  // namespace

Run add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt on the local engine, streaming");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path")->required();
  cmd->add_option("--prompt,-p", a->prompt, "Raw prompt text");
  cmd->add_option("--chat,-c", a->chat, "A user message, formatted with the model's chat template");
  cmd->add_option("--system", a->system, "System message for --chat");
  add_sampling_flags(*cmd, a->sampling);
  a->backend.threads = default_threads();
  add_backend_flags(*cmd, a->backend, a->names);
  cmd->add_option("--context", a->context, "KV cache size in tokens")->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--kv-budget", a->kv_budget,
                  "KV positions kept once the prompt is read: the rest evicted by attention (SnapKV-style); 0 keeps all")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_flag("--special", a->special, "Parse special tokens such as <|im_start|> in --prompt");
  cmd->add_flag("--print-ids", a->print_ids, "Print generated token ids instead of text");
  cmd->add_flag("--quiet,-q", a->quiet, "No statistics on stderr");
  cmd->add_option("--speculation", a->speculation,
                  "Speculative decoding: off, ngram (prompt lookup), suffix (a suffix tree of the prompt and output), "
                  "draft (--draft-model), auto (the controller picks per step)")
      ->check(CLI::IsMember({"off", "ngram", "suffix", "auto", "draft"}))
      ->capture_default_str();
  cmd->add_option("--max-draft", a->max_draft, "Most drafted tokens per verify step")->check(CLI::Range(1, 8))->capture_default_str();
  cmd->add_option("--draft-model", a->draft_model,
                  "Draft model (name or GGUF path) with the target's tokenizer, for --speculation draft or auto");
  return [a] { return run_generate(*a); };
}

}  // namespace troupe::cli
