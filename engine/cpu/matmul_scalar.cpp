// Portable kernels: the reference every SIMD path is tested against, the
// fallback on CPUs without AVX2, and the tail of rows whose length is not a
// whole number of SIMD chunks.
#include <algorithm>
#include <cstring>

#include "engine/cpu/half.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/quants.h"

namespace troupe::cpu::detail {
namespace {

// Q4_K/Q5_K activations keep sub-blocks in the order 0,2,1,3,4,6,5,7.
constexpr int kSubBlockSlot[8] = {0, 2, 1, 3, 4, 6, 5, 7};

int act_value(const ActView& a, const int8_t* q, int64_t i) {
  return a.biased ? static_cast<int>(static_cast<uint8_t>(q[i])) - 128 : q[i];
}

template <class Load>
float dot_float(const uint8_t* row, const ActView& a, int t, int64_t first, int64_t end, int elem_bytes, Load load) {
  const float* x = a.x + t * a.x_stride;
  float sum = 0;
  for (int64_t i = first; i < end; ++i) sum += load(row + i * elem_bytes) * x[i];
  return sum;
}

float dot_q8_0(const uint8_t* row, const ActView& a, int t, int64_t first, int64_t end) {
  const int8_t* q = a.q + t * a.q_stride;
  const float* d = a.d + t * a.d_stride;
  float sum = 0;
  for (int64_t b = first; b < end; ++b) {
    const uint8_t* blk = row + 34 * b;
    int sumi = 0;
    for (int j = 0; j < 32; ++j) sumi += static_cast<int8_t>(blk[2 + j]) * act_value(a, q, 32 * b + j);
    sum += static_cast<float>(sumi) * (load_fp16(blk) * d[b]);
  }
  return sum;
}

// Q4_0 (bits5 = false) and Q5_0 (bits5 = true), nibble-ordered activations:
// chunk c of up to 4 blocks holds their low halves, then their high halves.
float dot_nib(const uint8_t* row, const ActView& a, int t, int64_t first, int64_t end, bool bits5) {
  const int64_t nb = a.cols / 32;
  const int8_t* q = a.q + t * a.q_stride;
  const float* d = a.d + t * a.d_stride;
  const int32_t* corr = a.corr + t * a.corr_stride;
  const int64_t block_bytes = bits5 ? 22 : 18;
  float sum = 0;
  for (int64_t b = first; b < end; ++b) {
    const uint8_t* blk = row + block_bytes * b;
    const uint8_t* qs = blk + (bits5 ? 6 : 2);
    uint32_t qh = 0;
    if (bits5) std::memcpy(&qh, blk + 2, 4);
    const int64_t c = b / 4, k = b % 4, n = std::min<int64_t>(4, nb - 4 * c);
    const int8_t* lo = q + 128 * c + 16 * k;
    const int8_t* hi = q + 128 * c + 16 * n + 16 * k;
    int sumi = corr[4 * b];
    for (int j = 0; j < 16; ++j) {
      const int wl = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int wh = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      sumi += wl * lo[j] + wh * hi[j];
    }
    sum += static_cast<float>(sumi) * (load_fp16(blk) * d[b]);
  }
  return sum;
}

// Q4_K (bits5 = false) and Q5_K (bits5 = true).
float dot_q45_k(const uint8_t* row, const ActView& a, int t, int64_t first, int64_t end, bool bits5) {
  const int8_t* q = a.q + t * a.q_stride;
  const float* d = a.d + t * a.d_stride;
  const int16_t* sums = a.sums + t * a.sums_stride;
  const int64_t block_bytes = bits5 ? 176 : 144;
  float sum = 0;
  for (int64_t s = first; s < end; ++s) {
    const uint8_t* blk = row + block_bytes * s;
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (bits5 ? 48 : 16);
    uint8_t sc[8], mn[8];
    unpack_k_scales(blk + 4, sc, mn);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      const int8_t* qa = q + 256 * s + 32 * kSubBlockSlot[j];
      int dot = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = qs[32 * (j / 2) + l];
        int w = (j % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
        if (bits5) w |= ((qh[l] >> j) & 1) << 4;
        dot += w * qa[l];
      }
      sumi += sc[j] * dot;
      summ += mn[j] * sums[8 * s + j];
    }
    const float da = d[s];
    sum += static_cast<float>(sumi) * (load_fp16(blk) * da) - static_cast<float>(summ) * (load_fp16(blk + 2) * da);
  }
  return sum;
}

float dot_q6_k(const uint8_t* row, const ActView& a, int t, int64_t first, int64_t end) {
  const int8_t* q = a.q + t * a.q_stride;
  const float* d = a.d + t * a.d_stride;
  const int16_t* sums = a.sums + t * a.sums_stride;
  float sum = 0;
  for (int64_t s = first; s < end; ++s) {
    const uint8_t* blk = row + 210 * s;
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    int sumi = 0;
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, l = e & 31, quarter = (e >> 5) & 3;
      const uint8_t low = blk[64 * h + (quarter & 1) * 32 + l];
      const int nib = quarter < 2 ? (low & 0x0F) : (low >> 4);
      const int w = nib | (((blk[128 + 32 * h + l] >> (2 * quarter)) & 3) << 4);
      sumi += sc[e / 16] * w * q[256 * s + e];
    }
    for (int g = 0; g < 16; ++g) sumi -= 32 * sc[g] * sums[16 * s + g];
    sum += static_cast<float>(sumi) * (load_fp16(blk + 208) * d[s]);
  }
  return sum;
}

