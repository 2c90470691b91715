#include "engine/speculation/ngram_drafter.h"

#include <algorithm>

namespace troupe {

std::vector<int32_t> NgramDrafter::propose(std::span<const int32_t> history, int32_t k) const {
  const auto len = static_cast<int64_t>(history.size());
  if (k <= 0) return {};
  for (int32_t n = std::min<int64_t>(n_max_, len - 1); n >= n_min_; --n) {
    const auto tail = history.subspan(static_cast<size_t>(len - n));
    // Most recent match first: nearby text predicts best. A match must leave
    // at least one token after it.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), history.begin() + start)) continue;
      // Copy what followed; when the match is so recent that fewer than k
      // tokens follow it, keep copying from the proposal itself (a loop of
      // period len - from repeats).
      const int64_t from = start + n;
      std::vector<int32_t> out;
      out.reserve(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) {
        const int64_t at = from + i;
        out.push_back(at < len ? history[static_cast<size_t>(at)] : out[static_cast<size_t>(at - len)]);
      }
      return out;
    }
  }
  return {};
}

}  // namespace troupe
