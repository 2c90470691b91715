#include "engine/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/cpu/ops.h"

namespace troupe {

void route_tokens(float* logits, int64_t n_tokens, const MoeRouting& r, int32_t* experts, float* weights) {
  thread_local std::vector<int32_t> order;  // no allocation per step once sized
  order.resize(static_cast<size_t>(r.n_expert));
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* p = logits + t * r.n_expert;
    if (r.gating == ModelConfig::Gating::softmax) {
      cpu::softmax(p, r.n_expert);
    } else {
      for (int64_t e = 0; e < r.n_expert; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + r.n_used, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    int32_t* ex = experts + t * r.n_used;
    float* w = weights + t * r.n_used;
    float sum = 0.0f;
    for (int64_t k = 0; k < r.n_used; ++k) {
      ex[k] = order[static_cast<size_t>(k)];
      w[k] = p[ex[k]];
      sum += w[k];
    }
    if (r.normalize) {
      sum = std::max(sum, 6.103515625e-5f);  // the smallest normal half
      for (int64_t k = 0; k < r.n_used; ++k) w[k] /= sum;
    }
    if (r.scale != 1.0f)
      for (int64_t k = 0; k < r.n_used; ++k) w[k] *= r.scale;
  }
}

}  // namespace troupe
