#include "engine/cpu/attention.h"

#include <cmath>
#include <cstring>

#include "engine/cpu/isa.h"
#include "engine/cpu/kv_kernels.h"
#include "engine/cpu/ops.h"
#include "engine/kv_cache.h"

namespace troupe::cpu {

void paged_attention(const float* q, const KvCache& cache, int64_t layer, std::span<const int32_t> block_table,
                     int32_t n_ctx, const AttentionShape& shape, int64_t head_begin, int64_t head_end, float* out,
                     float* scores) {
  if (active_isa() == Isa::avx512 && avx512::paged_attention_fits(shape.head_dim))
    return avx512::paged_attention(q, cache, layer, block_table, n_ctx, shape, head_begin, head_end, out, scores);
  const int64_t d = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int32_t ps = cache.page_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  uint16_t qh[1024];
  for (int64_t h = head_begin; h < head_end; ++h) {
    const int64_t kvh = h / group;
    to_f16(q + h * d, qh, d);
    for (int32_t p = 0; p < n_ctx; ++p) {
      const uint16_t* k = cache.key(layer, block_table[p / ps], p % ps) + kvh * d;
      scores[p] = dot_f16(qh, k, d) * scale;
    }
    softmax(scores, n_ctx);
    round_through_f16(scores, n_ctx);
    float* oh = out + h * d;
    std::memset(oh, 0, sizeof(float) * d);
    for (int32_t p = 0; p < n_ctx; ++p) {
      const uint16_t* v = cache.value(layer, block_table[p / ps], p % ps) + kvh * d;
      axpy_f16(scores[p], v, oh, d);
    }
  }
}

}  // namespace troupe::cpu
