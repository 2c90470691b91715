#pragma once
// The shared load helpers (simd_loads.h) plus the 512-bit ones and the small
// pieces the AVX-512 quantized kernels share, for those files only.
#if !defined(__AVX512F__)
#error "simd_avx512.h is for files compiled with AVX-512 flags (*_avx512.cpp)"
#endif

#include "engine/cpu/simd_loads.h"

namespace troupe::cpu::detail {
namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
// 64 bytes as two 256-bit loads: weight rows sit at any offset, and on Zen 4
// a 512-bit load that splits a cache line (nearly all of them here) costs
// more than two 256-bit ones (Q4_K/Q6_K decode about 6% faster).
inline __m512i load512_split(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(b)), load256(b + 32), 1);
}

inline __m512i nibbles_lo(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
inline __m512i nibbles_hi(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }
inline __m512i or_and(__m512i a, __m512i b, __m512i c) { return _mm512_ternarylogic_epi32(a, b, c, 0xF8); }  // a | (b & c)

// The canonical end of a quantized dot product (matmul_units_avx512.cpp):
// lane c + 8 onto c, then c + 4, c + 2, c + 1.
inline float tree16(__m512 acc) {
  const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

// Q4_K/Q5_K: the scales d * sc and mins -dmin * m of the 8 sub-blocks of the
// super-block whose header (d, dmin, 12 packed scale bytes) is at h0, in
// lanes 0..7, and of h1's in lanes 8..15 (+0 where h1 is null). Both headers
// are unpacked side by side in one vector (a 128-bit half each): the scalar
// unpacking this replaced was a quarter of the few-token lane kernel's
// instructions. The codes are exact, so the products are the same bits.
inline void k_scales_mins(const uint8_t* h0, const uint8_t* h1, __m512& ws, __m512& minc) {
  const __m256i h = h1 ? _mm256_inserti128_si256(_mm256_castsi128_si256(load128(h0)), load128(h1), 1)
                       : _mm256_zextsi128_si256(load128(h0));
  // Per half, dwords [d | dmin, v0, v1, v2]: the scales' low bits are v0's
  // 6-bit fields and the mins' v1's; their high ones v2's nibbles (v2 >> 4
  // for the mins) with two bits from v0 (v1) >> 2.
  const __m256i a = _mm256_shuffle_epi32(h, _MM_SHUFFLE(2, 1, 2, 1));  // [v0, v1, v0, v1]
  const __m256i c = _mm256_srlv_epi32(_mm256_shuffle_epi32(h, _MM_SHUFFLE(3, 3, 3, 3)),
                                      _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));  // [v2, v2 >> 4, ..]
  const __m256i lo = _mm256_and_si256(a, _mm256_set1_epi32(0x3F3F3F3F));
  const __m256i hi = _mm256_ternarylogic_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x0F0F0F0F)), _mm256_srli_epi32(a, 2),
                                               _mm256_set1_epi32(0x30303030), 0xF8);  // c | (a >> 2 & 0x30..)
  // Per half [sc lo, sc hi, mn lo, mn hi]; then sc0 sc1 mn0 mn1, 8 bytes each.
  const __m256i u = _mm256_permute4x64_epi64(_mm256_unpacklo_epi32(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(u)));
  const __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(u, 1)));
  // [d0, dmin0, d1, dmin1] as floats, each spread over its super-block's 8 lanes.
  const __m512 dd = _mm512_castps128_ps512(
      _mm_cvtph_ps(_mm256_castsi256_si128(_mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0)))));
  const __m512i lanes_d = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512 dv = _mm512_permutexvar_ps(lanes_d, dd);
  const __m512 neg_dmin = _mm512_castsi512_ps(_mm512_xor_si512(
      _mm512_castps_si512(_mm512_permutexvar_ps(_mm512_add_epi32(lanes_d, _mm512_set1_epi32(1)), dd)),
      _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  ws = _mm512_mul_ps(dv, sc);
  // A missing second header: +0 mins (a negated +0 dmin would give -0).
  minc = _mm512_maskz_mul_ps(h1 ? 0xFFFF : 0x00FF, neg_dmin, mn);
}

}  // namespace
}  // namespace troupe::cpu::detail
