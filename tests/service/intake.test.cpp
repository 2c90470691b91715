// The socket thread's decisions (service/intake.h): Pings answered on the
// spot, prompts bounded by the backlog and refused `overloaded` past it,
// control frames never bounded.
#include <catch2/catch.hpp>

#include "messages/client_frames.h"
#include "messages/client_validation.h"
#include "service/intake.h"
#include "tests/service/harness.h"

using namespace troupe;
using namespace troupe::service;

namespace {

messages::SamplingFields greedy() { return test::greedy_sampling(4); }

}  // namespace

TEST_CASE("a Ping is answered by the socket thread with its nonce") {
  IntakeBacklog backlog;
  const IntakeDecision d = classify_frame(messages::ping_request(5, 77), {}, backlog);
  REQUIRE(d.lane == IntakeLane::answered);
  const auto* r = messages::check_response(d.reply);
  REQUIRE(r);
  CHECK(r->client_request_id() == 5);
  CHECK(r->body_as_Pong()->nonce() == 77);
  CHECK(backlog.frames() == 0);
}

TEST_CASE("prompts wait for ingestion up to the backlog's frames and bytes, then are refused overloaded at once") {
  IntakeBacklog backlog({3, 64ll << 20});
  const std::string prompt = messages::generate_request(1, "hello", greedy(), wire::Priority::interactive);
  for (int i = 0; i < 3; ++i) CHECK(classify_frame(prompt, {}, backlog).lane == IntakeLane::prompt);
  CHECK(backlog.frames() == 3);
  CHECK(backlog.bytes() == 3 * static_cast<int64_t>(prompt.size()));
  const IntakeDecision over = classify_frame(prompt, {}, backlog);
  REQUIRE(over.lane == IntakeLane::answered);
  const auto* e = messages::check_response(over.reply)->body_as_Error();
  REQUIRE(e);
  CHECK(e->code() == wire::ErrorCode::overloaded);
  CHECK_THAT(e->message()->str(), Catch::Contains("reading 3 prompts"));
  CHECK(backlog.frames() == 3);  // the refusal took nothing
  // Control frames are never held back by the prompts' bound.
  CHECK(classify_frame(messages::stats_request(2), {}, backlog).lane == IntakeLane::control);
  CHECK(classify_frame(messages::cancel_request(3, 1), {}, backlog).lane == IntakeLane::control);
  CHECK(classify_frame(messages::ping_request(4, 1), {}, backlog).lane == IntakeLane::answered);
  backlog.release(prompt.size());  // ingestion read one
  CHECK(classify_frame(prompt, {}, backlog).lane == IntakeLane::prompt);
}

TEST_CASE("the byte bound counts each prompt's size, and a frame the gate refuses goes to ingestion for its reason") {
  IntakeBacklog backlog({1000, 1 << 20});
  const std::string big = messages::generate_request(1, std::string(700 << 10, 'x'), greedy(), wire::Priority::batch);
  CHECK(classify_frame(big, {}, backlog).lane == IntakeLane::prompt);
  CHECK(classify_frame(big, {}, backlog).lane == IntakeLane::answered);  // 1.4 MiB > 1 MiB
  const std::string small = messages::generate_request(2, "hi", greedy(), wire::Priority::batch);
  CHECK(classify_frame(small, {}, backlog).lane == IntakeLane::prompt);
  CHECK(classify_frame("not a flatbuffer", {}, backlog).lane == IntakeLane::control);
}
