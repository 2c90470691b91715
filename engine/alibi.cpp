#include "engine/alibi.h"

#include <cmath>

namespace troupe {

std::vector<float> alibi_slopes(int64_t n_head, float max_bias) {
  std::vector<float> slopes(static_cast<size_t>(n_head));
  const auto n = static_cast<int64_t>(1u << static_cast<uint32_t>(std::floor(std::log2(static_cast<double>(n_head)))));
  const float m0 = std::pow(2.0f, -max_bias / static_cast<float>(n));
  const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(n));
  for (int64_t h = 0; h < n_head; ++h)
    slopes[static_cast<size_t>(h)] = h < n ? std::pow(m0, static_cast<float>(h + 1))
                                           : std::pow(m1, static_cast<float>(2 * (h - n) + 1));
  return slopes;
}

}  // namespace troupe
