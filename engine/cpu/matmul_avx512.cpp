// AVX-512 (F/BW/VL/DQ/VNNI): the activation quantizer, the F32/F16/BF16
// kernels (an R x T tile converts each weight vector once and FMAs it into T
// tokens) and the kernel table. Quantized weights have their own files:
// matmul_units_avx512.cpp (few tokens) and matmul_packed_avx512.cpp (many).
//
// Only plain code lives here: no standard-library templates, whose out-of-line
// copies compiled with these flags could be picked by the linker for callers
// on CPUs without AVX-512.
#if defined(__x86_64__)
#include "engine/cpu/simd_avx512.h"

#include <cstring>

#include "engine/cpu/matmul.h"

namespace troupe::cpu::detail {
namespace {





// ------------------------------------------------------------------ float formats
// Each format: kType, kElems (values per chunk), kBytes (bytes per chunk),
// kBlockElems; W = one row's unpacked chunk; load(p); dot(w, act, t, c, acc).

// Two vectors per chunk, summed before they meet the accumulator: one add per
// 32 values on the accumulator's dependency chain instead of two FMAs.
template <TensorType kT, int kElemBytes>
struct FloatX {
  static constexpr TensorType kType = kT;
  static constexpr int64_t kElems = 32, kBytes = 32 * kElemBytes, kBlockElems = 1;
  struct W {
    __m512 w0, w1;
  };
  static __m512 convert(const uint8_t* p) {
    if constexpr (kT == TensorType::F32) return _mm512_loadu_ps(p);
    if constexpr (kT == TensorType::F16) return _mm512_cvtph_ps(load256(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
  }
  static W load(const uint8_t* p) { return {convert(p), convert(p + 16 * kElemBytes)}; }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m512& acc) {
    const float* x = a.x + t * a.x_stride + c * 32;
    acc = _mm512_add_ps(acc, _mm512_fmadd_ps(w.w0, _mm512_loadu_ps(x), _mm512_mul_ps(w.w1, _mm512_loadu_ps(x + 16))));
  }
};

// ------------------------------------------------------------------ activations
// Same arithmetic as quantize_scalar (matmul.cpp), in the same order, so the
// bytes are identical: amax is exact, the scale a division, the rounding RNE.

constexpr int kActSlot[8] = {0, 2, 1, 3, 4, 6, 5, 7};

inline __m512i round_codes(__m512 x, __m512 inv) {
  return _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

void quantize_32(ActLayout l, const float* x, const ActView& v, int t) {
  const int64_t nb = v.cols / 32;
  auto* q = const_cast<int8_t*>(v.q + t * v.q_stride);
  auto* d = const_cast<float*>(v.d + t * v.d_stride);
  auto* dl = const_cast<float*>(v.dl + t * v.dl_stride);
  auto* corr = const_cast<int32_t*>(v.corr + t * v.corr_stride);
  const bool nib = l == ActLayout::nib8 || l == ActLayout::nib16;
  const int offset = l == ActLayout::nib16 ? 16 : 8;
  const __m128i flip = _mm_set1_epi8(l == ActLayout::q8_biased ? static_cast<char>(0x80) : 0);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float scale = amax / 127;
    const __m512 inv = _mm512_set1_ps(scale != 0 ? 1 / scale : 0);
    const __m512i i0 = round_codes(x0, inv), i1 = round_codes(x1, inv);
    d[b] = scale;
    if (nib) {
      const int64_t c = b / 4, k = b % 4, n = nb - 4 * c < 4 ? nb - 4 * c : 4;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 128 * c + 16 * k), _mm512_cvtepi32_epi8(i0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 128 * c + 16 * n + 16 * k), _mm512_cvtepi32_epi8(i1));
      _mm_storeu_ps(dl + 4 * b, _mm_set1_ps(scale));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(corr + 4 * b),
                       _mm_cvtsi32_si128(-offset * _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1))));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm_xor_si128(_mm512_cvtepi32_epi8(i0), flip));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm_xor_si128(_mm512_cvtepi32_epi8(i1), flip));
      _mm256_storeu_ps(dl + 8 * b, _mm256_set1_ps(scale));
    }
  }
}

void quantize_256(ActLayout l, const float* x, const ActView& v, int t) {
  const int64_t nsb = v.cols / 256;
  auto* q = const_cast<int8_t*>(v.q + t * v.q_stride);
  auto* d = const_cast<float*>(v.d + t * v.d_stride);
  auto* sums = const_cast<int16_t*>(v.sums + t * v.sums_stride);
  const bool sb32 = l == ActLayout::k_sb32;
  for (int64_t s = 0; s < nsb; ++s) {
    const float* xs = x + 256 * s;
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xs + 16 * i)));
    const float scale = _mm512_reduce_max_ps(m) / 127;
    const __m512 inv = _mm512_set1_ps(scale != 0 ? 1 / scale : 0);
    d[s] = scale;
    for (int i = 0; i < 16; ++i) {
      const __m512i codes = round_codes(_mm512_loadu_ps(xs + 16 * i), inv);
      // Sub-block i / 2 of 32 goes to its slot; groups of 16 stay in place.
      int8_t* dst = q + 256 * s + (sb32 ? 32 * kActSlot[i / 2] + 16 * (i % 2) : 16 * i);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(codes));
      const int sum = _mm512_reduce_add_epi32(codes);
      if (sb32)
        sums[8 * s + i / 2] = static_cast<int16_t>((i % 2 ? sums[8 * s + i / 2] : 0) + sum);
      else
        sums[16 * s + i] = static_cast<int16_t>(sum);
    }
  }
}

