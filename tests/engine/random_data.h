#pragma once
// Seeded random inputs shared by the kernel tests.
#include <cstdint>
#include <random>
#include <vector>

namespace troupe::test {

inline std::vector<float> gaussian(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace troupe::test
