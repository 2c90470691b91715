#include <catch2/catch.hpp>

#include <map>

#include "engine/sampler.h"
#include "engine/stop_strings.h"

using namespace troupe;

namespace {
SamplingParams plain(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}
}  // namespace

TEST_CASE("greedy sampling picks the largest logit") {
  Sampler s(plain(0.0f));
  std::vector<float> logits{0.1f, 3.0f, -2.0f, 2.9f};
  CHECK(s.sample(logits, {}) == 1);
}

TEST_CASE("the same seed gives the same tokens and another seed other tokens") {
  auto draw = [](uint64_t seed) {
    SamplingParams p = plain(1.0f);
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      std::vector<float> logits(16, 0.0f);
      out.push_back(s.sample(logits, {}));
    }
    return out;
  };
  CHECK(draw(1) == draw(1));
  CHECK(draw(1) != draw(2));
}

TEST_CASE("sampling at temperature 1 follows the softmax of the logits") {
  SamplingParams p = plain(1.0f);
  p.seed = 3;
  Sampler s(p);
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> logits{0.0f, std::log(3.0f)};  // p = 1/4, 3/4
    ++counts[s.sample(logits, {})];
  }
  CHECK(counts[1] / double(n) == Approx(0.75).margin(0.015));
}

TEST_CASE("top-k, top-p and min-p never return a token they cut") {
  std::vector<float> base{5.0f, 4.0f, 1.0f, 0.0f, -1.0f};
  SECTION("top-k 2") {
    SamplingParams p = plain(1.0f);
    p.top_k = 2;
    Sampler s(p);
    for (int i = 0; i < 500; ++i) {
      auto l = base;
      CHECK(s.sample(l, {}) < 2);
    }
  }
  SECTION("top-p 0.5 keeps only the first") {
    SamplingParams p = plain(1.0f);
    p.top_p = 0.5f;
    Sampler s(p);
    for (int i = 0; i < 200; ++i) {
      auto l = base;
      CHECK(s.sample(l, {}) == 0);
    }
  }
  SECTION("min-p 0.2 drops tokens below a fifth of the best") {
    SamplingParams p = plain(1.0f);
    p.min_p = 0.2f;
    Sampler s(p);
    for (int i = 0; i < 500; ++i) {
      auto l = base;
      CHECK(s.sample(l, {}) < 2);
    }
  }
}

TEST_CASE("penalties lower the logits of tokens already seen") {
  SamplingParams p = plain(0.0f);
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  std::vector<float> logits{2.0f, -1.0f, 1.9f};
  std::vector<int32_t> history{0, 0, 1};
  CHECK(s.sample(logits, history) == 2);
  CHECK(logits[0] == Approx(2.0f / 2 - 0.5f - 0.5f));
  CHECK(logits[1] == Approx(-1.0f * 2 - 0.5f - 0.25f));
}

TEST_CASE("invalid sampling settings are refused by name") {
  SamplingParams p;
  p.top_p = 0.0f;
  CHECK_THROWS_WITH(Sampler(p), Catch::Contains("top_p"));
  p = SamplingParams{};
  p.temperature = -1.0f;
  CHECK_THROWS_WITH(Sampler(p), Catch::Contains("temperature"));
}

TEST_CASE("a stop string split across pushes is held back and never emitted") {
  StopStrings s({"STOP"});
  std::string out = s.push("hello ST");
  CHECK(out == "hello ");
  out += s.push("O");
  CHECK(out == "hello ");
  out += s.push("P and more");
  CHECK(s.stopped());
  CHECK(out == "hello ");
}

TEST_CASE("held-back text that does not become a stop string is emitted") {
  StopStrings s({"STOP"});
  std::string out = s.push("a ST");
  out += s.push("ART");
  out += s.finish();
  CHECK(out == "a START");
  CHECK_FALSE(s.stopped());
}

TEST_CASE("logit_bias moves a token's logit before anything else: -100 bans, +100 all but forces") {
  std::vector<float> base{1.0f, 5.0f, 2.0f};
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.logit_bias = {{1, -100.0f}};
  auto logits = base;
  CHECK(Sampler(greedy).sample(logits, {}) == 2);
  greedy.logit_bias = {{0, 100.0f}};
  logits = base;
  CHECK(Sampler(greedy).sample(logits, {}) == 0);
  greedy.logit_bias = {{7, 100.0f}};  // past the vocabulary: ignored, never out of bounds
  logits = base;
  CHECK(Sampler(greedy).sample(logits, {}) == 1);
  greedy.logit_bias = {{0, 1000.0f}};
  CHECK_THROWS_AS(Sampler(greedy), std::invalid_argument);
}
