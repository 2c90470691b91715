#pragma once
// Causal attention over paged KV, tiled (flash-style): a tile is up to
// kTileRows consecutive query rows of one sequence (a prefill chunk, a verify
// window, or one decode token) and the query heads of one KV head. The KV is
// read block by block (16 positions, through the block table), each block
// converted once from the cache's format (engine/kv_type.h) for every row and
// head of the tile, with an online softmax per (row, head): a running max and
// sum, the output rescaled as the max grows. No row x context score matrix
// exists; memory is the tile's state and two blocks.
//
// A row's arithmetic depends only on its own query, its context length and
// the KV, never on the other rows or heads of its tile, so a token's output
// is bitwise the same alone, in any tile, in any batch, on any thread (the
// speculative verifier relies on it). Queries and attention probabilities are
// rounded to half before their products, as half-precision kernels do; in
// bf16 (engine/attention_precision.h) every operand of both products is
// rounded to bfloat16 and the products are summed two at a time (a pair's
// odd element first, then its even one, each an exact product added with one
// rounding: what vdpbf16ps computes), over the dimensions for a score and
// over a block's positions for the output; its softmax is in base 2 (the
// queries scaled by log2 e / sqrt(head_dim) before they are rounded), with a
// shorter exponential and a running max that moves only when a score passes
// it by a factor 2^8 (cpu/attention_exp.h).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/attention_precision.h"
#include "engine/cpu/aligned_vector.h"

namespace troupe {
class KvCache;
}

