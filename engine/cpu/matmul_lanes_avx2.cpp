// AVX2 kernels for lane-layout weights (repack.h): the layout the AVX-512
// lane kernels read, taken 8 units at a time (each 64-byte piece vector is
// two 32-byte halves, units 0..7 and 8..15 of a group). In the GGUF layout
// every 32-value unit's products land spread over 8 lanes and its scale has
// to be repeated per lane and applied per pair of blocks (matmul_avx2.cpp);
// here 8 units sit side by side, so a unit's exact integer sum ends in its
// own lane after maddubs, a few 16-bit adds and one madd, and its scale is
// one multiply by a vector of 8 unit scales. A token costs 8 maddubs per 8
// units (4 for Q6_K) where the GGUF-layout kernel spends 16 multiplies and a
// float conversion per pair of blocks.
//
// Without VNNI the products go through maddubs (u8 x s8 -> s16 pairs), which
// saturates past 32,767: codes up to 15 (Q4_K, Q4_0) allow 8 of its results
// to be summed in 16 bits, up to 31 (Q5_0) 4, up to 63 (Q6_K) 2. Q8_0's
// codes are stored + 128; they are taken back to signed and multiplied as
// |w| x sign(w) * a (at most 128 * 127 * 2 per pair).
//
// The float arithmetic per row and token is fixed: per half group, the 8
// exact unit sums converted, times (unit scale x activation scale), added
// into one 8-lane accumulator, plus the mins term for Q4_K; the lanes summed
// in Avx2 reduce's order at the end. Every token count runs exactly that,
// so a token's outputs do not depend on the batch. They differ from the
// GGUF-layout AVX2 kernels' in the last bits (another order), not in size.
#if defined(__x86_64__)
#include "engine/cpu/simd_avx2.h"

#include "engine/cpu/lane_drivers.h"

namespace troupe::cpu::detail {
namespace {

// 8 units of a group: their codes as kPieces vectors (32-bit lane j holds 4
// codes of unit j, unsigned, or signed for Q8_0), their scales and (Q4_K)
// their mins.
struct Half {
  __m256i q[8];
  __m256 ws, minc;
};

inline __m256i or_and(__m256i a, __m256i b, __m256i c) { return _mm256_or_si256(a, _mm256_and_si256(b, c)); }

// Lanes [0, n) all ones.
inline __m256i first_lanes(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
inline __m256i first_bytes(int n) {
  return _mm256_cmpgt_epi8(_mm256_set1_epi8(static_cast<char>(n)),
                           _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                            22, 23, 24, 25, 26, 27, 28, 29, 30, 31));
}

// Q4_K: groups of 2 super-blocks (288 bytes): two headers, then 4 vectors
// of 64 bytes, byte 4j+p of vector m holding value 8m+p of unit j in its low
// nibble and 8m+4+p in its high one. Half h is super-block h of the group.
struct AQ4_K {
  static constexpr int kUnitElems = 32, kPieces = 8, kOffset = 0, kSum16 = 8;
  static constexpr int64_t kGroupStride = 288;
  static constexpr bool kMins = true, kSigned = false;
  template <bool kWhole>
  static void load(const uint8_t* g, int, int h, Half& w) {
    for (int m = 0; m < 4; ++m) {
      const __m256i v = load256(g + 32 + 64 * m + 32 * h);
      w.q[2 * m] = nibbles_lo(v);
      w.q[2 * m + 1] = nibbles_hi(v);
    }
    // The header: d, dmin, then 6-bit scales and mins packed in 12 bytes.
    const uint8_t* p = g + 16 * h;
    const uint32_t u0 = u32_at(p + 4), u1 = u32_at(p + 8), u2 = u32_at(p + 12);
    const uint64_t sc = (u0 & 0x3F3F3F3Fu) | static_cast<uint64_t>((u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u)) << 32;
    const uint64_t mn = (u1 & 0x3F3F3F3Fu) | static_cast<uint64_t>(((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u)) << 32;
    const auto to_ps = [](uint64_t b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(b)))); };
    w.ws = _mm256_mul_ps(_mm256_set1_ps(f16_at(p)), to_ps(sc));
    w.minc = _mm256_mul_ps(_mm256_set1_ps(-f16_at(p + 2)), to_ps(mn));
  }
};

// Q6_K: one super-block per group (210 bytes): 2 vectors of low nibbles, one
// of high bit pairs, then the 16 signed scales and d.
struct AQ6_K {
  static constexpr int kUnitElems = 16, kPieces = 4, kOffset = 32, kSum16 = 2;
  static constexpr int64_t kGroupStride = 210;
  static constexpr bool kMins = false, kSigned = false;
  template <bool kWhole>
  static void load(const uint8_t* g, int, int h, Half& w) {
    const __m256i a = load256(g + 32 * h), b = load256(g + 64 + 32 * h), hb = load256(g + 128 + 32 * h);
    const __m256i c30 = _mm256_set1_epi8(0x30);
    w.q[0] = or_and(nibbles_lo(a), _mm256_slli_epi16(hb, 4), c30);
    w.q[1] = or_and(nibbles_hi(a), _mm256_slli_epi16(hb, 2), c30);
    w.q[2] = or_and(nibbles_lo(b), hb, c30);
    w.q[3] = or_and(nibbles_hi(b), _mm256_srli_epi16(hb, 2), c30);
    uint64_t sc;
    std::memcpy(&sc, g + 192 + 8 * h, 8);
    w.ws = _mm256_mul_ps(_mm256_set1_ps(f16_at(g + 208)),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc)))));
    w.minc = _mm256_setzero_ps();
  }
};

