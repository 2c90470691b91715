// The client protocol's gate: what passes, and for each kind of bad buffer
// the Error code and the field it names. Builders and readers round-trip.
#include <catch2/catch.hpp>

#include <random>

#include "messages/client_frames.h"
#include "messages/client_validation.h"
#include "messages/job_frames.h"
#include "messages/session_frames.h"

using namespace troupe::messages;
using troupe::wire::ErrorCode;

namespace {

Rejection reject(const Bytes& b, const ClientLimits& limits = {}) {
  Rejection why;
  CHECK(check_request(b, limits, why) == nullptr);
  return why;
}

}  // namespace

TEST_CASE("a well-formed Generate passes and reads back") {
  SamplingFields s;
  s.temperature = 0.3f;
  s.max_tokens = 12;
  s.stop = {"\n\n", "END"};
  const Bytes b = generate_request(7, "Hello", s, troupe::wire::Priority::batch, true);
  Rejection why;
  const auto* req = check_request(b, {}, why);
  REQUIRE(req != nullptr);
  CHECK_FALSE(why);
  CHECK(req->client_request_id() == 7);
  const auto* g = req->body_as_Generate();
  REQUIRE(g);
  CHECK(g->prompt()->str() == "Hello");
  CHECK(g->priority() == troupe::wire::Priority::batch);
  const SamplingFields back = read_sampling(g->sampling());
  CHECK(back.temperature == 0.3f);
  CHECK(back.max_tokens == 12);
  CHECK(back.stop == s.stop);
}

TEST_CASE("random bytes and truncated buffers are malformed, not crashes") {
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    Bytes junk(rng() % 200, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    Rejection why;
    if (check_request(junk, {}, why) == nullptr) CHECK((why.code == ErrorCode::malformed || why.code == ErrorCode::invalid_field));
  }
  const Bytes good = generate_request(1, "Hello there", SamplingFields{});
  for (size_t n = 0; n < good.size(); n += 3) {
    const Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    Rejection why;
    CHECK(check_request(cut, {}, why) == nullptr);
  }
  CHECK(reject(Bytes{}).code == ErrorCode::malformed);
}

TEST_CASE("a response buffer is not a request") {
  // (Unions number their members alike, so a response can only fail on what
  // its body holds: Tokens read as a ChatTurn has no valid messages.)
  const int32_t ids[] = {1, 2, 3};
  const Bytes b = tokens_response(3, "text", ids);
  const Rejection why = reject(b);
  CHECK((why.code == ErrorCode::malformed || why.code == ErrorCode::invalid_field));
}

TEST_CASE("a body type this server does not know is refused by name") {
  flatbuffers::FlatBufferBuilder fbb;
  const auto body = troupe::wire::CreateStats(fbb).Union();
  fbb.Finish(troupe::wire::CreateRequest(fbb, 4, static_cast<troupe::wire::RequestBody>(200), body));
  const Rejection why = reject(Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()));
  CHECK(why.code == ErrorCode::invalid_field);
  CHECK_THAT(why.message, Catch::Contains("Request.body") && Catch::Contains("200"));
}

