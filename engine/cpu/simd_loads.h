#pragma once
// Unaligned load helpers shared by the AVX2 and AVX-512 kernel files (both are
// compiled with AVX2 and F16C), and the one place they include <immintrin.h>.
// Include it from *_avx2.cpp / *_avx512.cpp files only: the helpers have
// internal linkage, so no copy compiled with those flags can be linked into
// code that runs on other CPUs.
#if !defined(__AVX2__) || !defined(__F16C__)
#error "simd_loads.h is for files compiled with AVX2 and F16C (*_avx2.cpp, *_avx512.cpp)"
#endif

// GCC 12's AVX-512 headers start many intrinsics from _mm512_undefined_*(),
// which it then reports as uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

namespace troupe::cpu::detail {
namespace {

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline void store256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

inline float f16_at(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
inline uint64_t u16_at(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline uint32_t u32_at(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace
}  // namespace troupe::cpu::detail
