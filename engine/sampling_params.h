#pragma once
// How a sequence samples its tokens (engine/sampler.h). The one set of
// sampling fields: the client protocol's SamplingFields (messages/) extends
// it with what a request adds (max_tokens, stop strings, its constraint).
#include <cstdint>
#include <utility>
#include <vector>

namespace troupe {

struct SamplingParams {
  float temperature = 0.8f;  // 0 = greedy
  int32_t top_k = 40;        // 0 = off
  float top_p = 0.95f;       // 1 = off
  float min_p = 0.05f;       // 0 = off; drops tokens below min_p * p(max)
  float repetition_penalty = 1.0f;  // 1 = off; divides positive logits of seen tokens
  float presence_penalty = 0.0f;    // subtracted once per seen token
  float frequency_penalty = 0.0f;   // subtracted per occurrence
  int32_t penalty_last_n = 64;      // how much history the penalties look at
  uint64_t seed = 0;
  // Added to these tokens' logits first, as OpenAI's logit_bias (-100 bans).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Verifying greedy drafts (engine/speculation/acceptance.h): keep a drafted
  // token whose probability is at least this fraction of the top token's.
  // 1: exactly greedy; less trades fidelity for accepted drafts. Greedy only.
  float accept_ratio = 1.0f;

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

}  // namespace troupe
