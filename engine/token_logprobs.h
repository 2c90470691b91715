#pragma once
// Log-probabilities of a logits row, as a server reports them (OpenAI's
// `logprobs` and `top_logprobs`): the model's distribution before any
// sampling setting or constraint touches the row.
#include <cstdint>
#include <span>
#include <vector>

namespace troupe {

struct RowLogprobs {
  double log_sum_exp = 0;            // log Σ exp(logit)
  std::vector<int32_t> top_ids;      // the `top` most likely tokens, most likely first (ties: lower id)
  std::vector<float> top_logprobs;   // their log-probabilities
  float of(std::span<const float> logits, int32_t token) const {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - log_sum_exp);
  }
};

RowLogprobs row_logprobs(std::span<const float> logits, int32_t top);

}  // namespace troupe
