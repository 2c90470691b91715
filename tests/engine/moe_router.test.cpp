// The mixture-of-experts router's edge cases: ties, one expert, every
// expert, every token to one expert, renormalized and scaled weights,
// sigmoid gating.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/moe_router.h"

using namespace troupe;

namespace {

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(std::vector<float> logits, int64_t n_expert, int64_t k, bool normalize = false, float scale = 1.0f,
             ModelConfig::Gating gating = ModelConfig::Gating::softmax) {
  const auto n = static_cast<int64_t>(logits.size()) / n_expert;
  Routed r{std::vector<int32_t>(static_cast<size_t>(n * k)), std::vector<float>(static_cast<size_t>(n * k))};
  route_tokens(logits.data(), n, {n_expert, k, gating, normalize, scale}, r.experts.data(), r.weights.data());
  return r;
}

}  // namespace

TEST_CASE("router: a tie in gate scores goes to the lower expert index, the same in any position of the batch") {
  const Routed r = route({1, 3, 3, 0, /* */ 3, 3, 3, 3}, 4, 2);
  CHECK(r.experts == std::vector<int32_t>{1, 2, 0, 1});
  CHECK(r.weights[0] == r.weights[1]);
}

TEST_CASE("router: k = 1 picks the argmax, k = E uses every expert in probability order") {
  const Routed one = route({0.5f, 2.0f, -1.0f}, 3, 1);
  CHECK(one.experts == std::vector<int32_t>{1});
  const Routed all = route({0.5f, 2.0f, -1.0f}, 3, 3);
  CHECK(all.experts == std::vector<int32_t>{1, 0, 2});
  float sum = 0;
  for (float w : all.weights) sum += w;
  CHECK(sum == Approx(1.0f));  // softmax probabilities of every expert
  CHECK(all.weights[0] == Approx(std::exp(2.0f) / (std::exp(0.5f) + std::exp(2.0f) + std::exp(-1.0f))));
}

TEST_CASE("router: every token routed to one expert when it dominates") {
  std::vector<float> logits;
  for (int t = 0; t < 16; ++t) logits.insert(logits.end(), {0.1f * t, 0.0f, 50.0f, -0.1f * t});
  const Routed r = route(logits, 4, 1);
  for (int32_t e : r.experts) CHECK(e == 2);
}

TEST_CASE("router: renormalized weights sum to 1 (Mixtral), unnormalized ones do not (Qwen-MoE), and scale multiplies") {
  const std::vector<float> logits{1.0f, 0.0f, 2.0f, -1.0f};
  const Routed plain = route(logits, 4, 2);
  const Routed norm = route(logits, 4, 2, true);
  const Routed scaled = route(logits, 4, 2, true, 2.5f);
  CHECK(plain.weights[0] + plain.weights[1] < 0.95f);
  CHECK(norm.weights[0] + norm.weights[1] == Approx(1.0f));
  CHECK(norm.weights[0] / norm.weights[1] == Approx(plain.weights[0] / plain.weights[1]));
  CHECK(scaled.weights[0] == Approx(2.5f * norm.weights[0]));
}

TEST_CASE("router: sigmoid gating weighs each expert by its own sigmoid") {
  const Routed r = route({2.0f, -1.0f, 0.5f}, 3, 2, false, 1.0f, ModelConfig::Gating::sigmoid);
  CHECK(r.experts == std::vector<int32_t>{0, 2});
  CHECK(r.weights[0] == Approx(1.0f / (1.0f + std::exp(-2.0f))));
  CHECK(r.weights[1] == Approx(1.0f / (1.0f + std::exp(-0.5f))));
}
