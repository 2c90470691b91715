// Activations in the layouts the kernels read (matmul.h, ActLayout): where
// their arrays sit in the scratch, the scalar quantizer, and the packing of
// 16 tokens per group for the AVX-512 many-token kernels.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/matmul.h"

namespace troupe::cpu::detail {
namespace {

constexpr int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

bool is_32_block(ActLayout l) {
  return l == ActLayout::q8 || l == ActLayout::q8_biased || l == ActLayout::nib8 || l == ActLayout::nib16;
}
bool is_k(ActLayout l) { return l == ActLayout::k_sb32 || l == ActLayout::k_sb16; }
bool is_packed(ActLayout l) { return l == ActLayout::packed32 || l == ActLayout::packed_k; }
bool is_lanes(ActLayout l) { return l == ActLayout::lanes32 || l == ActLayout::lanes16 || l == ActLayout::lanes_b32; }

// The per-token layout a packed or lane layout is made from.
ActLayout source_of(ActLayout l) {
  if (l == ActLayout::packed32 || l == ActLayout::lanes_b32) return ActLayout::q8;
  if (l == ActLayout::packed_k || l == ActLayout::lanes16) return ActLayout::k_sb16;
  if (l == ActLayout::lanes32) return ActLayout::k_sb32;
  return l;
}

float absmax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// One token's x into 32-blocks: scale amax/127, values round(x / scale).
void quantize_32(const float* x, ActLayout l, const ActView& v, int t) {
  const int64_t nb = v.cols / 32;
  auto* q = const_cast<int8_t*>(v.q + t * v.q_stride);
  auto* d = const_cast<float*>(v.d + t * v.d_stride);
  auto* dl = const_cast<float*>(v.dl + t * v.dl_stride);
  auto* corr = const_cast<int32_t*>(v.corr + t * v.corr_stride);
  const bool nib = l == ActLayout::nib8 || l == ActLayout::nib16;
  const int offset = l == ActLayout::nib16 ? 16 : 8;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + 32 * b;
    const float scale = absmax(xb, 32) / 127;
    const float inv = scale != 0 ? 1 / scale : 0;
    int8_t qb[32];
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += qb[j] = static_cast<int8_t>(std::nearbyint(xb[j] * inv));
    d[b] = scale;
    if (nib) {
      const int64_t c = b / 4, k = b % 4, n = std::min<int64_t>(4, nb - 4 * c);
      std::copy(qb, qb + 16, q + 128 * c + 16 * k);
      std::copy(qb + 16, qb + 32, q + 128 * c + 16 * n + 16 * k);
      std::fill(dl + 4 * b, dl + 4 * b + 4, scale);
      corr[4 * b] = -offset * sum;
      std::fill(corr + 4 * b + 1, corr + 4 * b + 4, 0);
    } else {
      for (int j = 0; j < 32; ++j)
        q[32 * b + j] = l == ActLayout::q8_biased ? static_cast<int8_t>(static_cast<uint8_t>(qb[j] + 128)) : qb[j];
      std::fill(dl + 8 * b, dl + 8 * b + 8, scale);
    }
  }
}

// One token's x into 256-blocks with sums per 32 (sub-blocks reordered
// 0,2,1,3,...) or per 16.
void quantize_256(const float* x, ActLayout l, const ActView& v, int t) {
  static constexpr int kSlot[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  const int64_t nsb = v.cols / 256;
  auto* q = const_cast<int8_t*>(v.q + t * v.q_stride);
  auto* d = const_cast<float*>(v.d + t * v.d_stride);
  auto* sums = const_cast<int16_t*>(v.sums + t * v.sums_stride);
  const bool sb32 = l == ActLayout::k_sb32;
  for (int64_t s = 0; s < nsb; ++s) {
    const float* xs = x + 256 * s;
    const float scale = absmax(xs, 256) / 127;
    const float inv = scale != 0 ? 1 / scale : 0;
    d[s] = scale;
    const int group = sb32 ? 32 : 16;
    for (int g = 0; g < 256 / group; ++g) {
      int8_t* dst = q + 256 * s + (sb32 ? 32 * kSlot[g] : 16 * g);
      int sum = 0;
      for (int j = 0; j < group; ++j) sum += dst[j] = static_cast<int8_t>(std::nearbyint(xs[group * g + j] * inv));
      sums[(sb32 ? 8 : 16) * s + g] = static_cast<int16_t>(sum);
    }
  }
}

// Copies token t's codes (+128) and scales into its lane of its group.
void pack_token(ActLayout l, const ActView& v, int t) {
  const int64_t g = t / 16, lane = t % 16;
  uint8_t* pk = const_cast<uint8_t*>(v.pk + g * v.pk_stride) + 4 * lane;
  const int8_t* q = v.q + t * v.q_stride;
  for (int64_t m = 0; m < v.cols / 4; ++m) {
    uint32_t w;
    std::memcpy(&w, q + 4 * m, 4);
    w ^= 0x80808080u;
    std::memcpy(pk + 64 * m, &w, 4);
  }
  float* pd = const_cast<float*>(v.pk_d + g * v.pk_d_stride) + lane;
  const float* d = v.d + t * v.d_stride;
  if (l == ActLayout::packed32) {
    for (int64_t b = 0; b < v.cols / 32; ++b) pd[16 * b] = d[b];
    return;
  }
  float* ps = const_cast<float*>(v.pk_dsum + g * v.pk_d_stride) + lane;
  const int16_t* sums = v.sums + t * v.sums_stride;  // per 16 values
  for (int64_t b = 0; b < v.cols / 32; ++b) {
    pd[16 * b] = d[b / 8];
    ps[16 * b] = d[b / 8] * static_cast<float>(sums[2 * b] + sums[2 * b + 1]);  // = k_sb32's dsum
  }
}

// Token t's codes side by side, 16 units per group (ActView::lq), from the
// k_sb32 (32-value units, stored in sub-block slots 0,2,1,3,...), k_sb16 or
// q8 codes; for lanes16 and lanes_b32 also the units' code sums.
void lane_token(ActLayout l, const ActView& v, int t) {
  static constexpr int kSlot[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  const int64_t unit = l == ActLayout::lanes16 ? 16 : 32, units = v.cols / unit, groups = (units + 15) / 16;
  const int8_t* q = v.q + t * v.q_stride;
  auto* lq = const_cast<int8_t*>(v.lq + t * v.lq_stride);
  std::memset(lq, 0, static_cast<size_t>(groups * 16 * unit));
  for (int64_t u = 0; u < units; ++u) {
    const int8_t* src = l == ActLayout::lanes32 ? q + 256 * (u / 8) + 32 * kSlot[u % 8] : q + unit * u;
    int8_t* dst = lq + (u / 16) * 16 * unit + 4 * (u % 16);
    for (int64_t k = 0; k < unit / 4; ++k) std::memcpy(dst + 64 * k, src + 4 * k, 4);
  }
  if (l == ActLayout::lanes32) return;
  auto* lsum = const_cast<int32_t*>(v.lsum + t * v.lsum_stride);
  if (l == ActLayout::lanes16) {
    const int16_t* sums = v.sums + t * v.sums_stride;
    for (int64_t u = 0; u < units; ++u) lsum[u] = sums[u];
    return;
  }
  for (int64_t u = 0; u < units; ++u) {
    int32_t sum = 0;
    for (int64_t j = 0; j < 32; ++j) sum += q[32 * u + j];
    lsum[u] = sum;
  }
}

// Lanes after the last token: zero activations (code 0 is byte 128), zero scale.
void pad_last_group(const ActView& v, int n_tokens) {
  const int64_t g = (n_tokens - 1) / 16;
  for (int64_t lane = n_tokens % 16; lane != 0 && lane < 16; ++lane) {
    uint8_t* pk = const_cast<uint8_t*>(v.pk + g * v.pk_stride) + 4 * lane;
    for (int64_t m = 0; m < v.cols / 4; ++m) std::memset(pk + 64 * m, 0x80, 4);
    float* pd = const_cast<float*>(v.pk_d + g * v.pk_d_stride) + lane;
    float* ps = v.pk_dsum ? const_cast<float*>(v.pk_dsum + g * v.pk_d_stride) + lane : nullptr;
    for (int64_t b = 0; b < v.cols / 32; ++b) {
      pd[16 * b] = 0;
      if (ps) ps[16 * b] = 0;
    }
  }
}

}  // namespace

void quantize_scalar(ActLayout l, const float* x, const ActView& v, int t) {
  if (is_32_block(l))
    quantize_32(x, l, v, t);
  else if (is_k(l))
    quantize_256(x, l, v, t);
}

int64_t place_activations(ActLayout l, int64_t cols, int n_tokens, uint8_t* base, ActView& v) {
  v = ActView{};
  v.cols = cols;
  if (l == ActLayout::f32) return 0;
  const ActLayout src = source_of(l);
  v.biased = src == ActLayout::q8_biased;
  int64_t offset = 0;
  auto take = [&](int64_t bytes) {
    uint8_t* r = base ? base + offset : nullptr;
    offset += round_up(bytes, 64);
    return r;
  };
  const int64_t blocks = is_32_block(src) ? cols / 32 : cols / 256;
  v.q_stride = round_up(cols, 64);
  v.q = reinterpret_cast<int8_t*>(take(v.q_stride * n_tokens));
  v.d_stride = round_up(blocks, 16);
  v.d = reinterpret_cast<float*>(take(4 * v.d_stride * n_tokens));
  if (is_32_block(src)) {
    const bool nib = src == ActLayout::nib8 || src == ActLayout::nib16;
    v.dl_stride = round_up(blocks * (nib ? 4 : 8), 16);
    v.dl = reinterpret_cast<float*>(take(4 * v.dl_stride * n_tokens));
    if (nib) {
      v.corr_stride = round_up(blocks * 4, 16);
      v.corr = reinterpret_cast<int32_t*>(take(4 * v.corr_stride * n_tokens));
    }
  } else {
    const int64_t units = blocks * (src == ActLayout::k_sb32 ? 8 : 16);
    v.sums_stride = round_up(units, 32);
    v.sums = reinterpret_cast<int16_t*>(take(2 * v.sums_stride * n_tokens));
    v.du_stride = round_up(units, 16);
    v.du = reinterpret_cast<float*>(take(4 * v.du_stride * n_tokens));
    if (src == ActLayout::k_sb32) v.dsum = reinterpret_cast<float*>(take(4 * v.du_stride * n_tokens));
    if (src == ActLayout::k_sb16) {
      v.corr_stride = round_up(units * 4, 16);
      v.corr = reinterpret_cast<int32_t*>(take(4 * v.corr_stride * n_tokens));
    }
  }
  if (is_lanes(l)) {
    const int64_t unit = l == ActLayout::lanes16 ? 16 : 32, units = cols / unit;
    v.lq_stride = (units + 15) / 16 * 16 * unit;  // a multiple of 64
    v.lq = reinterpret_cast<int8_t*>(take(v.lq_stride * n_tokens));
    if (l != ActLayout::lanes32) {
      v.lsum_stride = round_up(units, 16);
      v.lsum = reinterpret_cast<int32_t*>(take(4 * v.lsum_stride * n_tokens));
    }
  }
  if (is_packed(l)) {
    const int64_t groups = (n_tokens + 15) / 16;
    v.pk_stride = 16 * cols;  // a multiple of 64: cols is a multiple of 32
    v.pk = take(v.pk_stride * groups);
    v.pk_d_stride = cols / 32 * 16;
    v.pk_d = reinterpret_cast<float*>(take(4 * v.pk_d_stride * groups));
    if (l == ActLayout::packed_k) v.pk_dsum = reinterpret_cast<float*>(take(4 * v.pk_d_stride * groups));
  }
  return offset;
}

namespace {

// Per-unit arrays of the K layouts, from the quantizer's scales and sums: the
// AVX-512 kernels scale each unit's exact integer sum separately (see
// matmul_avx512.cpp), and these must be the values the packed kernels use.
void unit_arrays(ActLayout src, const ActView& v, int t) {
  if (src != ActLayout::k_sb32 && src != ActLayout::k_sb16) return;
  const bool sb32 = src == ActLayout::k_sb32;
  const int64_t units = v.cols / (sb32 ? 32 : 16), per_block = sb32 ? 8 : 16;
  const float* d = v.d + t * v.d_stride;
  const int16_t* sums = v.sums + t * v.sums_stride;
  auto* du = const_cast<float*>(v.du + t * v.du_stride);
  for (int64_t u = 0; u < units; ++u) du[u] = d[u / per_block];
  if (sb32) {
    auto* dsum = const_cast<float*>(v.dsum + t * v.du_stride);
    for (int64_t u = 0; u < units; ++u) dsum[u] = du[u] * static_cast<float>(sums[u]);
  } else {
    auto* corr = const_cast<int32_t*>(v.corr + t * v.corr_stride);
    for (int64_t u = 0; u < units; ++u) {
      corr[4 * u] = -32 * sums[u];
      corr[4 * u + 1] = corr[4 * u + 2] = corr[4 * u + 3] = 0;
    }
  }
}

}  // namespace

void prepare_token(ActLayout l, QuantizeFn quantize, const float* x, const ActView& v, int t, int n_tokens) {
  if (l == ActLayout::f32) return;
  quantize(source_of(l), x + t * v.cols, v, t);
  unit_arrays(source_of(l), v, t);
  if (is_lanes(l)) return lane_token(l, v, t);
  if (!is_packed(l)) return;
  pack_token(l, v, t);
  if (t == n_tokens - 1) pad_last_group(v, n_tokens);
}

}  // namespace troupe::cpu::detail
