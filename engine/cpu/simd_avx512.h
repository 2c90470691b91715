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
// lanes 0..7, and of h1's in lanes 8..15 (+0 where h1 is null).
inline void k_scales_mins(const uint8_t* h0, const uint8_t* h1, __m512& ws, __m512& minc) {
  uint64_t sc[2] = {}, mn[2] = {};
  float d[2] = {}, neg_dmin[2] = {};
  const uint8_t* h[2] = {h0, h1};
  for (int s = 0; s < 2 && h[s]; ++s) {
    const uint8_t* p = h[s];
    const uint32_t v0 = u32_at(p + 4), v1 = u32_at(p + 8), v2 = u32_at(p + 12);
    sc[s] = (v0 & 0x3F3F3F3Fu) | static_cast<uint64_t>((v2 & 0x0F0F0F0Fu) | ((v0 >> 2) & 0x30303030u)) << 32;
    mn[s] = (v1 & 0x3F3F3F3Fu) | static_cast<uint64_t>(((v2 >> 4) & 0x0F0F0F0Fu) | ((v1 >> 2) & 0x30303030u)) << 32;
    d[s] = f16_at(p), neg_dmin[s] = -f16_at(p + 2);
  }
  const __m512 dv = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d[0]), _mm512_set1_ps(d[1]));
  const __m512 mv = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(neg_dmin[0]), _mm512_set1_ps(neg_dmin[1]));
  const auto bytes = [](const uint64_t v[2]) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_set_epi64x(static_cast<long long>(v[1]), static_cast<long long>(v[0]))));
  };
  ws = _mm512_mul_ps(dv, bytes(sc));
  minc = _mm512_mul_ps(mv, bytes(mn));
}

}  // namespace
}  // namespace troupe::cpu::detail
