#pragma once
// The shared load helpers (simd_loads.h) plus the byte-unpacking pieces the
// AVX2 quantized kernels share (matmul_avx2.cpp, matmul_lanes_avx2.cpp), for
// *_avx2.cpp files only: internal linkage, so no copy compiled with AVX2
// reaches code that runs on other CPUs.
#include "engine/cpu/simd_loads.h"

namespace troupe::cpu::detail {
namespace {

inline __m256i nibbles_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
inline __m256i nibbles_hi(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }

// Bytes equal to `value` where bit k of x is set, else 0.
inline __m256i bits_to_bytes(uint32_t x, __m256i value) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), spread);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), value);
}

}  // namespace
}  // namespace troupe::cpu::detail
