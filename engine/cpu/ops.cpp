#include "engine/cpu/ops.h"

#include <cmath>
#include <stdexcept>

#include "engine/cpu/isa.h"

// Function multi-versioning: the loader picks the widest clone this CPU runs.
// Not under a sanitizer: clang's resolvers then run before the runtime has
// read CPUID and chose the AVX-512 clone on an AVX2-only CPU (SIGILL in the
// clang ASan build); gcc says __SANITIZE_ADDRESS__, clang __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define TROUPE_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TROUPE_SANITIZED 1
#endif
#if defined(__x86_64__) && !defined(TROUPE_SANITIZED)
#define TROUPE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TROUPE_CLONES
#endif

namespace troupe::cpu {

TROUPE_CLONES void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void layernorm(const float* x, const float* weight, const float* bias, int64_t n, float eps, float* out) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - mean;
    sq += static_cast<double>(d * d);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(sq / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - mean) * scale * weight[i] + (bias ? bias[i] : 0.0f);
}

TROUPE_CLONES void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

namespace {

// Index reductions (max, argmax) run in kLanes interleaved lanes, the shape
// of a vector; they are exact, so any order gives the same answer.
constexpr int64_t kLanes = 16;

}  // namespace

void silu_mul(float* gate, const float* up, int64_t n) {
  if (active_isa() == Isa::avx512) return avx512::silu_mul(gate, up, n);
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

namespace {
float gelu_of(float x) {
  const float u2 = kGeluTwiceSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return x / (1.0f + std::exp(-u2));
}
}  // namespace

void gelu_mul(float* gate, const float* up, int64_t n) {
  if (active_isa() == Isa::avx512) return avx512::gelu_mul(gate, up, n);
  for (int64_t i = 0; i < n; ++i) gate[i] = gelu_of(gate[i]) * up[i];
}

void gelu(float* x, int64_t n) {
  if (active_isa() == Isa::avx512) return avx512::gelu(x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = gelu_of(x[i]);
}

TROUPE_CLONES static float max_of(const float* x, int64_t n) {
  const int64_t whole = n / kLanes * kLanes;
  float lane[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lane[j] = x[0];
  for (int64_t i = 0; i < whole; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  float max = x[0];
  for (int64_t i = whole; i < n; ++i) max = x[i] > max ? x[i] : max;
  for (int64_t j = 0; j < kLanes; ++j) max = lane[j] > max ? lane[j] : max;
  return max;
}

void softmax(float* x, int64_t n) {
  const float max = max_of(x, n);
  if (active_isa() == Isa::avx512) {
    avx512::exp_shifted(x, n, max);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - max);
  }
  // In order, one float add at a time: the sum's rounding is part of the
  // result's bits (ops_avx512.cpp says why they matter).
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

TROUPE_CLONES int64_t argmax(const float* x, int64_t n) {
  // The maximum first (order-free, so lanes may hold it), then the first
  // block of kLanes that holds it, then its place there.
  const float max = max_of(x, n);
  const int64_t whole = n / kLanes * kLanes;
  int64_t i = 0;
  for (; i < whole; i += kLanes) {
    int hit = 0;
    for (int64_t j = 0; j < kLanes; ++j) hit |= x[i + j] == max;
    if (hit) break;
  }
  for (; i < n; ++i)
    if (x[i] == max) return i;
  return 0;  // x[0] is NaN: as std::max_element, which never moves past it
}

Rope::Rope(int64_t head_dim, std::span<const float> frequencies, float magnitude, RopeOrder order)
    : head_dim_(head_dim), magnitude_(magnitude), order_(order) {
  if (head_dim <= 0 || head_dim > 1024 || head_dim % 2 || static_cast<int64_t>(frequencies.size()) != head_dim / 2)
    throw std::invalid_argument("unsupported RoPE head dimension");
  for (int64_t i = 0; i < head_dim / 2; ++i) freq_[i] = frequencies[static_cast<size_t>(i)];
}

void Rope::angles(int64_t pos, float magnitude, float* cos_t, float* sin_t) const {
  const float p = static_cast<float>(pos);
  for (int64_t i = 0; i < head_dim_ / 2; ++i) {
    const float theta = p * freq_[i];
    cos_t[i] = std::cos(theta);
    sin_t[i] = std::sin(theta);
    if (magnitude != 1.0f) cos_t[i] *= magnitude, sin_t[i] *= magnitude;
  }
}

void Rope::rotate(float* heads, int64_t n_heads, const float* cos_t, const float* sin_t) const {
  const int64_t half = head_dim_ / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = heads + h * head_dim_;
    for (int64_t i = 0; i < half; ++i) {
      // halves pairs (i, i + d/2); adjacent pairs (2i, 2i + 1)
      const int64_t a = order_ == RopeOrder::halves ? i : 2 * i;
      const int64_t b = order_ == RopeOrder::halves ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cos_t[i] - x1 * sin_t[i];
      v[b] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}

void Rope::turn(float* heads, int64_t n_heads, int64_t pos, float magnitude) const {
  float cos_t[512], sin_t[512];
  angles(pos, magnitude, cos_t, sin_t);
  rotate(heads, n_heads, cos_t, sin_t);
}

}  // namespace troupe::cpu
