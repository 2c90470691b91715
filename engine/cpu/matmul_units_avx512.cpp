// AVX-512 kernels for quantized weights and up to a dozen tokens (decode,
// small batches): one row at a time, its weights unpacked once per chunk of 4
// units and dotted with each token (vpdpbusd).
//
// Every AVX-512 quantized kernel, these and the many-token ones in
// matmul_packed_avx512.cpp, computes a row/token dot product in one canonical
// order, so a token's result is bitwise the same in whatever batch it comes:
// chunked prefill and batching must not change logits, and with 8-bit
// activations the smallest difference upstream can flip a rounding downstream.
//
// Canonical order. Units are the 32-value blocks (Q4_0/Q5_0/Q8_0), 32-value
// sub-blocks (Q4_K/Q5_K) or 16-value groups (Q6_K). For unit u, S_u is the
// exact integer sum of weight code x activation code (offsets included) and
// scale_u = fl(weight scale x activation scale). Sixteen chains take the
// units u = c (mod 16) in order,
//   acc_c = fma(float(S_u), scale_u, acc_c)
//   acc_c = fma(-dmin * min_u, activation scale * sum_u, acc_c)   (Q4_K/Q5_K)
// and the result is the tree ((a + b) of chains c and c + 8, then c and
// c + 4, c and c + 2, c and c + 1) that tree16() spells out.
//
// Here 16 units at a time: the integer partial sums are reduced to one lane
// per unit, so each chain is a lane and one FMA advances all sixteen.
#if defined(__x86_64__)
#include "engine/cpu/simd_avx512.h"

#include <cstring>

#include "engine/cpu/matmul.h"

namespace troupe::cpu::detail {
namespace {

inline __m512i four_lanes(const uint8_t* p, int stride) {
  __m512i v = _mm512_castsi128_si512(load128(p));
  v = _mm512_inserti32x4(v, load128(p + stride), 1);
  v = _mm512_inserti32x4(v, load128(p + 2 * stride), 2);
  return _mm512_inserti32x4(v, load128(p + 3 * stride), 3);
}
// Written with intrinsics, not loops: GCC 12.2 at -O3 with VNNI turns a
// signed x signed byte dot-product loop into vpdpbusd, which reads one side
// as unsigned (wrong results).
inline int32_t hsum4(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1)));
}
inline int32_t hsum8(__m256i v) { return hsum4(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))); }
inline __mmask16 first_lanes(int n) { return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1); }

