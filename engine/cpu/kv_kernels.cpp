#include "engine/cpu/kv_kernels.h"

#include "engine/cpu/half.h"
#include "engine/cpu/isa.h"

namespace troupe::cpu {
namespace {
bool use_avx2() { return active_isa() != Isa::scalar; }
}  // namespace

void to_f16(const float* x, uint16_t* out, int64_t n) {
  if (use_avx2()) return avx2::to_f16(x, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(x[i]);
}

void round_through_f16(float* x, int64_t n) {
  if (use_avx2()) return avx2::round_through_f16(x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

float dot_f16(const uint16_t* a, const uint16_t* b, int64_t n) {
  if (use_avx2()) return avx2::dot_f16(a, b, n);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(a[i]) * fp16_to_fp32(b[i]);
  return s;
}

void axpy_f16(float s, const uint16_t* v, float* y, int64_t n) {
  if (use_avx2()) return avx2::axpy_f16(s, v, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] += s * fp16_to_fp32(v[i]);
}

}  // namespace troupe::cpu
