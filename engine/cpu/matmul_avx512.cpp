// AVX-512 (F/BW/VL/DQ/VNNI): the activation quantizer, the F32/F16/BF16
// kernels (an R x T tile converts each weight vector once and FMAs it into T
// tokens) and the kernel table. Quantized weights have their own files:
// matmul_units_avx512.cpp (few tokens) and matmul_packed_avx512.cpp (many).
//
// The tile GEMM, the float formats and the quantizer's layouts are shared
// with the AVX2 file (matmul_skeleton.h); this file supplies the AVX-512
// intrinsics (Avx512).
//
// Only plain code lives here: no standard-library templates, whose out-of-line
// copies compiled with these flags could be picked by the linker for callers
// on CPUs without AVX-512.
#if defined(__x86_64__)
#include "engine/cpu/simd_avx512.h"

#include "engine/cpu/matmul_skeleton.h"

namespace troupe::cpu::detail {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V broadcast(float x) { return _mm512_set1_ps(x); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static V load_f32(const uint8_t* p) { return _mm512_loadu_ps(p); }
  static V load_f16(const uint8_t* p) { return _mm512_cvtph_ps(load256(p)); }
  static V load_bf16(const uint8_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
  }
  static float reduce(V v) { return _mm512_reduce_add_ps(v); }
  static constexpr int kFloatRows = 4, kFloatTokens = 4;

  // Folding from |x[0..16)| rather than from 0 (as quantize_scalar does) gives the same maximum.
  static float amax(const float* x, int n) {
    __m512 m = _mm512_abs_ps(_mm512_loadu_ps(x));
    for (int i = 16; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    return _mm512_reduce_max_ps(m);
  }
  struct Codes32 {
    __m512i i0, i1;  // values 0..15, 16..31 as int32
    __m128i lo() const { return _mm512_cvtepi32_epi8(i0); }
    __m128i hi() const { return _mm512_cvtepi32_epi8(i1); }
    int sum_lo() const { return _mm512_reduce_add_epi32(i0); }
    int sum_hi() const { return _mm512_reduce_add_epi32(i1); }
    int sum() const { return _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1)); }
    void store(int8_t* dst, char flip) const {
      const __m128i f = _mm_set1_epi8(flip);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_xor_si128(lo(), f));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm_xor_si128(hi(), f));
    }
  };
  static __m512i round_codes(__m512 x, __m512 inv) {
    const __m512 scaled = _mm512_mul_ps(x, inv);
    return _mm512_cvtps_epi32(_mm512_roundscale_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static Codes32 codes32(const float* x, V inv) {
    return {round_codes(_mm512_loadu_ps(x), inv), round_codes(_mm512_loadu_ps(x + 16), inv)};
  }
};

}  // namespace

void quantize_avx512(ActLayout layout, const float* x, const ActView& v, int t) { quantize<Avx512>(layout, x, v, t); }

// Quantized weights have their own kernels (matmul_units_avx512.cpp,
// matmul_packed_avx512.cpp); F32/F16/BF16 run the shared tiles.
Kernel avx512_kernel(TensorType type) {
  switch (type) {
    case TensorType::Q8_0: return {avx512_unit_kernel(type), ActLayout::q8_biased, avx512_packed_kernel(type), ActLayout::packed32};
    case TensorType::Q4_0: return {avx512_unit_kernel(type), ActLayout::nib8, avx512_packed_kernel(type), ActLayout::packed32};
    case TensorType::Q5_0: return {avx512_unit_kernel(type), ActLayout::nib16, avx512_packed_kernel(type), ActLayout::packed32};
    case TensorType::Q4_K: return {avx512_unit_kernel(type), ActLayout::k_sb32, avx512_packed_kernel(type), ActLayout::packed_k};
    case TensorType::Q5_K: return {avx512_unit_kernel(type), ActLayout::k_sb32, avx512_packed_kernel(type), ActLayout::packed_k};
    case TensorType::Q6_K: return {avx512_unit_kernel(type), ActLayout::k_sb16, avx512_packed_kernel(type), ActLayout::packed_k};
    default: return float_kernel<Avx512>(type);
  }
}

}  // namespace troupe::cpu::detail

#else  // not x86-64: no AVX-512 kernels

#include "engine/cpu/matmul.h"
namespace troupe::cpu::detail {
Kernel avx512_kernel(TensorType) { return {}; }
void quantize_avx512(ActLayout layout, const float* x, const ActView& v, int t) { quantize_scalar(layout, x, v, t); }
}  // namespace troupe::cpu::detail
#endif
