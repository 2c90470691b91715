#include "engine/cpu/attention.h"

#include "engine/cpu/attention_tile.h"
#include "engine/cpu/isa.h"

namespace troupe::cpu {

namespace avx2 {
void attend_tile(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                 const AttentionTile& tile, float* qs, float* o, float* m, float* l, float* kt, float* vb);
}  // namespace avx2
namespace avx512 {
void attend_tile(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                 const AttentionTile& tile, float* qs, float* o, float* m, float* l);
}  // namespace avx512

namespace {

// Sizes the scratch for the largest tile of this shape (once: the shape is the model's).
void size_scratch(const AttentionShape& shape, AttentionScratch& s) {
  const auto rh = static_cast<size_t>(kTileRows * (shape.n_head / shape.n_head_kv));
  const auto d = static_cast<size_t>(shape.head_dim);
  if (s.q.size() >= rh * d && s.keys.size() >= kKvBlockPositions * d) return;
  s.q.assign(rh * d, 0.0f);
  s.o.assign(rh * d, 0.0f);
  s.m.assign(rh, 0.0f);
  s.l.assign(rh, 0.0f);
  s.keys.assign(kKvBlockPositions * d + 16, 0.0f);  // + 16: room to align
  s.values.assign(kKvBlockPositions * d + 16, 0.0f);
}

}  // namespace

namespace portable {
void attend_tile(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionShape& shape,
                 const AttentionTile& tile, AttentionScratch& s) {
  size_scratch(shape, s);
  attend_tile_portable(cache, layer, block_table.data(), shape, tile, s.q.data(), s.o.data(), s.m.data(), s.l.data(),
                       s.keys.data(), s.values.data());
}
}  // namespace portable

void attend_tile(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionShape& shape,
                 const AttentionTile& tile, AttentionScratch& s) {
  const Isa isa = active_isa();
  if (isa == Isa::scalar) return portable::attend_tile(cache, layer, block_table, shape, tile, s);
  size_scratch(shape, s);
  if (isa == Isa::avx512 && avx512::attention_fits(shape.head_dim) && shape.n_head / shape.n_head_kv <= 64)
    return avx512::attend_tile(cache, layer, block_table.data(), shape, tile, s.q.data(), s.o.data(), s.m.data(),
                               s.l.data());
  avx2::attend_tile(cache, layer, block_table.data(), shape, tile, s.q.data(), s.o.data(), s.m.data(), s.l.data(),
                    s.keys.data(), s.values.data());
}

}  // namespace troupe::cpu
