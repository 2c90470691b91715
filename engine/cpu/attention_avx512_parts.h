#pragma once
// What the AVX-512 attention kernels share (cpu/attention_avx512.cpp, fp32;
// cpu/attention_avx512bf16.cpp, bf16): the cache formats as vectors, the
// 16 x 16 transpose and the block sums; and fp32's exponential, ALiBi and
// softmax phase (bf16 has its own, in base 2). Only for files compiled with
// AVX-512 flags.
#include "engine/cpu/simd_avx512.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/cpu/attention.h"
#include "engine/cpu/attention_exp.h"
#include "engine/kv_cache.h"

namespace troupe::cpu::avx512 {
namespace {

constexpr int kB = kKvBlockPositions;


// attention_exp.h's steps, 16 lanes at a time: the same bits.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(kExpLow));
  const __m512 round = _mm512_set1_ps(kExpRound);
  const __m512 shifted = _mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), round);
  const __m512 n = _mm512_sub_ps(shifted, round);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  const __m512i k = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_set1_epi32(0x4B400000));
  const __m512i two_n = _mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(two_n));
}

inline __m512 round_half(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }

// Values 16c..16c+15 of a row in the cache's format, as floats.
inline __m512 f16_vec(const uint8_t* row, int c) { return _mm512_cvtph_ps(detail::load256(row + 32 * c)); }
inline __m512 q8_0_vec(const uint8_t* row, int c) {
  const uint8_t* blk = row + (c / 2) * 34;
  const __m512i q = _mm512_cvtepi8_epi32(detail::load128(blk + 2 + 16 * (c % 2)));
  return _mm512_mul_ps(_mm512_set1_ps(detail::f16_at(blk)), _mm512_cvtepi32_ps(q));
}
inline __m512 q4_0_vec(const uint8_t* row, int c) {
  const uint8_t* blk = row + (c / 2) * 18;
  const __m128i bytes = detail::load128(blk + 2);
  const __m128i nibbles = c % 2 ? _mm_srli_epi16(bytes, 4) : bytes;
  const __m512i q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(nibbles, _mm_set1_epi8(0x0F))), _mm512_set1_epi32(8));
  return _mm512_mul_ps(_mm512_set1_ps(detail::f16_at(blk)), _mm512_cvtepi32_ps(q));
}

// A row's kVecs vectors, as registers.
template <int kVecs>
inline void row_vecs(KvRowFormat f, const uint8_t* row, __m512 (&out)[kVecs]) {
  switch (f) {
    case KvRowFormat::f16:
      for (int c = 0; c < kVecs; ++c) out[c] = f16_vec(row, c);
      return;
    case KvRowFormat::q8_0:
      for (int c = 0; c < kVecs; ++c) out[c] = q8_0_vec(row, c);
      return;
    case KvRowFormat::q4_0:
      for (int c = 0; c < kVecs; ++c) out[c] = q4_0_vec(row, c);
      return;
  }
}

// One row of kVecs * 16 values from the cache's format.
template <int kVecs>
inline void decode_row(KvRowFormat f, const uint8_t* row, float* out) {
  switch (f) {
    case KvRowFormat::f16:
      for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(out + 16 * c, f16_vec(row, c));
      return;
    case KvRowFormat::q8_0:
      for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(out + 16 * c, q8_0_vec(row, c));
      return;
    case KvRowFormat::q4_0:
      for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(out + 16 * c, q4_0_vec(row, c));
      return;
  }
}

// r[j] (row j of a 16 x 16 block) becomes column j: r[i][j] <- r[j][i].
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), e = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
  }
}