// Q8_0, Q5_0, Q4_0: groups of n <= 16 blocks: n f16 scales; Q5_0's fifth
// bits, 4n per piece (bit 4j + p: value 4k + p of unit j); then the codes,
// 4n bytes a piece (Q8_0: 8 pieces of code + 128; Q5_0/Q4_0: 4 vectors of
// nibbles, low piece 2m, high 2m + 1). A last partial group reads the 32
// bytes a half would have (a lane buffer ends with 64 spare bytes) and keeps
// its own.
template <TensorType kType>
struct AQ_0 {
  static constexpr int kUnitElems = 32, kPieces = 8;
  static constexpr int kOffset = kType == TensorType::Q5_0 ? 16 : kType == TensorType::Q4_0 ? 8 : 0;
  static constexpr int kSum16 = kType == TensorType::Q8_0 ? 1 : kType == TensorType::Q5_0 ? 4 : 8;
  static constexpr int64_t kBlockBytes = kType == TensorType::Q8_0 ? 34 : kType == TensorType::Q5_0 ? 22 : 18;
  static constexpr int64_t kGroupStride = 16 * kBlockBytes;
  static constexpr bool kMins = false, kSigned = kType == TensorType::Q8_0;
  template <bool kWhole>
  static void load(const uint8_t* g, int n, int h, Half& w) {
    const int units = kWhole ? 8 : (n - 8 * h < 8 ? n - 8 * h : 8);
    const __m256i keep = kWhole ? _mm256_set1_epi8(-1) : first_bytes(4 * units);
    const auto piece = [&](const uint8_t* p) { return _mm256_and_si256(load256(p + 32 * h), keep); };
    __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * h));
    if constexpr (!kWhole) scales = _mm_and_si128(scales, _mm_cmpgt_epi16(_mm_set1_epi16(static_cast<short>(units)),
                                                                           _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7)));
    w.ws = _mm256_cvtph_ps(scales);
    w.minc = _mm256_setzero_ps();
    if constexpr (kType == TensorType::Q8_0) {
      for (int k = 0; k < 8; ++k) w.q[k] = _mm256_xor_si256(piece(g + 2 * n + 4 * n * k), _mm256_and_si256(keep, _mm256_set1_epi8(static_cast<char>(0x80))));
    } else {
      const uint8_t* v = g + (kType == TensorType::Q5_0 ? 6 : 2) * n;
      for (int m = 0; m < 4; ++m) {
        const __m256i z = piece(v + 4 * n * m);
        w.q[2 * m] = nibbles_lo(z);
        w.q[2 * m + 1] = nibbles_hi(z);
      }
      if constexpr (kType == TensorType::Q5_0) {
        const __m256i c16 = _mm256_set1_epi8(16);
        for (int k = 0; k < 8; ++k) {
          const int first = 4 * n * k + 32 * h;
          uint64_t bits;
          std::memcpy(&bits, g + 2 * n + first / 8, 8);
          uint32_t piece_bits = static_cast<uint32_t>(bits >> (first % 8));
          if constexpr (!kWhole) piece_bits &= units == 8 ? ~0u : (1u << (4 * units)) - 1;
          w.q[k] = _mm256_or_si256(w.q[k], bits_to_bytes(piece_bits, c16));
        }
      }
    }
  }
};

template <class F>
constexpr int kShift = F::kOffset == 32 ? 5 : F::kOffset == 16 ? 4 : F::kOffset == 8 ? 3 : 0;

// The exact integer sums of 8 units with one token: (code - kOffset) times
// the activation codes; the offset enters as -kOffset * (the unit's
// activation code sum). Integer sums are exact, so their order changes no bit.
template <class F, bool kWhole>
inline __m256i unit_sums(const Half& w, const int8_t* lq, const int32_t* lsum, __m256i valid) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s = _mm256_setzero_si256();
  if constexpr (F::kOffset != 0) {
    const __m256i sums = kWhole ? load256(lsum) : _mm256_maskload_epi32(lsum, valid);
    s = _mm256_sub_epi32(s, _mm256_slli_epi32(sums, kShift<F>));
  }
  for (int k = 0; k < F::kPieces; k += F::kSum16) {
    __m256i s16 = _mm256_setzero_si256();
    for (int i = k; i < k + F::kSum16; ++i) {
      const __m256i a = load256(lq + 64 * i);
      // Q8_0: |w| is taken again per token; held beside w it would need 16
      // registers across the token loop, which AVX2 does not have.
      if constexpr (F::kSigned)
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_abs_epi8(w.q[i]), _mm256_sign_epi8(a, w.q[i])));
      else
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w.q[i], a));
    }
    s = _mm256_add_epi32(s, _mm256_madd_epi16(s16, ones));
  }
  return s;
}

