// AVX-512 kernels for many tokens (prefill, batched decode). 16 tokens ride in
// the 16 lanes of a zmm: one vpdpbusd multiplies 4 weights of one row,
// broadcast, with 4 activations of each of 16 tokens, so a 32-value unit of
// one row costs 8 vpdpbusd and one scale multiply + FMA for all 16 tokens,
// and each lane ends with one token's dot product: no horizontal sums.
// The arithmetic follows the canonical order of matmul_units_avx512.cpp, so
// results match the few-token kernels bit for bit.
//
// Weights are unpacked to signed codes (value / scale, offsets applied) for 4
// rows at a time, from GGUF order or from the lane layout (ULanes: the lane
// decoders, codes left in lane order), and reused for up to 128 tokens;
// activations arrive packed (ActLayout::packed32 / packed_k, made in
// matmul_act.cpp) as code + 128, and -128 * sum(codes) per unit, taken at
// unpack time, removes the +128.
#if defined(__x86_64__)
#include "engine/cpu/lanes_avx512.h"

#include <algorithm>
#include <cstring>

#include "engine/cpu/isa.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/quants.h"

namespace troupe::cpu::detail {
namespace {

constexpr int kRows = kPackedRows;
// Token groups of 16 a pass over a chunk's rows reuses each unpacked row
// for: up to 8 (128 tokens), as many as keep their packed activations
// within 5/8 of L2. The 1.5B's 8,960-value ffn_down rows take 4 (128 of
// them are 1.1 MB): on a Zen 5 EPYC (1 MiB L2, 2 threads, 512 tokens) Q8_0
// 1536x8960 ran at 382-386 GMAC/s with 8, 416-438 with 4, Q4_K 310-320 and
// 343-389, Q6_K 302-308 and 329-335.
constexpr int64_t kGroupsPerPass = 8;
inline int64_t groups_per_pass(int64_t cols) {
  return std::clamp<int64_t>(l2_data_bytes() * 5 / 8 / (16 * cols), 1, kGroupsPerPass);
}

inline __m512i broadcast4(const int8_t* p) { return _mm512_set1_epi32(static_cast<int>(u32_at(p))); }

inline __m256i nibbles_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
inline __m256i nibbles_hi(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }

// bias[u] = -128 * (sum of the codes of unit u), four 32-value units (or
// eight 16-value units) per pass: pair sums by maddubs/madd, then a hadd tree.
template <int kUnit>
void compute_biases(const int8_t* codes, int64_t units, int32_t* bias) {
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  const __m128i m128 = _mm_set1_epi32(-128);
  constexpr int64_t kPerPass = 128 / kUnit;
  int64_t u = 0;
  for (; u + kPerPass <= units; u += kPerPass) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j)
      v[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, load256(codes + kUnit * u + 32 * j)), ones16);
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m128i lo = _mm256_castsi256_si128(h), hi = _mm256_extracti128_si256(h, 1);
    if constexpr (kUnit == 32) {  // lo + hi: the four units' sums
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bias + u), _mm_mullo_epi32(_mm_add_epi32(lo, hi), m128));
    } else {  // lo: units 0,2,4,6, hi: units 1,3,5,7
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bias + u), _mm_mullo_epi32(_mm_unpacklo_epi32(lo, hi), m128));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bias + u + 4), _mm_mullo_epi32(_mm_unpackhi_epi32(lo, hi), m128));
    }
  }
  for (; u < units; ++u) {
    int32_t sum = 0;
    for (int j = 0; j < kUnit; ++j) sum += codes[kUnit * u + j];
    bias[u] = -128 * sum;
  }
}

// Unpacked rows in the thread's work area: codes of row i at codes + i * cols;
// per unit u (32 values, 16 for Q6_K) of row i at index i * units + u: the
// float scale, -128 * sum of its codes, and (Q4_K/Q5_K) -dmin * min. cols and
// units cover whole groups of 16 units (lane layouts unpack whole groups);
// real_units are the row's own.
struct Unpacked {
  int8_t* codes;
  float* scale;
  int32_t* bias;
  float* minc;
  int64_t cols, units, real_units;
};

