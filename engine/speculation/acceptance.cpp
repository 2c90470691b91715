#include "engine/speculation/acceptance.h"

#include <algorithm>
#include <stdexcept>

namespace troupe {
namespace {

float prob(const Sampler::Distribution& d, int32_t token) {
  for (const auto& [t, p] : d)
    if (t == token) return p;
  return 0.0f;
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
      if (p[0].first == d) {
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
    Sampler::Distribution residual;
    float total = 0.0f;
    for (const auto& [t, pt] : p) {
      const float qt = draft_dist ? prob((*draft_dist)[i], t) : (t == d ? 1.0f : 0.0f);
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
