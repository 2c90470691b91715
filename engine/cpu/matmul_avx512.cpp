// AVX-512 (F/BW/VL/DQ/VNNI) kernels. Each format unpacks a chunk of one row
// into unsigned 8-bit codes laid out to match the activation layout, then
// dots it with T tokens (vpdpbusd, or maddubs + vpdpwssd where sub-block
// scales are integers), so decoding is paid once per R x T tile.
//
// Only plain code lives here: no standard-library templates, whose out-of-line
// copies compiled with these flags could be picked by the linker for callers
// on CPUs without AVX-512.
#if defined(__x86_64__)
// GCC 12's AVX-512 headers start many intrinsics from _mm512_undefined_*(),
// which it then reports as uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>

#include "engine/cpu/matmul.h"

namespace troupe::cpu::detail {
namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline uint64_t u16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Four f16 block scales `stride` bytes apart.
inline __m128 f16x4(const uint8_t* p, int stride) {
  const uint64_t x = u16_at(p) | u16_at(p + stride) << 16 | u16_at(p + 2 * stride) << 32 | u16_at(p + 3 * stride) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(x)));
}

inline __m512 spread4(__m128 v) {  // 4 lanes each repeated 4 times
  return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                               _mm512_castps128_ps512(v));
}
inline __m512 spread2(__m128 v, int first) {  // lanes first and first+1, each repeated 8 times
  const __m512i lo = _mm512_set1_epi32(first), hi = _mm512_set1_epi32(first + 1);
  return _mm512_permutexvar_ps(_mm512_mask_blend_epi32(0xFF00, lo, hi), _mm512_castps128_ps512(v));
}

// pshufb controls that fill each 128-bit lane with one 16-bit word of the source.
struct alignas(64) Bytes64 {
  int8_t v[64];
};
constexpr Bytes64 words(int w0, int w1, int w2, int w3) {
  Bytes64 r{};
  const int w[4] = {w0, w1, w2, w3};
  for (int lane = 0; lane < 4; ++lane)
    for (int i = 0; i < 8; ++i) {
      r.v[16 * lane + 2 * i] = static_cast<int8_t>(2 * w[lane]);
      r.v[16 * lane + 2 * i + 1] = static_cast<int8_t>(2 * w[lane] + 1);
    }
  return r;
}
// Q4_K/Q5_K codes come out as [sb0|sb2], [sb1|sb3], [sb4|sb6], [sb5|sb7].
constexpr Bytes64 kKScaleSel[4] = {words(0, 0, 2, 2), words(1, 1, 3, 3), words(4, 4, 6, 6), words(5, 5, 7, 7)};
// Q6_K codes of a half: elements 0..63 use scales 0..3, 64..127 scales 4..7.
constexpr Bytes64 kQ6ScaleSel[2] = {words(0, 1, 2, 3), words(4, 5, 6, 7)};

inline __m512i sel(__m512i src, const Bytes64& c) { return _mm512_shuffle_epi8(src, _mm512_load_si512(c.v)); }

inline __m512i nibbles_lo(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
inline __m512i nibbles_hi(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }
// a | (b & c), bytewise.
inline __m512i or_and(__m512i a, __m512i b, __m512i c) { return _mm512_ternarylogic_epi32(a, b, c, 0xF8); }

// ------------------------------------------------------------------ formats
// Each format: kType, kElems (values per chunk), kBytes (bytes per chunk),
// kBlockElems; W = one row's unpacked chunk; load(p); dot(w, act, t, c, acc).

// Q4_0/Q5_0 after unpacking: 128-bit lane k of lo/hi holds block k's values
// 0..15 / 16..31, matching the nib activation layout.
inline void nib_dot(__m512i lo, __m512i hi, __m512 dw, const ActView& a, int t, int64_t c, __m512& acc) {
  const int8_t* q = a.q + t * a.q_stride + c * 128;
  __m512i s = load512(a.corr + t * a.corr_stride + c * 16);
  s = _mm512_dpbusd_epi32(s, lo, load512(q));
  s = _mm512_dpbusd_epi32(s, hi, load512(q + 64));
  const __m512 scale = _mm512_mul_ps(dw, _mm512_loadu_ps(a.dl + t * a.dl_stride + c * 16));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc);
}

