// The tiled attention kernel (cpu/attention.h) in bf16 with AVX512_BF16:
// the portable kernel's bf16 arithmetic (cpu/attention_tile.h), each pair of
// products one lane of a vdpbf16ps. A block's keys are decoded into
// dimension pairs (kt2[t], lane j: key j's dimensions 2t and 2t + 1), its
// values into position pairs (vp[jp][c], lane i: dimension 16c + i of
// positions 2jp and 2jp + 1); a
// (row, head)'s 16 scores take head_dim / 2 instructions where fp32 takes
// head_dim, and so does its output.
//
// vdpbf16ps flushes a subnormal partial sum to zero where the portable
// kernel keeps it: the two agree to the last bit only while no partial sum
// of a score or an output falls below 2^-126, and the tests hold them to a
// bound, not to the bits (tests/engine/attention.test.cpp).
#include "engine/cpu/attention_avx512_parts.h"

namespace troupe::cpu::avx512bf16 {
namespace {

using avx512::kB;

// Query pairs live in the float scratch the caller gives (AttentionScratch::q).
using Pair = uint32_t __attribute__((may_alias));

// Two vectors of 16 floats as 16 bf16 pairs: lane i holds lo[i] (low half)
// and hi[i] (high half), each rounded to nearest even.
inline __m512i pack_pairs(__m512 lo, __m512 hi) {
  const __m512i words = _mm512_castps_si512((__m512)_mm512_cvtne2ps_pbh(hi, lo));  // lo's 16, hi's 16
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, words);
}

inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

// A tile's queries (rows x heads) times q_scale as bf16 dimension pairs,
// qp[(r * heads + g) * d / 2 + t]; its softmax state from nothing.
template <int kVecs>
void start_tile(const KvCache& cache, int64_t layer, const AttentionTile& tile, int64_t first_head, int64_t heads,
                float q_scale, Pair* qp, float* o, float* m, float* l) {
  constexpr int d = 16 * kVecs;
  const bool rotated_keys = kv_rotated(cache.key_format(layer));
  alignas(64) float row[d];
  for (int32_t r = 0; r < tile.rows; ++r)
    for (int64_t g = 0; g < heads; ++g) {
      std::memcpy(row, tile.q + r * tile.q_stride + (first_head + g) * d, sizeof row);
      if (rotated_keys) kv_rotate(row, d);  // the keys' basis: dot products unchanged
      Pair* dst = qp + (r * heads + g) * (d / 2);
      for (int c = 0; c < kVecs; ++c)  // 16 floats: 8 pairs, the even dimension low
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8 * c),
                            (__m256i)(_mm512_cvtneps_pbh(
                                _mm512_mul_ps(_mm512_load_ps(row + 16 * c), _mm512_set1_ps(q_scale)))));
    }
  const int64_t rh_count = tile.rows * heads;
  for (int64_t i = 0; i < rh_count; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  std::memset(o, 0, sizeof(float) * static_cast<size_t>(rh_count * d));
}

// Values 16c..16c+15 of a row in format kF, as floats.
template <KvRowFormat kF>
inline __m512 row_vec(const uint8_t* row, int c) {
  if constexpr (kF == KvRowFormat::f16) return avx512::f16_vec(row, c);
  if constexpr (kF == KvRowFormat::q8_0) return avx512::q8_0_vec(row, c);
  return avx512::q4_0_vec(row, c);
}

// The keys' half of load_pairs, in one format (a row's conversion in
// registers, no switch per row).
template <int kVecs, KvRowFormat kF>
void load_key_pairs(const KvCache& cache, int64_t layer, const int32_t* table, int32_t b0, int32_t n, int64_t kv_head,
                    __m512i* kt2) {
  constexpr int kPairs = 8 * kVecs;             // a key row's pairs
  constexpr int kGroups = (kPairs + 15) / 16;  // of 16 pairs, the last maybe half
  const int32_t ps = cache.page_size();
  __m512 rows[kGroups][kB];  // rows[g][j]: key j's pairs 16g..16g+15
  for (int32_t j = 0; j < kB; ++j) {
    const uint8_t* row = j < n ? cache.key_row(layer, table[(b0 + j) / ps], (b0 + j) % ps, kv_head) : nullptr;
    const auto vec = [&](int c) { return row ? row_vec<kF>(row, c) : _mm512_setzero_ps(); };
    for (int c = 0; c + 1 < kVecs; c += 2) rows[c / 2][j] = (__m512)_mm512_cvtne2ps_pbh(vec(c + 1), vec(c));
    if (kVecs % 2)
      rows[kGroups - 1][j] = _mm512_castsi512_ps(_mm512_zextsi256_si512((__m256i)_mm512_cvtneps_pbh(vec(kVecs - 1))));
  }
  for (int g = 0; g < kGroups; ++g) {
    avx512::transpose16(rows[g]);
    for (int i = 0; i < 16 && 16 * g + i < kPairs; ++i) kt2[16 * g + i] = _mm512_castps_si512(rows[g][i]);
  }
}

