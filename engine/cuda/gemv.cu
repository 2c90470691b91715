// Fused dequantize-GEMV for small batches (decode, draft windows): one warp
// per output row streams the row's weights once in 16-byte loads and dots
// them with up to kGemvTokens activation rows (read through L1/L2, they are
// small). The input transform is fused: RMSNorm (the norm's scalar is applied
// to the finished dot product) or SwiGLU (silu(gate) * up computed on load),
// and so is the residual add (accumulate).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace troupe::cuda {
namespace {

constexpr int kWarps = 4;

template <int Kind>
__device__ __forceinline__ float4 input4(const float* x, const float* gain, int64_t cols, int64_t c) {
  if constexpr (Kind == GemvInput::swiglu) {
    const float4 g = *reinterpret_cast<const float4*>(x + c);
    const float4 u = *reinterpret_cast<const float4*>(x + cols + c);
    return make_float4(silu(g.x) * u.x, silu(g.y) * u.y, silu(g.z) * u.z, silu(g.w) * u.w);
  } else {
    float4 v = *reinterpret_cast<const float4*>(x + c);
    if constexpr (Kind == GemvInput::rmsnorm) {
      const float4 g = __ldg(reinterpret_cast<const float4*>(gain + c));
      v = make_float4(v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
    }
    return v;
  }
}

// Decodes one 16-byte load into E weights (bf16: 8, int8: 16, int4: 32 with
// the int4 nibble order of device_matrix.h) as floats, before scaling.
template <int Format, int E>
__device__ __forceinline__ void decode16(const uint4 raw, float (&w)[E]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (Format == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[2 * i] = __uint_as_float(words[i] << 16);
      w[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  } else if constexpr (Format == 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = static_cast<float>(static_cast<int8_t>((words[i / 4] >> (8 * (i % 4))) & 0xff));
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t byte = (words[i / 4] >> (8 * (i % 4))) & 0xff;
      w[i] = static_cast<float>(byte & 15);
      w[i + 16] = static_cast<float>(byte >> 4);
    }
  }
}

template <int Format, int NT, int Kind>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const void* __restrict__ wq, const void* __restrict__ wscales, int64_t rows, int64_t cols,
                const float* __restrict__ x, int n, int64_t x_stride, const float* __restrict__ gain, float eps,
                float* __restrict__ y, int accumulate) {
  constexpr int E = Format == 0 ? 8 : (Format == 1 ? 16 : 32);
  __shared__ float inv[NT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if constexpr (Kind == GemvInput::rmsnorm) {
    for (int t = warp; t < n; t += kWarps) {
      float ss = 0;
      for (int64_t c = lane * 4; c < cols; c += 128) {
        const float4 v = *reinterpret_cast<const float4*>(x + t * x_stride + c);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      ss = warp_sum(ss);
      if (lane == 0) inv[t] = rsqrtf(ss / static_cast<float>(cols) + eps);
    }
    __syncthreads();
  }
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (r >= rows) return;

  const int64_t row_bytes = Format == 0 ? cols * 2 : (Format == 1 ? cols : cols / 2);
  const uint4* wrow = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(wq) + r * row_bytes);
  const int64_t chunks = cols / E;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

#pragma unroll 2
  for (int64_t ch = lane; ch < chunks; ch += 32) {
    float w[E];
    decode16<Format, E>(__ldg(wrow + ch), w);
    const int64_t c0 = ch * E;
    float scale = 1.0f, minv = 0.0f;
    if constexpr (Format == 1) {
      scale = __half2float(static_cast<const __half*>(wscales)[r * (cols / 32) + c0 / 32]);
    } else if constexpr (Format == 2) {
      const __half2 sm = static_cast<const __half2*>(wscales)[r * (cols / 32) + c0 / 32];
      scale = __low2float(sm);
      minv = __high2float(sm);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n) {
        const float* xt = x + t * x_stride;
        float dot = 0.0f, sum = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e += 4) {
          const float4 v = input4<Kind>(xt, gain, cols, c0 + e);
          dot += w[e] * v.x + w[e + 1] * v.y + w[e + 2] * v.z + w[e + 3] * v.w;
          if constexpr (Format == 2) sum += v.x + v.y + v.z + v.w;
        }
        acc[t] += Format == 0 ? dot : (Format == 1 ? scale * dot : scale * dot + minv * sum);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t < n) {
      float v = warp_sum(acc[t]);
      if constexpr (Kind == GemvInput::rmsnorm) v *= inv[t];
      if (lane == 0) {
        float* out = y + t * rows + r;
        *out = accumulate ? *out + v : v;
      }
    }
  }
}

template <int Format, int Kind>
void launch_kind(const DeviceMatrix& w, const float* x, int n, const GemvInput& in, float* y, bool acc, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((w.rows + kWarps - 1) / kWarps)), block(kWarps * 32);
  const int a = acc ? 1 : 0;
  if (n == 1)
    gemv_kernel<Format, 1, Kind><<<grid, block, 0, s>>>(w.q, w.scales, w.rows, w.cols, x, n, in.x_stride, in.gain, in.eps, y, a);
  else if (n == 2)
    gemv_kernel<Format, 2, Kind><<<grid, block, 0, s>>>(w.q, w.scales, w.rows, w.cols, x, n, in.x_stride, in.gain, in.eps, y, a);
  else if (n <= 4)
    gemv_kernel<Format, 4, Kind><<<grid, block, 0, s>>>(w.q, w.scales, w.rows, w.cols, x, n, in.x_stride, in.gain, in.eps, y, a);
  else
    gemv_kernel<Format, 8, Kind><<<grid, block, 0, s>>>(w.q, w.scales, w.rows, w.cols, x, n, in.x_stride, in.gain, in.eps, y, a);
  TROUPE_CUDA_LAUNCHED();
}

template <int Format>
void launch_format(const DeviceMatrix& w, const float* x, int n, const GemvInput& in, float* y, bool acc, cudaStream_t s) {
  switch (in.kind) {
    case GemvInput::plain: return launch_kind<Format, GemvInput::plain>(w, x, n, in, y, acc, s);
    case GemvInput::rmsnorm: return launch_kind<Format, GemvInput::rmsnorm>(w, x, n, in, y, acc, s);
    case GemvInput::swiglu: return launch_kind<Format, GemvInput::swiglu>(w, x, n, in, y, acc, s);
  }
}

}  // namespace

void gemv(const DeviceMatrix& w, const float* x, int n, const GemvInput& in, float* y, bool accumulate, cudaStream_t s) {
  if (w.cols % 32 != 0) throw std::invalid_argument("gemv: columns must be a multiple of 32");
  if (in.x_stride % 4 != 0) throw std::invalid_argument("gemv: activation stride must be a multiple of 4 floats");
  for (int t0 = 0; t0 < n; t0 += kGemvTokens) {
    const int m = n - t0 < kGemvTokens ? n - t0 : kGemvTokens;
    const float* xt = x + t0 * in.x_stride;
    float* yt = y + static_cast<int64_t>(t0) * w.rows;
    switch (w.format) {
      case DeviceFormat::bf16: launch_format<0>(w, xt, m, in, yt, accumulate, s); break;
      case DeviceFormat::int8: launch_format<1>(w, xt, m, in, yt, accumulate, s); break;
      case DeviceFormat::int4: launch_format<2>(w, xt, m, in, yt, accumulate, s); break;
    }
  }
}

}  // namespace troupe::cuda