inline __m512i four_lanes(const uint8_t* p, int stride) {
  __m512i v = _mm512_castsi128_si512(load128(p));
  v = _mm512_inserti32x4(v, load128(p + stride), 1);
  v = _mm512_inserti32x4(v, load128(p + 2 * stride), 2);
  return _mm512_inserti32x4(v, load128(p + 3 * stride), 3);
}

struct Q4_0x {
  static constexpr TensorType kType = TensorType::Q4_0;
  static constexpr int64_t kElems = 128, kBytes = 72, kBlockElems = 32;
  struct W {
    __m512i lo, hi;
    __m512 dw;
  };
  static W load(const uint8_t* p) {
    const __m512i v = four_lanes(p + 2, 18);
    return {nibbles_lo(v), nibbles_hi(v), spread4(f16x4(p, 18))};
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m512& acc) { nib_dot(w.lo, w.hi, w.dw, a, t, c, acc); }
};

struct Q5_0x {
  static constexpr TensorType kType = TensorType::Q5_0;
  static constexpr int64_t kElems = 128, kBytes = 88, kBlockElems = 32;
  using W = Q4_0x::W;
  static W load(const uint8_t* p) {
    const __m512i v = four_lanes(p + 6, 22);
    // The low 16 bits of each block's qh belong to values 0..15, the high 16 to 16..31.
    const uint64_t bits_lo = u16_at(p + 2) | u16_at(p + 24) << 16 | u16_at(p + 46) << 32 | u16_at(p + 68) << 48;
    const uint64_t bits_hi = u16_at(p + 4) | u16_at(p + 26) << 16 | u16_at(p + 48) << 32 | u16_at(p + 70) << 48;
    const __m512i c16 = _mm512_set1_epi8(16);
    const __m512i lo = nibbles_lo(v), hi = nibbles_hi(v);
    return {_mm512_mask_add_epi8(lo, _cvtu64_mask64(bits_lo), lo, c16),
            _mm512_mask_add_epi8(hi, _cvtu64_mask64(bits_hi), hi, c16), spread4(f16x4(p, 22))};
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m512& acc) { nib_dot(w.lo, w.hi, w.dw, a, t, c, acc); }
};

// Q8_0 weights are signed, so the activations come biased by +128 (unsigned)
// and 128 * sum(w), taken once per row chunk, is subtracted back.
struct Q8_0x {
  static constexpr TensorType kType = TensorType::Q8_0;
  static constexpr int64_t kElems = 128, kBytes = 136, kBlockElems = 32;
  struct W {
    __m512i w[2], neg_bias[2];
    __m512 dw[2];
  };
  static W load(const uint8_t* p) {
    W r;
    const __m512i zero = _mm512_setzero_si512(), c128 = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m128 d = f16x4(p, 34);
    for (int i = 0; i < 2; ++i) {
      const uint8_t* b = p + 68 * i;
      r.w[i] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(b + 2)), load256(b + 36), 1);
      r.neg_bias[i] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, r.w[i]));
      r.dw[i] = spread2(d, 2 * i);
    }
    return r;
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m512& acc) {
    const int8_t* q = a.q + t * a.q_stride + c * 128;
    const float* dl = a.dl + t * a.dl_stride + c * 32;
    for (int i = 0; i < 2; ++i) {
      const __m512i s = _mm512_dpbusd_epi32(w.neg_bias[i], load512(q + 64 * i), w.w[i]);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(w.dw[i], _mm512_loadu_ps(dl + 16 * i)), acc);
    }
  }
};

// Q4_K/Q5_K: 6-bit scales become 16-bit words per 128-bit lane, so maddubs'
// pair sums are scaled and accumulated by one vpdpwssd.
struct KScales {
  __m512i sc[4];
  __m512i mins;  // 8 words in the low 128 bits
};
inline KScales k_scales(const uint8_t* p) {
  const uint32_t u0 = u32_at(p), u1 = u32_at(p + 4), u2 = u32_at(p + 8);
  const uint64_t sc_lo = u0 & 0x3F3F3F3Fu, sc_hi = (u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u);
  const uint64_t mn_lo = u1 & 0x3F3F3F3Fu, mn_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u);
  const __m128i sc = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc_lo | sc_hi << 32)));
  const __m512i all = _mm512_broadcast_i32x4(sc);
  KScales r;
  for (int i = 0; i < 4; ++i) r.sc[i] = sel(all, kKScaleSel[i]);
  r.mins = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn_lo | mn_hi << 32))));
  return r;
}

