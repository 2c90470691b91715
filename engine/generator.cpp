#include "engine/generator.h"

#include <chrono>
#include <stdexcept>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/speculation/acceptance.h"
#include "engine/speculation/model_drafter.h"
#include "engine/speculation/ngram_drafter.h"
#include "engine/stop_strings.h"
#include "engine/tokenizer.h"

namespace troupe {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::length: return "length";
    case FinishReason::end_of_generation: return "stop";
    case FinishReason::stop_string: return "stop_string";
    case FinishReason::context_full: return "context_full";
  }
  return "unknown";
}

GenerateResult generate(Backend& backend, const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const GenerateCallbacks& callbacks) {
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
  if (options.prefill_chunk <= 0) throw std::invalid_argument("prefill chunk must be positive");
  GenerateResult result;
  result.prompt_tokens = static_cast<int32_t>(prompt.size());
  KvSequence seq(backend.pages(), backend.page_size());
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  Sampler sampler(options.sampling);
  StreamDecoder decoder(tokenizer);
  StopStrings stops(options.stop);
  Logits logits;
  auto emit = [&](const std::string& text) {
    if (!text.empty() && callbacks.on_text) callbacks.on_text(text);
  };

  const auto t0 = std::chrono::steady_clock::now();
  const int32_t n_prompt = static_cast<int32_t>(prompt.size());
  if (!seq.reserve(n_prompt)) throw std::runtime_error("the prompt does not fit in the KV cache");
  for (int32_t pos = 0; pos < n_prompt; pos += options.prefill_chunk) {
    const int32_t len = std::min(options.prefill_chunk, n_prompt - pos);
    Batch batch;
    batch.sequences.push_back({prompt.subspan(pos, len), pos, seq.block_table(),
                               pos + len == n_prompt ? LogitsWanted::last : LogitsWanted::none});
    backend.forward(batch, logits);
  }
  result.prefill_seconds = seconds_since(t0);

  const auto t1 = std::chrono::steady_clock::now();
  history.reserve(history.size() + static_cast<size_t>(options.max_tokens) + 16);
  // One token reaches the output; false when generation ends with it.
  auto keep = [&](int32_t token) {
    if (tokenizer.is_end_of_generation(token)) {
      result.finish = FinishReason::end_of_generation;
      return false;
    }
    history.push_back(token);
    result.tokens.push_back(token);
    if (callbacks.on_token) callbacks.on_token(token);
    emit(stops.push(decoder.push(token)));
    if (stops.stopped()) {
      result.finish = FinishReason::stop_string;
      return false;
    }
    return static_cast<int32_t>(result.tokens.size()) < options.max_tokens;
  };
  if (options.speculation == SpeculationMode::draft && !options.drafter)
    throw std::invalid_argument("speculation with a draft model needs the draft model");
  NgramDrafter drafter;
  SpeculationController controller(options.speculation, options.max_draft, options.drafter != nullptr);
  StepCostModel cost;
  DraftCatchUpCost catch_up;
  std::vector<int32_t> window;
  std::vector<int32_t> drafts;
  std::vector<Sampler::Distribution> draft_dists;  // the draft model's q, when it samples
  int32_t token = sampler.sample(logits.row(0), history);
  while (keep(token)) {
    const int32_t pos = static_cast<int32_t>(history.size()) - 1;  // where `token` goes
    const int32_t room = std::min(options.max_draft, options.max_tokens - static_cast<int32_t>(result.tokens.size()) - 1);
    drafts = options.speculation != SpeculationMode::off && room > 0 ? drafter.propose(history, room) : std::vector<int32_t>();
    const int64_t behind = options.drafter ? static_cast<int64_t>(history.size()) - options.drafter->computed(0) : 0;
    const auto choice = controller.choose(static_cast<int32_t>(drafts.size()), 1, cost,
                                          options.drafter ? options.drafter->round_ms() : 0.0, 0, catch_up.ms(behind));
    draft_dists.clear();
    if (choice.source == DraftSource::model) {
      const ModelDrafter::Request req{0, history, choice.k, options.sampling};
      auto proposal = std::move(options.drafter->propose(std::span(&req, 1)).front());
      catch_up.observe(options.drafter->catch_up_ms(), behind);
      drafts = std::move(proposal.tokens);
      draft_dists = std::move(proposal.dists);
    }
    const int32_t k = std::min(choice.k, static_cast<int32_t>(drafts.size()));
    drafts.resize(static_cast<size_t>(k));
    if (pos + k + 1 > backend.config().n_ctx_train || !seq.reserve(pos + k + 1)) {
      result.finish = FinishReason::context_full;
      break;
    }
    window.assign(1, token);
    window.insert(window.end(), drafts.begin(), drafts.end());
    Batch step;
    step.sequences.push_back({window, pos, seq.block_table(), k > 0 ? LogitsWanted::all : LogitsWanted::last});
    const auto ts = std::chrono::steady_clock::now();
    backend.forward(step, logits);
    cost.observe(k + 1, seconds_since(ts) * 1000.0);
    ++result.forward_steps;
    if (k == 0) {
      token = sampler.sample(logits.row(0), history);
      continue;
    }
    std::vector<int32_t> verified(history);  // penalties see what is accepted as it is
    const Acceptance acc = accept_drafts(sampler, drafts, [&](int32_t i) { return logits.row(i); }, verified,
                                         draft_dists.empty() ? nullptr : &draft_dists);
    controller.observe(choice.source, k, acc.accepted);
    seq.truncate(pos + 1 + acc.accepted);  // rejected positions: their pages go, their slots are rewritten later
    bool going = true;
    for (int32_t j = 0; j < acc.accepted && going; ++j) going = keep(drafts[static_cast<size_t>(j)]);
    if (!going) break;
    token = acc.next;
  }
  result.speculation = controller.stats();
  if (options.drafter) options.drafter->forget(0);
  // Every kept token but the last has its K/V computed.
  if (callbacks.on_kv) callbacks.on_kv(seq.block_table(), static_cast<int32_t>(history.size()) - 1);
  if (!stops.stopped()) emit(stops.push(decoder.finish()) + stops.finish());
  result.decode_seconds = seconds_since(t1);
  return result;
}

}  // namespace troupe