// The f16 scales of n <= 16 blocks `stride` bytes apart, lanes n.. zero.
// Scalar loads: a vpgatherdd here cost a quarter of the decode time on Zen 4.
inline uint64_t four_f16(const uint8_t* p, int stride) {
  return u16_at(p) | u16_at(p + stride) << 16 | u16_at(p + 2 * stride) << 32 | u16_at(p + 3 * stride) << 48;
}
inline __m512 f16_scales(const uint8_t* p, int stride, int n) {
  const auto quad = [p, stride, n](int i) -> long long {
    if (4 * i + 4 <= n) return static_cast<long long>(four_f16(p + 4 * i * stride, stride));
    uint64_t q = 0;
    for (int j = 4 * i; j < n; ++j) q |= u16_at(p + stride * j) << (16 * (j - 4 * i));
    return static_cast<long long>(q);
  };
  const __m128i lo = _mm_set_epi64x(quad(1), quad(0)), hi = _mm_set_epi64x(quad(3), quad(2));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// The f16 scales of a chunk's 4 blocks, picked out of one or two 64-byte loads
// of the chunk (bytes the qs loads touch anyway) as words w0..w3 of a:b.
inline __m128i chunk_scales(const uint8_t* a, const uint8_t* b, int w0, int w1, int w2, int w3) {
  const __m512i idx = _mm512_castsi128_si512(_mm_setr_epi16(static_cast<short>(w0), static_cast<short>(w1),
                                                            static_cast<short>(w2), static_cast<short>(w3), 0, 0, 0, 0));
  return _mm512_castsi512_si128(_mm512_permutex2var_epi16(load512_split(a), idx, load512_split(b)));
}
// Four chunks' scales (4 f16 each, low halves) as 16 floats.
inline __m512 group_scales(const __m128i d[4]) {
  const __m128i lo = _mm_unpacklo_epi64(d[0], d[1]), hi = _mm_unpacklo_epi64(d[2], d[3]);
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// Two vectors of 2 units each (8 lanes per unit) -> one of 4 units, 128-bit
// lane k holding unit k's partial sums.
inline __m512i pair_units(__m512i z0, __m512i z1) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(z0, z1, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(z0, z1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Four vectors of 4 units -> 16 totals. The adds leave unit j of vector m in
// lane 4 * (position of j) + m; `order` puts it in lane 4m + j.
inline __m512i unit_totals(const __m512i s[4], __m512i order) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  return _mm512_permutexvar_epi32(order, u);
}
inline __m512i in_order() { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }
// Q4_K/Q5_K vectors hold sub-blocks in positions 0,2,1,3.
inline __m512i k_order() { return _mm512_setr_epi32(0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15); }

// One token's activation arrays, resolved once per row.
struct TokenAct {
  const int8_t* q;
  const int32_t* corr;
  const float* du;
  const float* dsum;
};

// ------------------------------------------------------------------ formats
// load(row, c) unpacks chunk c (units 4c..4c+3); sums(w, token, c) gives
// their partial sums with one token, one 128-bit lane per unit (unit_totals);
// scales(row, u0, n, ws, minc) the weight scales (and Q4_K/Q5_K -dmin * min)
// of units u0..u0+n-1; unit_sum() one unit in scalar code, for the blocks
// after the last whole chunk.

// Q4_0/Q5_0: 128-bit lane k of lo/hi = block k's values 0..15 / 16..31
// (the nib activation layout); the -8/-16 offset comes in as the starting
// value, -offset * block sum of the activations.
inline __m512i nib_sums(__m512i lo, __m512i hi, const TokenAct& a, int64_t c) {
  const int8_t* q = a.q + c * 128;
  const __m512i s = _mm512_dpbusd_epi32(load512(a.corr + c * 16), lo, load512(q));
  return _mm512_dpbusd_epi32(s, hi, load512(q + 64));
}

template <bool kBits5>
struct VQ4_5_0 {
  static constexpr TensorType kType = kBits5 ? TensorType::Q5_0 : TensorType::Q4_0;
  static constexpr int kUnitElems = 32, kBlockBytes = kBits5 ? 22 : 18;
  static constexpr bool kMins = false, kTails = true;
  static constexpr bool kChunkScales = true;
  struct W {
    __m512i lo, hi;
    __m128i d4;
  };
  static W load(const uint8_t* row, int64_t c) {
    const uint8_t* p = row + 4 * kBlockBytes * c;
    const __m512i v = four_lanes(p + (kBits5 ? 6 : 2), kBlockBytes);
    const __m512i lo = nibbles_lo(v), hi = nibbles_hi(v);
    if constexpr (!kBits5) {
      return {lo, hi, chunk_scales(p, p, 0, 9, 18, 27)};  // blocks at bytes 0, 18, 36, 54
    } else {
      // One permute of two loads picks the 4 scales (blocks at bytes 0, 22,
      // 44, 66), then the low halves of the 4 qh (values 0..15), then the high.
      const __m512i idx = _mm512_castsi256_si512(_mm256_setr_epi16(0, 11, 22, 53, 1, 12, 23, 54, 2, 13, 24, 55, 0, 0, 0, 0));
      const __m256i words =
          _mm512_castsi512_si256(_mm512_permutex2var_epi16(load512_split(p), idx, load512_split(p + 24)));
      const __m128i w0 = _mm256_castsi256_si128(words);
      const auto bits_lo = static_cast<uint64_t>(_mm_extract_epi64(w0, 1));
      const auto bits_hi = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm256_extracti128_si256(words, 1)));
      const __m512i c16 = _mm512_set1_epi8(16);
      return {_mm512_mask_add_epi8(lo, _cvtu64_mask64(bits_lo), lo, c16),
              _mm512_mask_add_epi8(hi, _cvtu64_mask64(bits_hi), hi, c16), w0};
    }
  }
  static __m512i sums(const W& w, const TokenAct& a, int64_t c) { return nib_sums(w.lo, w.hi, a, c); }
  static __m512i order() { return in_order(); }
  static void scales(const uint8_t* row, int64_t u0, int n, __m512& ws, __m512&) {
    ws = f16_scales(row + kBlockBytes * u0, kBlockBytes, n);
  }
  static int32_t unit_sum(const uint8_t* row, const ActView& a, int t, int64_t b) {
    const uint8_t* blk = row + kBlockBytes * b;
    const __m128i v = load128(blk + (kBits5 ? 6 : 2)), m4 = _mm_set1_epi8(0x0F);
    __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    if constexpr (kBits5) {
      const uint32_t qh = u32_at(blk + 2);
      lo = _mm_mask_add_epi8(lo, static_cast<__mmask16>(qh & 0xFFFF), lo, _mm_set1_epi8(16));
      hi = _mm_mask_add_epi8(hi, static_cast<__mmask16>(qh >> 16), hi, _mm_set1_epi8(16));
    }
    const int64_t nb = a.cols / 32, c = b / 4, k = b % 4, n = nb - 4 * c < 4 ? nb - 4 * c : 4;
    const int8_t* q = a.q + t * a.q_stride + 128 * c + 16 * k;
    __m128i s = _mm_dpbusd_epi32(_mm_setzero_si128(), lo, load128(q));
    s = _mm_dpbusd_epi32(s, hi, load128(q + 16 * n));
    return a.corr[t * a.corr_stride + 4 * b] + hsum4(s);
  }
};

// Q8_0: signed weights meet activations stored +128 (unsigned); the
// 128 * sum(w) this adds is the starting value taken off.
struct VQ8_0 {
  static constexpr TensorType kType = TensorType::Q8_0;
  static constexpr int kUnitElems = 32;
  static constexpr bool kMins = false, kTails = true, kChunkScales = true;
  struct W {
    __m512i w[2], neg_bias[2];
    __m128i d4;
  };
  static W load(const uint8_t* row, int64_t c) {
    W r;
    const __m512i zero = _mm512_setzero_si512(), c128 = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int i = 0; i < 2; ++i) {
      const uint8_t* p = row + 136 * c + 68 * i;
      r.w[i] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(p + 2)), load256(p + 36), 1);
      r.neg_bias[i] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, r.w[i]));
    }
    const uint8_t* p = row + 136 * c;
    r.d4 = chunk_scales(p, p + 64, 0, 17, 32 + 2, 32 + 19);  // blocks at bytes 0, 34, 68, 102
    return r;
  }
  static __m512i sums(const W& w, const TokenAct& a, int64_t c) {
    const int8_t* q = a.q + c * 128;
    return pair_units(_mm512_dpbusd_epi32(w.neg_bias[0], load512(q), w.w[0]),
                      _mm512_dpbusd_epi32(w.neg_bias[1], load512(q + 64), w.w[1]));
  }
  static __m512i order() { return in_order(); }
  static void scales(const uint8_t* row, int64_t u0, int n, __m512& ws, __m512&) { ws = f16_scales(row + 34 * u0, 34, n); }
  static int32_t unit_sum(const uint8_t* row, const ActView& a, int t, int64_t b) {
    const __m256i w = load256(row + 34 * b + 2), q = load256(a.q + t * a.q_stride + 32 * b);
    const __m256i zero = _mm256_setzero_si256();
    const __m256i s = _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, q, w),
                                       _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(static_cast<char>(0x80)), w));
    return hsum8(s);
  }
};