// The values' half: two rows' vectors interleaved into position pairs.
template <int kVecs, KvRowFormat kF>
void load_value_pairs(const KvCache& cache, int64_t layer, const int32_t* table, int32_t b0, int32_t n,
                      int64_t kv_head, __m512i* vp) {
  const int32_t ps = cache.page_size();
  for (int32_t jp = 0; jp < kB / 2; ++jp) {
    const int32_t j = 2 * jp;
    const auto value_row = [&](int32_t p) { return cache.value_row(layer, table[p / ps], p % ps, kv_head); };
    const uint8_t* lo = j < n ? value_row(b0 + j) : nullptr;
    const uint8_t* hi = j + 1 < n ? value_row(b0 + j + 1) : nullptr;
    for (int c = 0; c < kVecs; ++c)
      vp[jp * kVecs + c] = pack_pairs(lo ? row_vec<kF>(lo, c) : _mm512_setzero_ps(),
                                      hi ? row_vec<kF>(hi, c) : _mm512_setzero_ps());
  }
}

// Positions [b0, b0 + n) of one KV head straight from the cache's format
// into pairs (past n: zeros). Keys: each row rounded into its dimension
// pairs, then 16 rows x 16 pairs transposed at a time (the transpose moves
// 32-bit lanes, a float's or a pair's alike) into kt2. Values: two rows'
// vectors interleaved into position pairs. The bits of decoding to floats,
// transposing and rounding after (each value is rounded alone), with a
// quarter of the shuffles.
template <int kVecs>
void load_pairs(const KvCache& cache, int64_t layer, const int32_t* table, int32_t b0, int32_t n, int64_t kv_head,
                __m512i* kt2, __m512i* vp) {
  const auto by_format = [&](KvRowFormat f, auto run) {
    switch (f) {
      case KvRowFormat::f16: return run(std::integral_constant<KvRowFormat, KvRowFormat::f16>{});
      case KvRowFormat::q8_0: return run(std::integral_constant<KvRowFormat, KvRowFormat::q8_0>{});
      case KvRowFormat::q4_0: return run(std::integral_constant<KvRowFormat, KvRowFormat::q4_0>{});
    }
  };
  by_format(cache.key_format(layer), [&](auto f) {
    load_key_pairs<kVecs, decltype(f)::value>(cache, layer, table, b0, n, kv_head, kt2);
  });
  by_format(cache.value_format(), [&](auto f) {
    load_value_pairs<kVecs, decltype(f)::value>(cache, layer, table, b0, n, kv_head, vp);
  });
}

// attention_exp2_bf16, 16 lanes at a time (the same bits); dead lanes 0.
inline __m512 exp2_bf16(__m512 t, __mmask16 live) {
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kExp2Cubic[0]), f, _mm512_set1_ps(kExp2Cubic[1]));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Cubic[2]));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, p, n);
}

// The rows of one score pass (one or two), as the softmax sees them.
struct Pass {
  const float* slopes;  // the tile's query heads' ALiBi slopes, or null
  __m512 dist[2];       // each row's distances to the block's keys (<= 0)
  __mmask16 live[2];    // the block's positions each row reads
  int64_t rh[2];        // each row's first (row, head)
  float *m, *l, *o;  // by (row, head): max (base 2), sum, output
  int64_t d;
  Pair (*pp)[64][kB / 2];  // pp[k][h]: row k's probabilities as position pairs
};

// block_softmax_bf16's rare step (cpu/attention_tile.h): the max moves to
// the block's, the sum and output shrink by what it moved.
inline void move_max(__m512 s, __mmask16 live, int64_t rh, const Pass& pass) {
  const float bmax = _mm512_mask_reduce_max_ps(live, s);
  float& m = pass.m[rh];
  const float m_new = m > bmax ? m : bmax;
  const float corr = attention_exp2_bf16(m - m_new);
  pass.l[rh] *= corr;
  float* o = pass.o + rh * pass.d;
  for (int64_t i = 0; i < pass.d; i += 16)
    _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_loadu_ps(o + i), _mm512_set1_ps(corr)));
  m = m_new;
}

