#pragma once
// ALiBi (Press et al., "Train Short, Test Long", 2022): no position embedding;
// a query head's score for a key is lowered by slope_h times their distance.
// Slopes for any head count: with n the largest power of two <= n_head,
// heads h < n get m0^(h+1) with m0 = 2^(-max_bias / n); the rest interleave
// between them, m1^(2(h - n) + 1) with m1 = 2^(-max_bias / 2n). This is the
// paper's recipe for head counts that are not powers of two, as BLOOM's
// reference code and llama.cpp compute it (in float, as here).
#include <cstdint>
#include <vector>

namespace troupe {

std::vector<float> alibi_slopes(int64_t n_head, float max_bias);

}  // namespace troupe