// Q4_K/Q5_K: chunk c is half h = c % 2 of super-block c / 2; its codes come out
// as [sb 4h | sb 4h+2] and [sb 4h+1 | sb 4h+3], matching the k_sb32 layout.
template <bool kBits5>
struct VQ45_K {
  static constexpr TensorType kType = kBits5 ? TensorType::Q5_K : TensorType::Q4_K;
  static constexpr int kUnitElems = 32, kBlockBytes = kBits5 ? 176 : 144;
  static constexpr bool kMins = true, kTails = false, kChunkScales = false;
  struct W {
    __m512i q0, q1;
  };
  static W load(const uint8_t* row, int64_t c) {
    const uint8_t* p = row + kBlockBytes * (c / 2);
    const int h = static_cast<int>(c % 2);
    const __m512i z = load512_split(p + (kBits5 ? 48 : 16) + 64 * h);
    __m512i q0 = nibbles_lo(z), q1 = nibbles_hi(z);
    if constexpr (kBits5) {  // bit j of qh[l]: fifth bit of value l of sub-block j
      const __m256i qh = load256(p + 16);
      __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      if (h) hb = _mm512_srli_epi16(hb, 4);
      const __m512i c16 = _mm512_set1_epi8(16);
      q0 = or_and(q0, _mm512_slli_epi16(hb, 4), c16);
      q1 = or_and(q1, _mm512_slli_epi16(hb, 3), c16);
    }
    return {q0, q1};
  }
  static __m512i sums(const W& w, const TokenAct& a, int64_t c) {
    const int8_t* q = a.q + c * 128;
    const __m512i zero = _mm512_setzero_si512();
    return pair_units(_mm512_dpbusd_epi32(zero, w.q0, load512(q)), _mm512_dpbusd_epi32(zero, w.q1, load512(q + 64)));
  }
  static __m512i order() { return k_order(); }
  // Up to two super-blocks: scales d * sc and mins -dmin * m, 8 each.
  static void scales(const uint8_t* row, int64_t u0, int n, __m512& ws, __m512& minc) {
    const uint8_t* p = row + kBlockBytes * (u0 / 8);
    k_scales_mins(p, n > 8 ? p + kBlockBytes : nullptr, ws, minc);
  }
  static int32_t unit_sum(const uint8_t*, const ActView&, int, int64_t) { return 0; }  // rows are whole super-blocks
};

