// Token choice on the device: greedy is the argmax (lowest id on ties), and
// sampled tokens follow softmax(logits / T) cut to top-k and top-p, checked
// by a chi-square test over many independently seeded rows.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/kernels.h"

using namespace troupe::cuda;

namespace {

struct Rows {
  std::vector<float> logits;
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seed, step;
};

// masks: one row of (vocab + 63) / 64 words per row, or empty for none.
std::vector<int32_t> choose(const Rows& r, int n, int64_t vocab, const std::vector<uint64_t>& masks = {}) {
  DeviceBuffer logits(r.logits.size() * 4), t(n * 4), k(n * 4), p(n * 4), sd(n * 8), st(n * 8), out(n * 4);
  const int64_t words = (vocab + 63) / 64;
  DeviceBuffer mask_rows(n * 4), mask_bits(std::max<size_t>(masks.size() * 8, 8));
  std::vector<int32_t> rows(static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 0);
  if (!masks.empty()) {
    TROUPE_CUDA_CHECK(cudaMemcpy(mask_rows.get(), rows.data(), n * 4, cudaMemcpyHostToDevice));
    TROUPE_CUDA_CHECK(cudaMemcpy(mask_bits.get(), masks.data(), masks.size() * 8, cudaMemcpyHostToDevice));
  }
  TROUPE_CUDA_CHECK(cudaMemcpy(logits.get(), r.logits.data(), r.logits.size() * 4, cudaMemcpyHostToDevice));
  TROUPE_CUDA_CHECK(cudaMemcpy(t.get(), r.temperature.data(), n * 4, cudaMemcpyHostToDevice));
  TROUPE_CUDA_CHECK(cudaMemcpy(k.get(), r.top_k.data(), n * 4, cudaMemcpyHostToDevice));
  TROUPE_CUDA_CHECK(cudaMemcpy(p.get(), r.top_p.data(), n * 4, cudaMemcpyHostToDevice));
  TROUPE_CUDA_CHECK(cudaMemcpy(sd.get(), r.seed.data(), n * 8, cudaMemcpyHostToDevice));
  TROUPE_CUDA_CHECK(cudaMemcpy(st.get(), r.step.data(), n * 8, cudaMemcpyHostToDevice));
  const ChoiceInputs c{t.as<float>(), k.as<int32_t>(), p.as<float>(), sd.as<uint64_t>(), st.as<uint64_t>(),
                       masks.empty() ? nullptr : mask_rows.as<int32_t>(), mask_bits.as<uint64_t>(), words};
  choose_tokens(logits.as<float>(), n, vocab, c, out.as<int32_t>(), nullptr);
  TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> ids(static_cast<size_t>(n));
  TROUPE_CUDA_CHECK(cudaMemcpy(ids.data(), out.get(), n * 4, cudaMemcpyDeviceToHost));
  return ids;
}

Rows same_rows(const std::vector<float>& row, int n, float temperature, int32_t top_k, float top_p) {
  Rows r;
  for (int i = 0; i < n; ++i) {
    r.logits.insert(r.logits.end(), row.begin(), row.end());
    r.temperature.push_back(temperature);
    r.top_k.push_back(top_k);
    r.top_p.push_back(top_p);
    r.seed.push_back(1234567u + static_cast<uint64_t>(i) * 7919u);
    r.step.push_back(static_cast<uint64_t>(i % 97));
  }
  return r;
}

// Pearson's statistic of counts against expected probabilities (zero-probability ids must not occur).
double chi_square(const std::vector<int32_t>& ids, const std::vector<double>& p) {
  std::vector<double> counts(p.size(), 0);
  for (int32_t id : ids) counts.at(static_cast<size_t>(id)) += 1;
  double x = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i] > 0) return INFINITY;
      continue;
    }
    const double e = p[i] * static_cast<double>(ids.size());
    x += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x;
}

}  // namespace

