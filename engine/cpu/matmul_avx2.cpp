// AVX2 (+FMA, F16C) kernels, for x86 CPUs without AVX-512 VNNI: an R x T
// tile unpacks a row chunk to 8-bit codes once and dots it with T tokens;
// products go through maddubs (u8 x s8 -> s16 pairs) and madd. Products never
// saturate: codes are < 64 and activations in [-127, 127], and Q8_0 uses
// |w| x sign(w)*a where |w| <= 128. One token runs the same per-row
// arithmetic as a tile, so results do not depend on the batch.
//
// The tile GEMM, the float formats and the quantizer's layouts are shared
// with the AVX-512 file (matmul_skeleton.h); this file supplies the AVX2
// intrinsics (Avx2) and the quantized formats.
//
// Only plain code lives here: no standard-library templates, whose out-of-line
// copies compiled with these flags could be picked by the linker for callers
// on CPUs without AVX2.
#if defined(__x86_64__)
#include "engine/cpu/matmul_skeleton.h"
#include "engine/cpu/simd_avx2.h"

namespace troupe::cpu::detail {
namespace {

inline __m256i two_lanes(const uint8_t* lo, const uint8_t* hi) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(load128(lo)), load128(hi), 1);
}

inline __m128 f16x4(const uint8_t* p, int stride) {
  const uint64_t x = u16_at(p) | u16_at(p + stride) << 16 | u16_at(p + 2 * stride) << 32 | u16_at(p + 3 * stride) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(x)));
}
// Lanes `first` and `first + 1` of v, each repeated 4 times.
inline __m256 spread2(__m128 v, int first) {
  const __m256i idx = _mm256_setr_epi32(first, first, first, first, first + 1, first + 1, first + 1, first + 1);
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), idx);
}

inline __m256i ones16() { return _mm256_set1_epi16(1); }

// pshufb control filling the low 128-bit lane with word w0, the high with w1.
inline __m256i word_sel(int w0, int w1) {
  return _mm256_setr_epi8(static_cast<char>(2 * w0), static_cast<char>(2 * w0 + 1), static_cast<char>(2 * w0),
                          static_cast<char>(2 * w0 + 1), static_cast<char>(2 * w0), static_cast<char>(2 * w0 + 1),
                          static_cast<char>(2 * w0), static_cast<char>(2 * w0 + 1), static_cast<char>(2 * w0),
                          static_cast<char>(2 * w0 + 1), static_cast<char>(2 * w0), static_cast<char>(2 * w0 + 1),
                          static_cast<char>(2 * w0), static_cast<char>(2 * w0 + 1), static_cast<char>(2 * w0),
                          static_cast<char>(2 * w0 + 1), static_cast<char>(2 * w1), static_cast<char>(2 * w1 + 1),
                          static_cast<char>(2 * w1), static_cast<char>(2 * w1 + 1), static_cast<char>(2 * w1),
                          static_cast<char>(2 * w1 + 1), static_cast<char>(2 * w1), static_cast<char>(2 * w1 + 1),
                          static_cast<char>(2 * w1), static_cast<char>(2 * w1 + 1), static_cast<char>(2 * w1),
                          static_cast<char>(2 * w1 + 1), static_cast<char>(2 * w1), static_cast<char>(2 * w1 + 1),
                          static_cast<char>(2 * w1), static_cast<char>(2 * w1 + 1));
}

// ------------------------------------------------------------------ formats

struct Q8_0y {
  static constexpr TensorType kType = TensorType::Q8_0;
  static constexpr int64_t kElems = 32, kBytes = 34, kBlockElems = 32;
  struct W {
    __m256i abs_w, w;
    __m256 dw;
  };
  static W load(const uint8_t* p) {
    const __m256i w = load256(p + 2);
    return {_mm256_sign_epi8(w, w), w, _mm256_set1_ps(f16_at(p))};
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m256& acc) {
    const __m256i x = _mm256_sign_epi8(load256(a.q + t * a.q_stride + c * 32), w.w);
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(w.abs_w, x), ones16());
    const __m256 scale = _mm256_mul_ps(w.dw, _mm256_set1_ps(a.d[t * a.d_stride + c]));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc);
  }
};