// Q6_K: chunk c = values 64c..64c+63 of the row, in order; codes 0..63 with
// the -32 coming in as the starting value, -32 * sum per 16 activations.
struct VQ6_K {
  static constexpr TensorType kType = TensorType::Q6_K;
  static constexpr int kUnitElems = 16;
  static constexpr bool kMins = false, kTails = false, kChunkScales = false;
  struct W {
    __m512i q;
  };
  static W load(const uint8_t* row, int64_t c) {
    const uint8_t* p = row + 210 * (c / 4);
    const int h = static_cast<int>(c % 4) / 2, upper = static_cast<int>(c % 2);
    const __m512i ql = load512_split(p + 64 * h);
    const __m256i qh = load256(p + 128 + 32 * h);
    const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    const __m512i c30 = _mm512_set1_epi8(0x30);
    return {upper ? or_and(nibbles_hi(ql), hb, c30) : or_and(nibbles_lo(ql), _mm512_slli_epi16(hb, 4), c30)};
  }
  static __m512i sums(const W& w, const TokenAct& a, int64_t c) {
    return _mm512_dpbusd_epi32(load512(a.corr + 16 * c), w.q, load512(a.q + 64 * c));
  }
  static __m512i order() { return in_order(); }
  static void scales(const uint8_t* row, int64_t u0, int, __m512& ws, __m512&) {
    const uint8_t* p = row + 210 * (u0 / 16);
    ws = _mm512_mul_ps(_mm512_set1_ps(f16_at(p + 208)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(p + 192))));
  }
  static int32_t unit_sum(const uint8_t*, const ActView&, int, int64_t) { return 0; }  // rows are whole super-blocks
};

// ------------------------------------------------------------------ driver

// Units u0 + from .. u0 + n - 1 of token t, in scalar code, into their lanes.
template <class F>
__m512i with_tail(__m512i sums, const uint8_t* row, const ActView& a, int t, int64_t u0, int from, int n) {
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, sums);
  for (int i = from; i < n; ++i) lanes[i] = F::unit_sum(row, a, t, u0 + i);
  return _mm512_load_si512(lanes);
}

// Advances token t's chains by units u0..u0+15 (lanes past n: zero sums and
// scales, so the FMAs add +0).
template <class F>
inline __m512 step(__m512 acc, __m512i sums, __m512 ws, __m512 minc, const TokenAct& a, int64_t u0, __mmask16 valid) {
  const __m512 scale = _mm512_mul_ps(ws, _mm512_maskz_loadu_ps(valid, a.du + u0));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc);
  if constexpr (F::kMins) acc = _mm512_fmadd_ps(minc, _mm512_maskz_loadu_ps(valid, a.dsum + u0), acc);
  return acc;
}

