#pragma once
// What the batch planner's tests share: prompts of consecutive ids, and one
// step run with a fake engine that samples token 7 everywhere.
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "engine/schedule/batch_planner.h"

namespace troupe::test {

inline std::vector<int32_t> prompt(int32_t n, int32_t first = 1) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline std::vector<PlannedSlice> step(BatchPlanner& p) {
  const auto slices = p.plan();
  const Batch b = p.batch();
  REQUIRE(b.sequences.size() == slices.size());
  std::vector<int32_t> sampled;
  for (const auto& s : slices)
    if (s.wants_token) sampled.push_back(7);
  p.commit(sampled);
  return slices;
}

}  // namespace troupe::test
