#pragma once
// Shared by the CUDA device tests: synthetic models, runs of a backend over
// a token sequence, and comparisons of logits rows.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/synthetic_model.h"

namespace troupe::test {

inline std::string synthetic_model(TensorType type, const std::string& tag, SyntheticModelSpec spec = {}) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("troupe-cuda-test-" + tag + "-" + std::string(tensor_type_name(type)) + ".gguf");
  spec.weight_type = type;
  spec.embedding_type = type;
  spec.seed = 7;
  write_synthetic_model(spec, path.string());
  return path.string();
}

inline std::unique_ptr<Backend> open(const std::string& path, Device device, int32_t kv_pages = 64,
                                     DeviceWeights weights = DeviceWeights::automatic) {
  BackendOptions o;
  o.device = device;
  o.threads = 4;
  o.kv_pages = kv_pages;
  o.weights = weights;
  o.max_batch_tokens = 1024;
  return open_backend(path, o);
}

inline std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// Logits of every position, the sequence fed in the given chunk lengths.
inline std::vector<float> all_logits(Backend& b, const std::vector<int32_t>& tokens, const std::vector<size_t>& chunks) {
  KvSequence seq(b.pages(), b.page_size());
  if (!seq.reserve(static_cast<int32_t>(tokens.size()))) throw std::runtime_error("KV pages exhausted");
  std::vector<float> all;
  Logits out;
  size_t pos = 0;
  for (size_t i = 0; pos < tokens.size(); ++i) {
    const size_t len = std::min(i < chunks.size() ? chunks[i] : 1, tokens.size() - pos);
    Batch batch;
    batch.sequences.push_back({std::span(tokens).subspan(pos, len), static_cast<int32_t>(pos), seq.block_table(),
                               LogitsWanted::all});
    b.forward(batch, out);
    all.insert(all.end(), out.values.begin(), out.values.end());
    pos += len;
  }
  return all;
}

// ||a - b|| / ||b|| of one row.
inline double rel_l2(std::span<const float> a, std::span<const float> b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(n, 1e-30));
}

// The largest per-row relative error between two [rows][vocab] sets; NaN fails.
inline double worst_row_error(const std::vector<float>& got, const std::vector<float>& want, int64_t vocab) {
  double worst = 0;
  for (size_t r = 0; r * vocab < want.size(); ++r) {
    const std::span<const float> g(got.data() + r * vocab, vocab), w(want.data() + r * vocab, vocab);
    const double e = rel_l2(g, w);
    if (!(e == e)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

inline int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Greedy decoding on both backends in lockstep. `same` counts identical
// steps; at the first difference, `margin` is the CPU's logit gap between
// the two picks over its row's range (a near-tie when small).
struct GreedyAgreement {
  int same = 0;
  float margin = 0;
};

inline GreedyAgreement greedy_agreement(Backend& cpu, Backend& gpu, const std::vector<int32_t>& prompt, int steps) {
  const auto n = static_cast<int32_t>(prompt.size());
  KvSequence cs(cpu.pages(), cpu.page_size()), gs(gpu.pages(), gpu.page_size());
  if (!cs.reserve(n + steps) || !gs.reserve(n + steps)) throw std::runtime_error("KV pages exhausted");
  std::vector<int32_t> toks(prompt);
  const TokenChoice greedy{};
  std::vector<int32_t> picked;
  Logits cl;
  GreedyAgreement a;
  for (int step = 0; step < steps; ++step) {
    const int32_t pos = step == 0 ? 0 : static_cast<int32_t>(toks.size()) - 1;
    const size_t len = step == 0 ? prompt.size() : 1;
    Batch cb, gb;
    cb.sequences.push_back({std::span(toks).subspan(pos, len), pos, cs.block_table(), LogitsWanted::last});
    gb.sequences.push_back({std::span(toks).subspan(pos, len), pos, gs.block_table(), LogitsWanted::last});
    cpu.forward(cb, cl);
    gpu.forward_choose(gb, std::span(&greedy, 1), picked);
    const auto row = cl.row(0);
    const int32_t c = argmax(row), g = picked.at(0);
    if (c != g) {
      const float range = *std::max_element(row.begin(), row.end()) - *std::min_element(row.begin(), row.end());
      a.margin = (row[c] - row[g]) / range;
      return a;
    }
    ++a.same;
    toks.push_back(c);
  }
  return a;
}

}  // namespace troupe::test