template <TensorType kType>
void gemm_scalar(const KernelArgs& a, int64_t r0, int64_t r1, int) {
  const int64_t blocks = a.cols / traits(kType).block_elems;
  for (int64_t r = r0; r < r1; ++r)
    for (int t = 0; t < a.n_tokens; ++t)
      a.y[t * a.y_stride + r] = dot_blocks(kType, a.w + r * a.row_bytes, *a.act, t, 0, blocks);
}

}  // namespace

float dot_blocks(TensorType type, const uint8_t* row, const ActView& a, int t, int64_t first, int64_t end) {
  switch (type) {
    case TensorType::F32:
      return dot_float(row, a, t, first, end, 4, [](const uint8_t* p) {
        float v;
        std::memcpy(&v, p, 4);
        return v;
      });
    case TensorType::F16:
      return dot_float(row, a, t, first, end, 2, [](const uint8_t* p) { return load_fp16(p); });
    case TensorType::BF16:
      return dot_float(row, a, t, first, end, 2, [](const uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return bf16_to_fp32(h);
      });
    case TensorType::Q8_0: return dot_q8_0(row, a, t, first, end);
    case TensorType::Q4_0: return dot_nib(row, a, t, first, end, false);
    case TensorType::Q5_0: return dot_nib(row, a, t, first, end, true);
    case TensorType::Q4_K: return dot_q45_k(row, a, t, first, end, false);
    case TensorType::Q5_K: return dot_q45_k(row, a, t, first, end, true);
    case TensorType::Q6_K: return dot_q6_k(row, a, t, first, end);
    default: return 0;
  }
}

Kernel scalar_kernel(TensorType type) {
  switch (type) {
    case TensorType::F32: return {gemm_scalar<TensorType::F32>, ActLayout::f32};
    case TensorType::F16: return {gemm_scalar<TensorType::F16>, ActLayout::f32};
    case TensorType::BF16: return {gemm_scalar<TensorType::BF16>, ActLayout::f32};
    case TensorType::Q8_0: return {gemm_scalar<TensorType::Q8_0>, ActLayout::q8};
    case TensorType::Q4_0: return {gemm_scalar<TensorType::Q4_0>, ActLayout::nib8};
    case TensorType::Q5_0: return {gemm_scalar<TensorType::Q5_0>, ActLayout::nib16};
    case TensorType::Q4_K: return {gemm_scalar<TensorType::Q4_K>, ActLayout::k_sb32};
    case TensorType::Q5_K: return {gemm_scalar<TensorType::Q5_K>, ActLayout::k_sb32};
    case TensorType::Q6_K: return {gemm_scalar<TensorType::Q6_K>, ActLayout::k_sb16};
    default: return {};
  }
}

}  // namespace troupe::cpu::detail