inline Unpacked carve(uint8_t* work, int64_t cols, int64_t units, int64_t real_units) {
  Unpacked u{};
  u.cols = cols, u.units = units, u.real_units = real_units;
  u.codes = reinterpret_cast<int8_t*>(work);
  auto* p = reinterpret_cast<float*>(work + kRows * cols);
  u.scale = p;
  u.bias = reinterpret_cast<int32_t*>(p + kRows * units);
  u.minc = p + 2 * kRows * units;
  return u;
}

// One 32-value unit of row i: codes and scale (biases come after, in bulk).
inline void put(const Unpacked& u, int i, int64_t unit, __m256i codes, float scale) {
  store256(u.codes + i * u.cols + 32 * unit, codes);
  u.scale[i * u.units + unit] = scale;
}

struct UQ8_0 {
  static constexpr int kUnit = 32;
  static constexpr bool kMins = false;
  static void unpack(const uint8_t* row, const Unpacked& u, int i) {
    for (int64_t b = 0; b < u.real_units; ++b) put(u, i, b, load256(row + 34 * b + 2), f16_at(row + 34 * b));
  }
};

struct UQ4_0 {
  static constexpr int kUnit = 32;
  static constexpr bool kMins = false;
  static void unpack(const uint8_t* row, const Unpacked& u, int i) {
    for (int64_t b = 0; b < u.real_units; ++b) {
      const uint8_t* p = row + 18 * b;
      const __m256i v = _mm256_broadcastsi128_si256(load128(p + 2));
      const __m256i q = _mm256_blend_epi32(nibbles_lo(v), nibbles_hi(v), 0xF0);
      put(u, i, b, _mm256_sub_epi8(q, _mm256_set1_epi8(8)), f16_at(p));
    }
  }
};

struct UQ5_0 {
  static constexpr int kUnit = 32;
  static constexpr bool kMins = false;
  static void unpack(const uint8_t* row, const Unpacked& u, int i) {
    for (int64_t b = 0; b < u.real_units; ++b) {
      const uint8_t* p = row + 22 * b;
      const __m256i v = _mm256_broadcastsi128_si256(load128(p + 6));
      __m256i q = _mm256_blend_epi32(nibbles_lo(v), nibbles_hi(v), 0xF0);
      q = _mm256_mask_add_epi8(q, _cvtu32_mask32(u32_at(p + 2)), q, _mm256_set1_epi8(16));  // bit k: value k's fifth bit
      put(u, i, b, _mm256_sub_epi8(q, _mm256_set1_epi8(16)), f16_at(p));
    }
  }
};

// Q4_K (kBits5 false) and Q5_K: codes 0..31 as they are; the min goes to minc.
template <bool kBits5>
struct UQ45_K {
  static constexpr int kUnit = 32;
  static constexpr bool kMins = true;
  static void unpack(const uint8_t* row, const Unpacked& u, int i) {
    for (int64_t s = 0; s < u.real_units / 8; ++s) {
      const uint8_t* p = row + (kBits5 ? 176 : 144) * s;
      const float d = f16_at(p), dmin = f16_at(p + 2);
      uint8_t sc[8], mn[8];
      unpack_k_scales(p + 4, sc, mn);
      const uint8_t* qs = p + (kBits5 ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        const __m256i z = load256(qs + 32 * (j / 2));
        __m256i q = j % 2 ? nibbles_hi(z) : nibbles_lo(z);
        if constexpr (kBits5) {  // bit j of qh[l]: fifth bit of value l of sub-block j
          const __mmask32 high = _mm256_test_epi8_mask(load256(p + 16), _mm256_set1_epi8(static_cast<char>(1 << j)));
          q = _mm256_mask_add_epi8(q, high, q, _mm256_set1_epi8(16));
        }
        put(u, i, 8 * s + j, q, d * static_cast<float>(sc[j]));
        u.minc[i * u.units + 8 * s + j] = -dmin * static_cast<float>(mn[j]);
      }
    }
  }
};

