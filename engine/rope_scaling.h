#pragma once
// RoPE scaling: how a model trained at one context reaches a longer one. A
// head's dimension pairs rotate at angle pos * omega_i; scaling changes the
// omega_i and, for YaRN, the magnitude of the rotated vectors.
//
//   none    omega_i = base^(-2i/d)
//   linear  omega_i = base^(-2i/d) / factor        (position interpolation)
//   ntk     omega_i = base'^(-2i/d), base' = base * factor^(d/(d-2))   (NTK-aware)
//   yarn    omega_i = f_i * ((1 - r_i) / factor + r_i), f_i = base^(-2i/d), where
//           the ramp r_i is 1 for pairs that turn more than beta_fast times over the
//           original context and 0 below beta_slow turns (those are interpolated);
//           q and k are scaled by mscale = attn_factor * (1 + 0.1 ln factor), factor > 1
//
// YaRN follows llama.cpp's ggml_rope_yarn (and the YaRN paper): the ramp
// runs over pair index i between floor(c(beta_fast)) and ceil(c(beta_slow)),
// c(b) = d ln(orig_ctx / (2 pi b)) / (2 ln base). Since every angle is linear
// in the position, a key cached at position p moves to p + delta by one more
// rotation of delta * omega_i (what a context shift does to cached keys).
#include <cstdint>
#include <string_view>
#include <vector>

namespace troupe {

enum class RopeScalingType : uint8_t { none, linear, ntk, yarn };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;       // > 0: how many times the original context
  int64_t orig_ctx = 0;      // yarn: the context the model was trained at
  double attn_factor = 1.0;  // yarn: multiplies its magnitude correction
  double beta_fast = 32.0, beta_slow = 1.0;
};

// "none" | "linear" | "ntk" | "yarn"; throws std::invalid_argument naming the choices.
RopeScalingType rope_scaling_from_name(std::string_view name);
const char* rope_scaling_name(RopeScalingType type);
// Throws std::invalid_argument for a factor that is not finite and > 0, a
// yarn without orig_ctx, non-finite betas or attention factor.
void validate(const RopeScaling& s);

// omega_i for the head_dim / 2 pairs (float, as the kernels use them).
std::vector<float> rope_frequencies(int64_t head_dim, double freq_base, const RopeScaling& s);
// The magnitude applied to rotated q and k (1 but for yarn).
float rope_magnitude(const RopeScaling& s);

}  // namespace troupe