// Positions [b0, b0 + n) of one KV head: keys transposed into kt[i][16],
// values as rows vb[j][d]; rows past n are zeros.
template <int kVecs>
void load_block(const KvCache& cache, int64_t layer, const int32_t* table, int32_t b0, int32_t n, int64_t kv_head,
                float* kt, float* vb) {
  constexpr int d = 16 * kVecs;
  const int32_t ps = cache.page_size();
  const KvRowFormat kf = cache.key_format(layer), vf = cache.value_format();
  for (int32_t j = 0; j < n; ++j) {
    const int32_t p = b0 + j;
    decode_row<kVecs>(kf, cache.key_row(layer, table[p / ps], p % ps, kv_head), vb + j * d);
  }
  std::memset(vb + n * d, 0, sizeof(float) * (kB - n) * d);
  for (int c = 0; c < kVecs; ++c) {
    __m512 r[16];
    for (int j = 0; j < kB; ++j) r[j] = _mm512_loadu_ps(vb + j * d + 16 * c);
    transpose16(r);
    for (int i = 0; i < 16; ++i) _mm512_store_ps(kt + (16 * c + i) * kB, r[i]);
  }
  for (int32_t j = 0; j < n; ++j) {
    const int32_t p = b0 + j;
    decode_row<kVecs>(vf, cache.value_row(layer, table[p / ps], p % ps, kv_head), vb + j * d);
  }
  std::memset(vb + n * d, 0, sizeof(float) * (kB - n) * d);
}

// Heads [0, heads) two at a time, the last three together (one at a time
// past head_dim 128: the accumulators would spill): step(k, g) for the
// k.value heads from g (k a std::integral_constant, for a template's count).
template <int kVecs, class Step>
inline void in_head_groups(int64_t heads, const Step& step) {
  constexpr bool kSideBySide = kVecs <= 8;
  for (int64_t g = 0; g < heads;) {
    const int64_t left = heads - g;
    if (kSideBySide && left == 3) {
      step(std::integral_constant<int, 3>{}, g);
      g += 3;
    } else if (kSideBySide && left >= 2) {
      step(std::integral_constant<int, 2>{}, g);
      g += 2;
    } else {
      step(std::integral_constant<int, 1>{}, g);
      g += 1;
    }
  }
}

// step(k, g) for the heads [g, g + k.value), g = 0, 8, 16, ... below
// `heads` (k a std::integral_constant of 1 to 8, for a template's count).
template <class Step>
inline void in_eights(int64_t heads, const Step& step) {
  for (int64_t g = 0; g < heads; g += 8) {
    switch (heads - g < 8 ? heads - g : 8) {
      case 1: step(std::integral_constant<int, 1>{}, g); break;
      case 2: step(std::integral_constant<int, 2>{}, g); break;
      case 3: step(std::integral_constant<int, 3>{}, g); break;
      case 4: step(std::integral_constant<int, 4>{}, g); break;
      case 5: step(std::integral_constant<int, 5>{}, g); break;
      case 6: step(std::integral_constant<int, 6>{}, g); break;
      case 7: step(std::integral_constant<int, 7>{}, g); break;
      default: step(std::integral_constant<int, 8>{}, g); break;
    }
  }
}

// kernel(v) for a head_dim of 16 v.value (v a std::integral_constant), of
// the widths the AVX-512 kernels are built for: 16 to 128, 160, 192, 256.
// Any other: nothing.
template <class Kernel>
inline void for_head_dim(int64_t head_dim, const Kernel& kernel) {
  if (head_dim % 16 != 0) return;
  switch (head_dim / 16) {
    case 1: return kernel(std::integral_constant<int, 1>{});
    case 2: return kernel(std::integral_constant<int, 2>{});
    case 3: return kernel(std::integral_constant<int, 3>{});
    case 4: return kernel(std::integral_constant<int, 4>{});
    case 5: return kernel(std::integral_constant<int, 5>{});
    case 6: return kernel(std::integral_constant<int, 6>{});
    case 7: return kernel(std::integral_constant<int, 7>{});
    case 8: return kernel(std::integral_constant<int, 8>{});
    case 10: return kernel(std::integral_constant<int, 10>{});
    case 12: return kernel(std::integral_constant<int, 12>{});
    case 16: return kernel(std::integral_constant<int, 16>{});
    default: return;
  }
}

