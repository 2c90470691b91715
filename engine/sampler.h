#pragma once
// Picks the next token from logits. Order of operations (as llama.cpp and HF
// apply them): penalties on the raw logits, then greedy if temperature is 0,
// else temperature, top-k, top-p, min-p, and a draw from the seeded generator.
// The same seed, settings and logits give the same tokens on every run.
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace troupe {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `logits` is modified (penalties, temperature). `history` is every token so
  // far, prompt included; the penalties look at its last penalty_last_n.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

  // What sample() draws from, as (token, probability) pairs summing to 1,
  // most likely first: after penalties, temperature, top-k, top-p and min-p.
  // Greedy (temperature 0) is one pair (argmax, 1). Valid until the next call.
  using Distribution = std::vector<std::pair<int32_t, float>>;
  const Distribution& distribution(std::span<float> logits, std::span<const int32_t> history);
  int32_t draw(const Distribution& d);  // one draw from this sampler's generator
  float uniform();                      // in [0, 1), from the same generator (speculative acceptance)
  bool greedy() const { return params_.temperature == 0.0f; }
  const SamplingParams& params() const { return params_; }

 private:
  void apply_penalties(std::span<float> logits, std::span<const int32_t> history);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  Distribution dist_;
  std::vector<int32_t> counts_;
};

}  // namespace troupe