// Units u0..u0+4*kChunks-1 of one row for T tokens, then any tail units up
// to u0 + n in scalar code (legacy formats only).
template <class F, int T, int kChunks>
inline void group(const uint8_t* row, const ActView& act, const TokenAct* ta, int t0, int64_t u0, int n, __m512* acc) {
  __m512i s[T][4];
  __m128i d4[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    d4[i] = _mm_setzero_si128();
    if (i < kChunks) {
      const typename F::W w = F::load(row, u0 / 4 + i);
      if constexpr (F::kChunkScales) d4[i] = w.d4;
      for (int t = 0; t < T; ++t) s[t][i] = F::sums(w, ta[t], u0 / 4 + i);
    } else {
      for (int t = 0; t < T; ++t) s[t][i] = _mm512_setzero_si512();
    }
  }
  __m512 ws, minc = _mm512_setzero_ps();
  if (F::kChunkScales && 4 * kChunks == n)
    ws = group_scales(d4);
  else
    F::scales(row, u0, n, ws, minc);
  for (int t = 0; t < T; ++t) {
    __m512i sums = unit_totals(s[t], F::order());
    if constexpr (F::kTails)
      if (4 * kChunks < n) sums = with_tail<F>(sums, row, act, t0 + t, u0, 4 * kChunks, n);
    acc[t] = step<F>(acc[t], sums, ws, minc, ta[t], u0, first_lanes(n));
  }
}

// Row r for tokens t0..t0+T-1.
template <class F, int T>
void row_tokens(const KernelArgs& a, int64_t r, int t0) {
  const ActView& act = *a.act;
  const uint8_t* row = a.w + r * a.row_bytes;
  const int64_t units = a.cols / F::kUnitElems, chunks = units / 4;
  const bool unit_scales = F::kMins || F::kType == TensorType::Q6_K;  // legacy formats: one scale per unit already
  TokenAct ta[T];
  __m512 acc[T];
  for (int t = 0; t < T; ++t) {
    const int64_t tt = t0 + t;
    ta[t] = {act.q + tt * act.q_stride, act.corr ? act.corr + tt * act.corr_stride : nullptr,
             unit_scales ? act.du + tt * act.du_stride : act.d + tt * act.d_stride,
             act.dsum ? act.dsum + tt * act.du_stride : nullptr};
    acc[t] = _mm512_setzero_ps();
  }
  int64_t u0 = 0;
  for (; u0 + 16 <= 4 * chunks; u0 += 16) group<F, T, 4>(row, act, ta, t0, u0, 16, acc);
  if (u0 < units) {  // the last, partial group
    const int n = static_cast<int>(units - u0);
    switch (chunks - u0 / 4) {
      case 0: group<F, T, 0>(row, act, ta, t0, u0, n, acc); break;
      case 1: group<F, T, 1>(row, act, ta, t0, u0, n, acc); break;
      case 2: group<F, T, 2>(row, act, ta, t0, u0, n, acc); break;
      default: group<F, T, 3>(row, act, ta, t0, u0, n, acc); break;
    }
  }
  for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.y_stride + r] = tree16(acc[t]);
}

template <class F, int T>
void tokens_tail(const KernelArgs& a, int64_t r, int t, int left) {
  if (left == T) return row_tokens<F, T>(a, r, t);
  if constexpr (T > 1) tokens_tail<F, T - 1>(a, r, t, left);
}

// Each row's chunks are unpacked once per 4 tokens; for one token this reads
// the rows as one sequential stream, which the prefetchers like best.
template <class F>
void gemm_units(const KernelArgs& a, int64_t r0, int64_t r1, int) {
  constexpr int kT = 4;
  for (int64_t r = r0; r < r1; ++r) {
    int t = 0;
    for (; t + kT <= a.n_tokens; t += kT) row_tokens<F, kT>(a, r, t);
    if (t < a.n_tokens) tokens_tail<F, kT>(a, r, t, a.n_tokens - t);
  }
}

}  // namespace

GemmFn avx512_unit_kernel(TensorType type) {
  switch (type) {
    case TensorType::Q4_0: return gemm_units<VQ4_5_0<false>>;
    case TensorType::Q5_0: return gemm_units<VQ4_5_0<true>>;
    case TensorType::Q8_0: return gemm_units<VQ8_0>;
    case TensorType::Q4_K: return gemm_units<VQ45_K<false>>;
    case TensorType::Q5_K: return gemm_units<VQ45_K<true>>;
    case TensorType::Q6_K: return gemm_units<VQ6_K>;
    default: return nullptr;
  }
}

}  // namespace troupe::cpu::detail

#else  // not x86-64

#include "engine/cpu/matmul.h"
namespace troupe::cpu::detail {
GemmFn avx512_unit_kernel(TensorType) { return nullptr; }
}  // namespace troupe::cpu::detail
#endif
