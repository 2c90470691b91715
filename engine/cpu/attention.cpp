#include "engine/cpu/attention.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cpu/attention_tile.h"
#include "engine/cpu/isa.h"

namespace troupe::cpu {

namespace avx2 {
void attend_chunk(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l, float* kt,
                  float* vb);
}  // namespace avx2
namespace avx512 {
void attend_chunk(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l);
void merge_partial(int64_t rh_count, int64_t d, const AttentionPartial& c, AttentionPartial& t);
}  // namespace avx512
namespace avx512bf16 {
void attend_chunk(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l);
}  // namespace avx512bf16

namespace {

size_t row_heads(const AttentionShape& shape) { return static_cast<size_t>(kTileRows * (shape.n_head / shape.n_head_kv)); }

void size_partial(const AttentionShape& shape, AttentionPartial& p) {
  const size_t rh = row_heads(shape), d = static_cast<size_t>(shape.head_dim);
  if (p.m.size() >= rh && p.o.size() >= rh * d) return;
  p.m.assign(rh, 0.0f);
  p.l.assign(rh, 0.0f);
  p.o.assign(rh * d, 0.0f);
}

// Sizes the scratch for the largest tile of this shape (once: the shape is the model's).
void size_scratch(const AttentionShape& shape, AttentionScratch& s) {
  const size_t rh = row_heads(shape), d = static_cast<size_t>(shape.head_dim);
  size_partial(shape, s.chunk);
  size_partial(shape, s.total);
  if (s.q.size() >= rh * d && s.keys.size() >= kKvBlockPositions * d) return;
  s.q.assign(rh * d, 0.0f);
  s.keys.assign(kKvBlockPositions * d + 16, 0.0f);  // + 16: room to align
  s.values.assign(kKvBlockPositions * d + 16, 0.0f);
}

void run_chunk(Isa isa, const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
               const AttentionTile& tile, int32_t chunk, AttentionScratch& s, AttentionPartial& out) {
  const int32_t p0 = chunk * kChunkPositions, p1 = p0 + kChunkPositions;
  const bool bf16 = shape.precision == AttentionPrecision::bf16;
  const bool fits512 = isa == Isa::avx512 && avx512::attention_fits(shape.head_dim) && shape.n_head / shape.n_head_kv <= 64;
  const bool bf16_kernel = bf16 && fits512 && detect_avx512_bf16();
  const auto kernel = [&](const AttentionTile& t, size_t at) {  // at: the tile's first (row, head) in the state
    const size_t d = static_cast<size_t>(shape.head_dim);
    float *qs = s.q.data() + at * d, *o = out.o.data() + at * d, *m = out.m.data() + at, *l = out.l.data() + at;
    if (isa == Isa::scalar)
      return attend_chunk_portable(cache, layer, table, shape, t, p0, p1, qs, o, m, l, s.keys.data(), s.values.data());
    if (bf16_kernel) return avx512bf16::attend_chunk(cache, layer, table, shape, t, p0, p1, qs, o, m, l);
    if (fits512 && !bf16) return avx512::attend_chunk(cache, layer, table, shape, t, p0, p1, qs, o, m, l);
    avx2::attend_chunk(cache, layer, table, shape, t, p0, p1, qs, o, m, l, s.keys.data(), s.values.data());
  };
  // Several heads of a lone row: the AVX-512 lane-order kernel reads them
  // page by page; the others take them one at a time (the same bits).
  if (tile.heads == 1 || (fits512 && lane_order_scores(shape))) return kernel(tile, 0);
  const auto group = static_cast<size_t>(shape.n_head / shape.n_head_kv);
  for (int32_t h = 0; h < tile.heads; ++h) {
    AttentionTile one = tile;
    one.kv_head = tile.kv_head + h;
    one.heads = 1;
    kernel(one, static_cast<size_t>(h) * group);
  }
}

// Folds one chunk's state into the running total, per (row, head). A chunk
// that held none of a row's positions has l = 0 (any other has l >= 1: its
// largest score contributes e^0) and is skipped; the first that did is copied.
void merge(Isa isa, int64_t rh_count, int64_t d, const AttentionPartial& c, AttentionPartial& t) {
  if (isa == Isa::avx512 && d % 16 == 0) return avx512::merge_partial(rh_count, d, c, t);  // the same bits
  for (int64_t rh = 0; rh < rh_count; ++rh) {
    if (c.l[rh] == 0.0f) continue;
    const float* co = &c.o[rh * d];
    float* to = &t.o[rh * d];
    if (t.l[rh] == 0.0f) {
      t.m[rh] = c.m[rh];
      t.l[rh] = c.l[rh];
      for (int64_t i = 0; i < d; ++i) to[i] = co[i];
      continue;
    }
    const float m = t.m[rh] > c.m[rh] ? t.m[rh] : c.m[rh];
    const float a = attention_exp(t.m[rh] - m), b = attention_exp(c.m[rh] - m);
    t.m[rh] = m;
    t.l[rh] = t.l[rh] * a + c.l[rh] * b;
    for (int64_t i = 0; i < d; ++i) to[i] = to[i] * a + co[i] * b;
  }
}

// A tile's (row, head)s: rows x heads x group, in that order.
int64_t tile_row_heads(const AttentionShape& shape, const AttentionTile& tile) {
  return tile.rows * tile.heads * (shape.n_head / shape.n_head_kv);
}

void write_out(const KvCache& cache, const AttentionShape& shape, const AttentionTile& tile, const AttentionPartial& t) {
  const int64_t d = shape.head_dim, heads = tile.heads * (shape.n_head / shape.n_head_kv);
  const int64_t first = tile.kv_head * (shape.n_head / shape.n_head_kv);
  const bool rotated_values = kv_rotated(cache.value_format());
  for (int32_t r = 0; r < tile.rows; ++r)
    for (int64_t g = 0; g < heads; ++g) {
      const int64_t rh = r * heads + g;
      float* dst = tile.out + r * tile.q_stride + (first + g) * d;
      for (int64_t i = 0; i < d; ++i) dst[i] = t.o[rh * d + i] / t.l[rh];
      if (rotated_values) kv_rotate(dst, d);  // back from the values' basis
    }
}

void clear_total(const AttentionShape& shape, const AttentionTile& tile, AttentionPartial& t) {
  const auto rh = static_cast<size_t>(tile_row_heads(shape, tile));
  std::fill(t.l.begin(), t.l.begin() + static_cast<std::ptrdiff_t>(rh), 0.0f);
}

void attend_tile_on(Isa isa, const KvCache& cache, int64_t layer, std::span<const int32_t> block_table,
                    const AttentionShape& shape, const AttentionTile& tile, AttentionScratch& s) {
  size_scratch(shape, s);
  const ChunkRange chunks = tile_chunks(tile);
  const int64_t rh_count = tile_row_heads(shape, tile);
  clear_total(shape, tile, s.total);
  for (int32_t c = chunks.first; c < chunks.last; ++c) {
    run_chunk(isa, cache, layer, block_table.data(), shape, tile, c, s, s.chunk);
    merge(isa, rh_count, shape.head_dim, s.chunk, s.total);
  }
  write_out(cache, shape, tile, s.total);
}

// Several KV heads in one tile: a lone row's, within the model's (the
// scratch holds kTileRows x group (row, head)s, kTileHeads <= kTileRows).
static_assert(kTileHeads <= kTileRows);
void check_heads(const AttentionShape& shape, const AttentionTile& tile) {
  if (tile.heads != 1 && (tile.heads < 1 || tile.rows != 1 || tile.heads > kTileHeads ||
                          tile.kv_head + tile.heads > shape.n_head_kv))
    throw std::invalid_argument("attention tile of " + std::to_string(tile.heads) + " KV heads from " +
                                std::to_string(tile.kv_head) + " over " + std::to_string(tile.rows) +
                                " rows: several heads are for one row, at most " + std::to_string(kTileHeads) +
                                ", within the model's");
}

}  // namespace

ChunkRange tile_chunks(const AttentionTile& tile) {
  const int32_t last_ctx = tile.first_ctx + tile.rows - 1;  // positions [.., last_ctx) are read
  return {first_block_start(tile) / kChunkPositions, (last_ctx + kChunkPositions - 1) / kChunkPositions};
}

namespace portable {
void attend_tile(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionShape& shape,
                 const AttentionTile& tile, AttentionScratch& s) {
  check_heads(shape, tile);
  attend_tile_on(Isa::scalar, cache, layer, block_table, shape, tile, s);
}
}  // namespace portable

void attend_tile(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionShape& shape,
                 const AttentionTile& tile, AttentionScratch& s) {
  check_heads(shape, tile);
  attend_tile_on(active_isa(), cache, layer, block_table, shape, tile, s);
}

void attend_chunk(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t chunk, AttentionScratch& s, AttentionPartial& out) {
  check_heads(shape, tile);
  size_scratch(shape, s);
  size_partial(shape, out);
  run_chunk(active_isa(), cache, layer, block_table.data(), shape, tile, chunk, s, out);
}

void prefetch_kv_rows(const KvCache& cache, int64_t layer, const int32_t* block_table, int64_t kv_head, int32_t first,
                      int32_t end) {
  const int32_t ps = cache.page_size();
  const int64_t kb = cache.key_row_bytes(layer), vb = cache.value_row_bytes();
  const auto ask = [](const uint8_t* run, int64_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(run);
    for (uintptr_t line = a & ~uintptr_t{63}; line < a + static_cast<uintptr_t>(bytes); line += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
  };
  // A page's rows of one head are one run (engine/kv_cache.h): a run a page.
  for (int32_t p = first; p < end;) {
    const int32_t page = block_table[p / ps], slot = p % ps;
    const int32_t n = std::min(end - p, ps - slot);
    ask(cache.key_row(layer, page, slot, kv_head), n * kb);
    ask(cache.value_row(layer, page, slot, kv_head), n * vb);
    p += n;
  }
}

void prefetch_tile_kv(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionTile& tile) {
  // Its first positions only: the kernel asks for each next block's rows
  // itself as it goes (prefetch_kv_rows), and a long context's would not
  // stay in cache until they are read.
  const int32_t first = first_block_start(tile);
  const int32_t end = std::min(tile.first_ctx + tile.rows - 1, first + kPrefetchPositions);
  prefetch_kv_rows(cache, layer, block_table.data(), tile.kv_head, first, end);
}

void finish_tile(const KvCache& cache, const AttentionShape& shape, const AttentionTile& tile,
                 std::span<const AttentionPartial> chunks) {
  thread_local AttentionPartial total;  // no allocation per step once sized
  size_partial(shape, total);
  clear_total(shape, tile, total);
  const int64_t rh_count = tile_row_heads(shape, tile);
  for (const AttentionPartial& c : chunks) merge(active_isa(), rh_count, shape.head_dim, c, total);
  write_out(cache, shape, tile, total);
}

}  // namespace troupe::cpu
