// The tiled attention kernel (cpu/attention.h) with AVX2, FMA and F16C, in
// the portable kernel's order (cpu/attention_tile.h), so with its bits. For
// fp32 with several query heads per KV head (Qwen2's and Llama's GQA: the
// long-context case) it is written out: a block's 16 rows decoded with F16C
// and transposed 8 x 8, a (row, head)'s 16 scores two vectors of head_dim
// fmas beside three other heads', its probabilities rounded to half by F16C
// and its output held in registers across the block's positions. The
// compiled portable source left the score chains half scalar and loaded and
// stored the output at every position: attention was half of a 4K prefill's
// time on Zen 3. Other shapes and bf16 run the portable source with these
// flags.
#include "engine/cpu/simd_loads.h"

#include "engine/cpu/attention_tile.h"

namespace troupe::cpu::avx2 {
namespace {

constexpr int kB = kKvBlockPositions;

inline __m256 round_half8(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// attention_exp.h's steps, 8 lanes at a time: the same bits.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(kExpLow));
  const __m256 round = _mm256_set1_ps(kExpRound);
  const __m256 shifted = _mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), round);
  const __m256 n = _mm256_sub_ps(shifted, round);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  const __m256i k = _mm256_sub_epi32(_mm256_castps_si256(shifted), _mm256_set1_epi32(0x4B400000));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// One row of d values (d a multiple of 32 for the quantized formats) as
// floats, as decode_kv_row gives them.
inline void decode_row(KvRowFormat f, const uint8_t* row, int64_t d, float* out) {
  switch (f) {
    case KvRowFormat::f16:
      for (int64_t c = 0; c < d; c += 8) _mm256_storeu_ps(out + c, _mm256_cvtph_ps(detail::load128(row + 2 * c)));
      return;
    case KvRowFormat::q8_0:
      for (int64_t b = 0; b < d; b += kKvBlock) {
        const uint8_t* blk = row + (b / kKvBlock) * (2 + kKvBlock);
        const __m256 scale = _mm256_set1_ps(detail::f16_at(blk));
        for (int k = 0; k < 4; ++k) {
          const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k));
          _mm256_storeu_ps(out + b + 8 * k, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
      }
      return;
    case KvRowFormat::q4_0:
      for (int64_t b = 0; b < d; b += kKvBlock) {
        const uint8_t* blk = row + (b / kKvBlock) * (2 + kKvBlock / 2);
        const __m256 scale = _mm256_set1_ps(detail::f16_at(blk));
        const __m128i bytes = detail::load128(blk + 2), low = _mm_set1_epi8(0x0F);
        const __m128i nibbles[2] = {_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low)};
        for (int k = 0; k < 4; ++k) {  // values b + 8k: bytes 8 (k % 2) of the low (k < 2) or high nibbles
          const __m128i q = k % 2 ? _mm_srli_si128(nibbles[k / 2], 8) : nibbles[k / 2];
          const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(q), _mm256_set1_epi32(8));
          _mm256_storeu_ps(out + b + 8 * k, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(v)));
        }
      }
      return;
  }
}

// r[j] (row j of an 8 x 8 block) becomes column j.
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// Positions [b0, b0 + n) of one KV head: keys transposed into kt[i][16],
// values as rows vb[j][d]; rows past n are zeros.
void load_block(const KvCache& cache, int64_t layer, const int32_t* table, int32_t b0, int32_t n, int64_t kv_head,
                int64_t d, float* kt, float* vb) {
  const int32_t ps = cache.page_size();
  const KvRowFormat kf = cache.key_format(layer), vf = cache.value_format();
  for (int32_t j = 0; j < n; ++j)
    decode_row(kf, cache.key_row(layer, table[(b0 + j) / ps], (b0 + j) % ps, kv_head), d, vb + j * d);
  std::memset(vb + n * d, 0, sizeof(float) * static_cast<size_t>((kB - n) * d));
  for (int j0 = 0; j0 < kB; j0 += 8)
    for (int64_t i0 = 0; i0 < d; i0 += 8) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(vb + (j0 + j) * d + i0);
      transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kt + (i0 + i) * kB + j0, r[i]);
    }
  for (int32_t j = 0; j < n; ++j)
    decode_row(vf, cache.value_row(layer, table[(b0 + j) / ps], (b0 + j) % ps, kv_head), d, vb + j * d);
  std::memset(vb + n * d, 0, sizeof(float) * static_cast<size_t>((kB - n) * d));
}