// Q6_K: 16-value units, codes q - 32.
struct UQ6_K {
  static constexpr int kUnit = 16;
  static constexpr bool kMins = false;
  static void unpack(const uint8_t* row, const Unpacked& u, int i) {
    for (int64_t s = 0; s < u.real_units / 16; ++s) {
      const uint8_t* p = row + 210 * s;
      const float d = f16_at(p + 208);
      const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
      const __m256i c30 = _mm256_set1_epi8(0x30), c32 = _mm256_set1_epi8(32);
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(p + 64 * h), ql1 = load256(p + 64 * h + 32), qh = load256(p + 128 + 32 * h);
        const __m256i q[4] = {
            _mm256_or_si256(nibbles_lo(ql0), _mm256_and_si256(_mm256_slli_epi16(qh, 4), c30)),
            _mm256_or_si256(nibbles_lo(ql1), _mm256_and_si256(_mm256_slli_epi16(qh, 2), c30)),
            _mm256_or_si256(nibbles_hi(ql0), _mm256_and_si256(qh, c30)),
            _mm256_or_si256(nibbles_hi(ql1), _mm256_and_si256(_mm256_srli_epi16(qh, 2), c30))};
        for (int k = 0; k < 4; ++k) {
          const int64_t unit = 16 * s + 8 * h + 2 * k;  // two 16-value units per 32 codes
          store256(u.codes + i * u.cols + 16 * unit, _mm256_sub_epi8(q[k], c32));
          u.scale[i * u.units + unit] = d * static_cast<float>(sc[unit % 16]);
          u.scale[i * u.units + unit + 1] = d * static_cast<float>(sc[unit % 16 + 1]);
        }
      }
    }
  }
};

// Lane layout (repack.h) back to units in order. v[k] holds piece k (values
// 4k..4k+3) of the group's 16 units, one per 32-bit lane; unpack/unpackhi
// pairs gather each unit's pieces within 128-bit lanes, then 128-bit lanes
// are transposed so that whole units come out in order.
inline void lanes4x4(__m512i a, __m512i b, __m512i c, __m512i d, __m512i out[4]) {
  const __m512i t0 = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), t1 = _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i t2 = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)), t3 = _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2));
  out[0] = _mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
  out[1] = _mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
  out[2] = _mm512_shuffle_i32x4(t2, t3, _MM_SHUFFLE(2, 0, 2, 0));
  out[3] = _mm512_shuffle_i32x4(t2, t3, _MM_SHUFFLE(3, 1, 3, 1));
}
// b[m] 128-bit lane L: pieces 4h..4h+3 of unit 4L + m, from v[4h..4h+3].
inline void gather_pieces(const __m512i v[4], __m512i b[4]) {
  const __m512i a01l = _mm512_unpacklo_epi32(v[0], v[1]), a01h = _mm512_unpackhi_epi32(v[0], v[1]);
  const __m512i a23l = _mm512_unpacklo_epi32(v[2], v[3]), a23h = _mm512_unpackhi_epi32(v[2], v[3]);
  b[0] = _mm512_unpacklo_epi64(a01l, a23l);
  b[1] = _mm512_unpackhi_epi64(a01l, a23l);
  b[2] = _mm512_unpacklo_epi64(a01h, a23h);
  b[3] = _mm512_unpackhi_epi64(a01h, a23h);
}
// 16 units of 32 values (8 pieces) to 512 bytes in order.
inline void store_units32(const __m512i v[8], int8_t* out) {
  __m512i lo[4], hi[4], o[4];
  gather_pieces(v, lo);
  gather_pieces(v + 4, hi);
  for (int h = 0; h < 2; ++h) {  // units 4L + 2h and 4L + 2h + 1 share a 64-byte line
    lanes4x4(lo[2 * h], hi[2 * h], lo[2 * h + 1], hi[2 * h + 1], o);
    for (int L = 0; L < 4; ++L) _mm512_storeu_si512(out + 128 * L + 64 * h, o[L]);
  }
}
// 16 units of 16 values (4 pieces) to 256 bytes in order.
inline void store_units16(const __m512i v[4], int8_t* out) {
  __m512i b[4], o[4];
  gather_pieces(v, b);
  lanes4x4(b[0], b[1], b[2], b[3], o);
  for (int L = 0; L < 4; ++L) _mm512_storeu_si512(out + 64 * L, o[L]);
}