// Heads [g0, g0 + kHeads) of kRows rows against one block's pairs: the
// scores (one chain per (row, head), side by side so each pair of key rows
// is loaded once), then block_softmax_bf16 on them while they are in
// registers: probabilities to pass.pp, their sums (by tree16) to pass.l.
template <int kVecs, int kHeads, int kRows>
void score_heads(const Pair* qp, int64_t q_row, const __m512i* kt2, int64_t g0, const Pass& pass) {
  constexpr int half = 8 * kVecs;  // pairs in a head
  __m512 acc[kRows][kHeads];
  for (int r = 0; r < kRows; ++r)
    for (int g = 0; g < kHeads; ++g) acc[r][g] = _mm512_setzero_ps();
  for (int t = 0; t < half; ++t) {
    const __m512bh k = as_bh(kt2[t]);
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
      for (int g = 0; g < kHeads; ++g)
        acc[r][g] = _mm512_dpbf16_ps(acc[r][g], k, as_bh(_mm512_set1_epi32(static_cast<int>(qp[r * q_row + g * half + t]))));
  }
  const __m512 lazy = _mm512_set1_ps(kLazyMaxLog2);
  bool over = false;
  __m512 t[kRows][kHeads];
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) {
      __m512 s = acc[r][g];
      if (pass.slopes) s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(pass.slopes[g0 + g]), pass.dist[r]));
      acc[r][g] = s;
      t[r][g] = _mm512_sub_ps(s, _mm512_set1_ps(pass.m[pass.rh[r] + g0 + g]));
      over |= _mm512_mask_cmp_ps_mask(pass.live[r], t[r][g], lazy, _CMP_GT_OQ) != 0;
    }
  if (over)
    for (int r = 0; r < kRows; ++r)
      for (int g = 0; g < kHeads; ++g) {
        if (!_mm512_mask_cmp_ps_mask(pass.live[r], t[r][g], lazy, _CMP_GT_OQ)) continue;
        const int64_t rh = pass.rh[r] + g0 + g;
        move_max(acc[r][g], pass.live[r], rh, pass);
        t[r][g] = _mm512_sub_ps(acc[r][g], _mm512_set1_ps(pass.m[rh]));
      }
  constexpr int kAll = kRows * kHeads;
  __m512 pv[kAll + 3];
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) {
      const __m512 p = exp2_bf16(t[r][g], pass.live[r]);
      pv[r * kHeads + g] = p;
      _mm256_store_si256(reinterpret_cast<__m256i*>(pass.pp[r][g0 + g]), (__m256i)_mm512_cvtneps_pbh(p));
    }
  for (int i = kAll; i < kAll + 3; ++i) pv[i] = _mm512_setzero_ps();
  for (int i = 0; i < kAll; i += 4) {
    alignas(64) float sums[16];
    _mm512_store_ps(sums, avx512::tree16_of_four(pv[i], pv[i + 1], pv[i + 2], pv[i + 3]));
    for (int k = 0; k < 4 && i + k < kAll; ++k) {
      const int r = (i + k) / kHeads, g = (i + k) % kHeads;
      float& l = pass.l[pass.rh[r] + g0 + g];
      l = l + sums[4 * k];
    }
  }
}

template <int kVecs, int kRows>
void score_group(const Pair* qp, int64_t q_row, const __m512i* kt2, int64_t heads, const Pass& pass) {
  constexpr int half = 8 * kVecs;
  avx512::in_eights(heads, [&](auto k, int64_t g) {
    score_heads<kVecs, decltype(k)::value, kRows>(qp + g * half, q_row, kt2, g, pass);
  });
}

// o += the block's probabilities times its values, for kHeads heads,
// position pairs [first / 2, valid) as the portable kernel takes them.
template <int kVecs, int kHeads>
void accumulate_heads(const Pair (*pp)[kB / 2], const __m512i* vp, int32_t first, int32_t valid, float* o) {
  constexpr int d = 16 * kVecs;
  __m512 acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < kVecs; ++c) acc[h][c] = _mm512_loadu_ps(o + h * d + 16 * c);
  for (int jp = first / 2; 2 * jp < valid; ++jp) {
    __m512bh v[kVecs];
    for (int c = 0; c < kVecs; ++c) v[c] = as_bh(vp[jp * kVecs + c]);
    for (int h = 0; h < kHeads; ++h) {
      const __m512bh p = as_bh(_mm512_set1_epi32(static_cast<int>(pp[h][jp])));
      for (int c = 0; c < kVecs; ++c) acc[h][c] = _mm512_dpbf16_ps(acc[h][c], v[c], p);
    }
  }
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(o + h * d + 16 * c, acc[h][c]);
}

