// A request handed to another scheduler (service/hand_off.h) and what a
// sequence sends on (service/scheduled_sequence.h): every field the
// next tier or replica needs, the answer so far as its prompt, held tokens
// taken back.
#include <catch2/catch.hpp>

#include <vector>

#include "harness.h"
#include "service/hand_off.h"

using namespace troupe;
using namespace troupe::service;

namespace {

ScheduledSequence sequence(int32_t max_tokens) {
  const auto sampling = test::greedy_sampling(max_tokens);
  ScheduledSequence s{ResponseStream(*test::synthetic_tokenizer(), {"peer-a", 17, 0}, sampling, true, true, true, 1234),
                      sampling};
  s.stream.report_top(3);
  return s;
}

void push(ScheduledSequence& s, int32_t token, int64_t t = 5000) {
  Outbound out;
  (void)s.stream.push(token, -0.25f, t, out);
}

}  // namespace

TEST_CASE("hand-off: the request goes on with its stream, sampling left, session, route and cache key") {
  ScheduledSequence s = sequence(10);
  s.tenant = "alice";
  s.weight = 3;
  s.priority = Priority::chat;
  s.session_id = "s-1";
  s.turn_messages = {{"user", "hello"}};
  s.persisted_pages = 2;
  s.window_first_turn = 4;
  s.cache = wire::ResponseCacheOutcome::miss;
  s.cache_key = "key";
  s.route.kind = RouteKind::escalate;
  s.session_escalations = 1;
  push(s, 65);
  push(s, 66);
  const AdmitRequest a = hand_off(s, {1, 2, 3, 65, 66}, 3);
  CHECK(a.peer == "peer-a");
  CHECK(a.client_id == 17);
  CHECK(a.tenant == "alice");
  CHECK(a.weight == 3);
  CHECK(a.priority == Priority::chat);
  CHECK(a.prompt == std::vector<int32_t>{1, 2, 3, 65, 66});
  CHECK(a.first_prompt_tokens == 3);
  CHECK(a.sampling.max_tokens == 8);  // what the answer has left
  CHECK(a.logprobs);
  CHECK(a.top_logprobs == 3);
  CHECK(a.ignore_eos);
  CHECK(a.accepted_ns == 1234);
  CHECK(a.session_id == "s-1");
  CHECK(a.turn_messages.size() == 1);
  CHECK(a.persisted_pages == 2);
  CHECK(a.window_first_turn == 4);
  CHECK(a.response_cache == wire::ResponseCacheOutcome::miss);
  CHECK(a.response_cache_key == "key");
  CHECK(a.route.kind == RouteKind::escalate);
  CHECK(a.session_escalations == 1);
  REQUIRE(a.carried);
  CHECK(a.carried->completion() == 2);
}

TEST_CASE("hand-off: what a sequence sends on leaves out its unsent and held tokens, and unholds its stream") {
  ScheduledSequence s = sequence(10);
  push(s, 65);
  s.held.emplace(s.stream);
  push(s, 66);
  push(s, 67);
  s.held->tokens = 2;
  CHECK(s.sent({1, 2, 65, 66, 67, 68}, 1) == std::vector<int32_t>{1, 2, 65});
  CHECK_FALSE(s.held);
  CHECK(s.stream.completion() == 1);  // as its client saw it
  CHECK(s.sent({1, 2}, 5).empty());
}
