// Attention over half-precision KV with AVX-512, for the common head
// dimensions (32, 64, 80, 96, 128, 256).
//
// The per-head loop (attention.cpp) converts each key and value row from half
// once per query head and reduces every dot product across its lanes alone.
// Here the heads that share a KV head (7 in Qwen2.5-0.5B) take each row from
// one conversion into a small float block in L1, and the dot products of 16
// positions are reduced together, in one transpose-and-add tree. A head's
// arithmetic does not depend on which other heads run with it, so splitting
// heads over threads anywhere gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/cpu/attention.h"
#include "engine/cpu/kv_kernels.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/simd_loads.h"
#include "engine/kv_cache.h"

namespace troupe::cpu::avx512 {
namespace {

constexpr int kBlock = 16;    // positions per block: one vector of scores

template <int kImm>
__m512 shuffle_quarters(__m512 a, __m512 b) {
  return _mm512_shuffle_f32x4(a, b, kImm);
}

__m512 load_half16(const uint16_t* p) { return _mm512_cvtph_ps(detail::load256(p)); }

// Sixteen vectors to the vector of their lane sums, lane j summing v[j] when
// the inputs arrive in kTreeOrder (below).
__m512 sum16(const __m512 (&v)[kBlock]) {
  __m512 w[8], x[4], y[2];
  for (int j = 0; j < 8; ++j)  // halves: lanes 0-7 from v[j], 8-15 from v[j + 8]
    w[j] = _mm512_add_ps(shuffle_quarters<_MM_SHUFFLE(1, 0, 1, 0)>(v[j], v[j + 8]),
                         shuffle_quarters<_MM_SHUFFLE(3, 2, 3, 2)>(v[j], v[j + 8]));
  for (int j = 0; j < 4; ++j)  // quarters: v[j], v[j + 8], v[j + 4], v[j + 12]
    x[j] = _mm512_add_ps(shuffle_quarters<_MM_SHUFFLE(2, 0, 2, 0)>(w[j], w[j + 4]),
                         shuffle_quarters<_MM_SHUFFLE(3, 1, 3, 1)>(w[j], w[j + 4]));
  for (int j = 0; j < 2; ++j)  // pairs within each quarter: x[j], then x[j + 2]
    y[j] = _mm512_add_ps(_mm512_shuffle_ps(x[j], x[j + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[j], x[j + 2], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Which input of sum16 lands in lane j: feeding position j's partial sums as
// input kTreeOrder[j] puts position j's dot product in lane j.
constexpr int kTreeOrder[kBlock] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

// Rows [p0, p0 + n) of one KV head, converted to float: block[j][0..d).
template <bool kKeys>
void load_block(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, int32_t p0, int n,
                int64_t kv_offset, int vecs, float* block) {
  const int32_t ps = cache.page_size();
  for (int j = 0; j < n; ++j) {
    const int32_t p = p0 + j;
    const uint16_t* row =
        (kKeys ? cache.key(layer, block_table[p / ps], p % ps) : cache.value(layer, block_table[p / ps], p % ps)) +
        kv_offset;
    for (int c = 0; c < vecs; ++c) _mm512_store_ps(block + (j * vecs + c) * 16, load_half16(row + c * 16));
  }
  // Rows past the end compute scores that are never stored; zeros keep them finite.
  std::memset(block + n * vecs * 16, 0, sizeof(float) * (kBlock - n) * vecs * 16);
}

template <int kVecs>
void attend_group(const float* q, const KvCache& cache, int64_t layer, std::span<const int32_t> block_table,
                  int32_t n_ctx, int64_t kv_head, int64_t h0, int64_t h1, float scale, float* out, float* scores) {
  constexpr int d = kVecs * 16;
  const int64_t kv_offset = kv_head * d;
  const int64_t stride = (n_ctx + kBlock - 1) / kBlock * kBlock;  // one head's scores
  alignas(64) float block[kBlock * d];
  alignas(64) float qf[kMaxAttentionHeads][d];
  for (int64_t h = h0; h < h1; ++h) {  // queries rounded through half, as the KV
    uint16_t qh[d];
    to_f16(q + h * d, qh, d);
    for (int c = 0; c < kVecs; ++c)
      _mm512_store_ps(qf[h - h0] + c * 16, load_half16(qh + c * 16));
  }

  const __m512 vscale = _mm512_set1_ps(scale);
  for (int32_t p0 = 0; p0 < n_ctx; p0 += kBlock) {
    const int n = std::min<int32_t>(kBlock, n_ctx - p0);
    load_block<true>(cache, layer, block_table, p0, n, kv_offset, kVecs, block);
    for (int64_t h = h0; h < h1; ++h) {
      __m512 qv[kVecs];
      for (int c = 0; c < kVecs; ++c) qv[c] = _mm512_load_ps(qf[h - h0] + c * 16);
      __m512 part[kBlock];
#pragma GCC unroll 16
      for (int j = 0; j < kBlock; ++j) {
        const float* k = block + j * d;
        __m512 acc = _mm512_mul_ps(qv[0], _mm512_load_ps(k));
        for (int c = 1; c < kVecs; ++c) acc = _mm512_fmadd_ps(qv[c], _mm512_load_ps(k + c * 16), acc);
        part[kTreeOrder[j]] = acc;
      }
      const __m512 s = _mm512_mul_ps(sum16(part), vscale);
      _mm512_mask_storeu_ps(scores + (h - h0) * stride + p0, static_cast<__mmask16>((1u << n) - 1), s);
    }
  }

  for (int64_t h = h0; h < h1; ++h) {
    float* sh = scores + (h - h0) * stride;
    softmax(sh, n_ctx);
    round_through_f16(sh, n_ctx);
    std::memset(out + h * d, 0, sizeof(float) * d);
  }

  // out += p * v, position by position in order, one fma per element: the
  // per-head path's arithmetic (axpy_f16), with each row converted once.
  for (int32_t p0 = 0; p0 < n_ctx; p0 += kBlock) {
    const int n = std::min<int32_t>(kBlock, n_ctx - p0);
    load_block<false>(cache, layer, block_table, p0, n, kv_offset, kVecs, block);
    for (int64_t h = h0; h < h1; ++h) {
      const float* sh = scores + (h - h0) * stride + p0;
      float* oh = out + h * d;
      __m512 acc[kVecs];
      for (int c = 0; c < kVecs; ++c) acc[c] = _mm512_loadu_ps(oh + c * 16);
      for (int j = 0; j < n; ++j) {
        const __m512 pj = _mm512_set1_ps(sh[j]);
        for (int c = 0; c < kVecs; ++c) acc[c] = _mm512_fmadd_ps(pj, _mm512_load_ps(block + j * d + c * 16), acc[c]);
      }
      for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(oh + c * 16, acc[c]);
    }
  }
}

template <int kVecs>
void attend(const float* q, const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, int32_t n_ctx,
            const AttentionShape& shape, int64_t head_begin, int64_t head_end, float* out, float* scores) {
  const int64_t group = shape.n_head / shape.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  for (int64_t h0 = head_begin; h0 < head_end;) {
    const int64_t kv_head = h0 / group;
    const int64_t h1 = std::min({head_end, (kv_head + 1) * group, h0 + kMaxAttentionHeads});
    attend_group<kVecs>(q, cache, layer, block_table, n_ctx, kv_head, h0, h1, scale, out, scores);
    h0 = h1;
  }
}

}  // namespace

bool paged_attention_fits(int64_t head_dim) {
  switch (head_dim) {
    case 32: case 64: case 80: case 96: case 128: case 256: return true;
    default: return false;
  }
}

void paged_attention(const float* q, const KvCache& cache, int64_t layer, std::span<const int32_t> block_table,
                     int32_t n_ctx, const AttentionShape& shape, int64_t head_begin, int64_t head_end, float* out,
                     float* scores) {
  const auto run = [&]<int kVecs>() {
    attend<kVecs>(q, cache, layer, block_table, n_ctx, shape, head_begin, head_end, out, scores);
  };
  switch (shape.head_dim) {
    case 32: return run.template operator()<2>();
    case 64: return run.template operator()<4>();
    case 80: return run.template operator()<5>();
    case 96: return run.template operator()<6>();
    case 128: return run.template operator()<8>();
    case 256: return run.template operator()<16>();
    default: throw std::invalid_argument("no AVX-512 attention for head dimension " + std::to_string(shape.head_dim));
  }
}

}  // namespace troupe::cpu::avx512
