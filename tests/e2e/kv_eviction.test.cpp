// `troupe serve --kv-budget`: sequences cut to their KV budget as they
// decode, several at once, give the tokens the engine gives alone under the
// same budget (`troupe generate --kv-budget`, engine/generator): the same
// cuts at the same positions, chosen by the same queries.
#include <catch2/catch.hpp>

#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

std::string long_prompt(int i) {
  std::string p;
  for (int k = 0; k < 12; ++k) p += "Request " + std::to_string(i) + " part " + std::to_string(k) + " asks about the fox and the dog. ";
  return p;
}

}  // namespace

TEST_CASE("under a KV budget, concurrent streams equal each prompt generated alone under that budget", "[service]") {
  Server server("evict", {"--kv-budget", "128"});
  Reference ref;
  constexpr int kStreams = 4, kTokens = 160;
  std::vector<std::string> prompts;
  for (int i = 0; i < kStreams; ++i) prompts.push_back(long_prompt(i));
  const std::vector<messages::StreamOutcome> got = concurrent_greedy(server.endpoint, prompts, kTokens);
  uint64_t cuts = 0;
  for (int i = 0; i < kStreams; ++i) {
    INFO("stream " << i << ": " << got[static_cast<size_t>(i)].message);
    REQUIRE(got[static_cast<size_t>(i)].done);
    GenerateOptions g;
    g.max_tokens = kTokens;
    g.sampling.temperature = 0;
    g.eviction.budget = 128;
    const auto ids = ref.tokenizer->encode(prompts[static_cast<size_t>(i)], ref.tokenizer->add_bos_by_default(), false);
    REQUIRE(ids.size() > 128);  // the prompt alone is past the budget: the first decode cuts it
    const GenerateResult alone = generate(*ref.backend, *ref.tokenizer, ids, g, {});
    CHECK(alone.evictions >= 2);
    CHECK(got[static_cast<size_t>(i)].tokens == alone.tokens);
    cuts += static_cast<uint64_t>(alone.evictions);
  }
  // The server cut as often as the engine alone did (this small model's
  // greedy answers hardly change with the cuts: the count shows they ran).
  messages::ClientConnection c(server.endpoint);
  messages::Bytes keep;
  const wire::StatsReply* st = stats(c, keep);
  REQUIRE(st);
  CHECK(st->kv_evictions() == cuts);
  CHECK(st->kv_positions_evicted() > 0);
  CHECK(pages_return(c, 10s));
}

TEST_CASE("a KV budget too small is refused at start with one line", "[service]") {
  CHECK_THROWS_WITH(Server("evict-small", {"--kv-budget", "100"}), Catch::Contains("too small: at least 128"));
}

TEST_CASE("a session under a KV budget survives kill -9: its next turn equals the whole conversation sent at once", "[service]") {
  const std::vector<std::string> extra{"--kv-budget", "128"};
  std::string endpoint;
  std::vector<std::pair<std::string, std::string>> history;
  {
    Server server("evict-session", extra);
    endpoint = server.endpoint;
    for (int i = 0; i < 2; ++i) {
      const std::string user = long_prompt(i);
      const auto out = turn(endpoint, "s1", user, 48);
      REQUIRE(out.done);
      history.insert(history.end(), {{"user", user}, {"assistant", out.text}});
    }
    messages::ClientConnection c(endpoint);
    messages::Bytes keep;
    const wire::StatsReply* st = stats(c, keep);
    REQUIRE(st);
    CHECK(st->kv_evictions() >= 2);  // each turn's prompt is past the budget
    server.process.stop(SIGKILL);
  }
  // What the store kept is the conversation, not KV cut to the budget: the
  // next turn (prefix restored or recomputed) equals one request carrying it all.
  Server again("evict-session", extra, endpoint);
  const auto resumed = turn(endpoint, "s1", "And the dog?", 24);
  REQUIRE(resumed.done);
  history.emplace_back("user", "And the dog?");
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  const auto alone = c.stream(messages::chat_request(id, "", history, greedy(24)), id, {}, 60s);
  REQUIRE(alone.done);
  CHECK(resumed.tokens == alone.tokens);
  CHECK(resumed.usage.prompt_tokens == alone.usage.prompt_tokens);
}

TEST_CASE("a request's own kv_budget cuts its KV on a server without one, and a bad one is refused", "[service]") {
  Server server("evict-request");
  Reference ref;
  messages::ClientConnection c(server.endpoint);
  messages::SamplingFields s = greedy(96);
  s.kv_budget = 160;
  const uint64_t id = c.next_id();
  const std::string prompt = long_prompt(7);
  const auto got = c.stream(messages::generate_request(id, prompt, s), id, {}, 120s);
  REQUIRE(got.done);
  GenerateOptions g;
  g.max_tokens = 96;
  g.sampling.temperature = 0;
  g.eviction.budget = 160;
  const auto ids = ref.tokenizer->encode(prompt, ref.tokenizer->add_bos_by_default(), false);
  const GenerateResult alone = generate(*ref.backend, *ref.tokenizer, ids, g, {});
  CHECK(alone.evictions >= 1);
  CHECK(got.tokens == alone.tokens);
  messages::Bytes keep;
  const wire::StatsReply* st = stats(c, keep);
  REQUIRE(st);
  CHECK(st->kv_evictions() == static_cast<uint64_t>(alone.evictions));

  s.kv_budget = 100;
  const uint64_t bad = c.next_id();
  const auto refused = c.stream(messages::generate_request(bad, "hi", s), bad, {}, 10s);
  CHECK_FALSE(refused.done);
  CHECK(refused.message.find("kv_budget") != std::string::npos);
  CHECK(refused.message.find("[128, 16777216]") != std::string::npos);
}
