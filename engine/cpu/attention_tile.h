#pragma once
// The portable tiled attention kernel (cpu/attention.h), as inline code for
// each translation unit that instantiates it: attention.cpp (any x86-64) and
// attention_avx2.cpp (compiled with AVX2 and FMA, where the same source
// vectorizes across the 16 positions of a block, and which writes out its
// own kernel in this order for fp32 GQA). All give the same bits:
// every product is an explicit fma in a fixed order, the exponential is
// attention_exp.h's, and the block sum is one fixed tree.
//
// Plain loops on raw pointers only, in an anonymous namespace: no library
// templates whose out-of-line copies, compiled with AVX2, the linker could
// hand to callers on CPUs without it.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/cpu/attention.h"
#include "engine/cpu/attention_exp.h"
#include "engine/cpu/half.h"
#include "engine/kv_cache.h"
#include "engine/kv_type.h"

namespace troupe::cpu {
namespace {

constexpr int kB = kKvBlockPositions;

inline float round_half(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

// To bfloat16 as VCVTNEPS2BF16 rounds: to nearest even, a subnormal to a zero
// of its sign; the low 16 bits of the result are zero.
inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t exponent = u & 0x7F800000u;
  if (exponent == 0)
    u &= 0x80000000u;
  else if (exponent != 0x7F800000u)
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The block's 16 values summed in one fixed tree: halves, quarters, pairs.
inline float tree_sum16(const float* p) {
  float a[8], b[4];
  for (int i = 0; i < 8; ++i) a[i] = p[i] + p[i + 8];
  for (int i = 0; i < 4; ++i) b[i] = a[i] + a[i + 4];
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// Rows [b0, b0 + n) of one KV head, as floats (rounded to bfloat16 when
// bf16): out[j][0..d); zeros past n.
inline void load_rows(const KvCache& cache, int64_t layer, const int32_t* table, int32_t b0, int32_t n, int64_t kv_head,
                      bool keys, bool bf16, float* out) {
  const int64_t d = cache.head_dim();
  const int32_t ps = cache.page_size();
  const KvRowFormat f = keys ? cache.key_format(layer) : cache.value_format();
  for (int32_t j = 0; j < n; ++j) {
    const int32_t p = b0 + j;
    const uint8_t* row = keys ? cache.key_row(layer, table[p / ps], p % ps, kv_head)
                              : cache.value_row(layer, table[p / ps], p % ps, kv_head);
    decode_kv_row(f, row, d, out + j * d);
    if (bf16)
      for (int64_t i = 0; i < d; ++i) out[j * d + i] = round_bf16(out[j * d + i]);
  }
  std::memset(out + n * d, 0, sizeof(float) * static_cast<size_t>((kB - n) * d));
}

// The online softmax step of a block's raw scores s: scaled, ALiBi added
// (slope != 0: the block's first key dist0 positions from the query, <= 0),
// the running max m moved on, o rescaled, l grown by the block's
// probabilities p (0 outside [first, valid)).
inline void block_softmax(float* s, int32_t first, int32_t valid, float scale, float slope, int32_t dist0, int64_t d,
                          float& m, float& l, float* o, float* p) {
  float bmax = -INFINITY;
  for (int j = 0; j < kB; ++j) {
    s[j] *= scale;
    if (slope != 0.0f) s[j] = s[j] + slope * static_cast<float>(dist0 + j);
    if (j >= first && j < valid && s[j] > bmax) bmax = s[j];
  }
  const float m_new = m > bmax ? m : bmax;
  const float corr = attention_exp(m - m_new);
  for (int j = 0; j < kB; ++j) p[j] = j >= first && j < valid ? attention_exp(s[j] - m_new) : 0.0f;
  l = l * corr + tree_sum16(p);
  for (int64_t i = 0; i < d; ++i) o[i] *= corr;
  m = m_new;
}

// One (row, head)'s step over a block: scores against the transposed keys
// kt[i][j], the online softmax update, the values accumulated.
// slope, dist0: ALiBi (block_softmax).
// lanes: the scores' lane order (attention.h, lane_order_scores).
inline void update_row_head(const float* q, const float* kt, const float* vb, int64_t d, int32_t first,
                            int32_t valid, float scale, float slope, int32_t dist0, bool lanes, float& m, float& l,
                            float* o) {
  float s[kB];
  if (lanes) {
    float c[16][kB];
    for (int64_t i = 0; i < d; ++i)
      for (int j = 0; j < kB; ++j)
        c[i % 16][j] = i < 16 ? q[i] * kt[i * kB + j] : std::fma(q[i], kt[i * kB + j], c[i % 16][j]);
    for (int j = 0; j < kB; ++j) {
      float lane[16];
      for (int i = 0; i < 16; ++i) lane[i] = c[i][j];
      s[j] = tree_sum16(lane);
    }
  } else {
    for (int j = 0; j < kB; ++j) s[j] = q[0] * kt[j];
    for (int64_t i = 1; i < d; ++i)
      for (int j = 0; j < kB; ++j) s[j] = std::fma(q[i], kt[i * kB + j], s[j]);
  }
  float p[kB];
  block_softmax(s, first, valid, scale, slope, dist0, d, m, l, o, p);
  for (int j = first; j < valid; ++j) {
    const float ph = round_half(p[j]);
    const float* v = vb + j * d;
    for (int64_t i = 0; i < d; ++i) o[i] = std::fma(ph, v[i], o[i]);
  }
}

// block_softmax in bf16, in base 2 (attention_exp.h): the scores come
// scaled (the queries were: by 1/sqrt(d) log2 e) and the slope times
// log2 e, and m is kept so; the max moves only when a live score passes it
// by kLazyMaxLog2, and o and l are rescaled only then.
inline void block_softmax_bf16(float* s, int32_t first, int32_t valid, float slope, int32_t dist0, int64_t d,
                               float& m, float& l, float* o, float* p) {
  if (slope != 0.0f)
    for (int j = 0; j < kB; ++j) s[j] = s[j] + slope * static_cast<float>(dist0 + j);
  bool over = false;
  for (int j = first; j < valid; ++j) over |= s[j] - m > kLazyMaxLog2;
  if (over) {
    float bmax = -INFINITY;
    for (int j = first; j < valid; ++j) bmax = s[j] > bmax ? s[j] : bmax;
    const float m_new = m > bmax ? m : bmax;
    const float corr = attention_exp2_bf16(m - m_new);
    l *= corr;
    for (int64_t i = 0; i < d; ++i) o[i] *= corr;
    m = m_new;
  }
  for (int j = 0; j < kB; ++j) p[j] = j >= first && j < valid ? attention_exp2_bf16(s[j] - m) : 0.0f;
  l = l + tree_sum16(p);
}

// update_row_head in bf16 (attention.h): q, kt and vb hold bfloat16 values.
// A score is one chain over the dimension pairs; the output takes the
// block's positions in pairs (a pair wholly outside [first, valid) skipped,
// a lone one's partner has probability 0).
inline void update_row_head_bf16(const float* q, const float* kt, const float* vb, int64_t d, int32_t first,
                                 int32_t valid, float slope, int32_t dist0, float& m, float& l, float* o) {
  float s[kB] = {};
  for (int64_t i = 0; i < d; i += 2)
    for (int j = 0; j < kB; ++j) {
      s[j] = std::fma(q[i + 1], kt[(i + 1) * kB + j], s[j]);
      s[j] = std::fma(q[i], kt[i * kB + j], s[j]);
    }
  float p[kB];
  block_softmax_bf16(s, first, valid, slope, dist0, d, m, l, o, p);
  for (int j = first & ~1; j < valid; j += 2) {
    const float p0 = round_bf16(p[j]), p1 = round_bf16(p[j + 1]);
    const float *v0 = vb + j * d, *v1 = v0 + d;
    for (int64_t i = 0; i < d; ++i) {
      o[i] = std::fma(p1, v1[i], o[i]);
      o[i] = std::fma(p0, v0[i], o[i]);
    }
  }
}

// The tile's softmax state over the KV blocks in positions [p0, p1) (a
// chunk: attention.h), from scratch: per (row, head) m, l and the
// unnormalized o. scratch: qs of rows x group x d floats, two blocks of 16 x d.
inline void attend_chunk_portable(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m,
                                  float* l, float* kt, float* vb) {
  const int64_t d = shape.head_dim, group = shape.n_head / shape.n_head_kv;
  const int64_t rh_count = tile.rows * group;
  const bool bf16 = shape.precision == AttentionPrecision::bf16;
  // bf16 works in base 2 (block_softmax_bf16), its queries scaled before
  // they are rounded; its max is turned back below.
  const float scale = 1.0f / std::sqrt(static_cast<float>(d)) * (bf16 ? kLog2e : 1.0f);
  const bool lanes = lane_order_scores(shape);
  const bool rotated_keys = kv_rotated(cache.key_format(layer));
  for (int32_t r = 0; r < tile.rows; ++r)
    for (int64_t g = 0; g < group; ++g) {
      const float* src = tile.q + r * tile.q_stride + (tile.kv_head * group + g) * d;
      float* dst = qs + (r * group + g) * d;
      std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(d));
      if (rotated_keys) kv_rotate(dst, d);  // the keys' basis: dot products unchanged
      for (int64_t i = 0; i < d; ++i) dst[i] = bf16 ? round_bf16(dst[i] * scale) : round_half(dst[i]);
    }
  for (int64_t i = 0; i < rh_count; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  std::memset(o, 0, sizeof(float) * static_cast<size_t>(rh_count * d));
  const TileBlocks blocks = tile_blocks(tile, p0, p1);
  for (int32_t b0 = blocks.start; b0 < blocks.end; b0 += kB) {
    const int32_t n = blocks.positions(b0);
    prefetch_block_ahead(cache, layer, table, tile.kv_head, b0, blocks.end);
    load_rows(cache, layer, table, b0, n, tile.kv_head, true, bf16, vb);
    for (int j = 0; j < kB; ++j)
      for (int64_t i = 0; i < d; ++i) kt[i * kB + j] = vb[j * d + i];
    load_rows(cache, layer, table, b0, n, tile.kv_head, false, bf16, vb);
    RowSpan span;
    for (int32_t r = 0; r < tile.rows; ++r) {
      if (!row_span(tile, r, b0, span)) continue;
      const int32_t ctx = tile.first_ctx + r, first = span.first, valid = span.valid;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t rh = r * group + g;
        const float slope = shape.slopes ? shape.slopes[tile.kv_head * group + g] * (bf16 ? kLog2e : 1.0f) : 0.0f;
        if (bf16)
          update_row_head_bf16(qs + rh * d, kt, vb, d, first, valid, slope, b0 - (ctx - 1), m[rh], l[rh], o + rh * d);
        else
          update_row_head(qs + rh * d, kt, vb, d, first, valid, scale, slope, b0 - (ctx - 1), lanes, m[rh], l[rh],
                          o + rh * d);
      }
    }
  }
  if (bf16)  // the chunks merge in base e (cpu/attention.cpp)
    for (int64_t i = 0; i < rh_count; ++i) m[i] *= kLn2;
}

}  // namespace
}  // namespace troupe::cpu
