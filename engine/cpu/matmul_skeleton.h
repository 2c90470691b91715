#pragma once
// What matmul_avx2.cpp and matmul_avx512.cpp share, written once over a SIMD
// traits type S that each of them defines (Avx2, Avx512): the R x T tile GEMM
// with its one-token path, the F32/F16/BF16 formats, the float entries of the
// kernel table, and the activation quantizer's layouts. S supplies:
//
//   V, kLanes                 float vector (the accumulator) and its width
//   zero, broadcast, add, mul, fmadd(a, b, c) = a * b + c, loadu(const float*)
//   load_f32/f16/bf16(p)      kLanes weights at p, as floats
//   reduce(V)                 horizontal sum, in that file's fixed order
//   kFloatRows, kFloatTokens  R x T of the float tiles
//   amax(x, n)                max |x[i]|, n a multiple of kLanes
//   codes32(x, inv)           round-to-nearest-even of x[0..32) * inv, as a
//                             Codes32: lo(), hi() (bytes of values 0..15,
//                             16..31), sum_lo(), sum_hi(), sum(), and
//                             store(dst, flip) (32 bytes, each ^ flip)
//
// A weight format (FloatRow below, the AVX2 file's quantized ones) is a
// struct with kType, kElems (values per chunk), kBytes (bytes per chunk),
// kBlockElems; W, one row's unpacked chunk; load(p); dot(w, act, t, c, acc).
//
// Include this from *_avx2.cpp / *_avx512.cpp only (simd_loads.h checks the
// flags). Everything here is in an anonymous namespace on purpose: each file
// then gets its own copies with internal linkage, compiled with its own -m
// flags. Templates and inline functions in a named namespace are emitted as
// weak symbols that the linker merges across files, keeping any one copy, so
// a helper compiled for AVX-512 could end up serving a caller on a CPU
// without it. Nothing may be instantiated here from a file compiled without
// those flags, which is also why no standard-library templates are used.
#include "engine/cpu/simd_loads.h"

#include "engine/cpu/matmul.h"

namespace troupe::cpu::detail {
namespace {

// ------------------------------------------------------------------ float formats

// Two vectors per chunk, summed before they meet the accumulator: one add per
// 2 * kLanes values on the accumulator's dependency chain instead of two FMAs.
template <class S, TensorType kT, int kElemBytes>
struct FloatRow {
  using V = typename S::V;
  static constexpr TensorType kType = kT;
  static constexpr int64_t kElems = 2 * S::kLanes, kBytes = kElems * kElemBytes, kBlockElems = 1;
  struct W {
    V w0, w1;
  };
  static V convert(const uint8_t* p) {
    if constexpr (kT == TensorType::F32)
      return S::load_f32(p);
    else if constexpr (kT == TensorType::F16)
      return S::load_f16(p);
    else
      return S::load_bf16(p);
  }
  static W load(const uint8_t* p) { return {convert(p), convert(p + S::kLanes * kElemBytes)}; }
  static void dot(const W& w, const ActView& a, int t, int64_t c, V& acc) {
    const float* x = a.x + t * a.x_stride + c * kElems;
    acc = S::add(acc, S::fmadd(w.w0, S::loadu(x), S::mul(w.w1, S::loadu(x + S::kLanes))));
  }
};

// ------------------------------------------------------------------ activations
// Same arithmetic as quantize_scalar (matmul_act.cpp), so the bytes are
// identical: amax is exact, the scale a division, the rounding RNE.

constexpr int kSlot[8] = {0, 2, 1, 3, 4, 6, 5, 7};  // ActLayout::k_sb32's sub-block order

template <class S>
void quantize_32(ActLayout l, const float* x, const ActView& v, int t) {
  const int64_t nb = v.cols / 32;
  auto* q = const_cast<int8_t*>(v.q + t * v.q_stride);
  auto* d = const_cast<float*>(v.d + t * v.d_stride);
  auto* dl = const_cast<float*>(v.dl + t * v.dl_stride);
  auto* corr = const_cast<int32_t*>(v.corr + t * v.corr_stride);
  const bool nib = l == ActLayout::nib8 || l == ActLayout::nib16;
  const int offset = l == ActLayout::nib16 ? 16 : 8;
  const char flip = l == ActLayout::q8_biased ? static_cast<char>(0x80) : 0;
  for (int64_t b = 0; b < nb; ++b) {
    const float scale = S::amax(x + 32 * b, 32) / 127;
    const typename S::Codes32 codes = S::codes32(x + 32 * b, S::broadcast(scale != 0 ? 1 / scale : 0));
    d[b] = scale;
    if (nib) {
      const int64_t c = b / 4, k = b % 4, n = nb - 4 * c < 4 ? nb - 4 * c : 4;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 128 * c + 16 * k), codes.lo());
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 128 * c + 16 * n + 16 * k), codes.hi());
      _mm_storeu_ps(dl + 4 * b, _mm_set1_ps(scale));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(corr + 4 * b), _mm_cvtsi32_si128(-offset * codes.sum()));
    } else {
      codes.store(q + 32 * b, flip);
      _mm256_storeu_ps(dl + 8 * b, _mm256_set1_ps(scale));
    }
  }
}