// Q4_0/Q5_0: pair i of a 4-block chunk unpacks to lo = [block 2i values
// 0..15 | block 2i+1 values 0..15] and hi likewise for values 16..31.
struct NibW {
  __m256i lo[2], hi[2];
  __m256 dw[2];
};
inline void nib_dot(const NibW& w, const ActView& a, int t, int64_t c, __m256& acc) {
  const int8_t* q = a.q + t * a.q_stride + c * 128;
  for (int i = 0; i < 2; ++i) {
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w.lo[i], load256(q + 32 * i)),
                                         _mm256_maddubs_epi16(w.hi[i], load256(q + 64 + 32 * i)));
    const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(s16, ones16()), load256(a.corr + t * a.corr_stride + c * 16 + 8 * i));
    const __m256 scale = _mm256_mul_ps(w.dw[i], _mm256_loadu_ps(a.dl + t * a.dl_stride + c * 16 + 8 * i));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc);
  }
}

struct Q4_0y {
  static constexpr TensorType kType = TensorType::Q4_0;
  static constexpr int64_t kElems = 128, kBytes = 72, kBlockElems = 32;
  using W = NibW;
  static W load(const uint8_t* p) {
    W r;
    const __m128 d = f16x4(p, 18);
    for (int i = 0; i < 2; ++i) {
      const __m256i v = two_lanes(p + 36 * i + 2, p + 36 * i + 20);
      r.lo[i] = nibbles_lo(v), r.hi[i] = nibbles_hi(v), r.dw[i] = spread2(d, 2 * i);
    }
    return r;
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m256& acc) { nib_dot(w, a, t, c, acc); }
};

struct Q5_0y {
  static constexpr TensorType kType = TensorType::Q5_0;
  static constexpr int64_t kElems = 128, kBytes = 88, kBlockElems = 32;
  using W = NibW;
  static W load(const uint8_t* p) {
    W r;
    const __m128 d = f16x4(p, 22);
    const __m256i c16 = _mm256_set1_epi8(16);
    for (int i = 0; i < 2; ++i) {
      const uint8_t* b0 = p + 44 * i;
      const uint8_t* b1 = b0 + 22;
      const uint32_t h0 = u32_at(b0 + 2), h1 = u32_at(b1 + 2);
      const __m256i v = two_lanes(b0 + 6, b1 + 6);
      r.lo[i] = _mm256_or_si256(nibbles_lo(v), bits_to_bytes((h0 & 0xFFFF) | (h1 << 16), c16));
      r.hi[i] = _mm256_or_si256(nibbles_hi(v), bits_to_bytes((h0 >> 16) | (h1 & 0xFFFF0000u), c16));
      r.dw[i] = spread2(d, 2 * i);
    }
    return r;
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m256& acc) { nib_dot(w, a, t, c, acc); }
};

// K-quants: sub-block j's codes in q[j]; 16-bit scales per sub-block (or per
// 16 values for Q6_K) applied by madd.
struct KW {
  __m256i q[8], sc[8];
  __m128i mins;
  __m256 d, neg_dmin;
};

inline void k45_scales(const uint8_t* p, KW& r) {
  const uint32_t u0 = u32_at(p), u1 = u32_at(p + 4), u2 = u32_at(p + 8);
  const uint64_t sc_lo = u0 & 0x3F3F3F3Fu, sc_hi = (u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u);
  const uint64_t mn_lo = u1 & 0x3F3F3F3Fu, mn_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u);
  const __m128i sc = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc_lo | sc_hi << 32)));
  const __m256i all = _mm256_broadcastsi128_si256(sc);
  for (int j = 0; j < 8; ++j) r.sc[j] = _mm256_shuffle_epi8(all, word_sel(j, j));
  r.mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn_lo | mn_hi << 32)));
}

