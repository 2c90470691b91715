#include "service/response_tier.h"

#include <sodium.h>

#include <cstring>

namespace troupe::service {
namespace {

// Fixed-width little-endian fields, lengths before variable parts: two
// different requests never serialize to the same bytes.
class Canonical {
 public:
  template <typename T>
  void add(T v) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes_.append(reinterpret_cast<const char*>(b), sizeof(T));
  }
  void add(const std::string& s) {
    add<uint64_t>(s.size());
    bytes_ += s;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace

std::string response_cache_refusal(const CacheableRequest& r) {
  const messages::SamplingFields& s = *r.sampling;
  if (s.temperature > 0 && s.seed == 0)
    return "a sampled request without a seed is answered anew each time; give it a seed, or temperature 0";
  if (r.samples != 1) return "only single-sample requests are cached (n = 1)";
  if (r.logprobs) return "log-probabilities are not cached";
  if (s.accept_ratio < 1.0f && r.speculation != SpeculationMode::off)
    return "a lenient accept_ratio keeps whatever was drafted, and drafting depends on the server's load";
  if (r.route_learned) return "tier auto answers by the policy it has learned so far, which changes";
  return {};
}

std::optional<std::string> response_cache_key(const CacheableRequest& r) {
  if (!response_cache_refusal(r).empty()) return std::nullopt;
  const messages::SamplingFields& s = *r.sampling;
  Canonical c;
  c.add<uint32_t>(1);  // the key's own version
  c.add(r.model);
  c.add<uint64_t>(r.prompt.size());
  for (int32_t t : r.prompt) c.add(t);
  // Greedy ignores the sampler's other knobs except those that change logits.
  const bool greedy = s.temperature <= 0;
  c.add(greedy ? 0.0f : s.temperature);
  c.add(greedy ? 0 : s.top_k);
  c.add(greedy ? 0.0f : s.top_p);
  c.add(greedy ? 0.0f : s.min_p);
  c.add(greedy ? uint64_t{0} : s.seed);
  c.add(s.repetition_penalty);
  c.add(s.presence_penalty);
  c.add(s.frequency_penalty);
  c.add(s.penalty_last_n);
  c.add(s.max_tokens);
  c.add<uint64_t>(s.stop.size());
  for (const auto& stop : s.stop) c.add(stop);
  c.add<uint64_t>(s.logit_bias.size());
  for (const auto& [token, bias] : s.logit_bias) c.add(token), c.add(bias);
  c.add<uint8_t>(r.ignore_eos);
  c.add<uint8_t>(greedy ? 0 : static_cast<uint8_t>(r.speculation));
  if (!r.route.empty()) c.add(r.route);  // absent without tiers: earlier keys stay valid
  // The constraint's grammar is the answer's as much as the prompt is; the
  // GBNF it lowers to (jump-forward follows from it), absent when none.
  if (!s.grammar.empty()) c.add<uint8_t>(0x47), c.add(s.grammar);
  std::string key(crypto_generichash_BYTES, '\0');
  static_assert(crypto_generichash_BYTES == 32);
  crypto_generichash(reinterpret_cast<unsigned char*>(key.data()), key.size(),
                     reinterpret_cast<const unsigned char*>(c.bytes().data()), c.bytes().size(), nullptr, 0);
  return key;
}

std::vector<messages::Bytes> cached_answer_frames(uint64_t client_id, const persistence::CachedAnswer& a, double elapsed_ms) {
  std::vector<messages::Bytes> frames;
  const auto prompt = a.prompt_tokens;
  frames.push_back(messages::accepted_response(client_id, prompt, 0));
  frames.push_back(messages::tokens_response(client_id, a.text, a.tokens));
  messages::DoneFields d;
  d.reason = static_cast<wire::FinishReason>(a.finish_reason);
  d.prompt_tokens = d.cached_prompt_tokens = prompt;
  d.completion_tokens = static_cast<int32_t>(a.tokens.size());
  d.queue_ms = 0;
  d.ttft_ms = d.total_ms = elapsed_ms;
  d.response_cache = wire::ResponseCacheOutcome::hit;
  frames.push_back(messages::done_response(client_id, d));
  return frames;
}

}  // namespace troupe::service
