// The portable tiled attention (cpu/attention_tile.h) compiled with AVX2 and
// FMA: the same source and the same bits as the generic build, vectorized
// across each block's 16 positions.
#include "engine/cpu/attention_tile.h"

namespace troupe::cpu::avx2 {

void attend_tile(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                 const AttentionTile& tile, float* qs, float* o, float* m, float* l, float* kt, float* vb) {
  attend_tile_portable(cache, layer, table, shape, tile, qs, o, m, l, kt, vb);
}

}  // namespace troupe::cpu::avx2