struct KW {
  __m512i q[4];
  KScales s;
  __m512 d, neg_dmin;
};

inline void k45_dot(const KW& w, const ActView& a, int t, int64_t c, __m512& acc) {
  const int8_t* q = a.q + t * a.q_stride + c * 256;
  __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(w.q[0], load512(q)), w.s.sc[0]);
  for (int i = 1; i < 4; ++i) s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(w.q[i], load512(q + 64 * i)), w.s.sc[i]);
  const __m512i sums = _mm512_zextsi128_si512(load128(a.sums + t * a.sums_stride + c * 8));
  const __m512i m = _mm512_madd_epi16(w.s.mins, sums);
  const __m512 da = _mm512_set1_ps(a.d[t * a.d_stride + c]);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(w.d, da), acc);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(w.neg_dmin, da), acc);
}

struct Q4_Kx {
  static constexpr TensorType kType = TensorType::Q4_K;
  static constexpr int64_t kElems = 256, kBytes = 144, kBlockElems = 256;
  using W = KW;
  static W load(const uint8_t* p) {
    W r;
    r.s = k_scales(p + 4);
    const __m512i z0 = load512(p + 16), z1 = load512(p + 80);
    r.q[0] = nibbles_lo(z0), r.q[1] = nibbles_hi(z0), r.q[2] = nibbles_lo(z1), r.q[3] = nibbles_hi(z1);
    r.d = _mm512_set1_ps(f16_at(p)), r.neg_dmin = _mm512_set1_ps(-f16_at(p + 2));
    return r;
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m512& acc) { k45_dot(w, a, t, c, acc); }
};

struct Q5_Kx {
  static constexpr TensorType kType = TensorType::Q5_K;
  static constexpr int64_t kElems = 256, kBytes = 176, kBlockElems = 256;
  using W = KW;
  static W load(const uint8_t* p) {
    W r;
    r.s = k_scales(p + 4);
    const __m512i z0 = load512(p + 48), z1 = load512(p + 112);
    // Bit j of qh[l] is the fifth bit of sub-block j; [qh | qh >> 2] lines
    // bits 0/2 (then 4/6) up with [sb0|sb2] (then [sb4|sb6]), bits 1/3 with [sb1|sb3].
    const __m256i qh = load256(p + 16);
    const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    const __m512i h4 = _mm512_srli_epi16(h, 4), c16 = _mm512_set1_epi8(16);
    r.q[0] = or_and(nibbles_lo(z0), _mm512_slli_epi16(h, 4), c16);
    r.q[1] = or_and(nibbles_hi(z0), _mm512_slli_epi16(h, 3), c16);
    r.q[2] = or_and(nibbles_lo(z1), _mm512_slli_epi16(h4, 4), c16);
    r.q[3] = or_and(nibbles_hi(z1), _mm512_slli_epi16(h4, 3), c16);
    r.d = _mm512_set1_ps(f16_at(p)), r.neg_dmin = _mm512_set1_ps(-f16_at(p + 2));
    return r;
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m512& acc) { k45_dot(w, a, t, c, acc); }
};

// Q6_K: codes 0..63 with the -32 folded into the integer sum as
// -32 * sum(scale * activation sum per 16), which shares the block's scale.
struct Q6_Kx {
  static constexpr TensorType kType = TensorType::Q6_K;
  static constexpr int64_t kElems = 256, kBytes = 210, kBlockElems = 256;
  struct W {
    __m512i q[4], sc[4], neg32_sc;
    __m512 d;
  };
  static W load(const uint8_t* p) {
    W r;
    const __m512i c30 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = load512(p + 64 * h);
      const __m256i qh = load256(p + 128 + 32 * h);
      const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      r.q[2 * h] = or_and(nibbles_lo(ql), _mm512_slli_epi16(hb, 4), c30);
      r.q[2 * h + 1] = or_and(nibbles_hi(ql), hb, c30);
      const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 192 + 8 * h));
      const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepi8_epi16(sc8));
      r.sc[2 * h] = sel(sc, kQ6ScaleSel[0]);
      r.sc[2 * h + 1] = sel(sc, kQ6ScaleSel[1]);
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(load128(p + 192));
    r.neg32_sc = _mm512_zextsi256_si512(_mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32)));
    r.d = _mm512_set1_ps(f16_at(p + 208));
    return r;
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m512& acc) {
    const int8_t* q = a.q + t * a.q_stride + c * 256;
    __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(w.q[0], load512(q)), w.sc[0]);
    for (int i = 1; i < 4; ++i) s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(w.q[i], load512(q + 64 * i)), w.sc[i]);
    s = _mm512_dpwssd_epi32(s, w.neg32_sc, _mm512_zextsi256_si512(load256(a.sums + t * a.sums_stride + c * 16)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(w.d, _mm512_set1_ps(a.d[t * a.d_stride + c])), acc);
  }
};