// Lane-layout rows (lanes_avx512.h) to signed codes. With kLaneOrder the
// codes stay in the lane layout, where micro() broadcasts a unit's 4 values
// from 64 bytes apart: no shuffles, but a unit spans 8 cache lines, which
// pays while 4 rows' codes stay in L1 (rows up to a few thousand values);
// wider rows go back to unit order. The unit sums for the biases come from
// the decoded vectors, one vpdpbusd by ones per piece.
template <class F, bool kInLaneOrder>
struct ULanes {
  static constexpr int kUnit = F::kUnitElems;
  static constexpr bool kMins = F::kMins;
  static constexpr bool kLaneOrder = kInLaneOrder;
  static constexpr bool kOwnBiases = true;  // row_block skips compute_biases
  static void unpack(const uint8_t* row, const Unpacked& u, int i) {
    const int64_t whole = u.real_units / 16;
    for (int64_t g = 0; g < whole; ++g) unpack_group<true>(row, u, i, g);
    if (whole < u.units / 16) unpack_group<false>(row, u, i, whole);
  }
  template <bool kWhole>
  static void unpack_group(const uint8_t* row, const Unpacked& u, int i, int64_t g) {
    LaneGroup w;
    F::load(row + F::kGroupStride * g, kWhole ? 16 : static_cast<int>(u.real_units - 16 * g), w);
    int8_t* out = u.codes + i * u.cols + 16 * kUnit * g;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i sum = _mm512_setzero_si512();
    for (int k = 0; k < F::kPieces; ++k) {
      if constexpr (F::kOffset != 0) w.q[k] = _mm512_sub_epi8(w.q[k], _mm512_set1_epi8(static_cast<char>(F::kOffset)));
      sum = _mm512_dpbusd_epi32(sum, ones, w.q[k]);
      if constexpr (kLaneOrder) _mm512_storeu_si512(out + 64 * k, w.q[k]);
    }
    if constexpr (!kLaneOrder) {
      if constexpr (kUnit == 32)
        store_units32(w.q, out);
      else
        store_units16(w.q, out);
    }
    _mm512_storeu_si512(u.bias + i * u.units + 16 * g, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
    _mm512_storeu_ps(u.scale + i * u.units + 16 * g, w.ws);
    if constexpr (kMins) _mm512_storeu_ps(u.minc + i * u.units + 16 * g, w.minc);
  }
};

// Where unit k's codes start in an unpacked row, and how far apart its
// 4-value pieces lie: in unit order, or in the lane layout.
template <class U>
constexpr bool kCodesInLaneOrder = [] {
  if constexpr (requires { U::kLaneOrder; }) return U::kLaneOrder;
  return false;
}();
template <class U>
constexpr int64_t kPieceStride = kCodesInLaneOrder<U> ? 64 : 4;
template <class U>
inline int64_t code_offset(int64_t k) {
  if constexpr (kCodesInLaneOrder<U>) return k / 16 * 16 * U::kUnit + 4 * (k % 16);
  return k * U::kUnit;
}

// R unpacked rows x the 16 tokens of group g in the canonical order
// (matmul_units_avx512.cpp): chain c takes units c, c + 16, ... in turn (one
// accumulator per row live at a time), then the chains meet in tree16's order.
template <class U, int R>
void micro(const ActView& a, int64_t g, const Unpacked& u, __m512 out[R]) {
  constexpr int kVecs = U::kUnit / 4;
  const uint8_t* ac = a.pk + g * a.pk_stride;
  const float* ad = a.pk_d + g * a.pk_d_stride;
  const float* as = U::kMins ? a.pk_dsum + g * a.pk_d_stride : nullptr;
  __m512 chains[16][R];
  for (int c = 0; c < 16; ++c) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t k = c; k < u.real_units; k += 16) {
      __m512i av[kVecs];
      for (int v = 0; v < kVecs; ++v) av[v] = _mm512_load_si512(ac + (k * U::kUnit + 4 * v) * 16);
      const __m512 da = _mm512_load_ps(ad + (k * U::kUnit / 32) * 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int8_t* code = u.codes + r * u.cols + code_offset<U>(k);
        // Two chains of vpdpbusd halve the latency each row waits on.
        __m512i s0 = _mm512_set1_epi32(u.bias[r * u.units + k]), s1 = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int v = 0; v < kVecs; v += 2) {
          s0 = _mm512_dpbusd_epi32(s0, av[v], broadcast4(code + kPieceStride<U> * v));
          s1 = _mm512_dpbusd_epi32(s1, av[v + 1], broadcast4(code + kPieceStride<U> * v + kPieceStride<U>));
        }
        const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(u.scale[r * u.units + k]), da);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), scale, acc[r]);
        if constexpr (U::kMins)
          acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(u.minc[r * u.units + k]), _mm512_load_ps(as + k * 16), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) chains[c][r] = acc[r];
  }
  for (int r = 0; r < R; ++r) {
    __m512 t[8];
    for (int c = 0; c < 8; ++c) t[c] = _mm512_add_ps(chains[c][r], chains[c + 8][r]);
    for (int c = 0; c < 4; ++c) t[c] = _mm512_add_ps(t[c], t[c + 4]);
    for (int c = 0; c < 2; ++c) t[c] = _mm512_add_ps(t[c], t[c + 2]);
    out[r] = _mm512_add_ps(t[0], t[1]);
  }
}