// ------------------------------------------------------------------ drivers

template <class F>
float tail(const KernelArgs& a, const uint8_t* row, int t, int64_t chunks) {
  const int64_t first = chunks * (F::kElems / F::kBlockElems), end = a.cols / F::kBlockElems;
  return first < end ? dot_blocks(F::kType, row, *a.act, t, first, end) : 0.0f;
}

// R rows x T tokens: each row's chunk is unpacked once and used T times; the
// tokens' activation chunks stay in L1 across the R rows.
template <class F, int R, int T>
void tile(const KernelArgs& a, int64_t r0, int t0) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const int64_t chunks = a.cols / F::kElems;
  const uint8_t* base = a.w + r0 * a.row_bytes;
  for (int64_t c = 0; c < chunks; ++c) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const typename F::W w = F::load(base + r * a.row_bytes + c * F::kBytes);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) F::dot(w, *a.act, t0 + t, c, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      a.y[(t0 + t) * a.y_stride + r0 + r] =
          _mm512_reduce_add_ps(acc[r][t]) + tail<F>(a, base + r * a.row_bytes, t0 + t, chunks);
}

// One token: rows one after another so each thread reads a single sequential
// stream (interleaving rows measurably defeats the hardware prefetcher). Each
// row's arithmetic is exactly tile()'s for that row and token, so a token's
// result does not depend on how many tokens share the call; that is also why
// there is one accumulator, not two.
template <class F>
void gemv(const KernelArgs& a, int64_t r0, int64_t r1) {
  const int64_t chunks = a.cols / F::kElems;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = a.w + r * a.row_bytes;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) F::dot(F::load(row + c * F::kBytes), *a.act, 0, c, acc);
    a.y[r] = _mm512_reduce_add_ps(acc) + tail<F>(a, row, 0, chunks);
  }
}

// Tokens [t, t + left) with left <= T, as one tile of exactly `left`.
template <class F, int R, int T>
void tile_tail(const KernelArgs& a, int64_t r, int t, int left) {
  if (left == T) return tile<F, R, T>(a, r, t);
  if constexpr (T > 1) tile_tail<F, R, T - 1>(a, r, t, left);
}

template <class F, int R, int T>
void row_group(const KernelArgs& a, int64_t r, int t_begin, int t_end) {
  int t = t_begin;
  for (; t + T <= t_end; t += T) tile<F, R, T>(a, r, t);
  if (t < t_end) tile_tail<F, R, T>(a, r, t, t_end - t);
}

// Tokens in blocks whose activations fit in L2 next to the rows being reused.
constexpr int kTokenBlock = 64;

template <class F, int R, int T>
void gemm(const KernelArgs& a, int64_t r0, int64_t r1, int) {
  if (a.n_tokens == 1) return gemv<F>(a, r0, r1);
  for (int tb = 0; tb < a.n_tokens; tb += kTokenBlock) {
    const int te = a.n_tokens - tb < kTokenBlock ? a.n_tokens : tb + kTokenBlock;
    int64_t r = r0;
    for (; r + R <= r1; r += R) row_group<F, R, T>(a, r, tb, te);
    for (; r < r1; ++r) row_group<F, 1, T>(a, r, tb, te);
  }
}

}  // namespace

void quantize_avx512(ActLayout layout, const float* x, const ActView& v, int t) {
  if (layout == ActLayout::k_sb32 || layout == ActLayout::k_sb16)
    quantize_256(layout, x, v, t);
  else if (layout != ActLayout::f32)
    quantize_32(layout, x, v, t);
}

Kernel avx512_kernel(TensorType type) {
  switch (type) {
    case TensorType::F32: return {gemm<FloatX<TensorType::F32, 4>, 4, 4>, ActLayout::f32};
    case TensorType::F16: return {gemm<FloatX<TensorType::F16, 2>, 4, 4>, ActLayout::f32};
    case TensorType::BF16: return {gemm<FloatX<TensorType::BF16, 2>, 4, 4>, ActLayout::f32};
    case TensorType::Q8_0: return {avx512_unit_kernel(type), ActLayout::q8_biased, avx512_packed_kernel(type), ActLayout::packed32};
    case TensorType::Q4_0: return {avx512_unit_kernel(type), ActLayout::nib8, avx512_packed_kernel(type), ActLayout::packed32};
    case TensorType::Q5_0: return {avx512_unit_kernel(type), ActLayout::nib16, avx512_packed_kernel(type), ActLayout::packed32};
    case TensorType::Q4_K: return {avx512_unit_kernel(type), ActLayout::k_sb32, avx512_packed_kernel(type), ActLayout::packed_k};
    case TensorType::Q5_K: return {avx512_unit_kernel(type), ActLayout::k_sb32, avx512_packed_kernel(type), ActLayout::packed_k};
    case TensorType::Q6_K: return {avx512_unit_kernel(type), ActLayout::k_sb16, avx512_packed_kernel(type), ActLayout::packed_k};
    default: return {};
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
