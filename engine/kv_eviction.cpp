#include "engine/kv_eviction.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/alibi.h"
#include "engine/cpu/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/kv_type.h"
#include "engine/model_config.h"

namespace troupe {

int32_t EvictionPolicy::keep() const { return budget - std::max(window, budget / 8); }

void EvictionPolicy::check() const {
  if (budget <= 0) return;
  if (sinks < 0 || window < 1 || pool < 1 || pool % 2 == 0)
    throw std::invalid_argument("eviction needs sinks >= 0, a window >= 1 and an odd pool");
  const int32_t least = this->least();
  if (budget < least)
    throw std::invalid_argument("a KV budget of " + std::to_string(budget) + " positions is too small: at least " +
                                std::to_string(least) + " (the sinks, the recent window and room to choose)");
}

QueryWindow::QueryWindow(int64_t n_layer, int64_t q_dim, int32_t window)
    : n_layer_(n_layer), q_dim_(q_dim), window_(window), positions_(static_cast<size_t>(window), -1),
      rows_(static_cast<size_t>(n_layer * window * q_dim)) {
  if (window < 1) throw std::invalid_argument("a query window needs at least one position");
}

void QueryWindow::store(int64_t layer, int32_t position, const float* q) {
  const int32_t slot = position % window_;
  positions_[static_cast<size_t>(slot)] = position;  // every layer writes the same value
  std::memcpy(&rows_[static_cast<size_t>((layer * window_ + slot) * q_dim_)], q, static_cast<size_t>(q_dim_) * sizeof(float));
}

const float* QueryWindow::find(int64_t layer, int32_t position) const {
  if (position < 0 || layer < 0 || layer >= n_layer_) return nullptr;
  const int32_t slot = position % window_;
  if (positions_[static_cast<size_t>(slot)] != position) return nullptr;
  return &rows_[static_cast<size_t>((layer * window_ + slot) * q_dim_)];
}

std::vector<int32_t> choose_kept(std::span<const float> scores, int32_t length, int32_t keep, const EvictionPolicy& policy) {
  std::vector<int32_t> kept;
  if (length <= keep) {
    kept.resize(static_cast<size_t>(std::max(length, 0)));
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  const int32_t sinks = std::min(policy.sinks, keep);
  const int32_t recent = std::min(policy.window, keep - sinks);
  const int32_t from = sinks, to = length - recent;  // the positions chosen by score
  const int32_t chosen = keep - sinks - recent;
  // Pooled: a position scores the most its neighbours (within [from, to)) got.
  const int32_t half = policy.pool / 2;
  std::vector<float> pooled(static_cast<size_t>(to - from));
  for (int32_t p = from; p < to; ++p) {
    float m = scores[static_cast<size_t>(p)];
    for (int32_t q = std::max(from, p - half); q <= std::min(to - 1, p + half); ++q) m = std::max(m, scores[static_cast<size_t>(q)]);
    pooled[static_cast<size_t>(p - from)] = m;
  }
  std::vector<int32_t> order(pooled.size());
  std::iota(order.begin(), order.end(), from);
  // Ties (pooled neighbours share their peak) go to the later position: it
  // is nearer the queries to come.
  const auto better = [&](int32_t a, int32_t b) {
    const float sa = pooled[static_cast<size_t>(a - from)], sb = pooled[static_cast<size_t>(b - from)];
    return sa != sb ? sa > sb : a > b;
  };
  std::nth_element(order.begin(), order.begin() + chosen, order.end(), better);
  order.resize(static_cast<size_t>(chosen));
  kept.resize(static_cast<size_t>(sinks));
  std::iota(kept.begin(), kept.end(), 0);
  std::sort(order.begin(), order.end());
  kept.insert(kept.end(), order.begin(), order.end());
  for (int32_t p = to; p < length; ++p) kept.push_back(p);
  return kept;
}

namespace {

float eviction_dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Every slot's key of one head, decoded as stored (a quantized row stays in
// its rotated basis: the queries turn to meet it).
std::vector<float> decode_head_keys(const KvCache& cache, const KvEviction& e, int64_t layer, int64_t kv_head) {
  const int64_t d = cache.head_dim();
  const int32_t ps = cache.page_size();
  std::vector<float> keys(static_cast<size_t>(e.length * d));
  for (int32_t s = 0; s < e.length; ++s)
    decode_kv_row(cache.key_format(layer), cache.key_row(layer, e.src_table[static_cast<size_t>(s / ps)], s % ps, kv_head),
                  d, &keys[static_cast<size_t>(s * d)]);
  return keys;
}

}  // namespace

int32_t score_slots(const KvCache& cache, const ModelConfig& config, const KvEviction& e, int64_t layer, int64_t kv_head,
                    std::span<float> scores) {
  if (!e.queries || e.length <= 0) return 0;
  const int64_t d = config.head_dim, group = config.n_head / config.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const bool rotated = kv_rotated(cache.key_format(layer));
  const std::vector<float> slopes = config.alibi() ? alibi_slopes(config.n_head, config.max_alibi_bias) : std::vector<float>{};
  std::vector<float> keys, q(static_cast<size_t>(d)), s(static_cast<size_t>(e.length));
  int32_t scored = 0;
  for (int32_t slot = std::max(0, e.length - e.queries->window()); slot < e.length; ++slot) {
    const float* row = e.queries->find(layer, slot + e.rope_offset);
    if (!row) continue;
    if (keys.empty()) keys = decode_head_keys(cache, e, layer, kv_head);
    for (int64_t g = 0; g < group; ++g) {
      const int64_t head = kv_head * group + g;
      std::copy_n(row + head * d, d, q.begin());
      if (rotated) kv_rotate(q.data(), d);
      const float slope = slopes.empty() ? 0.0f : slopes[static_cast<size_t>(head)];
      float mx = -INFINITY;
      for (int32_t j = 0; j <= slot; ++j) {
        s[static_cast<size_t>(j)] = eviction_dot(q.data(), &keys[static_cast<size_t>(j * d)], d) * scale - slope * static_cast<float>(slot - j);
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (int32_t j = 0; j <= slot; ++j) sum += s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx);
      const auto inv = static_cast<float>(1.0 / sum);
      for (int32_t j = 0; j <= slot; ++j) scores[static_cast<size_t>(j)] += s[static_cast<size_t>(j)] * inv;
    }
    ++scored;
  }
  return scored;
}

void evict_kv(KvCache& cache, const ModelConfig& config, cpu::ThreadPool& pool, const KvEviction& e) {
  const int32_t ps = cache.page_size();
  if (config.sliding_window > 0) throw std::invalid_argument("KV eviction does not run on sliding-window models");
  if (e.keep < 0 || e.length < 0 || e.keep > e.length) throw std::invalid_argument("KV eviction keeps more than it holds");
  const auto covers = [&](std::span<const int32_t> table, int32_t n) {
    if (static_cast<int64_t>(table.size()) * ps < n) return false;
    return std::all_of(table.begin(), table.end(), [&](int32_t p) { return p >= 0 && p < cache.pool().capacity(); });
  };
  if (!covers(e.src_table, e.length) || !covers(e.dst_table, e.keep)) throw std::out_of_range("KV eviction outside its block tables");
  if (e.keep == e.length && e.src_table.data() == e.dst_table.data()) return;
  const int64_t heads = cache.n_head_kv(), units = config.n_layer * heads;
  pool.parallel_for(units, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t layer = u / heads, head = u % heads;
      scores.assign(static_cast<size_t>(e.length), 0.0f);
      score_slots(cache, config, e, layer, head, scores);  // none scored: the sinks and the latest positions stay
      const std::vector<int32_t> kept = choose_kept(scores, e.length, e.keep, e.policy);
      // Ascending, and kept[i] >= i: within one table a row is read before
      // anything is written over it.
      for (int32_t i = 0; i < e.keep; ++i) {
        const int32_t from = kept[static_cast<size_t>(i)];
        const int32_t sp = e.src_table[static_cast<size_t>(from / ps)], dp = e.dst_table[static_cast<size_t>(i / ps)];
        std::memmove(cache.key_row(layer, dp, i % ps, head), cache.key_row(layer, sp, from % ps, head),
                     static_cast<size_t>(cache.key_row_bytes(layer)));
        std::memmove(cache.value_row(layer, dp, i % ps, head), cache.value_row(layer, sp, from % ps, head),
                     static_cast<size_t>(cache.value_row_bytes()));
      }
    }
  });
}

}  // namespace troupe
