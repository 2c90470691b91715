#pragma once
// IEEE half and bfloat16 <-> float, in portable integer code so the scalar
// path needs no F16C and gives the same bits on every machine. Rounding is to
// nearest-even, as ggml and NumPy do, so quantized files match byte for byte.
#include <cstdint>
#include <cstring>

namespace troupe::cpu {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal halves are mant * 2^-24, which a float holds exactly.
  return bits_float(sign | float_bits(static_cast<float>(mant) * 0x1p-24f));
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00u | ((ax >> 13) & 0x3FFu);  // NaN stays a (quiet) NaN
  if (ax >= 0x477FF000u) return sign | 0x7C00u;                          // rounds past 65504: infinity
  if (ax >= 0x38800000u) {                                               // normal half
    const uint32_t r = (ax - (112u << 23)) + 0xFFFu + ((ax >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  const uint32_t e = ax >> 23;
  if (e < 102) return sign;  // below half the smallest subnormal: zero
  const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // m * 2^(e-150) in units of 2^-24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal, which encodes right
  return static_cast<uint16_t>(sign | q);
}

inline float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

inline float load_fp16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return fp16_to_fp32(h);
}

inline void store_fp16(void* p, float f) {
  const uint16_t h = fp32_to_fp16(f);
  std::memcpy(p, &h, sizeof h);
}

}  // namespace troupe::cpu
