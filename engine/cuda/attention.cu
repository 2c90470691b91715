// The attention half of a layer: finishing Q/K/V (bias, RoPE, K/V into the
// paged cache) and paged attention for any mix of rows — decode tokens,
// prefill chunks, draft windows — each attending its own positions [0, pos]
// through its sequence's block table (causality follows from pos).
//
// One block handles (head, row, split): scores for up to kAttentionSplit
// positions, one thread per position; softmax in shared memory; then
// probabilities times V with threads over head dimensions. Rows longer than
// one split write partial (max, sum, acc) that attention_combine merges, so
// a long context spreads over many blocks (split-K).
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void qkv_finish_kernel(float* qkv, const float* bias, AttentionDims d, const float* inv_freq,
                                  float freq_scale, int rope_halves, RowInputs rows, __half* k_cache, __half* v_cache) {
  const int64_t q_dim = static_cast<int64_t>(d.n_head) * d.head_dim, kv_dim = static_cast<int64_t>(d.n_head_kv) * d.head_dim;
  const int64_t width = q_dim + 2 * kv_dim;
  float* row = qkv + blockIdx.x * width;
  if (bias) {
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) row[c] += bias[c];
    __syncthreads();
  }
  const int half_dim = d.head_dim / 2;
  const float p = static_cast<float>(rows.pos[blockIdx.x]) * freq_scale;
  const int pairs = (d.n_head + d.n_head_kv) * half_dim;
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int h = i / half_dim, j = i % half_dim;
    float* v = row + static_cast<int64_t>(h) * d.head_dim;  // K heads follow Q heads
    const int a = rope_halves ? j : 2 * j, b = rope_halves ? j + half_dim : 2 * j + 1;
    float sn, cs;
    sincosf(p * inv_freq[j], &sn, &cs);
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * cs - x1 * sn;
    v[b] = x0 * sn + x1 * cs;
  }
  __syncthreads();
  const int64_t slot = rows.kv_slot[blockIdx.x];
  for (int64_t c = threadIdx.x; c < kv_dim; c += blockDim.x) {
    k_cache[slot * kv_dim + c] = __float2half(row[q_dim + c]);
    v_cache[slot * kv_dim + c] = __float2half(row[q_dim + kv_dim + c]);
  }
}

__device__ __forceinline__ int64_t slot_of(const RowInputs& rows, int row, int pos, int page_size) {
  const int page = rows.tables[rows.table_off[row] + pos / page_size];
  return static_cast<int64_t>(page) * page_size + pos % page_size;
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const float* qkv, int64_t qkv_stride, AttentionDims d, RowInputs rows, const __half* k_cache,
                     const __half* v_cache, int n_splits, float* partial_acc, float* partial_ml, float* out) {
  constexpr int G = kThreads / HD;  // groups of threads over positions in the V pass
  __shared__ float q[HD];
  __shared__ float scores[kAttentionSplit];
  __shared__ float red[32];
  __shared__ float acc_g[G][HD];
  const int h = blockIdx.x, row = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
  const int len = rows.pos[row] + 1;
  const int start = split * kAttentionSplit;
  if (start >= len) return;
  const int count = min(len - start, kAttentionSplit);
  const int kvh = h / (d.n_head / d.n_head_kv);
  const int64_t kv_dim = static_cast<int64_t>(d.n_head_kv) * HD;
  if (tid < HD) q[tid] = qkv[row * qkv_stride + h * HD + tid] * rsqrtf(static_cast<float>(HD));
  __syncthreads();

  for (int j = tid; j < count; j += kThreads) {
    const uint4* k = reinterpret_cast<const uint4*>(k_cache + slot_of(rows, row, start + j, d.page_size) * kv_dim + kvh * HD);
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < HD / 8; ++c) {
      const uint4 raw = __ldg(k + c);
      const __half2* hv = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __half22float2(hv[e]);
        s += f.x * q[c * 8 + 2 * e] + f.y * q[c * 8 + 2 * e + 1];
      }
    }
    scores[j] = s;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int j = tid; j < count; j += kThreads) m = fmaxf(m, scores[j]);
  m = block_max(m, red);
  float l = 0.0f;
  for (int j = tid; j < count; j += kThreads) {
    const float e = __expf(scores[j] - m);
    scores[j] = e;
    l += e;
  }
  l = block_sum(l, red);  // its barrier publishes the exponentiated scores

  const int g = tid / HD, dim = tid % HD;
  float acc = 0.0f;