TEST_CASE("a body type without its body is refused before anything reads it") {
  flatbuffers::FlatBufferBuilder fbb;
  troupe::wire::RequestBuilder rb(fbb);  // Ping named, no Ping table: the verifier alone lets it pass
  rb.add_client_request_id(7);
  rb.add_body_type(troupe::wire::RequestBody::Ping);
  fbb.Finish(rb.Finish());
  const Bytes b(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
  const Rejection why = reject(b);
  CHECK(why.code == ErrorCode::invalid_field);
  CHECK_THAT(why.message, Catch::StartsWith("Request.body: body type 5 without a body"));
}

TEST_CASE("sampling ranges are the engine's own, so a passed request never fails a step") {
  SamplingFields s;
  s.repetition_penalty = 20;
  CHECK_THAT(reject(generate_request(1, "hi", s)).message, Catch::Contains("repeat_penalty: 20 is outside [0.01, 10]"));
  s = {};
  s.presence_penalty = -11;
  CHECK_THAT(reject(generate_request(1, "hi", s)).message, Catch::Contains("presence_penalty"));
}

TEST_CASE("out-of-range fields are refused by name") {
  SamplingFields s;
  s.top_p = 1.5f;
  auto why = reject(generate_request(4, "hi", s));
  CHECK(why.code == ErrorCode::invalid_field);
  CHECK_THAT(why.message, Catch::StartsWith("Generate.sampling.top_p: 1.5 is outside [0, 1]"));
  CHECK(why.client_request_id == 4);

  s = {};
  s.max_tokens = 0;
  CHECK_THAT(reject(generate_request(1, "hi", s)).message, Catch::StartsWith("Generate.sampling.max_tokens: 0"));
  s.max_tokens = 1 << 30;
  CHECK_THAT(reject(generate_request(1, "hi", s)).message, Catch::Contains("max_tokens"));
  s = {};
  s.temperature = -1;
  CHECK_THAT(reject(generate_request(1, "hi", s)).message, Catch::Contains("temperature"));
  s = {};
  s.stop = {""};
  CHECK_THAT(reject(generate_request(1, "hi", s)).message, Catch::Contains("stop[0]: is empty"));
  CHECK_THAT(reject(generate_request(1, "", SamplingFields{})).message, Catch::Contains("Generate.prompt: is empty"));

  ClientLimits small;
  small.max_prompt_bytes = 4;
  CHECK_THAT(reject(generate_request(1, "too long", SamplingFields{}), small).message, Catch::Contains("at most 4"));
}

TEST_CASE("chat turns are checked message by message") {
  std::vector<std::pair<std::string, std::string>> msgs{{"system", "be brief"}, {"user", "hi"}};
  Rejection why;
  REQUIRE(check_request(chat_request(2, "s-1", msgs, SamplingFields{}), {}, why) != nullptr);
  msgs.push_back({"robot", "x"});
  CHECK_THAT(reject(chat_request(2, "s-1", msgs, SamplingFields{})).message,
             Catch::StartsWith("ChatTurn.messages[2].role: 'robot'"));
  CHECK_THAT(reject(chat_request(2, "bad id!", {}, SamplingFields{})).message, Catch::Contains("session_id"));
  CHECK_THAT(reject(chat_request(2, "", {}, SamplingFields{})).message, Catch::Contains("ChatTurn.messages: is empty"));
}

TEST_CASE("an oversized message is refused too_long before verification") {
  ClientLimits l;
  l.max_message_bytes = 64;
  const auto why = reject(generate_request(1, std::string(100, 'x'), SamplingFields{}), l);
  CHECK(why.code == ErrorCode::too_long);
  CHECK_THAT(why.message, Catch::Contains("exceeds the limit of 64"));
}

TEST_CASE("a chat of 10,000 messages is refused too_long, naming the field, not as a malformed buffer") {
  const std::vector<std::pair<std::string, std::string>> msgs(10000, {"user", "hi"});
  const auto why = reject(chat_request(2, "s-1", msgs, SamplingFields{}));
  CHECK(why.code == ErrorCode::too_long);
  CHECK_THAT(why.message, Catch::StartsWith("ChatTurn.messages: 10000 messages, at most 512"));
}

TEST_CASE("responses round-trip through the response check") {
  DoneFields d;
  d.reason = troupe::wire::FinishReason::stop;
  d.completion_tokens = 5;
  d.ttft_ms = 12.5;
  const Bytes b = done_response(9, d);
  const auto* r = check_response(b);
  REQUIRE(r);
  CHECK(r->client_request_id() == 9);
  REQUIRE(r->body_as_Done());
  CHECK(r->body_as_Done()->usage()->completion_tokens() == 5);
  CHECK(r->body_as_Done()->timings()->ttft_ms() == 12.5);
  const std::vector<int32_t> ids{1, 2};
  const Bytes tokens = tokens_response(3, "ab", ids);  // the view points into these bytes
  const auto* t = check_response(tokens);
  REQUIRE(t);
  CHECK(t->body_as_Tokens()->text()->str() == "ab");
  CHECK(check_response(Bytes("\x01\x02\x03")) == nullptr);
}

TEST_CASE("a session's hand-off between front ends: TakeSession and SessionRecords round-trip, bad steps are refused") {
  const TakeSessionFields t{"chat-1", troupe::wire::HandOffStep::ask, "alice", false, "tcp://10.0.0.2:7700"};
  const Bytes b = take_session_request(9, t);
  Rejection why;
  const auto* req = check_request(b, {}, why);
  REQUIRE(req);
  const TakeSessionFields back = read_take_session(*req->body_as_TakeSession());
  CHECK(back.session_id == "chat-1");
  CHECK(back.step == troupe::wire::HandOffStep::ask);
  CHECK(back.owner == "alice");
  CHECK_FALSE(back.admin);
  CHECK(back.to == "tcp://10.0.0.2:7700");
  CHECK_THAT(reject(take_session_request(1, {"bad id!", troupe::wire::HandOffStep::ask, "", true, "x"})).message,
             Catch::Contains("TakeSession.session_id"));
  CHECK_THAT(reject(take_session_request(1, {"s", static_cast<troupe::wire::HandOffStep>(7), "", true, "x"})).message,
             Catch::Contains("TakeSession.step"));
  CHECK_THAT(reject(take_session_request(1, {"s", troupe::wire::HandOffStep::done, "", true, ""})).message,
             Catch::Contains("TakeSession.to"));
  const SessionRecordsFields r{"chat-1", std::string("head\0er", 7), {"t0", "t1"}, {std::string(64, '\x7f')}};
  const Bytes reply = session_records_response(9, r);
  const auto* resp = check_response(reply);
  REQUIRE(resp);
  REQUIRE(resp->body_as_SessionRecords());
  const SessionRecordsFields got = read_session_records(*resp->body_as_SessionRecords());
  CHECK(got.session_id == r.session_id);
  CHECK(got.header == r.header);
  CHECK(got.turns == r.turns);
  CHECK(got.kv_pages == r.kv_pages);
}

TEST_CASE("a StatsReply reads back whole: tiers, workers, experts, speculation by source and the store's state with the counters") {
  StatsFields s;
  s.running = 2, s.waiting = 3, s.pages_total = 64, s.pages_used = 9, s.pages_cached = 4, s.pages_free = 51;
  s.live_token_fraction = 0.5f, s.steps = 77, s.tokens_generated = 1234, s.model = "m", s.engine_ms = 1.5, s.busy_ms = 2.5;
  s.pages_spilled = 5, s.pages_restored = 6, s.pages_swapped_out = 7, s.pages_swapped_in = 8, s.tokens_shifted = 9;
  s.preemptions = 10, s.draining = true, s.local_pages_total = 11, s.local_pages_used = 12, s.store_degraded = "full";
  s.tiers.push_back({"small", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  s.tiers.push_back({"large", 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25});
  s.escalation_classes = {{"*", 40, 0.3f, 0.7f}, {"job/j1", 16, 0.25f, -1.0f}};
  s.workers.push_back({"tcp://w1", "small", false, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12.5});
  s.expert_tokens = {3, 1, 4};
  s.speculation = {{"ngram", 40, 30, 9}, {"suffix", 20, 18, 4}};
  s.suffix_tree_bytes = 123456, s.suffix_trees = 7, s.suffix_tree_tokens = 999;
  const auto bytes = stats_response(1, s);
  const auto* r = check_response(bytes);
  REQUIRE(r);
  const StatsFields back = read_stats(*r->body_as_StatsReply());
  CHECK(back.model == "m");
  CHECK(back.tokens_generated == 1234);
  CHECK(back.preemptions == 10);
  CHECK(back.draining);
  CHECK(back.store_degraded == "full");
  CHECK(back.expert_tokens == s.expert_tokens);
  REQUIRE(back.tiers.size() == 2);
  CHECK(back.tiers[1].name == "large");
  CHECK(back.tiers[1].accepted == 20);
  CHECK(back.tiers[1].pages_total == 24);
  CHECK(back.tiers[1].check_failures == 25);
  CHECK(back.escalation_classes == s.escalation_classes);
  REQUIRE(back.workers.size() == 1);
  CHECK(back.workers[0].endpoint == "tcp://w1");
  CHECK_FALSE(back.workers[0].up);
  CHECK(back.workers[0].step_ms == 12.5);
  CHECK(back.local_pages_used == 12);
  REQUIRE(back.speculation.size() == 2);
  CHECK(back.speculation[1].source == "suffix");
  CHECK(back.speculation[1].accepted == 18);
  CHECK(back.speculation[1].windows == 4);
  CHECK(back.suffix_tree_bytes == 123456);
  CHECK(back.suffix_trees == 7);
  CHECK(back.suffix_tree_tokens == 999);
}

TEST_CASE("the cascade's fields are checked: an escalation class's name and a job's check") {
  SamplingFields s;
  s.escalate_class = "extract.v2/eu";
  Rejection why;
  const Bytes fine = generate_request(1, "x", s);
  REQUIRE(check_request(fine, {}, why) != nullptr);
  CHECK(read_sampling(check_request(fine, {}, why)->body_as_Generate()->sampling()).escalate_class == "extract.v2/eu");
  for (const std::string& bad : {std::string(65, 'a'), std::string("a b"), std::string("x\"y")}) {
    s.escalate_class = bad;
    const Rejection r = reject(generate_request(1, "x", s));
    CHECK(r.code == ErrorCode::invalid_field);
    CHECK_THAT(r.message, Catch::StartsWith("Generate.sampling.escalate_class"));
  }
  const std::vector<std::string> items{"a"};
  const JobCheckFields check{troupe::wire::JobCheckKind::regex, "x+"};
  const Bytes job = submit_job_request(2, items, "{item}", {}, troupe::wire::Priority::batch, check);
  const auto* req = check_request(job, {}, why);
  REQUIRE(req != nullptr);
  CHECK(read_job_check(req->body_as_SubmitJob()->check()) == check);
  const Rejection big = reject(submit_job_request(3, items, "{item}", {}, troupe::wire::Priority::batch,
                                                  {troupe::wire::JobCheckKind::contains, std::string((1 << 20) + 1, 'x')}));
  CHECK_THAT(big.message, Catch::StartsWith("SubmitJob.check.text"));
  const Rejection kind = reject(submit_job_request(4, items, "{item}", {}, troupe::wire::Priority::batch,
                                                   {static_cast<troupe::wire::JobCheckKind>(9), "x"}));
  CHECK_THAT(kind.message, Catch::StartsWith("SubmitJob.check.kind"));
}
