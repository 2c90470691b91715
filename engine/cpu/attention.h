#pragma once
// Attention of one query token over the KV of its sequence, read through the
// block table. Grouped-query: query head h reads KV head h / (n_head / n_head_kv).
#include <cstdint>
#include <span>

namespace troupe {
class KvCache;
}

namespace troupe::cpu {

struct AttentionShape {
  int64_t n_head;
  int64_t n_head_kv;
  int64_t head_dim;
};

// q: [n_head][head_dim] of the token at position n_ctx - 1; attends positions
// [0, n_ctx). Writes out: [n_head][head_dim] for heads [head_begin, head_end).
// scores: scratch of n_ctx floats.
void paged_attention(const float* q, const KvCache& cache, int64_t layer, std::span<const int32_t> block_table,
                     int32_t n_ctx, const AttentionShape& shape, int64_t head_begin, int64_t head_end, float* out,
                     float* scores);

}  // namespace troupe::cpu
