#pragma once
// The shared load helpers (simd_loads.h) plus the 512-bit one, for the
// AVX-512 kernel files only.
#if !defined(__AVX512F__)
#error "simd_avx512.h is for files compiled with AVX-512 flags (*_avx512.cpp)"
#endif

#include "engine/cpu/simd_loads.h"

namespace troupe::cpu::detail {
namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

}  // namespace
}  // namespace troupe::cpu::detail
