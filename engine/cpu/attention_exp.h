#pragma once
// The exponential of the attention kernels, for x <= 0 (scores less their
// running max): float arithmetic only, one rounding order, so the scalar
// code here and the 16-lane AVX-512 code (attention_avx512.cpp, which
// repeats each step with the same constants) give the same bits. Within 2
// ulp of e^x; probabilities are rounded to half (11 bits) right after.
//
//   x = n ln2 + r, |r| <= ln2/2 (n by the 1.5 * 2^23 rounding trick),
//   e^r by its degree-6 Taylor polynomial in Horner form, times 2^n.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace troupe::cpu {
namespace {

constexpr float kExpLow = -87.0f;  // e^-87 ~ 1.6e-38: the smallest normal range
constexpr float kExpRound = 12582912.0f;  // 1.5 * 2^23
constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693145752f, kLn2Lo = 1.42860677e-06f;
constexpr float kExpPoly[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

inline float attention_exp(float x) {
  x = x < kExpLow ? kExpLow : x;
  const float shifted = std::fma(x, kLog2e, kExpRound);
  const float n = shifted - kExpRound;
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kExpPoly[0];
  for (int i = 1; i < 7; ++i) p = std::fma(p, r, kExpPoly[i]);
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  const int32_t k = bits - 0x4B400000;  // the bits of kExpRound: what is left is n
  const int32_t two_n_bits = (k + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &two_n_bits, 4);
  return p * two_n;
}

}  // namespace
}  // namespace troupe::cpu
