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

// Heads attended together at most, over one KV head's rows.
constexpr int64_t kMaxAttentionHeads = 8;
// Floats of scratch paged_attention needs for a context of n_ctx.
constexpr int64_t attention_scratch(int64_t n_ctx) { return kMaxAttentionHeads * ((n_ctx + 15) / 16 * 16); }

// q: [n_head][head_dim] of the token at position n_ctx - 1; attends positions
// [0, n_ctx). Writes out: [n_head][head_dim] for heads [head_begin, head_end).
// scores: scratch of attention_scratch(n_ctx) floats. A head's result does not
// depend on the range it is computed in.
void paged_attention(const float* q, const KvCache& cache, int64_t layer, std::span<const int32_t> block_table,
                     int32_t n_ctx, const AttentionShape& shape, int64_t head_begin, int64_t head_end, float* out,
                     float* scores);

namespace avx512 {
// The heads of a KV group share each row's conversion from half.
bool paged_attention_fits(int64_t head_dim);
void paged_attention(const float* q, const KvCache& cache, int64_t layer, std::span<const int32_t> block_table,
                     int32_t n_ctx, const AttentionShape& shape, int64_t head_begin, int64_t head_end, float* out,
                     float* scores);
}  // namespace avx512

}  // namespace troupe::cpu
