// The tiled attention kernel (cpu/attention.h) in bf16 with AVX512_BF16:
// the portable kernel's bf16 arithmetic (cpu/attention_tile.h), each pair of
// products one lane of a vdpbf16ps. A block's keys are decoded and transposed
// as the fp32 kernel does it, then packed into dimension pairs (kt2[t], lane
// j: key j's dimensions 2t and 2t + 1), its values into position pairs
// (vp[jp][c], lane i: dimension 16c + i of positions 2jp and 2jp + 1); a
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

// A tile's queries (rows x heads) as bf16 dimension pairs, qp[(r * heads +
// g) * d / 2 + t]; its softmax state from nothing.
template <int kVecs>
void start_tile(const KvCache& cache, int64_t layer, const AttentionTile& tile, int64_t first_head, int64_t heads,
                Pair* qp, float* o, float* m, float* l) {
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
                            (__m256i)(_mm512_cvtneps_pbh(_mm512_load_ps(row + 16 * c))));
    }
  const int64_t rh_count = tile.rows * heads;
  for (int64_t i = 0; i < rh_count; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  std::memset(o, 0, sizeof(float) * static_cast<size_t>(rh_count * d));
}

// The block (keys kt transposed, values vb as rows, in floats) as pairs.
template <int kVecs>
void pack_block(const float* kt, const float* vb, __m512i* kt2, __m512i* vp) {
  constexpr int d = 16 * kVecs;
  for (int t = 0; t < d / 2; ++t) kt2[t] = pack_pairs(_mm512_load_ps(kt + 2 * t * kB), _mm512_load_ps(kt + (2 * t + 1) * kB));
  for (int jp = 0; jp < kB / 2; ++jp)
    for (int c = 0; c < kVecs; ++c)
      vp[jp * kVecs + c] = pack_pairs(_mm512_load_ps(vb + 2 * jp * d + 16 * c), _mm512_load_ps(vb + (2 * jp + 1) * d + 16 * c));
}

// Scores of kHeads heads of kRows rows against one block's pairs: one chain
// per (row, head), side by side so each pair of key rows is loaded once.
template <int kVecs, int kHeads, int kRows>
void score_heads(const Pair* qp, int64_t q_row, const __m512i* kt2, __m512 scale, float* s, int64_t s_row) {
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
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) _mm512_store_ps(s + r * s_row + g * kB, _mm512_mul_ps(acc[r][g], scale));
}

template <int kVecs, int kRows>
void score_group(const Pair* qp, int64_t q_row, const __m512i* kt2, __m512 scale, int64_t heads, float* s,
                 int64_t s_row) {
  constexpr int half = 8 * kVecs;
  avx512::in_eights(heads, [&](auto k, int64_t g) {
    score_heads<kVecs, decltype(k)::value, kRows>(qp + g * half, q_row, kt2, scale, s + g * kB, s_row);
  });
}

// o = o * corr + the block's probabilities times its values, for kHeads
// heads, position pairs [first / 2, valid) as the portable kernel takes them.
template <int kVecs, int kHeads>
void accumulate_heads(const Pair (*pp)[kB / 2], const float* corr, const __m512i* vp, int32_t first, int32_t valid,
                      float* o) {
  constexpr int d = 16 * kVecs;
  __m512 acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h) {
    const __m512 vc = _mm512_set1_ps(corr[h]);
    for (int c = 0; c < kVecs; ++c) acc[h][c] = _mm512_mul_ps(_mm512_loadu_ps(o + h * d + 16 * c), vc);
  }
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

// One row's heads [0, heads) over a block: softmax, then the values, a few
// heads at a time (in_value_groups).
template <int kVecs>
void update_row(const float* s_block, const __m512i* vp, int64_t heads, int32_t first, int32_t valid, float* m,
                float* l, float* o) {
  constexpr int d = 16 * kVecs;
  // Each head's probabilities as position pairs, rounded by the conversion
  // itself: pp[h][jp], positions 2jp (low) and 2jp + 1 (high), a dead lane 0.
  alignas(64) Pair pp[64][kB / 2];
  alignas(64) float corr[64];
  avx512::softmax_heads(s_block, heads, avx512::live_lanes(first, valid), m, l, corr, [&](int64_t h, __m512 p) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(pp[h]), (__m256i)_mm512_cvtneps_pbh(p));
  });
  in_value_groups<kVecs>(heads, [&](auto k, int64_t g) {
    accumulate_heads<kVecs, decltype(k)::value>(pp + g, corr + g, vp, first, valid, o + g * d);
  });
}

template <int kVecs>
void attend(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
            const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l) {
  constexpr int d = 16 * kVecs;
  const int64_t group = shape.n_head / shape.n_head_kv;
  alignas(64) float kt[d * kB];
  alignas(64) float vb[kB * d];
  alignas(64) __m512i kt2[d / 2];
  alignas(64) __m512i vp[kB / 2 * kVecs];
  constexpr int64_t kRowScores = 64 * kB;
  alignas(64) float scores[2 * kRowScores];
  // qs holds rows x group x d floats: room for the pairs, half of that.
  auto* qp = reinterpret_cast<Pair*>(qs);
  start_tile<kVecs>(cache, layer, tile, tile.kv_head * group, group, qp, o, m, l);
  const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(d)));
  const TileBlocks blocks = tile_blocks(tile, p0, p1);
  for (int32_t b0 = blocks.start; b0 < blocks.end; b0 += kB) {
    const int32_t n = blocks.positions(b0);
    prefetch_block_ahead(cache, layer, table, tile.kv_head, b0, blocks.end);
    avx512::load_block<kVecs>(cache, layer, table, b0, n, tile.kv_head, kt, vb);
    pack_block<kVecs>(kt, vb, kt2, vp);
    for (int32_t r = 0; r < tile.rows;) {  // rows two at a time, as the fp32 kernel
      if (tile.first_ctx + r <= b0) {
        ++r;
        continue;
      }
      const int32_t rows = r + 1 < tile.rows ? 2 : 1;
      const Pair* q = qp + r * group * (d / 2);
      if (rows == 2)
        score_group<kVecs, 2>(q, group * (d / 2), kt2, scale, group, scores, kRowScores);
      else
        score_group<kVecs, 1>(q, group * (d / 2), kt2, scale, group, scores, kRowScores);
      for (int32_t k = 0; k < rows; ++k, ++r) {
        const int32_t ctx = tile.first_ctx + r;
        const int32_t valid = ctx - b0 < kB ? ctx - b0 : kB;
        const int32_t first = first_in_window(tile, ctx, b0);
        if (first >= valid) continue;  // the block is behind this row's window
        float* row_scores = scores + k * kRowScores;
        if (shape.slopes) avx512::add_alibi(shape.slopes + tile.kv_head * group, group, b0 - (ctx - 1), row_scores);
        const int64_t rh = r * group;
        update_row<kVecs>(row_scores, vp, group, first, valid, m + rh, l + rh, o + rh * d);
      }
    }
  }
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
