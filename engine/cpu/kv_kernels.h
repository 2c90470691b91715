#pragma once
// Kernels over the half-precision KV cache. Keys and values are stored as
// IEEE half; attention math runs in float. Queries and attention
// probabilities are rounded to half before their dot products, as
// half-precision attention kernels (llama.cpp's CPU path, GPU tensor cores)
// do, so troupe's greedy output agrees with theirs.
#include <cstdint>

namespace troupe::cpu {

// out[i] = half(x[i])
void to_f16(const float* x, uint16_t* out, int64_t n);
// x[i] = float(half(x[i]))
void round_through_f16(float* x, int64_t n);
// sum a[i] * b[i], both half, accumulated in float
float dot_f16(const uint16_t* a, const uint16_t* b, int64_t n);
// y[i] += s * float(v[i])
void axpy_f16(float s, const uint16_t* v, float* y, int64_t n);

namespace avx2 {
void to_f16(const float* x, uint16_t* out, int64_t n);
void round_through_f16(float* x, int64_t n);
float dot_f16(const uint16_t* a, const uint16_t* b, int64_t n);
void axpy_f16(float s, const uint16_t* v, float* y, int64_t n);
}  // namespace avx2

}  // namespace troupe::cpu
