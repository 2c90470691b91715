// A step's result read against its step (service/step_outcome.h): what each
// wanting slice got, and every way a result can fail to answer its step.
#include <catch2/catch.hpp>

#include <vector>

#include "messages/step_frames.h"
#include "service/step_outcome.h"

using namespace troupe;
using namespace troupe::service;

namespace {

constexpr size_t kVocabulary = 100;

std::vector<SliceOutcome> read(uint64_t step, const std::vector<messages::SampledToken>& sampled,
                               const std::vector<uint64_t>& wanted) {
  const messages::Bytes bytes = messages::step_result(step, sampled, "", 1);
  return read_step_outcome(*messages::check_step_result(bytes), 5, wanted, kVocabulary);
}

messages::SampledToken token(uint64_t seq, int32_t t) {
  messages::SampledToken s;
  s.sequence_id = seq;
  s.token = t;
  s.logprob = -0.5f;
  return s;
}

}  // namespace

TEST_CASE("step outcome: accepted drafts come before the sampled token, with their logprobs and tops") {
  auto s = token(1, 9);
  s.accepted = {4, 5};
  s.logprobs = {-0.1f, -0.2f, -0.3f};
  s.top_ids = {4, 6, 5, 7, 9, 8};
  s.top_logprobs = {-0.1f, -2, -0.2f, -3, -0.3f, -4};
  s.forced = {42};
  const auto out = read(5, {s, token(2, 3)}, {1, 2});
  REQUIRE(out.size() == 2);
  CHECK(out[0].tokens == std::vector<int32_t>{4, 5, 9});
  CHECK(out[0].per_token() == 2);
  CHECK(out[0].logprob_of(2) == Approx(-0.3f));
  CHECK(out[0].forced == std::vector<int32_t>{42});
  CHECK(out[1].tokens == std::vector<int32_t>{3});
  CHECK(out[1].logprob_of(0) == Approx(-0.5f));  // no per-token logprobs: the sampled one's
}

TEST_CASE("step outcome: a grammar that allowed nothing is told per slice") {
  auto s = token(1, 0);
  s.grammar_blocked = true;
  CHECK(read(5, {s}, {1})[0].grammar_blocked);
}

TEST_CASE("step outcome: a result that does not answer its step is refused whole") {
  const char* why = "the verifier's result does not answer step 5";
  CHECK_THROWS_WITH(read(4, {token(1, 3)}, {1}), why);                 // another step
  CHECK_THROWS_WITH(read(5, {token(1, 3)}, {1, 2}), why);              // a slice missing
  CHECK_THROWS_WITH(read(5, {token(2, 3), token(1, 3)}, {1, 2}), why);  // out of order
  CHECK_THROWS_WITH(read(5, {token(1, 100)}, {1}), why);               // outside the vocabulary
  CHECK_THROWS_WITH(read(5, {token(1, -1)}, {1}), why);
  auto forced = token(1, 3);
  forced.forced = {500};
  CHECK_THROWS_WITH(read(5, {forced}, {1}), why);
  auto logprobs = token(1, 3);
  logprobs.logprobs = {-1, -2};  // two logprobs for one token
  CHECK_THROWS_WITH(read(5, {logprobs}, {1}), why);
  auto tops = token(1, 3);
  tops.top_ids = {1, 2};
  tops.top_logprobs = {-1};
  CHECK_THROWS_WITH(read(5, {tops}, {1}), why);
}