// The raw scores of kHeads heads of one row (queries d apart) against the
// transposed block: per head one chain of d fmas in dimension order, two
// vectors of 8 positions, the heads side by side.
template <int kHeads>
void score_heads(const float* q, int64_t d, const float* kt, float (*s)[kB]) {
  __m256 lo[kHeads], hi[kHeads];
  const __m256 k0 = _mm256_loadu_ps(kt), k1 = _mm256_loadu_ps(kt + 8);
  for (int h = 0; h < kHeads; ++h) {
    const __m256 qi = _mm256_set1_ps(q[h * d]);
    lo[h] = _mm256_mul_ps(qi, k0);
    hi[h] = _mm256_mul_ps(qi, k1);
  }
  for (int64_t i = 1; i < d; ++i) {
    const __m256 a = _mm256_loadu_ps(kt + i * kB), b = _mm256_loadu_ps(kt + i * kB + 8);
    for (int h = 0; h < kHeads; ++h) {
      const __m256 qi = _mm256_set1_ps(q[h * d + i]);
      lo[h] = _mm256_fmadd_ps(qi, a, lo[h]);
      hi[h] = _mm256_fmadd_ps(qi, b, hi[h]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    _mm256_storeu_ps(s[h], lo[h]);
    _mm256_storeu_ps(s[h] + 8, hi[h]);
  }
}

// The block's lanes [first, valid), as two masks of 8.
struct LiveLanes {
  __m256 lo, hi;
  LiveLanes(int32_t first, int32_t valid) {
    const __m256i f = _mm256_set1_epi32(first - 1), v = _mm256_set1_epi32(valid);
    const __m256i j0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), j1 = _mm256_add_epi32(j0, _mm256_set1_epi32(8));
    lo = _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(j0, f), _mm256_cmpgt_epi32(v, j0)));
    hi = _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(j1, f), _mm256_cmpgt_epi32(v, j1)));
  }
};