inline void k45_dot(const KW& w, const ActView& a, int t, int64_t c, __m256& acc) {
  const int8_t* q = a.q + t * a.q_stride + c * 256;
  __m256i s = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j)
    s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w.q[j], load256(q + 32 * kSlot[j])), w.sc[j]));
  const __m128i m = _mm_madd_epi16(w.mins, load128(a.sums + t * a.sums_stride + c * 8));
  const __m256 da = _mm256_set1_ps(a.d[t * a.d_stride + c]);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(w.d, da), acc);
  acc = _mm256_fmadd_ps(_mm256_zextps128_ps256(_mm_cvtepi32_ps(m)), _mm256_mul_ps(w.neg_dmin, da), acc);
}

template <bool kBits5>
struct Q45_Ky {
  static constexpr TensorType kType = kBits5 ? TensorType::Q5_K : TensorType::Q4_K;
  static constexpr int64_t kElems = 256, kBytes = kBits5 ? 176 : 144, kBlockElems = 256;
  using W = KW;
  static W load(const uint8_t* p) {
    W r;
    k45_scales(p + 4, r);
    const uint8_t* qs = p + (kBits5 ? 48 : 16);
    for (int g = 0; g < 4; ++g) {
      const __m256i z = load256(qs + 32 * g);
      r.q[2 * g] = nibbles_lo(z), r.q[2 * g + 1] = nibbles_hi(z);
    }
    if constexpr (kBits5) {
      // Bit j of qh[l] -> bit 4 of sub-block j's byte l.
      const __m256i qh = load256(p + 16), c16 = _mm256_set1_epi8(16);
      r.q[0] = _mm256_or_si256(r.q[0], _mm256_and_si256(_mm256_slli_epi16(qh, 4), c16));
      r.q[1] = _mm256_or_si256(r.q[1], _mm256_and_si256(_mm256_slli_epi16(qh, 3), c16));
      r.q[2] = _mm256_or_si256(r.q[2], _mm256_and_si256(_mm256_slli_epi16(qh, 2), c16));
      r.q[3] = _mm256_or_si256(r.q[3], _mm256_and_si256(_mm256_slli_epi16(qh, 1), c16));
      r.q[4] = _mm256_or_si256(r.q[4], _mm256_and_si256(qh, c16));
      r.q[5] = _mm256_or_si256(r.q[5], _mm256_and_si256(_mm256_srli_epi16(qh, 1), c16));
      r.q[6] = _mm256_or_si256(r.q[6], _mm256_and_si256(_mm256_srli_epi16(qh, 2), c16));
      r.q[7] = _mm256_or_si256(r.q[7], _mm256_and_si256(_mm256_srli_epi16(qh, 3), c16));
    }
    r.d = _mm256_set1_ps(f16_at(p)), r.neg_dmin = _mm256_set1_ps(-f16_at(p + 2));
    return r;
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m256& acc) { k45_dot(w, a, t, c, acc); }
};

// Q6_K: sub-block j is quarter j % 4 of half j / 4; codes 0..63, with -32
// folded in as -32 * sum(scale * activation sum per 16).
struct Q6_Ky {
  static constexpr TensorType kType = TensorType::Q6_K;
  static constexpr int64_t kElems = 256, kBytes = 210, kBlockElems = 256;
  struct W {
    __m256i q[8], sc[8], neg32_sc;
    __m256 d;
  };
  static W load(const uint8_t* p) {
    W r;
    const __m256i c30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(p + 64 * h), ql1 = load256(p + 64 * h + 32), qh = load256(p + 128 + 32 * h);
      __m256i* q = r.q + 4 * h;
      q[0] = _mm256_or_si256(nibbles_lo(ql0), _mm256_and_si256(_mm256_slli_epi16(qh, 4), c30));
      q[1] = _mm256_or_si256(nibbles_lo(ql1), _mm256_and_si256(_mm256_slli_epi16(qh, 2), c30));
      q[2] = _mm256_or_si256(nibbles_hi(ql0), _mm256_and_si256(qh, c30));
      q[3] = _mm256_or_si256(nibbles_hi(ql1), _mm256_and_si256(_mm256_srli_epi16(qh, 2), c30));
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(load128(p + 192));
    const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00), hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
    for (int j = 0; j < 8; ++j) r.sc[j] = _mm256_shuffle_epi8(j < 4 ? lo : hi, word_sel((2 * j) % 8, (2 * j + 1) % 8));
    r.neg32_sc = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32));
    r.d = _mm256_set1_ps(f16_at(p + 208));
    return r;
  }
  static void dot(const W& w, const ActView& a, int t, int64_t c, __m256& acc) {
    const int8_t* q = a.q + t * a.q_stride + c * 256;
    __m256i s = _mm256_madd_epi16(w.neg32_sc, load256(a.sums + t * a.sums_stride + c * 16));
    for (int j = 0; j < 8; ++j)
      s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w.q[j], load256(q + 32 * j)), w.sc[j]));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(w.d, _mm256_set1_ps(a.d[t * a.d_stride + c])), acc);
  }
};