TEST_CASE("device greedy choice is the argmax, lowest id on ties") {
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  const int64_t vocab = 151936;
  Rows r;
  const int n = 8;
  for (int i = 0; i < n; ++i) {
    for (int64_t v = 0; v < vocab; ++v) r.logits.push_back(g(rng));
    r.temperature.push_back(0), r.top_k.push_back(0), r.top_p.push_back(1), r.seed.push_back(i), r.step.push_back(0);
  }
  r.logits[3 * vocab + 500] = 50.0f;  // a tie in row 3: the lower id wins
  r.logits[3 * vocab + 90000] = 50.0f;
  const auto ids = choose(r, n, vocab);
  for (int i = 0; i < n; ++i) {
    const auto* row = r.logits.data() + i * vocab;
    CHECK(ids[i] == std::max_element(row, row + vocab) - row);
  }
  CHECK(ids[3] == 500);
}

TEST_CASE("device choice keeps to each row's token mask, greedy and sampled") {
  std::mt19937 rng(5);
  std::normal_distribution<float> g;
  const int64_t vocab = 151936, words = (vocab + 63) / 64;
  const int n = 64;
  Rows r;
  std::vector<uint64_t> masks(static_cast<size_t>(n * words), 0);
  for (int i = 0; i < n; ++i) {
    for (int64_t v = 0; v < vocab; ++v) r.logits.push_back(g(rng));
    r.temperature.push_back(i % 2 ? 1.0f : 0.0f), r.top_k.push_back(i % 4 == 1 ? 40 : 0), r.top_p.push_back(0.9f);
    r.seed.push_back(static_cast<uint64_t>(i)), r.step.push_back(1);
    // Row i allows a few tokens, none of them its unmasked argmax.
    for (int64_t v : {int64_t{7} * i + 1, int64_t{1000} + i, vocab - 1 - i})
      masks[static_cast<size_t>(i * words + v / 64)] |= uint64_t{1} << (v % 64);
    r.logits[static_cast<size_t>(i * vocab + 3)] = 100.0f;
  }
  const auto ids = choose(r, n, vocab, masks);
  for (int i = 0; i < n; ++i) {
    const int64_t t = ids[static_cast<size_t>(i)];
    CHECK(((masks[static_cast<size_t>(i * words + t / 64)] >> (t % 64)) & 1) == 1);
  }
}

// Significance 0.001: critical values of chi-square for 3, 2 and 1 degrees of freedom.
TEST_CASE("device sampling follows softmax with temperature, top-k and top-p") {
  const std::vector<float> row{std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f), -INFINITY, -1e30f, -1e30f, -1e30f};
  const int n = 40000;
  SECTION("temperature 1, no cut") {
    const auto ids = choose(same_rows(row, n, 1.0f, 0, 1.0f), n, 8);
    CHECK(chi_square(ids, {0.4, 0.3, 0.2, 0.1, 0, 0, 0, 0}) < 16.27);
  }
  SECTION("temperature 0.5 squares the odds") {
    const auto ids = choose(same_rows(row, n, 0.5f, 0, 1.0f), n, 8);
    CHECK(chi_square(ids, {16.0 / 30, 9.0 / 30, 4.0 / 30, 1.0 / 30, 0, 0, 0, 0}) < 16.27);
  }
  SECTION("top-k 2 keeps the two largest") {
    const auto ids = choose(same_rows(row, n, 1.0f, 2, 1.0f), n, 8);
    CHECK(chi_square(ids, {4.0 / 7, 3.0 / 7, 0, 0, 0, 0, 0, 0}) < 10.83);
  }
  SECTION("top-p 0.75 keeps the smallest nucleus reaching it") {
    const auto ids = choose(same_rows(row, n, 1.0f, 0, 0.75f), n, 8);
    CHECK(chi_square(ids, {4.0 / 9, 3.0 / 9, 2.0 / 9, 0, 0, 0, 0, 0}) < 13.82);
  }
}

TEST_CASE("device top-k over a real-sized vocabulary draws only from the top k, reproducibly") {
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.0f, 3.0f);
  const int64_t vocab = 151936;
  std::vector<float> row(static_cast<size_t>(vocab));
  for (auto& v : row) v = g(rng);
  const int n = 256;
  const auto rows = same_rows(row, n, 0.8f, 40, 0.95f);
  const auto ids = choose(rows, n, vocab);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 40, order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  const std::vector<int32_t> top(order.begin(), order.begin() + 40);
  for (int32_t id : ids) CHECK(std::find(top.begin(), top.end(), id) != top.end());
  CHECK(choose(rows, n, vocab) == ids);  // same seeds and steps, same tokens
}