inline float max8(__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// block_softmax (cpu/attention_tile.h) of one (row, head), vectorized: the
// scores scaled (and ALiBi's bias added), m moved on, l grown, the output's
// rescale factor returned; ph gets the probabilities rounded to half.
inline float softmax_block(float* s, const LiveLanes& live, float scale, float slope, int32_t dist0, float& m,
                           float& l, float* ph) {
  __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(s), _mm256_set1_ps(scale));
  __m256 hi = _mm256_mul_ps(_mm256_loadu_ps(s + 8), _mm256_set1_ps(scale));
  if (slope != 0.0f) {
    const __m256i j0 = _mm256_add_epi32(_mm256_set1_epi32(dist0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 sl = _mm256_set1_ps(slope);
    lo = _mm256_add_ps(lo, _mm256_mul_ps(sl, _mm256_cvtepi32_ps(j0)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(sl, _mm256_cvtepi32_ps(_mm256_add_epi32(j0, _mm256_set1_epi32(8)))));
  }
  const __m256 none = _mm256_set1_ps(-INFINITY);
  const float bmax = max8(_mm256_max_ps(_mm256_blendv_ps(none, lo, live.lo), _mm256_blendv_ps(none, hi, live.hi)));
  const float m_new = m > bmax ? m : bmax;
  const float corr = attention_exp(m - m_new);
  const __m256 mv = _mm256_set1_ps(m_new);
  alignas(32) float p[kB];
  const __m256 plo = _mm256_and_ps(exp8(_mm256_sub_ps(lo, mv)), live.lo);
  const __m256 phi = _mm256_and_ps(exp8(_mm256_sub_ps(hi, mv)), live.hi);
  _mm256_store_ps(p, plo);
  _mm256_store_ps(p + 8, phi);
  l = l * corr + tree_sum16(p);
  m = m_new;
  _mm256_storeu_ps(ph, round_half8(plo));
  _mm256_storeu_ps(ph + 8, round_half8(phi));
  return corr;
}

// o = o * corr + the probabilities of [first, valid) times their values, 64
// dimensions at a time in registers.
inline void accumulate(const float* ph, const float* vb, int64_t d, int32_t first, int32_t valid, float corr,
                       float* o) {
  const __m256 c = _mm256_set1_ps(corr);
  for (int64_t i0 = 0; i0 < d; i0 += 64) {
    const int vecs = static_cast<int>(d - i0 < 64 ? (d - i0) / 8 : 8);
    __m256 acc[8];
    for (int k = 0; k < vecs; ++k) acc[k] = _mm256_mul_ps(_mm256_loadu_ps(o + i0 + 8 * k), c);
    for (int32_t j = first; j < valid; ++j) {
      const __m256 pj = _mm256_set1_ps(ph[j]);
      const float* v = vb + j * d + i0;
      for (int k = 0; k < vecs; ++k) acc[k] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8 * k), acc[k]);
    }
    for (int k = 0; k < vecs; ++k) _mm256_storeu_ps(o + i0 + 8 * k, acc[k]);
  }
}

// The kernel for fp32 with several query heads per KV head.
void attend_groups(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                   const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l,
                   float* kt, float* vb) {
  const int64_t d = shape.head_dim, group = shape.n_head / shape.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const bool rotated_keys = kv_rotated(cache.key_format(layer));
  for (int32_t r = 0; r < tile.rows; ++r)
    for (int64_t g = 0; g < group; ++g) {
      float* dst = qs + (r * group + g) * d;
      std::memcpy(dst, tile.q + r * tile.q_stride + (tile.kv_head * group + g) * d, sizeof(float) * static_cast<size_t>(d));
      if (rotated_keys) kv_rotate(dst, d);  // the keys' basis: dot products unchanged
      for (int64_t i = 0; i < d; i += 8) _mm256_storeu_ps(dst + i, round_half8(_mm256_loadu_ps(dst + i)));
    }
  const int64_t rh_count = tile.rows * group;
  for (int64_t i = 0; i < rh_count; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  std::memset(o, 0, sizeof(float) * static_cast<size_t>(rh_count * d));
  alignas(32) float s[4][kB], ph[kB];
  const TileBlocks blocks = tile_blocks(tile, p0, p1);
  for (int32_t b0 = blocks.start; b0 < blocks.end; b0 += kB) {
    prefetch_block_ahead(cache, layer, table, tile.kv_head, b0, blocks.end);
    load_block(cache, layer, table, b0, blocks.positions(b0), tile.kv_head, d, kt, vb);
    RowSpan span;
    for (int32_t r = 0; r < tile.rows; ++r) {
      if (!row_span(tile, r, b0, span)) continue;
      const int32_t ctx = tile.first_ctx + r, first = span.first, valid = span.valid;
      const LiveLanes live(first, valid);
      for (int64_t g0 = 0; g0 < group; g0 += 4) {
        const int64_t heads = group - g0 < 4 ? group - g0 : 4;
        const float* q = qs + (r * group + g0) * d;
        switch (heads) {
          case 1: score_heads<1>(q, d, kt, s); break;
          case 2: score_heads<2>(q, d, kt, s); break;
          case 3: score_heads<3>(q, d, kt, s); break;
          default: score_heads<4>(q, d, kt, s); break;
        }
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t rh = r * group + g0 + h;
          const float slope = shape.slopes ? shape.slopes[tile.kv_head * group + g0 + h] : 0.0f;
          const float corr = softmax_block(s[h], live, scale, slope, b0 - (ctx - 1), m[rh], l[rh], ph);
          accumulate(ph, vb, d, first, valid, corr, o + rh * d);
        }
      }
    }
  }
}

}  // namespace

void attend_chunk(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l, float* kt,
                  float* vb) {
  if (shape.precision == AttentionPrecision::fp32 && !lane_order_scores(shape) && shape.head_dim % 8 == 0)
    return attend_groups(cache, layer, table, shape, tile, p0, p1, qs, o, m, l, kt, vb);
  attend_chunk_portable(cache, layer, table, shape, tile, p0, p1, qs, o, m, l, kt, vb);
}

}  // namespace troupe::cpu::avx2