// 4 rows x 16 tokens (acc[i] lane t: row i, token t) to y[t * stride + i]:
// a 4x4 transpose within each 128-bit lane leaves token 4L + m's 4 rows in
// lane L of v[m], one 16-byte store each instead of 64 scalar ones.
inline void store_4rows(const __m512 acc[4], float* y, int64_t stride) {
  const __m512 lo01 = _mm512_unpacklo_ps(acc[0], acc[1]), hi01 = _mm512_unpackhi_ps(acc[0], acc[1]);
  const __m512 lo23 = _mm512_unpacklo_ps(acc[2], acc[3]), hi23 = _mm512_unpackhi_ps(acc[2], acc[3]);
  const __m512 v[4] = {_mm512_shuffle_ps(lo01, lo23, 0x44), _mm512_shuffle_ps(lo01, lo23, 0xEE),
                       _mm512_shuffle_ps(hi01, hi23, 0x44), _mm512_shuffle_ps(hi01, hi23, 0xEE)};
  for (int m = 0; m < 4; ++m) {
    _mm_storeu_ps(y + (m + 0) * stride, _mm512_castps512_ps128(v[m]));
    _mm_storeu_ps(y + (m + 4) * stride, _mm512_extractf32x4_ps(v[m], 1));
    _mm_storeu_ps(y + (m + 8) * stride, _mm512_extractf32x4_ps(v[m], 2));
    _mm_storeu_ps(y + (m + 12) * stride, _mm512_extractf32x4_ps(v[m], 3));
  }
}

template <class U, int R>
void row_block(const KernelArgs& a, int64_t r0, int64_t g0, int64_t g1, const Unpacked& u) {
  for (int i = 0; i < R; ++i) {
    U::unpack(a.w + (r0 + i) * a.row_bytes, u, i);
    if constexpr (!requires { U::kOwnBiases; }) compute_biases<U::kUnit>(u.codes + i * u.cols, u.real_units, u.bias + i * u.units);
  }
  for (int64_t g = g0; g < g1; ++g) {
    __m512 acc[R];
    micro<U, R>(*a.act, g, u, acc);
    const int64_t lanes = a.n_tokens - 16 * g < 16 ? a.n_tokens - 16 * g : 16;
    if constexpr (R == 4) {
      if (lanes == 16) {
        store_4rows(acc, a.y + 16 * g * a.y_stride + r0, a.y_stride);
        continue;
      }
    }
    for (int i = 0; i < R; ++i) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[i]);
      for (int64_t l = 0; l < lanes; ++l) a.y[(16 * g + l) * a.y_stride + r0 + i] = out[l];
    }
  }
}

