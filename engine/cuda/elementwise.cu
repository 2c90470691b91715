// Row-wise kernels around the matrix products: embedding lookup, RMSNorm,
// SwiGLU, conversions to bf16 for cuBLAS, and gathering rows for the logits.
#include <cuda_bf16.h>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace troupe::cuda {
namespace {

__global__ void embed_kernel(int format, const void* q, const void* scales, int64_t cols, const int32_t* tokens,
                             float* x) {
  const int64_t r = blockIdx.x;
  const int64_t tok = tokens[r];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) x[r * cols + c] = matrix_element(format, q, scales, cols, tok, c);
}

__global__ void gather_kernel(const float* x, const int32_t* rows, int64_t width, float* out) {
  const int64_t r = blockIdx.x, src = rows[r];
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) out[r * width + c] = x[src * width + c];
}

__global__ void rmsnorm_bf16_kernel(const float* x, const float* gain, int64_t width, float eps, __nv_bfloat16* out) {
  __shared__ float red[32];
  const float* row = x + blockIdx.x * width;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) ss += row[c] * row[c];
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(width) + eps);
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
    out[blockIdx.x * width + c] = __float2bfloat16(row[c] * inv * gain[c]);
}

__global__ void swiglu_bf16_kernel(const float* gate_up, int64_t ff, __nv_bfloat16* out) {
  const float* row = gate_up + blockIdx.x * 2 * ff;
  for (int64_t c = threadIdx.x; c < ff; c += blockDim.x)
    out[blockIdx.x * ff + c] = __float2bfloat16(silu(row[c]) * row[ff + c]);
}

__global__ void to_bf16_kernel(const float* in, int64_t count, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

__global__ void dequantize_kernel(int format, const void* q, const void* scales, int64_t rows, int64_t cols,
                                  __nv_bfloat16* out) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(matrix_element(format, q, scales, cols, i / cols, i % cols));
}

int grid_for(int64_t count, int threads) {
  const int64_t blocks = (count + threads - 1) / threads;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

void embed_rows(const DeviceMatrix& table, const int32_t* tokens, int n, float* x, cudaStream_t s) {
  if (n == 0) return;
  embed_kernel<<<n, 256, 0, s>>>(static_cast<int>(table.format), table.q, table.scales, table.cols, tokens, x);
  TROUPE_CUDA_LAUNCHED();
}

void gather_rows(const float* x, const int32_t* rows, int n, int64_t width, float* out, cudaStream_t s) {
  if (n == 0) return;
  gather_kernel<<<n, 256, 0, s>>>(x, rows, width, out);
  TROUPE_CUDA_LAUNCHED();
}

void rmsnorm_to_bf16(const float* x, const float* gain, int n, int64_t width, float eps, uint16_t* out, cudaStream_t s) {
  if (n == 0) return;
  rmsnorm_bf16_kernel<<<n, 256, 0, s>>>(x, gain, width, eps, reinterpret_cast<__nv_bfloat16*>(out));
  TROUPE_CUDA_LAUNCHED();
}

void swiglu_to_bf16(const float* gate_up, int n, int64_t ff, uint16_t* out, cudaStream_t s) {
  if (n == 0) return;
  swiglu_bf16_kernel<<<n, 256, 0, s>>>(gate_up, ff, reinterpret_cast<__nv_bfloat16*>(out));
  TROUPE_CUDA_LAUNCHED();
}

void float_to_bf16(const float* in, int64_t count, uint16_t* out, cudaStream_t s) {
  if (count == 0) return;
  to_bf16_kernel<<<grid_for(count, 256), 256, 0, s>>>(in, count, reinterpret_cast<__nv_bfloat16*>(out));
  TROUPE_CUDA_LAUNCHED();
}

void dequantize_to_bf16(const DeviceMatrix& w, uint16_t* out, cudaStream_t s) {
  dequantize_kernel<<<grid_for(w.rows * w.cols, 256), 256, 0, s>>>(static_cast<int>(w.format), w.q, w.scales, w.rows,
                                                                    w.cols, reinterpret_cast<__nv_bfloat16*>(out));
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::cuda
