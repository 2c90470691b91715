// The exponentials of silu_mul and softmax, 16 floats at a time.
//
// They return the correctly rounded float, which is libm's expf but for the
// 0.05 % of values glibc rounds the other way, not a cheaper approximation:
// a last-bit change in one activation can move a later 8-bit activation
// code, and on Qwen2.5-0.5B a 1-ulp exponential moved logits by up to 0.3
// (docs/DECISIONS.md, Engine; docs/TESTING.md, the llama.cpp oracle).
//
// In double: x = n ln2 + r with |r| <= ln2 / 2, e^r by its degree-11 Taylor
// polynomial (truncation 7e-15 relative, far below float's half ulp), 2^n
// through the exponent bits, then one rounding to float.
#include <cmath>

#include "engine/cpu/ops.h"
#include "engine/cpu/simd_loads.h"

namespace troupe::cpu::avx512 {
namespace {

__m512d exp_pd(__m512d x) {
  const __m512d round = _mm512_set1_pd(6755399441055744.0);  // 1.5 * 2^52: adding it rounds to an integer
  const __m512d shifted = _mm512_fmadd_pd(x, _mm512_set1_pd(1.4426950408889634), round);
  const __m512d n = _mm512_sub_pd(shifted, round);
  __m512d r = _mm512_fmadd_pd(n, _mm512_set1_pd(-0.6931471805599453), x);  // ln 2, then its remainder
  r = _mm512_fmadd_pd(n, _mm512_set1_pd(-2.3190468138462996e-17), r);
  constexpr double kInvFactorial[] = {1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
                                      1.0 / 120,     1.0 / 24,     1.0 / 6,     0.5,        1.0, 1.0};
  __m512d p = _mm512_set1_pd(1.0 / 39916800);
  for (double c : kInvFactorial) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c));
  // n sits in the low bits of `shifted`; 2^n is n + 1023 in the exponent field.
  const __m512i k = _mm512_sub_epi64(_mm512_castpd_si512(shifted), _mm512_castpd_si512(round));
  const __m512i two_n = _mm512_slli_epi64(_mm512_add_epi64(k, _mm512_set1_epi64(1023)), 52);
  return _mm512_mul_pd(p, _mm512_castsi512_pd(two_n));
}

// e^x for 16 floats. Clamped first: e^-104 rounds to 0 in float, e^89 to
// inf, so the ends come out as expf's; NaN maps to the low end.
__m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m256 lo = _mm512_cvtpd_ps(exp_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x))));
  const __m256 hi = _mm512_cvtpd_ps(exp_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

__mmask16 tail_mask(int64_t left) { return static_cast<__mmask16>((1u << left) - 1); }

// gate[i] = step(gate[i], up[i]), 16 at a time, the tail masked.
template <typename Step>
void gated(float* gate, const float* up, int64_t n, const Step& step) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(gate + i, step(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(gate + i, m, step(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace

void exp_shifted(float* x, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), s)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  // gate / (1 + e^-gate) * up, each step rounded to float as the scalar path does.
  const __m512 one = _mm512_set1_ps(1.0f);
  const auto step = [&](__m512 g, __m512 u) {
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g)))), u);
  };
  gated(gate, up, n, step);
}

namespace {
// As the scalar path: u2 = c (x + a x^3), then x / (1 + e^-u2).
__m512 gelu16(__m512 x) {
  const __m512 c = _mm512_set1_ps(kGeluTwiceSqrt2OverPi), a = _mm512_set1_ps(kGeluCubic);
  const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(a, x), x), x);
  const __m512 u2 = _mm512_mul_ps(c, _mm512_add_ps(x, cube));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), u2))));
}
}  // namespace

void gelu_mul(float* gate, const float* up, int64_t n) {
  gated(gate, up, n, [](__m512 g, __m512 u) { return _mm512_mul_ps(gelu16(g), u); });
}

void gelu(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace troupe::cpu::avx512
