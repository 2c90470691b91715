#pragma once
// A KV cache of random keys and values for the attention kernel's tests
// (attention.test.cpp, attention_bf16.test.cpp): the kernel over it, tiled
// as a caller chooses, and a float64 reference over the values as stored.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/attention_exp.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "tests/engine/random_data.h"

namespace troupe::test {

using cpu::AttentionScratch;
using cpu::AttentionShape;
using cpu::AttentionTile;

// To the nearest bfloat16 (ties to even), written apart from the kernels'.
inline float to_bf16(float x) {
  const int e = std::ilogb(x);
  if (x == 0 || !std::isfinite(x) || e < -126) return e < -126 ? std::copysign(0.0f, x) : x;
  const float ulp = std::ldexp(1.0f, e - 7);  // 8 significant bits
  return std::nearbyint(x / ulp) * ulp;     // the default rounding: to nearest, ties to even
}

inline ModelConfig make_config(int64_t n_head, int64_t n_head_kv, int64_t head_dim, bool wide_keys = false) {
  ModelConfig c;
  if (wide_keys) c.wide_key_layers = {0};
  c.n_layer = 1;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.head_dim = head_dim;
  c.n_embd = n_head * head_dim;
  return c;
}

// A cache of one layer holding n_ctx random positions over shuffled pages
// (a ragged, non-contiguous block table).
struct Filled {
  ModelConfig config;
  KvCache cache;
  std::vector<int32_t> table;
  Filled(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int32_t n_ctx, KvType type = KvType::f16, bool wide = false)
      : config(make_config(n_head, n_head_kv, head_dim, wide)), cache(config, (n_ctx + 15) / 16 + 3, 16, type) {
    const int32_t pages = (n_ctx + 15) / 16;
    for (int32_t i = 0; i < pages; ++i) table.push_back((i * 5 + 2) % (pages + 3));
    const auto k = gaussian(static_cast<size_t>(n_ctx * config.kv_dim()), 11, 1.5f);
    const auto v = gaussian(static_cast<size_t>(n_ctx * config.kv_dim()), 12);
    for (int32_t p = 0; p < n_ctx; ++p)
      cache.store(0, table[p / 16], p % 16, &k[static_cast<size_t>(p) * config.kv_dim()], &v[static_cast<size_t>(p) * config.kv_dim()]);
  }
  std::vector<float> slopes;  // ALiBi when not empty
  AttentionPrecision precision = AttentionPrecision::fp32;
  AttentionShape shape() const {
    return {config.n_head, config.n_head_kv, config.head_dim, slopes.empty() ? nullptr : slopes.data(), precision};
  }

  // Rows [first_ctx - 1, first_ctx - 1 + rows) of one sequence, tiled by `tile_rows`.
  // window > 0: a sliding-window layer's rows.
  std::vector<float> attend(const std::vector<float>& q, int32_t rows, int32_t first_ctx, int32_t tile_rows,
                            int32_t window = 0) const {
    std::vector<float> out(q.size(), -1.0f);
    AttentionScratch scratch;
    for (int32_t r0 = 0; r0 < rows; r0 += tile_rows)
      for (int64_t h = 0; h < config.n_head_kv; ++h) {
        const AttentionTile t{q.data() + r0 * config.q_dim(), out.data() + r0 * config.q_dim(), config.q_dim(),
                              std::min(tile_rows, rows - r0), first_ctx + r0, h, window};
        cpu::attend_tile(cache, 0, table, shape(), t, scratch);
      }
    return out;
  }

  // Float64 attention over the values as stored (decoded from the cache's
  // format, turned back from the rotation quantized rows are kept in).
  // bf16_operands (f16 caches): queries, keys, values and probabilities
  // rounded to bfloat16 first, as bf16 attention's products take them.
  std::vector<double> reference(const std::vector<float>& q, int32_t rows, int32_t first_ctx, int32_t window = 0,
                                bool bf16_operands = false) const {
    const int64_t d = config.head_dim, group = config.n_head / config.n_head_kv;
    const int32_t n_ctx = first_ctx + rows - 1;
    std::vector<float> k(static_cast<size_t>(n_ctx * config.kv_dim())), v(k.size());
    for (int32_t p = 0; p < n_ctx; ++p)
      for (int64_t h = 0; h < config.n_head_kv; ++h) {
        float* kr = &k[(p * config.n_head_kv + h) * d];
        float* vr = &v[(p * config.n_head_kv + h) * d];
        decode_kv_row(cache.key_format(0), cache.key_row(0, table[p / 16], p % 16, h), d, kr);
        decode_kv_row(cache.value_format(), cache.value_row(0, table[p / 16], p % 16, h), d, vr);
        if (kv_rotated(cache.key_format(0))) kv_rotate(kr, d);  // stored rotated: the effective key
        if (kv_rotated(cache.value_format())) kv_rotate(vr, d);
        if (bf16_operands)
          for (int64_t i = 0; i < d; ++i) kr[i] = to_bf16(kr[i]), vr[i] = to_bf16(vr[i]);
      }
    // bf16 rounds a query after scaling it by 1/sqrt(d) log2 e, as its
    // softmax is in base 2 (cpu/attention_tile.h): that rounding, unscaled.
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(d)) * cpu::kLog2e;
    const auto query = [&](size_t i) -> double {
      return bf16_operands ? to_bf16(q[i] * q_scale) / static_cast<double>(q_scale) : q[i];
    };
    std::vector<double> out(q.size());
    std::vector<double> s(static_cast<size_t>(n_ctx));
    for (int32_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < config.n_head; ++h) {
        const int64_t kvh = h / group;
        const int32_t ctx = first_ctx + r;
        const int32_t lo = window > 0 ? std::max(0, ctx - window) : 0;  // the query at ctx - 1 sees window keys
        double mx = -INFINITY;
        for (int32_t p = lo; p < ctx; ++p) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i)
            dot += query(static_cast<size_t>((r * config.n_head + h) * d + i)) *
                   k[(p * config.n_head_kv + kvh) * d + i];
          s[p] = dot / std::sqrt(static_cast<double>(d));
          if (!slopes.empty()) s[p] -= static_cast<double>(slopes[static_cast<size_t>(h)]) * (ctx - 1 - p);
          mx = std::max(mx, s[p]);
        }
        double sum = 0;
        for (int32_t p = lo; p < ctx; ++p) sum += s[p] = std::exp(s[p] - mx);
        for (int64_t i = 0; i < d; ++i) {
          double o = 0;
          for (int32_t p = lo; p < ctx; ++p)
            o += (bf16_operands ? to_bf16(static_cast<float>(s[p])) : s[p]) / sum * v[(p * config.n_head_kv + kvh) * d + i];
          out[(r * config.n_head + h) * d + i] = o;
        }
      }
    return out;
  }
};

inline double max_abs_error(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(got[i] - want[i]));
  return e;
}

}  // namespace troupe::test