template <class S>
void quantize_256(ActLayout l, const float* x, const ActView& v, int t) {
  const int64_t nsb = v.cols / 256;
  auto* q = const_cast<int8_t*>(v.q + t * v.q_stride);
  auto* d = const_cast<float*>(v.d + t * v.d_stride);
  auto* sums = const_cast<int16_t*>(v.sums + t * v.sums_stride);
  const bool sb32 = l == ActLayout::k_sb32;
  for (int64_t s = 0; s < nsb; ++s) {
    const float* xs = x + 256 * s;
    const float scale = S::amax(xs, 256) / 127;
    const typename S::V inv = S::broadcast(scale != 0 ? 1 / scale : 0);
    d[s] = scale;
    for (int g = 0; g < 8; ++g) {
      const typename S::Codes32 codes = S::codes32(xs + 32 * g, inv);
      codes.store(q + 256 * s + 32 * (sb32 ? kSlot[g] : g), 0);
      if (sb32) {
        sums[8 * s + g] = static_cast<int16_t>(codes.sum());
      } else {
        sums[16 * s + 2 * g] = static_cast<int16_t>(codes.sum_lo());
        sums[16 * s + 2 * g + 1] = static_cast<int16_t>(codes.sum_hi());
      }
    }
  }
}

template <class S>
void quantize(ActLayout layout, const float* x, const ActView& v, int t) {
  if (layout == ActLayout::k_sb32 || layout == ActLayout::k_sb16)
    quantize_256<S>(layout, x, v, t);
  else if (layout != ActLayout::f32)
    quantize_32<S>(layout, x, v, t);
}

// ------------------------------------------------------------------ drivers
// Rows are handed out by row ranges; tokens go in tiles of T, rows in groups of R.

// The blocks after the last whole chunk, by the scalar code.
template <class F>
float tail(const KernelArgs& a, const uint8_t* row, int t, int64_t chunks) {
  const int64_t first = chunks * (F::kElems / F::kBlockElems), end = a.cols / F::kBlockElems;
  return first < end ? dot_blocks(F::kType, row, *a.act, t, first, end) : 0.0f;
}

// R rows x T tokens: each row's chunk is unpacked once and used T times; the
// tokens' activation chunks stay in L1 across the R rows.
template <class S, class F, int R, int T>
void tile(const KernelArgs& a, int64_t r0, int t0) {
  typename S::V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = S::zero();
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
      a.y[(t0 + t) * a.y_stride + r0 + r] = S::reduce(acc[r][t]) + tail<F>(a, base + r * a.row_bytes, t0 + t, chunks);
}

// One token: rows one after another so each thread reads a single sequential
// stream (interleaving rows measurably defeats the hardware prefetcher). Each
// row's arithmetic is exactly tile()'s for that row and token, so a token's
// result does not depend on how many tokens share the call; that is also why
// there is one accumulator, not two.
template <class S, class F>
void gemv(const KernelArgs& a, int64_t r0, int64_t r1) {
  const int64_t chunks = a.cols / F::kElems;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = a.w + r * a.row_bytes;
    typename S::V acc = S::zero();
    for (int64_t c = 0; c < chunks; ++c) F::dot(F::load(row + c * F::kBytes), *a.act, 0, c, acc);
    a.y[r] = S::reduce(acc) + tail<F>(a, row, 0, chunks);
  }
}

// Tokens [t, t + left) with left <= T, as one tile of exactly `left`.
template <class S, class F, int R, int T>
void tile_tail(const KernelArgs& a, int64_t r, int t, int left) {
  if (left == T) return tile<S, F, R, T>(a, r, t);
  if constexpr (T > 1) tile_tail<S, F, R, T - 1>(a, r, t, left);
}

template <class S, class F, int R, int T>
void row_group(const KernelArgs& a, int64_t r, int t_begin, int t_end) {
  int t = t_begin;
  for (; t + T <= t_end; t += T) tile<S, F, R, T>(a, r, t);
  if (t < t_end) tile_tail<S, F, R, T>(a, r, t, t_end - t);
}

// Tokens in blocks whose activations fit in L2 next to the rows being reused.
constexpr int kTokenBlock = 64;

template <class S, class F, int R, int T>
void gemm(const KernelArgs& a, int64_t r0, int64_t r1, int) {
  if (a.n_tokens == 1) return gemv<S, F>(a, r0, r1);
  for (int tb = 0; tb < a.n_tokens; tb += kTokenBlock) {
    const int te = a.n_tokens - tb < kTokenBlock ? a.n_tokens : tb + kTokenBlock;
    int64_t r = r0;
    for (; r + R <= r1; r += R) row_group<S, F, R, T>(a, r, tb, te);
    for (; r < r1; ++r) row_group<S, F, 1, T>(a, r, tb, te);
  }
}

// The kernel table's F32/F16/BF16 entries; {} for other types.
template <class S>
Kernel float_kernel(TensorType type) {
  constexpr int R = S::kFloatRows, T = S::kFloatTokens;
  switch (type) {
    case TensorType::F32: return {gemm<S, FloatRow<S, TensorType::F32, 4>, R, T>, ActLayout::f32};
    case TensorType::F16: return {gemm<S, FloatRow<S, TensorType::F16, 2>, R, T>, ActLayout::f32};
    case TensorType::BF16: return {gemm<S, FloatRow<S, TensorType::BF16, 2>, R, T>, ActLayout::f32};
    default: return {};
  }
}

}  // namespace
}  // namespace troupe::cpu::detail
