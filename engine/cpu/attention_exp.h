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

// The bf16 kernels' exponential, of base 2 (for t <= 127): they keep
// scores, the running max and ALiBi's slopes times log2 e, so a probability
// is 2^(s - m), the max's exactly 1. Probabilities are rounded to 8 significant bits right
// after, so 2^t is 2^n times a cubic in f = t - n (n the nearest integer,
// |f| <= 1/2) with its constant term 1: within 1.1e-4 of 2^f (13 bits), in
// seven vector steps a lane where attention_exp takes fifteen. The AVX-512
// kernel repeats these steps (vrndscaleps, vscalefps): the same bits.
constexpr float kExp2Cubic[] = {0.0550085828f, 0.242210373f, 0.693282902f};  // f^3, f^2, f
constexpr float kExp2Low = -200.0f;  // 2^t is a float zero long before: the int below stays defined
constexpr float kLn2 = 0.693147182f;

inline float attention_exp2_bf16(float t) {
  t = t < kExp2Low ? kExp2Low : t;
  const float n = std::nearbyint(t);
  const float f = t - n;
  const float p = std::fma(std::fma(std::fma(kExp2Cubic[0], f, kExp2Cubic[1]), f, kExp2Cubic[2]), f, 1.0f);
  // p 2^n rounded once, as vscalefps does (std::ldexp is a libm call).
  const auto pow2 = [](int e) {
    const int32_t bits = (e + 127) << 23;
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
  };
  const int k = static_cast<int>(n);
  return k >= -126 ? p * pow2(k) : p * pow2(k + 100) * pow2(-100);
}

// The bf16 kernels move a (row, head)'s running max only when a score passes
// it by more than kLazyMaxLog2: most blocks then skip the max and the
// rescale of the sum and the output. A probability stays at most 2^8 (bf16
// and fp32 keep it to the same relative precision), and the max, when it
// moves, is a score's: that score's probability is 1.
constexpr float kLazyMaxLog2 = 8.0f;

}  // namespace
}  // namespace troupe::cpu
