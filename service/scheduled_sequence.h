#pragma once
// One sequence the scheduler runs: a request's, or one of its n samples.
// What it streams (ResponseStream), how it samples, and what the request
// brought that a hand-off to another scheduler (service/hand_off.h) or the
// session store needs again.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/schedule/batch_planner.h"
#include "messages/client_frames.h"
#include "service/cascade.h"
#include "service/outbound.h"
#include "service/response_stream.h"

namespace troupe::service {

struct ScheduledSequence {
  ScheduledSequence(ResponseStream s, messages::SamplingFields f) : stream(std::move(s)), sampling(std::move(f)) {}

  // The stream as its client saw it before any held token: held tokens
  // never reached it, nor are they counted (counters only grow).
  void unhold() {
    if (!held) return;
    stream = std::move(held->before);
    held.reset();
  }
  // What the request continues from elsewhere: `tokens` (its prompt and
  // answer) less the last `unsent` and every held one.
  std::vector<int32_t> sent(std::vector<int32_t> tokens, int32_t unsent) {
    if (held) unsent += held->tokens;
    unhold();
    tokens.resize(tokens.size() - std::min(tokens.size(), static_cast<size_t>(unsent)));
    return tokens;
  }

  ResponseStream stream;
  messages::SamplingFields sampling;
  int32_t verifier_generation = -1;  // planner preemptions when the verifier last got its sampling
  int32_t forks_pending = 0;         // samples to fork once the prompt is computed
  std::string session_id;            // a session turn: committed before its Done
  std::vector<ChatMessage> turn_messages;
  std::vector<int32_t> pinned_messages;  // of turn_messages, those the client pinned
  int32_t persisted_pages = 0;       // a session turn's leading prompt pages already stored
  int32_t window_first_turn = 0;     // the first stored turn its prompt kept
  std::string tenant;                // its request's fair-share tenant
  wire::ResponseCacheOutcome cache = wire::ResponseCacheOutcome::not_asked;
  std::string cache_key;             // a miss: its answer is stored under it
  // Cascade: its route, the watch that may escalate it, what the next tier needs.
  Route route;
  std::optional<EscalationWatch> watch;
  // escalate's hold: the stream as it was before its first held token, and
  // the frames of the held tokens, sent only when the watch releases them.
  struct Held {
    explicit Held(const ResponseStream& s) : before(s) {}
    ResponseStream before;
    Outbound out;
    int32_t tokens = 0;
  };
  std::optional<Held> held;
  uint32_t weight = 1;
  Priority priority = Priority::interactive;
  int32_t first_prompt_tokens = -1;  // escalated here: the prompt its client sent
  int32_t session_escalations = 0;
  std::vector<std::string> restore_pages;  // the last tier's stored pages, kept for it
};

}  // namespace troupe::service
