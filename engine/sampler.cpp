#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/cpu/ops.h"

namespace troupe {

void SamplingParams::validate() const {
  auto bad = [](const char* what) { throw std::invalid_argument(what); };
  if (!(temperature >= 0.0f) || temperature > 100.0f) bad("temperature must be in [0, 100]");
  if (top_k < 0) bad("top_k must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) bad("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || repetition_penalty > 10.0f) bad("repetition_penalty must be in (0, 10]");
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 10.0f) bad("presence_penalty must be in [-10, 10]");
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 10.0f) bad("frequency_penalty must be in [-10, 10]");
  if (penalty_last_n < 0) bad("penalty_last_n must be >= 0");
  if (!(accept_ratio > 0.0f && accept_ratio <= 1.0f)) bad("accept_ratio must be in (0, 1]");
  if (accept_ratio < 1.0f && temperature > 0.0f)
    bad("accept_ratio below 1 applies to greedy requests (temperature 0); sampled drafts are verified exactly");
  for (const auto& [token, bias] : logit_bias)
    if (token < 0 || !std::isfinite(bias) || std::fabs(bias) > 100.0f) bad("logit_bias: a token >= 0, a bias in [-100, 100]");
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { params_.validate(); }

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
  for (const auto& [token, bias] : params_.logit_bias)
    if (static_cast<size_t>(token) < logits.size()) logits[token] += bias;
  const bool any = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                   params_.frequency_penalty != 0.0f;
  if (!any || params_.penalty_last_n == 0 || history.empty()) return;
  const size_t n = std::min<size_t>(history.size(), static_cast<size_t>(params_.penalty_last_n));
  const auto recent = history.subspan(history.size() - n);
  counts_.resize(logits.size());
  for (int32_t t : recent)
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) ++counts_[t];
  for (int32_t t : recent) {
    if (t < 0 || static_cast<size_t>(t) >= logits.size() || counts_[t] == 0) continue;
    float& l = logits[t];
    l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(counts_[t]);
    counts_[t] = 0;  // penalize each distinct token once
  }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  return draw(distribution(logits, history));
}

float Sampler::uniform() { return std::uniform_real_distribution<float>(0.0f, 1.0f)(rng_); }

int32_t Sampler::draw(const Distribution& d) {
  if (d.empty()) throw std::invalid_argument("an empty distribution");
  if (d.size() == 1) return d[0].first;
  const float u = uniform();
  float acc = 0.0f;
  for (const auto& [token, p] : d) {
    acc += p;
    if (u < acc) return token;
  }
  return d.back().first;
}

const Sampler::Distribution& Sampler::distribution(std::span<float> logits, std::span<const int32_t> history) {
  if (logits.empty()) throw std::invalid_argument("no logits to sample from");
  apply_penalties(logits, history);
  dist_.clear();
  if (params_.temperature == 0.0f) {
    dist_.emplace_back(static_cast<int32_t>(cpu::argmax(logits.data(), static_cast<int64_t>(logits.size()))), 1.0f);
    return dist_;
  }

  // Candidates sorted by logit, cut by top-k first so the sort is partial.
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
  size_t k = params_.top_k > 0 ? std::min<size_t>(params_.top_k, candidates_.size()) : candidates_.size();
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), by_logit);
  candidates_.resize(k);

  // Softmax at temperature over the survivors.
  const float max = candidates_[0].first;
  float sum = 0.0f;
  for (auto& c : candidates_) sum += c.first = std::exp((c.first - max) / params_.temperature);
  for (auto& c : candidates_) c.first /= sum;

  size_t keep = candidates_.size();
  if (params_.top_p < 1.0f) {
    float cum = 0.0f;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += candidates_[i].first;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const float floor = params_.min_p * candidates_[0].first;
    size_t i = 1;
    while (i < keep && candidates_[i].first >= floor) ++i;
    keep = i;
  }
  float total = 0.0f;
  for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
  for (size_t i = 0; i < keep; ++i) dist_.emplace_back(candidates_[i].second, candidates_[i].first / total);
  return dist_;
}

}  // namespace troupe
