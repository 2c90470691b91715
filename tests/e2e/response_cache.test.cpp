// The response cache tier end to end: a real `troupe serve`, clients that
// ask for the cache, and what comes back. A hit streams the stored answer
// without a step of the model; a changed field misses; the TTL ends
// entries; sampled requests without a seed are never answered from it;
// session turns may not ask; the cache outlives a restart.
#include <catch2/catch.hpp>

#include <csignal>
#include <thread>

#include "messages/client_connection.h"
#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

using Outcome = wire::ResponseCacheOutcome;

messages::StreamOutcome ask(const std::string& endpoint, const std::string& prompt, const messages::SamplingFields& s,
                            bool cache = true) {
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  return c.stream(messages::generate_request(id, prompt, s, wire::Priority::interactive, false, false, false, 1,
                                             wire::Speculation::server_default, 0, {}, wire::ContextPolicy::server_default,
                                             cache),
                  id, {}, 60s);
}

uint64_t steps(const std::string& endpoint) {
  messages::ClientConnection c(endpoint);
  messages::Bytes keep;
  const auto* s = stats(c, keep);
  REQUIRE(s);
  return s->steps();
}

}  // namespace

TEST_CASE("a cached greedy answer streams again at once, token for token, without a step", "[service]") {
  Server server("rcache");
  const std::string prompt = "The fox and the dog";
  const auto first = ask(server.endpoint, prompt, greedy(24));
  REQUIRE(first.done);
  CHECK(first.usage.response_cache == Outcome::miss);
  CHECK(first.usage.completion_tokens == static_cast<int32_t>(first.tokens.size()));
  const uint64_t before = steps(server.endpoint);
  const auto again = ask(server.endpoint, prompt, greedy(24));
  REQUIRE(again.done);
  CHECK(again.usage.response_cache == Outcome::hit);
  CHECK(again.tokens == first.tokens);
  CHECK(again.text == first.text);
  CHECK(again.usage.reason == first.usage.reason);
  CHECK(again.usage.completion_tokens == first.usage.completion_tokens);
  CHECK(again.usage.prompt_tokens == first.usage.prompt_tokens);
  CHECK(steps(server.endpoint) == before);  // the model did not run

  SECTION("a changed prompt or field misses") {
    CHECK(ask(server.endpoint, prompt + " ran", greedy(24)).usage.response_cache == Outcome::miss);
    CHECK(ask(server.endpoint, prompt, greedy(25)).usage.response_cache == Outcome::miss);
    auto stopped = greedy(24);
    stopped.stop = {"zz"};
    CHECK(ask(server.endpoint, prompt, stopped).usage.response_cache == Outcome::miss);
    auto penalized = greedy(24);
    penalized.repetition_penalty = 1.3f;
    CHECK(ask(server.endpoint, prompt, penalized).usage.response_cache == Outcome::miss);
  }
  SECTION("a request that does not ask is answered by the model, as ever") {
    const auto plain = ask(server.endpoint, prompt, greedy(24), false);
    REQUIRE(plain.done);
    CHECK(plain.usage.response_cache == Outcome::not_asked);
    CHECK(plain.tokens == first.tokens);
    CHECK(steps(server.endpoint) > before);
  }
}

TEST_CASE("sampled requests use the cache only with a seed", "[service]") {
  Server server("rcache-seed");
  messages::SamplingFields s;
  s.temperature = 0.9f;
  s.max_tokens = 16;
  const auto unseeded = ask(server.endpoint, "Once upon a time", s);
  REQUIRE(unseeded.done);
  CHECK(unseeded.usage.response_cache == Outcome::bypassed);
  CHECK(ask(server.endpoint, "Once upon a time", s).usage.response_cache == Outcome::bypassed);
  s.seed = 42;
  const auto seeded = ask(server.endpoint, "Once upon a time", s);
  CHECK(seeded.usage.response_cache == Outcome::miss);
  const auto replay = ask(server.endpoint, "Once upon a time", s);
  CHECK(replay.usage.response_cache == Outcome::hit);
  CHECK(replay.tokens == seeded.tokens);
  s.seed = 43;
  CHECK(ask(server.endpoint, "Once upon a time", s).usage.response_cache == Outcome::miss);
}

TEST_CASE("cached answers expire after the TTL, and a server without the cache bypasses it", "[service]") {
  {
    Server server("rcache-ttl", {"--response-cache-ttl", "1"});
    REQUIRE(ask(server.endpoint, "The dog", greedy(8)).usage.response_cache == Outcome::miss);
    CHECK(ask(server.endpoint, "The dog", greedy(8)).usage.response_cache == Outcome::hit);
    std::this_thread::sleep_for(1100ms);
    CHECK(ask(server.endpoint, "The dog", greedy(8)).usage.response_cache == Outcome::miss);
  }
  Server off("rcache-off", {"--response-cache-bytes", "0"});
  CHECK(ask(off.endpoint, "The dog", greedy(8)).usage.response_cache == Outcome::bypassed);
  CHECK(ask(off.endpoint, "The dog", greedy(8)).usage.response_cache == Outcome::bypassed);
}

TEST_CASE("a session turn may not ask for the cache, and the cache outlives a restart", "[service]") {
  std::string endpoint;
  messages::StreamOutcome first;
  {
    Server server("rcache-restart");
    endpoint = server.endpoint;
    messages::ClientConnection c(endpoint);
    const uint64_t id = c.next_id();
    const std::pair<std::string, std::string> msg[] = {{"user", "Hello"}};
    const auto turn = c.stream(messages::chat_request(id, "s1", msg, greedy(8), wire::Priority::chat, false,
                                                      wire::Speculation::server_default, 0, {},
                                                      wire::ContextPolicy::server_default, 1, true),
                               id, {}, 30s);
    CHECK_FALSE(turn.done);
    CHECK(turn.error == wire::ErrorCode::invalid_field);
    CHECK(turn.message.find("response_cache") != std::string::npos);
    first = ask(endpoint, "The fox", greedy(12));
    REQUIRE(first.usage.response_cache == Outcome::miss);
    server.process.stop(SIGTERM);
  }
  Server again("rcache-restart", {}, endpoint);
  const auto hit = ask(endpoint, "The fox", greedy(12));
  CHECK(hit.usage.response_cache == Outcome::hit);
  CHECK(hit.tokens == first.tokens);
}