// ------------------------------------------------------------------ traits

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V broadcast(float x) { return _mm256_set1_ps(x); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static V load_f32(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static V load_f16(const uint8_t* p) { return _mm256_cvtph_ps(load128(p)); }
  static V load_bf16(const uint8_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static float reduce(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static constexpr int kFloatRows = 2, kFloatTokens = 4;

  static float amax(const float* x, int n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
  }
  struct Codes32 {
    __m256i bytes;  // in order
    int lo_sum, hi_sum;
    __m128i lo() const { return _mm256_castsi256_si128(bytes); }
    __m128i hi() const { return _mm256_extracti128_si256(bytes, 1); }
    int sum_lo() const { return lo_sum; }
    int sum_hi() const { return hi_sum; }
    int sum() const { return lo_sum + hi_sum; }
    void store(int8_t* dst, char flip) const { store256(dst, _mm256_xor_si256(bytes, _mm256_set1_epi8(flip))); }
  };
  static __m256i round_codes(__m256 x, __m256 inv) {
    return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static int hsum_i32(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1)));
  }
  static Codes32 codes32(const float* x, V inv) {
    const __m256i a = round_codes(_mm256_loadu_ps(x), inv), b = round_codes(_mm256_loadu_ps(x + 8), inv);
    const __m256i c = round_codes(_mm256_loadu_ps(x + 16), inv), d = round_codes(_mm256_loadu_ps(x + 24), inv);
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return {_mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
            hsum_i32(_mm256_add_epi32(a, b)), hsum_i32(_mm256_add_epi32(c, d))};
  }
};

}  // namespace

void quantize_avx2(ActLayout layout, const float* x, const ActView& v, int t) { quantize<Avx2>(layout, x, v, t); }

Kernel avx2_kernel(TensorType type) {
  switch (type) {
    case TensorType::Q8_0: return {gemm<Avx2, Q8_0y, 2, 4>, ActLayout::q8};
    case TensorType::Q4_0: return {gemm<Avx2, Q4_0y, 1, 4>, ActLayout::nib8};
    case TensorType::Q5_0: return {gemm<Avx2, Q5_0y, 1, 4>, ActLayout::nib16};
    case TensorType::Q4_K: return {gemm<Avx2, Q45_Ky<false>, 1, 4>, ActLayout::k_sb32};
    case TensorType::Q5_K: return {gemm<Avx2, Q45_Ky<true>, 1, 4>, ActLayout::k_sb32};
    case TensorType::Q6_K: return {gemm<Avx2, Q6_Ky, 1, 4>, ActLayout::k_sb16};
    default: return float_kernel<Avx2>(type);
  }
}

}  // namespace troupe::cpu::detail

#else  // not x86-64: no AVX2 kernels

#include "engine/cpu/matmul.h"
namespace troupe::cpu::detail {
Kernel avx2_kernel(TensorType) { return {}; }
void quantize_avx2(ActLayout layout, const float* x, const ActView& v, int t) { quantize_scalar(layout, x, v, t); }
}  // namespace troupe::cpu::detail
#endif