// step(k, g) for heads [g, g + k.value) covering [0, heads) in groups of
// near-equal size, each as large as the registers hold: kHeads x kVecs
// accumulators, a position pair's kVecs values and a broadcast, at most 29
// of 32 (from head dim 160 one head at a time; at 256 one alone needs more).
// Fewer, larger groups give the dot products more independent chains and
// load each value pair fewer times.
template <int kVecs, class Step>
void in_value_groups(int64_t heads, const Step& step) {
  constexpr int64_t kFit = (28 - kVecs) / kVecs;
  constexpr int64_t kMost = kFit < 1 ? 1 : kFit < 8 ? kFit : 8;
  const int64_t groups = (heads + kMost - 1) / kMost;
  for (int64_t i = 0, g = 0; i < groups; ++i) {
    const int64_t n = (heads - g + (groups - i) - 1) / (groups - i);
    avx512::in_eights(n, [&](auto k, int64_t) { step(k, g); });
    g += n;
  }
}

template <int kVecs>
void attend(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
            const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l) {
  constexpr int d = 16 * kVecs;
  const int64_t group = shape.n_head / shape.n_head_kv;
  alignas(64) __m512i kt2[d / 2];
  alignas(64) __m512i vp[kB / 2 * kVecs];
  alignas(64) Pair pp[2][64][kB / 2];
  // qs holds rows x group x d floats: room for the pairs, half of that.
  auto* qp = reinterpret_cast<Pair*>(qs);
  // In base 2 (cpu/attention_exp.h): queries (the scale) and slopes times log2 e.
  start_tile<kVecs>(cache, layer, tile, tile.kv_head * group, group, 1.0f / std::sqrt(static_cast<float>(d)) * kLog2e,
                    qp, o, m, l);
  alignas(64) float slopes[64];
  if (shape.slopes)
    for (int64_t g = 0; g < group; ++g) slopes[g] = shape.slopes[tile.kv_head * group + g] * kLog2e;
  Pass pass{shape.slopes ? slopes : nullptr, {}, {}, {}, m, l, o, d, pp};
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const TileBlocks blocks = tile_blocks(tile, p0, p1);
  for (int32_t b0 = blocks.start; b0 < blocks.end; b0 += kB) {
    const int32_t n = blocks.positions(b0);
    prefetch_block_ahead(cache, layer, table, tile.kv_head, b0, blocks.end);
    load_pairs<kVecs>(cache, layer, table, b0, n, tile.kv_head, kt2, vp);
    for (int32_t r = 0; r < tile.rows;) {  // rows two at a time, as the fp32 kernel
      if (tile.first_ctx + r <= b0) {
        ++r;
        continue;
      }
      const int32_t rows = r + 1 < tile.rows ? 2 : 1;
      int32_t first[2], valid[2];
      for (int32_t k = 0; k < rows; ++k) {
        const int32_t ctx = tile.first_ctx + r + k;
        valid[k] = ctx - b0 < kB ? ctx - b0 : kB;
        first[k] = first_in_window(tile, ctx, b0);
        // A block behind the row's window: no lane live, no probability,
        // nothing added.
        pass.live[k] = first[k] < valid[k] ? avx512::live_lanes(first[k], valid[k]) : 0;
        pass.rh[k] = (r + k) * group;
        pass.dist[k] = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_set1_epi32(b0 - (ctx - 1)), lane));
      }
      const Pair* q = qp + r * group * (d / 2);
      if (rows == 2)
        score_group<kVecs, 2>(q, group * (d / 2), kt2, group, pass);
      else
        score_group<kVecs, 1>(q, group * (d / 2), kt2, group, pass);
      for (int32_t k = 0; k < rows; ++k, ++r) {
        if (first[k] >= valid[k]) continue;
        float* row_o = o + pass.rh[k] * d;
        in_value_groups<kVecs>(group, [&](auto h, int64_t g) {
          accumulate_heads<kVecs, decltype(h)::value>(pp[k] + g, vp, first[k], valid[k], row_o + g * d);
        });
      }
    }
  }
  for (int64_t i = 0; i < tile.rows * group; ++i) m[i] *= kLn2;  // the chunks merge in base e
}

}  // namespace

// attention.cpp sends only head dims avx512::attention_fits takes.
void attend_chunk(const KvCache& cache, int64_t layer, const int32_t* t, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l) {
  avx512::for_head_dim(shape.head_dim, [&](auto vecs) {
    attend<decltype(vecs)::value>(cache, layer, t, shape, tile, p0, p1, qs, o, m, l);
  });
}

}  // namespace troupe::cpu::avx512bf16
