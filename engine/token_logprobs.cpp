#include "engine/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace troupe {

RowLogprobs row_logprobs(std::span<const float> logits, int32_t top) {
  RowLogprobs r;
  if (logits.empty()) return r;
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  r.log_sum_exp = std::log(sum) + mx;
  const auto n = static_cast<size_t>(std::clamp<int64_t>(top, 0, static_cast<int64_t>(logits.size())));
  if (n == 0) return r;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto before = [&](int32_t a, int32_t b) {
    const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
    return x > y || (x == y && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<int64_t>(n), ids.end(), before);
  r.top_ids.assign(ids.begin(), ids.begin() + static_cast<int64_t>(n));
  for (int32_t id : r.top_ids) r.top_logprobs.push_back(r.of(logits, id));
  return r;
}

}  // namespace troupe