namespace troupe::cpu {

struct AttentionShape {
  int64_t n_head;
  int64_t n_head_kv;
  int64_t head_dim;
  // ALiBi (engine/alibi.h): n_head slopes; a score for a key `distance`
  // positions behind its query gets slope * -distance added after scaling,
  // computed here from positions (no bias matrix). Null: none.
  const float* slopes = nullptr;
  AttentionPrecision precision = AttentionPrecision::fp32;
};

// How a score's head_dim products are summed, which fixes its bits on every
// instruction set. With one query head per KV head (and a head_dim of whole
// 16s) a block's keys serve a single head of each row, so the AVX-512 kernel
// dots each key row in place rather than transposing the block: dimension i
// goes to chain i % 16 (fmas in dimension order), and the 16 chains are
// folded in one fixed tree (c + 8 onto c, then c + 4, c + 2, c + 1). With
// several query heads a transposed block serves them all, and a score is one
// chain of fmas in dimension order. bf16 scores are always one chain, of
// pairs in dimension order.
inline bool lane_order_scores(const AttentionShape& shape) {
  return shape.precision == AttentionPrecision::fp32 && shape.n_head == shape.n_head_kv && shape.head_dim % 16 == 0;
}

// 32 rows: each block's decoding serves twice the (row, head)s of 16, the
// long prefill's gain (docs/DECISIONS.md, "Attention in bf16").
constexpr int32_t kTileRows = 32;
constexpr int32_t kTileHeads = 16;  // a lone row's KV heads in one tile (AttentionTile::heads)
constexpr int32_t kKvBlockPositions = 16;

struct AttentionTile {
  const float* q;   // rows x [n_head][head_dim], row stride q_stride floats
  float* out;       // the same layout
  int64_t q_stride;
  int32_t rows;     // 1..kTileRows
  int32_t first_ctx;  // row r attends positions [0, first_ctx + r)
  int64_t kv_head;
  // A local (sliding-window) layer's window: row r then attends only
  // [first_ctx + r - window, first_ctx + r); 0 = every earlier position.
  int32_t window = 0;
  // KV heads [kv_head, kv_head + heads). More than one only for a lone row
  // (rows == 1) of a model with one query head per KV head, at most
  // kTileHeads: the kernel then reads each page's runs of all those heads in
  // address order (a page keeps its heads' runs side by side) rather than
  // one head's runs scattered over every page. Each head's arithmetic is
  // that of a tile of its own.
  int32_t heads = 1;
};

// The first position the tile reads: row 0's window start, down to a block
// boundary (blocks keep their alignment, so a row's blocks are the same
// whichever tile it is in).
inline int32_t first_block_start(const AttentionTile& tile) {
  if (tile.window <= 0 || tile.first_ctx <= tile.window) return 0;
  return (tile.first_ctx - tile.window) / kKvBlockPositions * kKvBlockPositions;
}

// Of a block starting at b0, the first slot row ctx's window reaches (0 when
// the whole block is in it; >= kKvBlockPositions when none is).
inline int32_t first_in_window(const AttentionTile& tile, int32_t ctx, int32_t b0) {
  if (tile.window <= 0) return 0;
  const int32_t lo = ctx - tile.window - b0;
  return lo > 0 ? lo : 0;
}

// Of the block at b0, the slots [first, valid) row r of a tile reads;
// false when it reads none (the block is past its context or behind its window).
struct RowSpan {
  int32_t first = 0, valid = 0;
};
inline bool row_span(const AttentionTile& tile, int32_t r, int32_t b0, RowSpan& span) {
  const int32_t ctx = tile.first_ctx + r;
  if (ctx <= b0) return false;
  span.valid = ctx - b0 < kKvBlockPositions ? ctx - b0 : kKvBlockPositions;
  span.first = first_in_window(tile, ctx, b0);
  return span.first < span.valid;
}

// The blocks a kernel reads of a tile within positions [p0, p1): from b0 =
// start while b0 < end, each of positions(b0) positions.
struct TileBlocks {
  int32_t start, end, last_ctx;
  int32_t positions(int32_t b0) const { return last_ctx - b0 < kKvBlockPositions ? last_ctx - b0 : kKvBlockPositions; }
};
inline TileBlocks tile_blocks(const AttentionTile& tile, int32_t p0, int32_t p1) {
  const int32_t last_ctx = tile.first_ctx + tile.rows - 1;  // positions [.., last_ctx) are read
  return {first_block_start(tile) > p0 ? first_block_start(tile) : p0, last_ctx < p1 ? last_ctx : p1, last_ctx};
}

// A long context is read in chunks at fixed positions, [0, 256), [256, 512),
// ...: each chunk's softmax state (per row and head: max m, sum l and the
// unnormalized output o) starts from nothing, and the chunks are merged in
// order. A row's bits then do not depend on whether one thread reads all its
// chunks (attend_tile) or several threads read one each and finish_tile
// merges them (Model, when a step has fewer tiles than threads: a decode
// step of one sequence on a model with one KV head has a single tile).
constexpr int32_t kChunkPositions = 256;

// The state of one chunk, for each (row, head) of a tile.
struct AttentionPartial {
  AlignedVector<float> m, l, o;  // per (row, head) in rows x heads x group order; o: x head_dim
};

// Per-thread working memory, sized for a shape by the first call.
struct AttentionScratch {
  AlignedVector<float> q, keys, values;
  AttentionPartial chunk, total;
};

// The chunks [first, last) that a tile reads (its first row's window start
// to its last row's context end).
struct ChunkRange {
  int32_t first, last;
};
ChunkRange tile_chunks(const AttentionTile& tile);

void attend_tile(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionShape& shape,
                 const AttentionTile& tile, AttentionScratch& scratch);
// One chunk of a tile, into `out` (sized here).
void attend_chunk(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t chunk, AttentionScratch& scratch, AttentionPartial& out);
// Merges a tile's chunks, in order, and writes tile.out.
void finish_tile(const KvCache& cache, const AttentionShape& shape, const AttentionTile& tile,
                 std::span<const AttentionPartial> chunks);

namespace portable {
void attend_tile(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionShape& shape,
                 const AttentionTile& tile, AttentionScratch& scratch);
}  // namespace portable

namespace avx512 {
bool attention_fits(int64_t head_dim);  // 16, 32, ..., 128, 160, 192, 256
}  // namespace avx512

// Prefetching. A tile's rows are a run per page (engine/kv_cache.h), but
// decode tiles are short and a run is a page's worth (2 KB of f16 keys at
// head_dim 64), too short for the hardware prefetchers to get ahead of the
// kernel. So the kernels ask for the next block while they compute one
// (one block ahead measured faster than two or three), and Model asks for a
// tile's first block while its thread computes the tile before it.
constexpr int32_t kPrefetchAhead = 1 * kKvBlockPositions;  // the kernels' distance
constexpr int32_t kPrefetchPositions = kPrefetchAhead;        // the blocks before the kernels' first
// The K and V rows of positions [first, end) of one KV head, a page's run at a time.
void prefetch_kv_rows(const KvCache& cache, int64_t layer, const int32_t* block_table, int64_t kv_head, int32_t first,
                      int32_t end);
// What a kernel computing the block at b0 of a tile that reads up to `end`
// asks for: the block kPrefetchAhead further on, if the tile reads it.
inline void prefetch_block_ahead(const KvCache& cache, int64_t layer, const int32_t* block_table, int64_t kv_head,
                                 int32_t b0, int32_t end) {
  const int32_t first = b0 + kPrefetchAhead;
  if (first < end)
    prefetch_kv_rows(cache, layer, block_table, kv_head, first,
                     end < first + kKvBlockPositions ? end : first + kKvBlockPositions);
}
// A tile's first kPrefetchPositions positions.
void prefetch_tile_kv(const KvCache& cache, int64_t layer, std::span<const int32_t> block_table, const AttentionTile& tile);

}  // namespace troupe::cpu
