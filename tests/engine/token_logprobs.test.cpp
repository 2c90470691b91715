#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/token_logprobs.h"

using namespace troupe;

TEST_CASE("a row's log-probabilities sum to one, and its most likely tokens come first, ties by id") {
  const std::vector<float> row = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  const RowLogprobs r = row_logprobs(row, 3);
  double total = 0;
  for (int32_t t = 0; t < 5; ++t) total += std::exp(r.of(row, t));
  CHECK(total == Approx(1.0).epsilon(1e-6));  // float log-probabilities
  CHECK(r.top_ids == std::vector<int32_t>{1, 3, 0});
  REQUIRE(r.top_logprobs.size() == 3);
  CHECK(r.top_logprobs[0] == Approx(r.of(row, 1)));
  CHECK(r.top_logprobs[2] == Approx(std::log(std::exp(1.0) / (std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-2.0) + std::exp(0.5)))));
  CHECK(row_logprobs(row, 0).top_ids.empty());
  CHECK(row_logprobs(row, 99).top_ids.size() == 5);
  // Large logits do not overflow.
  const std::vector<float> big = {1000.0f, 999.0f};
  CHECK(row_logprobs(big, 1).top_logprobs[0] == Approx(-std::log1p(std::exp(-1.0))));
}
