#pragma once
// A step's result as the scheduler applies it: per slice that wanted a
// token, what came back, checked against what the step asked for. A result
// that does not answer its step slice for slice (another step, other
// sequences, a token outside the vocabulary, logprobs that do not match
// the tokens) is refused whole: none of it reaches a stream.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace troupe::wire::step {
struct StepResult;
}

namespace troupe::service {

struct SliceOutcome {
  uint64_t sequence = 0;
  std::vector<int32_t> tokens;  // accepted drafts, then the sampled token
  float logprob = 0;            // the sampled token's (when token_logprobs is empty)
  std::vector<float> token_logprobs;  // with logprobs: one per token
  // With top logprobs: `per_token()` ids and logprobs per token, in order.
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  std::vector<int32_t> forced;  // tokens its grammar forces after those (jump-forward)
  bool grammar_blocked = false;  // its grammar allowed no token: nothing was sampled

  size_t per_token() const { return tokens.empty() ? 0 : top_ids.size() / tokens.size(); }
  float logprob_of(size_t k) const { return token_logprobs.empty() ? logprob : token_logprobs[k]; }
};

// Throws std::runtime_error naming `step` when the result does not answer it.
// `wanted`: the sequences whose slices want a token, in the step's order.
std::vector<SliceOutcome> read_step_outcome(const wire::step::StepResult& result, uint64_t step,
                                            std::span<const uint64_t> wanted, size_t vocabulary);

}  // namespace troupe::service