inline float reduce8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Groups [g0, g1) of row r for tokens t0..t0+T-1, half group by half
// group, added into acc (which starts from zero at g0 = 0): each half's
// codes are decoded once for the T tokens.
template <class F, int T, class Acc>
__attribute__((always_inline)) inline void row_groups(const KernelArgs& a, int64_t r, int t0, int64_t g0, int64_t g1,
                                                      Acc* acc_io) {
  const ActView& act = *a.act;
  const uint8_t* row = a.w + r * a.row_bytes;
  const int64_t units = a.cols / F::kUnitElems;
  const int64_t lq_s = act.lq_stride, ls_s = act.lsum_stride;
  const int64_t du_s = act.du ? act.du_stride : act.d_stride;
  const int8_t* lq = act.lq + t0 * lq_s;
  const int32_t* lsum = F::kOffset ? act.lsum + t0 * ls_s : nullptr;
  const float* du = act.du ? act.du + t0 * du_s : act.d + t0 * du_s;
  const float* dsum = F::kMins ? act.dsum + t0 * du_s : nullptr;
  // Stores the compiler would otherwise make a rep stos of (a tenth of the
  // kernel's time at 16 tokens).
  __m256 acc[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc[t] = g0 == 0 ? _mm256_setzero_ps() : acc_io[t];
  // Units [u, u + 8) of group g, which holds n units.
  const auto half = [&]<bool kWhole>(int64_t g, int n, int h) __attribute__((always_inline)) {
    const int64_t u = 16 * g + 8 * h;
    const __m256i valid = kWhole ? _mm256_set1_epi32(-1) : first_lanes(n - 8 * h);
    Half w;
    F::template load<kWhole>(row + F::kGroupStride * g, n, h, w);
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) {
      const __m256i s = unit_sums<F, kWhole>(w, lq + t * lq_s + 16 * F::kUnitElems * g + 32 * h,
                                             F::kOffset ? lsum + t * ls_s + u : nullptr, valid);
      const __m256 d = kWhole ? _mm256_loadu_ps(du + t * du_s + u) : _mm256_maskload_ps(du + t * du_s + u, valid);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(w.ws, d), acc[t]);
      if constexpr (F::kMins) acc[t] = _mm256_fmadd_ps(w.minc, _mm256_loadu_ps(dsum + t * du_s + u), acc[t]);
    }
  };
  const int64_t whole = std::min(g1, units / 16);
  for (int64_t g = g0; g < whole; ++g) {
    half.template operator()<true>(g, 16, 0);
    half.template operator()<true>(g, 16, 1);
  }
  if (const int n = static_cast<int>(units - 16 * whole); whole < g1 && n > 0) {
    // Q4_K ends in a whole half (an odd super-block); Q6_K in whole groups.
    if constexpr (F::kMins) {
      half.template operator()<true>(whole, n, 0);
    } else {
      half.template operator()<false>(whole, n, 0);
      if (n > 8) half.template operator()<false>(whole, n, 1);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc_io[t] = acc[t];
}

template <int T, class Acc>
void store_row(const KernelArgs& a, int64_t r, int t0, const Acc* acc) {
  for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.y_stride + r] = reduce8(acc[t]);
}

// Tokens in blocks over all the rows: enough to share each half group's
// decoding, few enough that the block's activations (about 1.25 bytes a
// value) stay near L1 as the rows stream by. On Zen 3 16 tokens were best
// for 896-value rows, 8 for 1,536 and 4,864 (Q4_K 8960x1536 at 512 tokens:
// 76 GMAC/s a thread, Q5_0 4864x896 62, Q6_K 896x4864 48).
template <class F>
void gemm_lanes(const KernelArgs& a, int64_t r0, int64_t r1, int) {
  if (a.cols <= 1024)
    token_blocks<F, 16, __m256>(a, r0, r1);
  else if (a.cols <= 6144)
    token_blocks<F, 8, __m256>(a, r0, r1);
  else
    token_blocks<F, 4, __m256>(a, r0, r1);
}

}  // namespace

Kernel avx2_lane_kernel(TensorType type) {
  switch (type) {
    case TensorType::Q4_K: return {gemm_lanes<AQ4_K>, ActLayout::lanes32};
    case TensorType::Q6_K: return {gemm_lanes<AQ6_K>, ActLayout::lanes16};
    case TensorType::Q8_0: return {gemm_lanes<AQ_0<TensorType::Q8_0>>, ActLayout::lanes_b32};
    case TensorType::Q5_0: return {gemm_lanes<AQ_0<TensorType::Q5_0>>, ActLayout::lanes_b32};
    case TensorType::Q4_0: return {gemm_lanes<AQ_0<TensorType::Q4_0>>, ActLayout::lanes_b32};
    default: return {};
  }
}

}  // namespace troupe::cpu::detail

#else  // not x86-64

#include "engine/cpu/matmul.h"
namespace troupe::cpu::detail {
Kernel avx2_lane_kernel(TensorType) { return {}; }
}  // namespace troupe::cpu::detail
#endif
