// The portable tiled attention (cpu/attention_tile.h) compiled with AVX2 and
// FMA: the same source and the same bits as the generic build, vectorized
// across each block's 16 positions.
#include "engine/cpu/attention_tile.h"

namespace troupe::cpu::avx2 {

void attend_chunk(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l, float* kt,
                  float* vb) {
  attend_chunk_portable(cache, layer, table, shape, tile, p0, p1, qs, o, m, l, kt, vb);
}

}  // namespace troupe::cpu::avx2