template <TensorType kT, int kElemBytes>
struct FloatX {
  static constexpr TensorType kType = kT;
  static constexpr int64_t kElems = 16, kBytes = 16 * kElemBytes, kBlockElems = 1;
  struct W {
    __m512 w;
  };
  static W load(const uint8_t* p) {
    if constexpr (kT == TensorType::F32) return {_mm512_loadu_ps(p)};
    if constexpr (kT == TensorType::F16) return {_mm512_cvtph_ps(load256(p))};
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16))};
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m512& acc) {
    acc = _mm512_fmadd_ps(w.w, _mm512_loadu_ps(a.x + t * a.x_stride + c * 16), acc);
  }
};

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
// stream (interleaving rows measurably defeats the hardware prefetcher), with
// two accumulators to overlap the FMA latency.
template <class F>
void gemv(const KernelArgs& a, int64_t r0, int64_t r1) {
  const int64_t chunks = a.cols / F::kElems;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = a.w + r * a.row_bytes;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 2 <= chunks; c += 2) {
      F::dot(F::load(row + c * F::kBytes), *a.act, 0, c, acc0);
      F::dot(F::load(row + (c + 1) * F::kBytes), *a.act, 0, c + 1, acc1);
    }
    if (c < chunks) F::dot(F::load(row + c * F::kBytes), *a.act, 0, c, acc0);
    a.y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + tail<F>(a, row, 0, chunks);
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
void gemm(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens == 1) return gemv<F>(a, r0, r1);
  for (int tb = 0; tb < a.n_tokens; tb += kTokenBlock) {
    const int te = a.n_tokens - tb < kTokenBlock ? a.n_tokens : tb + kTokenBlock;
    int64_t r = r0;
    for (; r + R <= r1; r += R) row_group<F, R, T>(a, r, tb, te);
    for (; r < r1; ++r) row_group<F, 1, T>(a, r, tb, te);
  }
}

}  // namespace

Kernel avx512_kernel(TensorType type) {
  switch (type) {
    case TensorType::F32: return {gemm<FloatX<TensorType::F32, 4>, 4, 4>, ActLayout::f32};
    case TensorType::F16: return {gemm<FloatX<TensorType::F16, 2>, 4, 4>, ActLayout::f32};
    case TensorType::BF16: return {gemm<FloatX<TensorType::BF16, 2>, 4, 4>, ActLayout::f32};
    case TensorType::Q8_0: return {gemm<Q8_0x, 4, 4>, ActLayout::q8_biased};
    case TensorType::Q4_0: return {gemm<Q4_0x, 4, 4>, ActLayout::nib8};
    case TensorType::Q5_0: return {gemm<Q5_0x, 4, 4>, ActLayout::nib16};
    case TensorType::Q4_K: return {gemm<Q4_Kx, 4, 4>, ActLayout::k_sb32};
    case TensorType::Q5_K: return {gemm<Q5_Kx, 4, 4>, ActLayout::k_sb32};
    case TensorType::Q6_K: return {gemm<Q6_Kx, 4, 4>, ActLayout::k_sb16};
    default: return {};
  }
}

}  // namespace troupe::cpu::detail

#else  // not x86-64: no AVX-512 kernels

#include "engine/cpu/matmul.h"
namespace troupe::cpu::detail {
Kernel avx512_kernel(TensorType) { return {}; }
}  // namespace troupe::cpu::detail
#endif
