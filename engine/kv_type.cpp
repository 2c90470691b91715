#include "engine/kv_type.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/cpu/half.h"

namespace troupe {
namespace {

void put_f16(uint8_t* p, float v) {
  const uint16_t h = cpu::fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}
float get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return cpu::fp16_to_fp32(h);
}

float finite_or_zero(float v) { return std::isfinite(v) ? v : 0.0f; }

void encode_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n; b += kKvBlock, out += 2 + kKvBlock) {
    float amax = 0;
    for (int64_t i = 0; i < kKvBlock; ++i) amax = std::max(amax, std::fabs(finite_or_zero(x[b + i])));
    put_f16(out, amax / 127.0f);
    const float d = get_f16(out);  // quantize against the scale that is stored
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    for (int64_t i = 0; i < kKvBlock; ++i) {
      const float q = std::nearbyint(finite_or_zero(x[b + i]) * inv);
      out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
    }
  }
}

void encode_q4_0(const float* x, int64_t n, uint8_t* out) {
  constexpr int64_t kHalf = kKvBlock / 2;
  for (int64_t b = 0; b < n; b += kKvBlock, out += 2 + kHalf) {
    float amax = 0;
    for (int64_t i = 0; i < kKvBlock; ++i) amax = std::max(amax, std::fabs(finite_or_zero(x[b + i])));
    put_f16(out, amax / 7.0f);
    const float d = get_f16(out);
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    auto code = [&](int64_t i) {
      const float q = std::nearbyint(finite_or_zero(x[b + i]) * inv);
      return static_cast<int>(std::clamp(q, -7.0f, 7.0f)) + 8;
    };
    for (int64_t j = 0; j < kHalf; ++j) out[2 + j] = static_cast<uint8_t>(code(j) | code(j + kHalf) << 4);
  }
}

}  // namespace

KvType kv_type_from_name(std::string_view name) {
  if (name == "f16") return KvType::f16;
  if (name == "q8_0") return KvType::q8_0;
  if (name == "k8v4") return KvType::k8v4;
  if (name == "q4_0") return KvType::q4_0;
  throw std::invalid_argument("unknown KV type '" + std::string(name) + "' (f16, q8_0, k8v4, q4_0)");
}

const char* kv_type_name(KvType type) {
  switch (type) {
    case KvType::f16: return "f16";
    case KvType::q8_0: return "q8_0";
    case KvType::k8v4: return "k8v4";
    case KvType::q4_0: return "q4_0";
  }
  return "?";
}

KvRowFormat key_format(KvType type) {
  switch (type) {
    case KvType::f16: return KvRowFormat::f16;
    case KvType::q4_0: return KvRowFormat::q4_0;
    case KvType::q8_0:
    case KvType::k8v4: return KvRowFormat::q8_0;
  }
  return KvRowFormat::f16;
}
KvRowFormat value_format(KvType type) {
  switch (type) {
    case KvType::f16: return KvRowFormat::f16;
    case KvType::q8_0: return KvRowFormat::q8_0;
    case KvType::k8v4:
    case KvType::q4_0: return KvRowFormat::q4_0;
  }
  return KvRowFormat::f16;
}

bool kv_type_fits(KvType type, int64_t head_dim) { return type == KvType::f16 || head_dim % kKvBlock == 0; }

int64_t kv_row_bytes(KvRowFormat format, int64_t n) {
  switch (format) {
    case KvRowFormat::f16: return 2 * n;
    case KvRowFormat::q8_0: return n / kKvBlock * (2 + kKvBlock);
    case KvRowFormat::q4_0: return n / kKvBlock * (2 + kKvBlock / 2);
  }
  return 0;
}

void encode_kv_row(KvRowFormat format, const float* x, int64_t n, uint8_t* out) {
  switch (format) {
    case KvRowFormat::f16:
      for (int64_t i = 0; i < n; ++i) put_f16(out + 2 * i, x[i]);
      return;
    case KvRowFormat::q8_0: return encode_q8_0(x, n, out);
    case KvRowFormat::q4_0: return encode_q4_0(x, n, out);
  }
}

void kv_rotate(float* x, int64_t n) {
  int64_t block = 1;
  while (n % (block * 2) == 0 && block * 2 <= 1024) block *= 2;
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (int64_t b = 0; b < n; b += block) {
    float* v = x + b;
    for (int64_t h = 1; h < block; h *= 2)
      for (int64_t i = 0; i < block; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          const float a = v[j], c = v[j + h];
          v[j] = a + c;
          v[j + h] = a - c;
        }
    for (int64_t i = 0; i < block; ++i) v[i] *= norm;
  }
}

void decode_kv_row(KvRowFormat format, const uint8_t* in, int64_t n, float* out) {
  switch (format) {
    case KvRowFormat::f16:
      for (int64_t i = 0; i < n; ++i) out[i] = get_f16(in + 2 * i);
      return;
    case KvRowFormat::q8_0:
      for (int64_t b = 0; b < n; b += kKvBlock, in += 2 + kKvBlock) {
        const float d = get_f16(in);
        for (int64_t i = 0; i < kKvBlock; ++i) out[b + i] = d * static_cast<float>(static_cast<int8_t>(in[2 + i]));
      }
      return;
    case KvRowFormat::q4_0:
      for (int64_t b = 0; b < n; b += kKvBlock, in += 2 + kKvBlock / 2) {
        const float d = get_f16(in);
        for (int64_t j = 0; j < kKvBlock / 2; ++j) {
          out[b + j] = d * static_cast<float>((in[2 + j] & 0xf) - 8);
          out[b + j + kKvBlock / 2] = d * static_cast<float>((in[2 + j] >> 4) - 8);
        }
      }
      return;
  }
}

}  // namespace troupe
