#include "engine/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace troupe {

RopeScalingType rope_scaling_from_name(std::string_view name) {
  if (name == "none") return RopeScalingType::none;
  if (name == "linear") return RopeScalingType::linear;
  if (name == "ntk") return RopeScalingType::ntk;
  if (name == "yarn") return RopeScalingType::yarn;
  throw std::invalid_argument("unknown RoPE scaling '" + std::string(name) + "' (none, linear, ntk, yarn)");
}

const char* rope_scaling_name(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::none: return "none";
    case RopeScalingType::linear: return "linear";
    case RopeScalingType::ntk: return "ntk";
    case RopeScalingType::yarn: return "yarn";
  }
  return "?";
}

void validate(const RopeScaling& s) {
  if (!std::isfinite(s.factor) || s.factor <= 0)
    throw std::invalid_argument("RoPE scaling factor " + std::to_string(s.factor) + " must be a finite number above 0");
  if (s.type == RopeScalingType::yarn) {
    if (s.orig_ctx <= 0) throw std::invalid_argument("RoPE scaling yarn needs the original context length (> 0)");
    if (!std::isfinite(s.attn_factor) || s.attn_factor <= 0 || !std::isfinite(s.beta_fast) || !std::isfinite(s.beta_slow) ||
        s.beta_fast <= 0 || s.beta_slow <= 0)
      throw std::invalid_argument("RoPE scaling yarn: attn_factor, beta_fast and beta_slow must be finite and above 0");
  }
}

std::vector<float> rope_frequencies(int64_t head_dim, double freq_base, const RopeScaling& s) {
  validate(s);
  const int64_t half = head_dim / 2;
  const double d = static_cast<double>(head_dim);
  const double base = s.type == RopeScalingType::ntk ? freq_base * std::pow(s.factor, d / (d - 2)) : freq_base;
  std::vector<float> omega(static_cast<size_t>(half));
  // The plain frequencies in float, as the unscaled kernels always computed them.
  for (int64_t i = 0; i < half; ++i)
    omega[i] = std::pow(static_cast<float>(base), -2.0f * static_cast<float>(i) / static_cast<float>(head_dim));
  if (s.type == RopeScalingType::linear) {
    for (float& w : omega) w = static_cast<float>(w / s.factor);
  } else if (s.type == RopeScalingType::yarn) {
    auto corr = [&](double turns) {
      return d * std::log(static_cast<double>(s.orig_ctx) / (turns * 2 * std::numbers::pi)) / (2 * std::log(freq_base));
    };
    const double low = std::max(0.0, std::floor(corr(s.beta_fast)));
    const double high = std::min(d - 1, std::ceil(corr(s.beta_slow)));
    for (int64_t i = 0; i < half; ++i) {
      const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
      const double ramp = 1.0 - std::clamp(y, 0.0, 1.0);  // 1: extrapolate (fast pairs), 0: interpolate
      omega[i] = static_cast<float>(omega[i] * ((1.0 - ramp) / s.factor + ramp));
    }
  }
  return omega;
}

float rope_magnitude(const RopeScaling& s) {
  if (s.type != RopeScalingType::yarn) return 1.0f;
  // No correction when the context is not stretched (as transformers' yarn).
  return static_cast<float>(s.attn_factor * (s.factor > 1 ? 1.0 + 0.1 * std::log(s.factor) : 1.0));
}

}  // namespace troupe
