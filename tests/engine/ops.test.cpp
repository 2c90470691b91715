#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "tests/engine/random_data.h"

using namespace troupe::cpu;

TEST_CASE("the AVX-512 exponential gives libm's expf from underflow to overflow, correctly rounded") {
  if (detect_isa() != Isa::avx512) {
    WARN("no AVX-512 on this CPU: nothing to check");
    return;
  }
  std::vector<float> x;
  for (float v = -110.0f; v <= 95.0f; v += 0.00731f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72f, 88.73f, -87.33f, -103.97f, -103.98f}) x.push_back(v);
  std::vector<float> got(x);
  avx512::exp_shifted(got.data(), static_cast<int64_t>(got.size()), 0.0f);
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (got[i] == std::exp(x[i])) continue;
    // glibc's expf misses correct rounding for ~0.05 % of inputs, within a
    // hair of a midpoint; there this one must be the correctly rounded float.
    ++differ;
    const double exact = std::exp(static_cast<double>(x[i]));
    CHECK(std::abs(got[i] - exact) <= std::abs(std::exp(x[i]) - exact));
  }
  INFO(differ << " of " << x.size() << " differ");
  CHECK(differ <= x.size() / 1000);
  CHECK(got.back() == std::exp(x.back()));
}

TEST_CASE("softmax matches a double-precision softmax and sums to 1 at every length") {
  for (int64_t n : {1, 2, 15, 16, 17, 64, 133, 1000}) {
    auto x = troupe::test::gaussian(static_cast<size_t>(n), static_cast<uint32_t>(n), 4.0f);
    double max = x[0], sum = 0;
    for (float v : x) max = std::max(max, static_cast<double>(v));
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum += want[i] = std::exp(x[i] - max);
    softmax(x.data(), n);
    double total = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      CHECK(x[i] == Approx(want[i] / sum).epsilon(1e-5).margin(1e-12));
      total += x[i];
    }
    CHECK(total == Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("silu_mul is x * sigmoid(x) * up, without overflow at large |x|") {
  std::vector<float> gate{-200.0f, -20.0f, -1.0f, 0.0f, 0.5f, 3.0f, 30.0f, 200.0f}, up(gate.size(), 2.0f);
  const std::vector<float> in(gate);
  silu_mul(gate.data(), up.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = in[i] / (1.0 + std::exp(-static_cast<double>(in[i]))) * 2.0;
    CHECK(std::isfinite(gate[i]));
    CHECK(gate[i] == Approx(want).epsilon(1e-6).margin(1e-30));
  }
}

TEST_CASE("argmax is the first index of the largest value, as std::max_element") {
  for (int64_t n : {1, 5, 16, 17, 151936}) {
    auto x = troupe::test::gaussian(static_cast<size_t>(n), static_cast<uint32_t>(n));
    CHECK(argmax(x.data(), n) == std::max_element(x.begin(), x.end()) - x.begin());
    // A tie: the first of two equal maxima wins, wherever they fall in the lanes.
    if (n >= 17) {
      x[3] = x[n - 1] = 100.0f;
      CHECK(argmax(x.data(), n) == 3);
    }
  }
  const std::vector<float> all_low(40, -1e30f);
  CHECK(argmax(all_low.data(), 40) == 0);
}
