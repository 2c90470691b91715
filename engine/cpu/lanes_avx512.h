#pragma once
// Decoders of the lane layout (repack.h), shared by the few-token lane
// kernels (matmul_lanes_avx512.cpp) and the many-token ones, which unpack
// lane rows back to unit order (matmul_packed_avx512.cpp). AVX-512 files only.
//
// Each decoder reads one group of up to 16 units, at row + kGroupStride * g,
// into kPieces vectors whose 32-bit lane j holds 4 codes of unit j (piece k:
// values 4k..4k+3), unsigned, a unit's true code being code - kOffset, plus
// the units' scales (ws) and, for Q4_K, their mins (minc). Lanes past the
// group's units are zero.
#include "engine/cpu/simd_avx512.h"
#include "engine/tensor_type.h"

namespace troupe::cpu::detail {
namespace {

struct LaneGroup {
  __m512i q[8];
  __m512 ws, minc;
};

inline __mmask16 first_units(int n) { return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1); }
inline __mmask64 first_bytes(int n) { return n >= 64 ? ~0ULL : (1ULL << n) - 1; }

// 4n bytes of a group's piece vector: whole groups load in two halves (see
// load512_split); a last partial group loads the same 64 bytes (a lane
// buffer ends with 64 spare ones, repack.cpp) and keeps its 4n. A masked
// byte load there took half of a 896-wide Q8_0 decode's samples on Zen 5.
inline __m512i piece(const uint8_t* p, int n) {
  return n == 16 ? load512_split(p) : _mm512_maskz_mov_epi8(first_bytes(4 * n), load512_split(p));
}

// Q4_K: groups of 2 super-blocks (288 bytes, padded): headers, then 4
// vectors of nibbles; scales d * sc, mins -dmin * m.
struct LQ4_K {
  static constexpr int kUnitElems = 32, kPieces = 8, kOffset = 0;
  static constexpr int64_t kGroupStride = 288;
  static constexpr bool kMins = true;
  static void load(const uint8_t* g, int n, LaneGroup& w) {
    for (int m = 0; m < 4; ++m) {
      const __m512i v = load512_split(g + 32 + 64 * m);
      w.q[2 * m] = nibbles_lo(v);
      w.q[2 * m + 1] = nibbles_hi(v);
    }
    // A missing second super-block gives +0 scales and mins, as in the GGUF-layout kernel.
    k_scales_mins(g, n > 8 ? g + 16 : nullptr, w.ws, w.minc);
  }
};

// Q6_K: one super-block per group (210 bytes): 2 vectors of low nibbles, one
// of high bit pairs, then the signed scales and d.
struct LQ6_K {
  static constexpr int kUnitElems = 16, kPieces = 4, kOffset = 32;
  static constexpr int64_t kGroupStride = 210;
  static constexpr bool kMins = false;
  static void load(const uint8_t* g, int, LaneGroup& w) {
    const __m512i a = load512_split(g), b = load512_split(g + 64), h = load512_split(g + 128);
    const __m512i c30 = _mm512_set1_epi8(0x30);
    w.q[0] = or_and(nibbles_lo(a), _mm512_slli_epi16(h, 4), c30);
    w.q[1] = or_and(nibbles_hi(a), _mm512_slli_epi16(h, 2), c30);
    w.q[2] = or_and(nibbles_lo(b), h, c30);
    w.q[3] = or_and(nibbles_hi(b), _mm512_srli_epi16(h, 2), c30);
    w.ws = _mm512_mul_ps(_mm512_set1_ps(f16_at(g + 208)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(g + 192))));
    w.minc = _mm512_setzero_ps();
  }
};

// Q8_0, Q5_0, Q4_0: groups of 16 blocks (the last may hold fewer, n), the
// row's bytes unchanged in number: n f16 scales; for Q5_0 then the fifth
// bits, 4n per piece, piece k from bit 4n * k (bit 4j + p: value 4k + p of
// unit j); then the pieces: Q8_0 8 vectors of code + 128, Q5_0/Q4_0 4
// vectors of nibbles (low: piece 2m, high: piece 2m + 1), 4n bytes each.
template <TensorType kType>
struct LQ_0 {
  static constexpr int kUnitElems = 32, kPieces = 8;
  static constexpr int kOffset = kType == TensorType::Q8_0 ? 128 : kType == TensorType::Q5_0 ? 16 : 8;
  static constexpr int64_t kBlockBytes = kType == TensorType::Q8_0 ? 34 : kType == TensorType::Q5_0 ? 22 : 18;
  static constexpr int64_t kGroupStride = 16 * kBlockBytes;
  static constexpr bool kMins = false;
  static void load(const uint8_t* g, int n, LaneGroup& w) {
    w.ws = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_units(n), g));
    w.minc = _mm512_setzero_ps();
    if constexpr (kType == TensorType::Q8_0) {
      for (int k = 0; k < 8; ++k) w.q[k] = piece(g + 2 * n + 4 * n * k, n);
    } else {
      const uint8_t* v = g + (kType == TensorType::Q5_0 ? 6 : 2) * n;
      for (int m = 0; m < 4; ++m) {
        const __m512i z = piece(v + 4 * n * m, n);
        w.q[2 * m] = nibbles_lo(z);
        w.q[2 * m + 1] = nibbles_hi(z);
      }
      if constexpr (kType == TensorType::Q5_0) {
        // 8 bytes from the piece's first bit stay inside the group (the
        // nibbles follow the bits).
        const uint8_t* bits = g + 2 * n;
        const __m512i c16 = _mm512_set1_epi8(16);
        if (n == 16) {
          // Whole groups: piece k's 64 bits start on byte 8k.
          for (int k = 0; k < 8; ++k) {
            uint64_t m;
            std::memcpy(&m, bits + 8 * k, 8);
            w.q[k] = _mm512_mask_add_epi8(w.q[k], _cvtu64_mask64(m), w.q[k], c16);
          }
          return;
        }
        for (int k = 0; k < 8; ++k) {
          const int first = 4 * n * k;
          uint64_t m = 0;
          std::memcpy(&m, bits + first / 8, 8);
          m = (m >> (first % 8)) & first_bytes(4 * n);
          w.q[k] = _mm512_mask_add_epi8(w.q[k], _cvtu64_mask64(m), w.q[k], c16);
        }
      }
    }
  }
};

}  // namespace
}  // namespace troupe::cpu::detail