// ALiBi: each head's 16 scores plus slope * (dist0 + j), a multiply then an
// add, as the portable kernel does them.
inline void add_alibi(const float* slopes, int64_t heads, int32_t dist0, float* s) {
  const __m512 dist = _mm512_cvtepi32_ps(_mm512_add_epi32(
      _mm512_set1_epi32(dist0), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
  for (int64_t g = 0; g < heads; ++g)
    _mm512_store_ps(s + g * kB, _mm512_add_ps(_mm512_load_ps(s + g * kB), _mm512_mul_ps(_mm512_set1_ps(slopes[g]), dist)));
}

// The block's positions [first, valid) a row reads.
inline __mmask16 live_lanes(int32_t first, int32_t valid) {
  return static_cast<__mmask16>(((1u << valid) - 1) & ~((1u << first) - 1));
}

// tree16 of four vectors at once: lanes 0, 4, 8 and 12 hold a's, b's, c's
// and d's sums, added in tree16's order (c + 8 onto c, then c + 4, c + 2,
// c + 1): a third of the shuffles and adds of four tree16s.
inline __m512 tree16_of_four(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));  // [a 8 | b 8]
  const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));  // 4 each
  const __m512 y = _mm512_add_ps(x, _mm512_permute_ps(x, 0x4E));  // lane 0: x0 + x2, lane 1: x1 + x3
  return _mm512_add_ps(y, _mm512_permute_ps(y, 0xB1));            // lane 0: y0 + y1
}

// Phase one for heads [0, heads) (at most 64), scores s_block (kB a head):
// m and l move on, corr gets each head's rescale factor, store(h, p) its
// probabilities, unrounded (the store rounds them to half, as the fp32
// kernels read them). Four heads' exps run side by
// side: one head's is a chain of a dozen dependent steps. A last four short
// of heads repeats the last one and drops the repeats' results, even for a
// lone head (the lane-order kernel): the heads left over one at a time,
// each with its own tree16, measured 12 % slower for 7 heads and 13 % for one.
template <class Store>
inline void softmax_heads(const float* s_block, int64_t heads, __mmask16 live, float* m, float* l, float* corr,
                          const Store& store) {
  for (int64_t h0 = 0; h0 < heads; h0 += 16) {
    const int64_t n = heads - h0 < 16 ? heads - h0 : 16;
    alignas(64) float dm[16] = {};  // m - m_new: 0 where the max stays (exp16 gives 1)
    bool rescale = false;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t h = h0 + i;
      const __m512 s = _mm512_load_ps(s_block + h * kB);
      if (_mm512_mask_cmp_ps_mask(live, s, _mm512_set1_ps(m[h]), _CMP_GT_OQ)) {
        const float bmax = _mm512_mask_reduce_max_ps(live, s);
        const float m_new = m[h] > bmax ? m[h] : bmax;
        dm[i] = m[h] - m_new;
        m[h] = m_new;
        rescale = true;
      }
    }
    alignas(64) float block_sum[16 * 4];  // head i's at 4i
    for (int64_t i = 0; i < n; i += 4) {
      __m512 p[4];
      for (int k = 0; k < 4; ++k) {
        const int64_t h = h0 + (i + k < n ? i + k : n - 1);  // past the last head: its again, unused
        p[k] = _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(_mm512_load_ps(s_block + h * kB), _mm512_set1_ps(m[h]))));
      }
      for (int k = 0; k < 4 && i + k < n; ++k) store(h0 + i + k, p[k]);
      _mm512_store_ps(block_sum + 4 * i, tree16_of_four(p[0], p[1], p[2], p[3]));
    }
    if (rescale)
      _mm512_storeu_ps(corr + h0, exp16(_mm512_load_ps(dm)));
    else
      for (int64_t i = 0; i < n; ++i) corr[h0 + i] = 1.0f;
    for (int64_t i = 0; i < n; ++i) l[h0 + i] = l[h0 + i] * corr[h0 + i] + block_sum[4 * i];
  }
}

}  // namespace
}  // namespace troupe::cpu::avx512
