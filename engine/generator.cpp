#include "engine/generator.h"

#include <chrono>
#include <stdexcept>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
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
  Batch step;  // reused: a decode step allocates nothing
  step.sequences.resize(1);
  history.reserve(history.size() + static_cast<size_t>(options.max_tokens));
  for (int32_t i = 0; i < options.max_tokens; ++i) {
    const int32_t token = sampler.sample(logits.row(0), history);
    if (tokenizer.is_end_of_generation(token)) {
      result.finish = FinishReason::end_of_generation;
      break;
    }
    history.push_back(token);
    result.tokens.push_back(token);
    if (callbacks.on_token) callbacks.on_token(token);
    emit(stops.push(decoder.push(token)));
    if (stops.stopped()) {
      result.finish = FinishReason::stop_string;
      break;
    }
    if (i + 1 == options.max_tokens) break;
    const int32_t pos = static_cast<int32_t>(history.size()) - 1;
    if (pos + 1 > backend.config().n_ctx_train || !seq.reserve(pos + 1)) {
      result.finish = FinishReason::context_full;
      break;
    }
    step.sequences[0] = {std::span<const int32_t>(&history[pos], 1), pos, seq.block_table(), LogitsWanted::last};
    backend.forward(step, logits);
  }
  if (!stops.stopped()) emit(stops.push(decoder.finish()) + stops.finish());
  result.decode_seconds = seconds_since(t1);
  return result;
}

}  // namespace troupe
