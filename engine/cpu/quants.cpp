#include "engine/cpu/quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/cpu/half.h"

namespace troupe::cpu {
namespace {

constexpr int kQK = 256;  // elements per K-quant super-block

void check_length(TensorType type, int64_t n) {
  const auto t = traits(type);
  if (n < 0 || n % t.block_elems != 0)
    throw std::invalid_argument(std::string(t.name) + ": row length " + std::to_string(n) +
                                " is not a multiple of " + std::to_string(t.block_elems));
}

// ---------------------------------------------------------------- decoding

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((b[2 + j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
  }
}

void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[6 + j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (b[6 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// Q4_K: d, dmin, 12 B scales, 128 B nibbles. Byte group g (32 B) holds
// sub-block 2g in its low nibbles and 2g+1 in its high nibbles.
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_fp16(b), dmin = load_fp16(b + 2);
  uint8_t sc[8], mn[8];
  unpack_k_scales(b + 4, sc, mn);
  const uint8_t* qs = b + 16;
  for (int g = 0; g < 4; ++g) {
    const float d1 = d * sc[2 * g], m1 = dmin * mn[2 * g];
    const float d2 = d * sc[2 * g + 1], m2 = dmin * mn[2 * g + 1];
    for (int l = 0; l < 32; ++l) {
      y[64 * g + l] = d1 * static_cast<float>(qs[32 * g + l] & 0x0F) - m1;
      y[64 * g + 32 + l] = d2 * static_cast<float>(qs[32 * g + l] >> 4) - m2;
    }
  }
}

// Q5_K: as Q4_K with a fifth bit per value: bit j of qh[l] belongs to
// element l of sub-block j.
void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_fp16(b), dmin = load_fp16(b + 2);
  uint8_t sc[8], mn[8];
  unpack_k_scales(b + 4, sc, mn);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int g = 0; g < 4; ++g) {
    const float d1 = d * sc[2 * g], m1 = dmin * mn[2 * g];
    const float d2 = d * sc[2 * g + 1], m2 = dmin * mn[2 * g + 1];
    for (int l = 0; l < 32; ++l) {
      const int lo = (qs[32 * g + l] & 0x0F) | (((qh[l] >> (2 * g)) & 1) << 4);
      const int hi = (qs[32 * g + l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
      y[64 * g + l] = d1 * static_cast<float>(lo) - m1;
      y[64 * g + 32 + l] = d2 * static_cast<float>(hi) - m2;
    }
  }
}

// Q6_K: two halves of 128. In half h, low nibbles of ql[64h + 0..63] are
// elements 0..63 and high nibbles 64..127; qh[32h + l] gives 2 bits to each of
// elements l, l+32, l+64, l+96; element e uses signed scale e / 16.
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_fp16(b + 208);
  for (int h = 0; h < 2; ++h) {
    for (int e = 0; e < 128; ++e) {
      const int l = e & 31, quarter = e >> 5;
      const uint8_t low = ql[64 * h + (quarter & 1) * 32 + l];
      const int nib = quarter < 2 ? (low & 0x0F) : (low >> 4);
      const int q = nib | (((qh[32 * h + l] >> (2 * quarter)) & 3) << 4);
      y[128 * h + e] = (d * static_cast<float>(sc[8 * h + e / 16])) * static_cast<float>(q - 32);
    }
  }
}

void dequant_q8_k(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

// ---------------------------------------------------------------- encoding

// Element of largest magnitude, with its sign: the legacy formats map it to
// the most negative code so the full range is used on that side.
float signed_absmax(const float* x, int n) {
  float amax = 0, vmax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), vmax = x[i];
  return vmax;
}

void quant_q4_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -8;
  const float id = d != 0 ? 1 / d : 0;
  store_fp16(b, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    b[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void quant_q5_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -16;
  const float id = d != 0 ? 1 / d : 0;
  store_fp16(b, d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    const int hi = std::min(31, static_cast<int>(x[j + 16] * id + 16.5f));
    b[6 + j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    qh |= static_cast<uint32_t>(lo >> 4) << j;
    qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  std::memcpy(b + 2, &qh, 4);
}

void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0 ? 1 / d : 0;
  store_fp16(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

struct ScaleMin {
  float scale;
  float min;
};

// Least-squares fit of x ~ scale * q - min with q in [0, nmax] for a few
// candidate grids; min is kept >= 0 because the format stores it unsigned.
ScaleMin fit_scale_min(const float* x, int n, int nmax) {
  float lo = 0, hi = x[0];
  for (int i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  if (hi <= lo) return {0, -lo};
  ScaleMin best{(hi - lo) / static_cast<float>(nmax), -lo};
  double best_err = INFINITY;
  for (int step = -6; step <= 12; ++step) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / (hi - lo);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    int q[32];
    for (int i = 0; i < n; ++i) {
      q[i] = std::clamp(static_cast<int>(std::lround((x[i] - lo) * iscale)), 0, nmax);
      sq += q[i], sqq += static_cast<double>(q[i]) * q[i], sx += x[i], sqx += q[i] * static_cast<double>(x[i]);
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double s = (n * sqx - sq * sx) / det, off = (sx - s * sq) / n;
    if (off > 0) off = 0, s = sqx / sqq;
    if (s <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * q[i] + off - x[i];
      err += e * e;
    }
    if (err < best_err) best_err = err, best = {static_cast<float>(s), static_cast<float>(-off)};
  }
  return best;
}

uint8_t code6(float v, float unit) {
  return unit > 0 ? static_cast<uint8_t>(std::clamp(static_cast<int>(std::lround(v / unit)), 0, 63)) : 0;
}

// Shared by Q4_K and Q5_K: fits sub-blocks, writes d, dmin and packed scales,
// and returns each element's code in q (0..nmax) under the stored scales.
void quant_k_scales(const float* x, uint8_t* b, int nmax, uint8_t q[kQK]) {
  ScaleMin sm[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    sm[j] = fit_scale_min(x + 32 * j, 32, nmax);
    max_scale = std::max(max_scale, sm[j].scale), max_min = std::max(max_min, sm[j].min);
  }
  store_fp16(b, max_scale / 63);
  store_fp16(b + 2, max_min / 63);
  const float d = load_fp16(b), dmin = load_fp16(b + 2);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) sc[j] = code6(sm[j].scale, d), mn[j] = code6(sm[j].min, dmin);
  pack_k_scales(sc, mn, b + 4);
  for (int j = 0; j < 8; ++j) {
    const float s = d * sc[j], m = dmin * mn[j];
    for (int l = 0; l < 32; ++l) {
      const long v = s > 0 ? std::lround((x[32 * j + l] + m) / s) : 0;
      q[32 * j + l] = static_cast<uint8_t>(std::clamp(v, 0L, static_cast<long>(nmax)));
    }
  }
}

void quant_q4_k(const float* x, uint8_t* b) {
  uint8_t q[kQK];
  quant_k_scales(x, b, 15, q);
  for (int g = 0; g < 4; ++g)
    for (int l = 0; l < 32; ++l) b[16 + 32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
}

void quant_q5_k(const float* x, uint8_t* b) {
  uint8_t q[kQK];
  quant_k_scales(x, b, 31, q);
  uint8_t* qh = b + 16;
  std::memset(qh, 0, 32);
  for (int g = 0; g < 4; ++g)
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = q[64 * g + l], hi = q[64 * g + 32 + l];
      b[48 + 32 * g + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh[l] = static_cast<uint8_t>(qh[l] | ((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
    }
}

void quant_q6_k(const float* x, uint8_t* b) {
  float group_scale[16], max_abs = 0;
  for (int g = 0; g < 16; ++g) {
    group_scale[g] = signed_absmax(x + 16 * g, 16) / -32;
    max_abs = std::max(max_abs, std::fabs(group_scale[g]));
  }
  store_fp16(b + 208, max_abs / 127);
  const float d = load_fp16(b + 208);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  uint8_t q[kQK];
  for (int g = 0; g < 16; ++g) {
    sc[g] = d > 0 ? static_cast<int8_t>(std::clamp(std::lround(group_scale[g] / d), -127L, 127L)) : 0;
    const float s = d * sc[g];
    for (int l = 0; l < 16; ++l) {
      const long v = s != 0 ? std::lround(x[16 * g + l] / s) : 0;
      q[16 * g + l] = static_cast<uint8_t>(std::clamp(v, -32L, 31L) + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  std::memset(qh, 0, 64);
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = q + 128 * h + l;  // elements l, l+32, l+64, l+96 of this half
      ql[64 * h + l] = static_cast<uint8_t>((e[0] & 0x0F) | ((e[64] & 0x0F) << 4));
      ql[64 * h + 32 + l] = static_cast<uint8_t>((e[32] & 0x0F) | ((e[96] & 0x0F) << 4));
      qh[32 * h + l] = static_cast<uint8_t>((e[0] >> 4) | ((e[32] >> 4) << 2) | ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
    }
}

void quant_q8_k(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0 ? 1 / d : 0;
  std::memcpy(b, &d, 4);
  for (int g = 0; g < 16; ++g) {
    int16_t sum = 0;
    for (int l = 0; l < 16; ++l) {
      const auto q = static_cast<int8_t>(std::nearbyint(x[16 * g + l] * id));
      b[4 + 16 * g + l] = static_cast<uint8_t>(q);
      sum = static_cast<int16_t>(sum + q);
    }
    std::memcpy(b + 260 + 2 * g, &sum, 2);
  }
}

using BlockFn = void (*)(const uint8_t*, float*);
using QuantFn = void (*)(const float*, uint8_t*);

}  // namespace

void unpack_k_scales(const uint8_t* p, uint8_t scales[8], uint8_t mins[8]) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = p[j] & 63;
    mins[j] = p[j + 4] & 63;
    scales[j + 4] = static_cast<uint8_t>((p[j + 8] & 0x0F) | ((p[j] >> 6) << 4));
    mins[j + 4] = static_cast<uint8_t>((p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4));
  }
}

void pack_k_scales(const uint8_t scales[8], const uint8_t mins[8], uint8_t* p) {
  for (int j = 0; j < 4; ++j) {
    p[j] = static_cast<uint8_t>((scales[j] & 63) | ((scales[j + 4] >> 4) << 6));
    p[j + 4] = static_cast<uint8_t>((mins[j] & 63) | ((mins[j + 4] >> 4) << 6));
    p[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((mins[j + 4] & 0x0F) << 4));
  }
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  check_length(type, n);
  const auto* s = static_cast<const uint8_t*>(src);
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, s, static_cast<size_t>(n) * 4);
      return;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_fp16(s + 2 * i);
      return;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
      }
      return;
    default:
      break;
  }
  BlockFn fn = nullptr;
  switch (type) {
    case TensorType::Q4_0: fn = dequant_q4_0; break;
    case TensorType::Q5_0: fn = dequant_q5_0; break;
    case TensorType::Q8_0: fn = dequant_q8_0; break;
    case TensorType::Q4_K: fn = dequant_q4_k; break;
    case TensorType::Q5_K: fn = dequant_q5_k; break;
    case TensorType::Q6_K: fn = dequant_q6_k; break;
    case TensorType::Q8_K: fn = dequant_q8_k; break;
    default: throw std::invalid_argument("dequantize_row: unsupported type");
  }
  const auto t = traits(type);
  for (int64_t i = 0; i < n / t.block_elems; ++i) fn(s + i * t.block_bytes, dst + i * t.block_elems);
}

void quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
  check_length(type, n);
  auto* d = static_cast<uint8_t*>(dst);
  switch (type) {
    case TensorType::F32:
      std::memcpy(d, src, static_cast<size_t>(n) * 4);
      return;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) store_fp16(d + 2 * i, src[i]);
      return;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_bf16(src[i]);
        std::memcpy(d + 2 * i, &h, 2);
      }
      return;
    default:
      break;
  }
  QuantFn fn = nullptr;
  switch (type) {
    case TensorType::Q4_0: fn = quant_q4_0; break;
    case TensorType::Q5_0: fn = quant_q5_0; break;
    case TensorType::Q8_0: fn = quant_q8_0; break;
    case TensorType::Q4_K: fn = quant_q4_k; break;
    case TensorType::Q5_K: fn = quant_q5_k; break;
    case TensorType::Q6_K: fn = quant_q6_k; break;
    case TensorType::Q8_K: fn = quant_q8_k; break;
    default: throw std::invalid_argument("quantize_row: unsupported type");
  }
  const auto t = traits(type);
  for (int64_t i = 0; i < n / t.block_elems; ++i) fn(src + i * t.block_elems, d + i * t.block_bytes);
}

}  // namespace troupe::cpu