#pragma unroll 4
  for (int j = g; j < count; j += G)
    acc += scores[j] * __half2float(v_cache[slot_of(rows, row, start + j, d.page_size) * kv_dim + kvh * HD + dim]);
  acc_g[g][dim] = acc;
  __syncthreads();
  if (tid < HD) {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < G; ++i) total += acc_g[i][tid];
    const int row_splits = (len + kAttentionSplit - 1) / kAttentionSplit;
    if (row_splits == 1) {
      out[(static_cast<int64_t>(row) * d.n_head + h) * HD + tid] = total / l;
    } else {
      const int64_t idx = (static_cast<int64_t>(row) * d.n_head + h) * n_splits + split;
      partial_acc[idx * HD + tid] = total;
      if (tid == 0) {
        partial_ml[idx * 2] = m;
        partial_ml[idx * 2 + 1] = l;
      }
    }
  }
}

__global__ void attention_combine_kernel(AttentionDims d, RowInputs rows, int n_splits, const float* partial_acc,
                                         const float* partial_ml, float* out) {
  const int h = blockIdx.x, row = blockIdx.y, dim = threadIdx.x;
  const int len = rows.pos[row] + 1;
  const int row_splits = (len + kAttentionSplit - 1) / kAttentionSplit;
  if (row_splits == 1) return;
  const int64_t base = (static_cast<int64_t>(row) * d.n_head + h) * n_splits;
  float m = -INFINITY;
  for (int s = 0; s < row_splits; ++s) m = fmaxf(m, partial_ml[(base + s) * 2]);
  float l = 0.0f, acc = 0.0f;
  for (int s = 0; s < row_splits; ++s) {
    const float w = __expf(partial_ml[(base + s) * 2] - m);
    l += w * partial_ml[(base + s) * 2 + 1];
    acc += w * partial_acc[(base + s) * d.head_dim + dim];
  }
  out[(static_cast<int64_t>(row) * d.n_head + h) * d.head_dim + dim] = acc / l;
}

}  // namespace

void qkv_finish(float* qkv, const float* bias, int n, const AttentionDims& d, const float* inv_freq, float freq_scale,
                bool rope_halves, const RowInputs& rows, uint16_t* k_cache, uint16_t* v_cache, cudaStream_t s) {
  if (n == 0) return;
  qkv_finish_kernel<<<n, 256, 0, s>>>(qkv, bias, d, inv_freq, freq_scale, rope_halves ? 1 : 0, rows,
                                      reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache));
  TROUPE_CUDA_LAUNCHED();
}

void attention(const float* qkv, int64_t qkv_stride, int n, const AttentionDims& d, const RowInputs& rows,
               const uint16_t* k_cache, const uint16_t* v_cache, int n_splits, float* partial_acc, float* partial_ml,
               float* out, cudaStream_t s) {
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>(d.n_head), static_cast<unsigned>(n), static_cast<unsigned>(n_splits));
  const auto* k = reinterpret_cast<const __half*>(k_cache);
  const auto* v = reinterpret_cast<const __half*>(v_cache);
  if (d.head_dim == 64)
    attention_kernel<64><<<grid, kThreads, 0, s>>>(qkv, qkv_stride, d, rows, k, v, n_splits, partial_acc, partial_ml, out);
  else if (d.head_dim == 128)
    attention_kernel<128><<<grid, kThreads, 0, s>>>(qkv, qkv_stride, d, rows, k, v, n_splits, partial_acc, partial_ml, out);
  else
    throw std::invalid_argument("CUDA attention supports head_dim 64 and 128, not " + std::to_string(d.head_dim));
  TROUPE_CUDA_LAUNCHED();
  if (n_splits > 1) {
    attention_combine_kernel<<<dim3(static_cast<unsigned>(d.n_head), static_cast<unsigned>(n)), d.head_dim, 0, s>>>(
        d, rows, n_splits, partial_acc, partial_ml, out);
    TROUPE_CUDA_LAUNCHED();
  }
}

}  // namespace troupe::cuda
