#include "engine/speculation/acceptance.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace troupe {
namespace {

float prob(const Sampler::Distribution& d, int32_t token) {
  for (const auto& [t, p] : d)
    if (t == token) return p;
  return 0.0f;
}

// q by token, for lookups while walking p (which may hold the whole vocabulary).
float prob_sorted(const Sampler::Distribution& by_token, int32_t token) {
  auto it = std::lower_bound(by_token.begin(), by_token.end(), token,
                             [](const std::pair<int32_t, float>& e, int32_t t) { return e.first < t; });
  return it != by_token.end() && it->first == token ? it->second : 0.0f;
}

}  // namespace

Acceptance accept_drafts(Sampler& sampler, std::span<const int32_t> drafts, const std::function<std::span<float>(int32_t)>& row,
                         std::vector<int32_t>& history, const std::vector<Sampler::Distribution>* draft_dist) {
  if (draft_dist && draft_dist->size() < drafts.size()) throw std::invalid_argument("fewer draft distributions than drafts");
  Acceptance a;
  for (size_t i = 0; i <= drafts.size(); ++i) {
    // Copied: the next call reuses the sampler's buffer.
    const Sampler::Distribution p = sampler.distribution(row(static_cast<int32_t>(i)), history);
    if (i == drafts.size()) {  // every draft accepted: the target adds one more
      a.next = sampler.draw(p);
      break;
    }
    const int32_t d = drafts[i];
    if (sampler.greedy()) {
      // The row holds the penalized logits now: p(d) / p(top) = exp(l_d - l_top).
      const std::span<float> logits = row(static_cast<int32_t>(i));
      const float alpha = sampler.params().accept_ratio;
      const bool near = alpha < 1.0f && d >= 0 && static_cast<size_t>(d) < logits.size() &&
                        std::exp(logits[static_cast<size_t>(d)] - logits[static_cast<size_t>(p[0].first)]) >= alpha;
      if (p[0].first == d || near) {
        ++a.accepted;
        history.push_back(d);
        continue;
      }
      a.next = p[0].first;
      break;
    }
    const float pd = prob(p, d);
    const float qd = draft_dist ? prob((*draft_dist)[i], d) : 1.0f;
    if (qd > 0.0f && sampler.uniform() < std::min(1.0f, pd / qd)) {
      ++a.accepted;
      history.push_back(d);
      continue;
    }
    // Rejected: draw from the residual max(0, p - q), renormalized.
    Sampler::Distribution residual, q_by_token;
    if (draft_dist) {
      q_by_token = (*draft_dist)[i];
      std::sort(q_by_token.begin(), q_by_token.end());
    }
    float total = 0.0f;
    for (const auto& [t, pt] : p) {
      const float qt = draft_dist ? prob_sorted(q_by_token, t) : (t == d ? 1.0f : 0.0f);
      const float r = std::max(0.0f, pt - qt);
      if (r > 0.0f) {
        residual.emplace_back(t, r);
        total += r;
      }
    }
    if (total <= 0.0f) {  // p <= q everywhere (numerically): p itself
      a.next = sampler.draw(p);
    } else {
      for (auto& e : residual) e.second /= total;
      a.next = sampler.draw(residual);
    }
    break;
  }
  history.push_back(a.next);
  return a;
}

}  // namespace troupe
