#pragma once
// Device helpers shared by the kernels: warp reductions and element decoding
// of the weight formats (device_matrix.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace troupe::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `shared` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

// One element of a device matrix (slow path: embedding rows, dequantization).
__device__ __forceinline__ float matrix_element(int format, const void* q, const void* scales, int64_t cols, int64_t r,
                                                int64_t c) {
  if (format == 0) return __bfloat162float(static_cast<const __nv_bfloat16*>(q)[r * cols + c]);
  const int64_t group = r * (cols / 32) + c / 32;
  if (format == 1)
    return static_cast<float>(static_cast<const int8_t*>(q)[r * cols + c]) *
           __half2float(static_cast<const __half*>(scales)[group]);
  const int i = static_cast<int>(c % 32);
  const uint8_t byte = static_cast<const uint8_t*>(q)[r * (cols / 2) + (c / 32) * 16 + (i & 15)];
  const int nib = i < 16 ? (byte & 15) : (byte >> 4);
  const __half2 sm = static_cast<const __half2*>(scales)[group];
  return __low2float(sm) * static_cast<float>(nib) + __high2float(sm);
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

}  // namespace troupe::cuda