// The next block's rows, into L2 while this block computes: the unpack
// otherwise meets each row's first lines as misses from memory, with no
// loads in flight during the long compute between blocks for the hardware
// prefetchers to run ahead of (a quarter of a 16-token step's unpack time).
inline void prefetch_rows(const KernelArgs& a, int64_t r0, int64_t r1) {
  const uint8_t* p = a.w + r0 * a.row_bytes;
  for (int64_t i = 0; i < (r1 - r0) * a.row_bytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T1);
}

template <class U>
void gemm_packed(const KernelArgs& a, int64_t r0, int64_t r1, int thread) {
  const int64_t units = a.cols / U::kUnit, padded = (units + 15) / 16 * 16;  // lane layouts unpack whole groups
  const Unpacked u = carve(a.work + thread * a.work_stride, padded * U::kUnit, padded, units);
  const int64_t groups = (a.n_tokens + 15) / 16;
  const int64_t gpp = groups_per_pass(a.cols);
  for (int64_t g0 = 0; g0 < groups; g0 += gpp) {
    const int64_t g1 = groups - g0 < gpp ? groups : g0 + gpp;
    int64_t r = r0;
    for (; r + kRows <= r1; r += kRows) {
      prefetch_rows(a, r + kRows, std::min(r + 2 * kRows, r1));
      row_block<U, kRows>(a, r, g0, g1, u);
    }
    if (r + 2 <= r1) row_block<U, 2>(a, r, g0, g1, u), r += 2;
    if (r < r1) row_block<U, 1>(a, r, g0, g1, u);
  }
}

// Lane order while 4 rows' codes take at most 20 KB of L1 (measured: the
// 0.5B's 4,864-value rows gain, the 1.5B's 8,960-value rows lose 40 %).
template <class F>
void gemm_packed_lanes(const KernelArgs& a, int64_t r0, int64_t r1, int thread) {
  if (a.cols * kRows <= 20 << 10)
    gemm_packed<ULanes<F, true>>(a, r0, r1, thread);
  else
    gemm_packed<ULanes<F, false>>(a, r0, r1, thread);
}

}  // namespace

GemmFn avx512_packed_kernel(TensorType type) {
  switch (type) {
    case TensorType::Q8_0: return gemm_packed<UQ8_0>;
    case TensorType::Q4_0: return gemm_packed<UQ4_0>;
    case TensorType::Q5_0: return gemm_packed<UQ5_0>;
    case TensorType::Q4_K: return gemm_packed<UQ45_K<false>>;
    case TensorType::Q5_K: return gemm_packed<UQ45_K<true>>;
    case TensorType::Q6_K: return gemm_packed<UQ6_K>;
    default: return nullptr;
  }
}

GemmFn avx512_packed_lane_kernel(TensorType type) {
  switch (type) {
    case TensorType::Q4_K: return gemm_packed_lanes<LQ4_K>;
    case TensorType::Q6_K: return gemm_packed_lanes<LQ6_K>;
    case TensorType::Q8_0: return gemm_packed_lanes<LQ_0<TensorType::Q8_0>>;
    case TensorType::Q5_0: return gemm_packed_lanes<LQ_0<TensorType::Q5_0>>;
    case TensorType::Q4_0: return gemm_packed_lanes<LQ_0<TensorType::Q4_0>>;
    default: return nullptr;
  }
}

}  // namespace troupe::cpu::detail

#else  // not x86-64

#include "engine/cpu/matmul.h"
namespace troupe::cpu::detail {
GemmFn avx512_packed_kernel(TensorType) { return nullptr; }
GemmFn avx512_packed_lane_kernel(TensorType) { return nullptr; }
}  // namespace troupe::cpu::detail
#endif
