#include "service/hand_off.h"

#include <memory>

namespace troupe::service {

AdmitRequest hand_off(const ScheduledSequence& s, std::vector<int32_t> prompt, int32_t first_prompt_tokens) {
  AdmitRequest a;
  a.peer = s.stream.target().peer;
  a.client_id = s.stream.target().client_id;
  a.tenant = s.tenant;
  a.weight = s.weight;
  a.prompt = std::move(prompt);
  a.sampling = s.sampling;
  a.sampling.max_tokens = s.stream.max_tokens() - s.stream.completion();
  a.priority = s.priority;
  a.logprobs = s.stream.logprobs();
  a.top_logprobs = s.stream.top_logprobs();
  a.ignore_eos = s.stream.ignore_eos();
  a.accepted_ns = s.stream.accepted_ns();
  a.session_id = s.session_id;
  a.turn_messages = s.turn_messages;
  a.pinned_messages = s.pinned_messages;
  a.persisted_pages = s.persisted_pages;
  a.window_first_turn = s.window_first_turn;
  a.response_cache = s.cache;
  a.response_cache_key = s.cache_key;
  a.route = s.route;
  a.session_escalations = s.session_escalations;
  a.carried = std::make_shared<ResponseStream>(s.stream);
  a.first_prompt_tokens = first_prompt_tokens;
  return a;
}

}  // namespace troupe::service
