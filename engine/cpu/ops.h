#pragma once
// Element-wise and row-wise kernels of the transformer block. Each is a verb on
// plain float arrays; the loops are written for the compiler to vectorize and
// are cloned per instruction set (see ops.cpp).
#include <cstdint>
#include <span>

#include "engine/model_config.h"

namespace troupe::cpu {

inline constexpr float kGeluTwiceSqrt2OverPi = 1.5957691216057308f;  // 2 sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

// out = x / rms(x) * weight
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);
// out = (x - mean) / sqrt(var + eps) * weight + bias (bloom's and mpt's
// LayerNorm; bias may be null; sums in double, as ggml's norm)
void layernorm(const float* x, const float* weight, const float* bias, int64_t n, float eps, float* out);
// x += y
void add(float* x, const float* y, int64_t n);
// gate = silu(gate) * up
void silu_mul(float* gate, const float* up, int64_t n);
// gate = gelu(gate) * up, GELU's tanh form: x / (1 + e^(-2u)) with
// u = sqrt(2/pi) (x + 0.044715 x^3), which is 0.5 x (1 + tanh u) exactly.
void gelu_mul(float* gate, const float* up, int64_t n);
// x = gelu(x), the same function without a gate (bloom's feed-forward)
void gelu(float* x, int64_t n);
// In place; returns nothing, the row sums to 1.
void softmax(float* x, int64_t n);
// Index of the first largest of x[0..n), n >= 1: std::max_element's answer,
// NaNs aside, vectorized.
int64_t argmax(const float* x, int64_t n);
namespace avx512 {
// e^x correctly rounded to float (libm's expf but for rare last-bit cases),
// 16 at a time.
void exp_shifted(float* x, int64_t n, float shift);  // x[i] = e^(x[i] - shift)
void silu_mul(float* gate, const float* up, int64_t n);
void gelu_mul(float* gate, const float* up, int64_t n);
void gelu(float* x, int64_t n);
}  // namespace avx512

// Rotary position embedding: the angle per position of each head dim pair
// (engine/rope_scaling.h), and the magnitude YaRN scales rotated vectors by.
class Rope {
 public:
  Rope(int64_t head_dim, std::span<const float> frequencies, float magnitude, RopeOrder order);
  // Rotating n_heads consecutive heads of head_dim values to position pos
  // is two parts, because a row's position serves many calls (a step's
  // queries and keys in every layer): the head_dim / 2 cosines and sines of
  // pos (magnitude included), then the rotation by them.
  void angles(int64_t pos, float* cos_t, float* sin_t) const { angles(pos, magnitude_, cos_t, sin_t); }
  void rotate(float* heads, int64_t n_heads, const float* cos_t, const float* sin_t) const;
  // Rotates them on by delta positions (a cached key moving in a context
  // shift): the rotation alone, no magnitude.
  void shift(float* heads, int64_t n_heads, int64_t delta) const { turn(heads, n_heads, delta, 1.0f); }
  int64_t half_dim() const { return head_dim_ / 2; }

 private:
  void turn(float* heads, int64_t n_heads, int64_t pos, float magnitude) const;
  void angles(int64_t pos, float magnitude, float* cos_t, float* sin_t) const;
  int64_t head_dim_;
  float magnitude_;
  RopeOrder order_;
  float freq_[512];  // head_dim / 2 entries; head_dim <= 1024
};

}  // namespace troupe::cpu
