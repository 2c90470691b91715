#include "service/step_outcome.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "messages/step_frames.h"

namespace troupe::service {
namespace {

template <typename T, typename V>
std::vector<T> copied(const V* v) {
  return v ? std::vector<T>(v->begin(), v->end()) : std::vector<T>();
}

bool in_vocabulary(const std::vector<int32_t>& tokens, size_t vocabulary) {
  return std::all_of(tokens.begin(), tokens.end(),
                     [&](int32_t t) { return t >= 0 && static_cast<size_t>(t) < vocabulary; });
}

bool well_formed(const SliceOutcome& o, size_t vocabulary) {
  return in_vocabulary(o.tokens, vocabulary) && in_vocabulary(o.forced, vocabulary) &&
         in_vocabulary(o.top_ids, vocabulary) &&
         (o.token_logprobs.empty() || o.token_logprobs.size() == o.tokens.size()) &&
         o.top_ids.size() == o.top_logprobs.size() && o.top_ids.size() % o.tokens.size() == 0;
}

}  // namespace

std::vector<SliceOutcome> read_step_outcome(const wire::step::StepResult& res, uint64_t step,
                                            std::span<const uint64_t> wanted, size_t vocabulary) {
  std::vector<SliceOutcome> outcomes;
  if (res.sampled())
    for (const auto* s : *res.sampled()) {
      SliceOutcome o;
      o.sequence = s->sequence_id();
      o.tokens = copied<int32_t>(s->accepted());
      o.tokens.push_back(s->token());
      o.logprob = s->logprob();
      o.token_logprobs = copied<float>(s->logprobs());
      o.top_ids = copied<int32_t>(s->top_ids());
      o.top_logprobs = copied<float>(s->top_logprobs());
      o.forced = copied<int32_t>(s->forced());
      o.grammar_blocked = s->grammar_blocked();
      outcomes.push_back(std::move(o));
    }
  bool answers = res.step() == step && outcomes.size() == wanted.size();
  for (size_t i = 0; answers && i < outcomes.size(); ++i)
    answers = outcomes[i].sequence == wanted[i] && well_formed(outcomes[i], vocabulary);
  if (!answers) throw std::runtime_error("the verifier's result does not answer step " + std::to_string(step));
  return outcomes;
}

}  // namespace troupe::service
