// The response cache tier's decisions: which requests it answers, keys
// that change with everything shaping the answer and nothing else, and
// the frames of a hit as a client reads them.
#include <catch2/catch.hpp>

#include <vector>

#include "messages/client_validation.h"
#include "service/response_tier.h"
#include "tests/service/harness.h"

using namespace troupe;
using namespace troupe::service;

namespace {

messages::SamplingFields greedy() { return test::greedy_sampling(32); }

std::string key_of(const messages::SamplingFields& s, std::vector<int32_t> prompt = {1, 2, 3}, uint64_t model = 7,
                   SpeculationMode spec = SpeculationMode::off) {
  CacheableRequest r{model, prompt, &s, false, false, 1, spec, {}, false};
  auto k = response_cache_key(r);
  REQUIRE(k);
  return *k;
}

}  // namespace

TEST_CASE("the response cache key changes with the model, the prompt and every field that shapes the answer") {
  const auto base = greedy();
  const std::string k = key_of(base);
  CHECK(k.size() == 32);
  CHECK(key_of(base) == k);
  CHECK(key_of(base, {1, 2, 4}) != k);
  CHECK(key_of(base, {1, 2, 3}, 8) != k);
  auto more = base;
  more.max_tokens = 33;
  CHECK(key_of(more) != k);
  auto stop = base;
  stop.stop = {"\n"};
  CHECK(key_of(stop) != k);
  auto bias = base;
  bias.logit_bias = {{5, 1.0f}};
  CHECK(key_of(bias) != k);
  auto penalty = base;
  penalty.repetition_penalty = 1.1f;
  CHECK(key_of(penalty) != k);
  // A constraint shapes the answer: its grammar is part of the key.
  auto constrained = base;
  constrained.grammar = "root ::= \"yes\" | \"no\"";
  CHECK(key_of(constrained) != k);
  auto other = constrained;
  other.grammar = "root ::= \"yes\"";
  CHECK(key_of(other) != key_of(constrained));
  // Greedy: the sampler's knobs and exact speculation do not change the tokens.
  auto knobs = base;
  knobs.top_k = 5;
  knobs.top_p = 0.5f;
  knobs.seed = 9;
  CHECK(key_of(knobs) == k);
  CHECK(key_of(base, {1, 2, 3}, 7, SpeculationMode::ngram) == k);
  // Sampled with a seed: the seed and the knobs count.
  auto sampled = base;
  sampled.temperature = 0.7f;
  sampled.seed = 1;
  const std::string ks = key_of(sampled);
  CHECK(ks != k);
  auto other_seed = sampled;
  other_seed.seed = 2;
  CHECK(key_of(other_seed) != ks);
  auto other_k = sampled;
  other_k.top_k = 5;
  CHECK(key_of(other_k) != ks);
}

TEST_CASE("requests whose answer is not theirs alone get no key, and a reason") {
  auto s = greedy();
  s.temperature = 0.8f;  // no seed
  const std::vector<int32_t> prompt{1, 2};
  CacheableRequest r{7, prompt, &s, false, false, 1, SpeculationMode::off, {}, false};
  CHECK_FALSE(response_cache_key(r));
  CHECK(response_cache_refusal(r).find("seed") != std::string::npos);
  s.seed = 3;
  CHECK(response_cache_key(r));
  r.samples = 2;
  CHECK_FALSE(response_cache_key(r));
  r.samples = 1;
  r.logprobs = true;
  CHECK_FALSE(response_cache_key(r));
  // A lenient acceptance ratio keeps drafts: with speculation the answer is not the request's alone.
  auto lenient = greedy();
  lenient.accept_ratio = 0.5f;
  CacheableRequest l{7, prompt, &lenient, false, false, 1, SpeculationMode::draft, {}, false};
  CHECK_FALSE(response_cache_key(l));
  CHECK(response_cache_refusal(l).find("accept_ratio") != std::string::npos);
  l.speculation = SpeculationMode::off;  // exactly greedy then
  CHECK(response_cache_key(l));
}

TEST_CASE("cascade routes key the cache apart (without tiers the key is as before), and auto gets none") {
  const auto s = greedy();
  const std::vector<int32_t> prompt{1, 2};
  CacheableRequest plain{7, prompt, &s, false, false, 1, SpeculationMode::off, {}, false};
  CacheableRequest small = plain, large = plain, learned = plain;
  small.route = "tier 0";
  large.route = "tier 1";
  learned.route = "auto";
  learned.route_learned = true;
  REQUIRE(response_cache_key(plain));
  CHECK(*response_cache_key(small) != *response_cache_key(plain));
  CHECK(*response_cache_key(small) != *response_cache_key(large));
  CHECK_FALSE(response_cache_key(learned));
  CHECK(response_cache_refusal(learned).find("auto") != std::string::npos);
}

TEST_CASE("a hit is Accepted, one Tokens frame with the whole answer, and a Done marked hit") {
  persistence::CachedAnswer a;
  a.tokens = {11, 12, 13};
  a.text = "abc";
  a.finish_reason = static_cast<uint8_t>(wire::FinishReason::length);
  a.prompt_tokens = 5;
  const auto frames = cached_answer_frames(9, a, 1.5);
  REQUIRE(frames.size() == 3);
  const auto* accepted = messages::check_response(frames[0]);
  REQUIRE(accepted);
  CHECK(accepted->body_type() == wire::ResponseBody::Accepted);
  const auto* tokens = messages::check_response(frames[1])->body_as_Tokens();
  REQUIRE(tokens);
  CHECK(tokens->text()->str() == "abc");
  CHECK(std::vector<int32_t>(tokens->token_ids()->begin(), tokens->token_ids()->end()) == a.tokens);
  const auto* response = messages::check_response(frames[2]);
  CHECK(response->client_request_id() == 9);
  const auto* done = response->body_as_Done();
  REQUIRE(done);
  CHECK(done->finish_reason() == wire::FinishReason::length);
  CHECK(done->response_cache() == wire::ResponseCacheOutcome::hit);
  CHECK(done->usage()->completion_tokens() == 3);
  CHECK(done->usage()->prompt_tokens() == 5);
  CHECK(done->usage()->cached_prompt_tokens() == 5);
}
