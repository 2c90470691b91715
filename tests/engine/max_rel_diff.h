#pragma once
// How far two logits rows are apart: the largest difference over the
// largest magnitude of the second (the reference).
#include <algorithm>
#include <cmath>
#include <span>

namespace troupe::test {

inline float max_rel_diff(std::span<const float> a, std::span<const float> b) {
  float d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i])), m = std::max(m, std::fabs(b[i]));
  return d / m;
}

}  // namespace troupe::test
