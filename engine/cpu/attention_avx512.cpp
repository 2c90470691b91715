// The tiled attention kernels (cpu/attention.h) with AVX-512, in the same
// order as the portable kernel's (same bits). With several query heads per
// KV head, each block's 16 key rows are decoded from the cache's format and
// transposed once, so a (row, head)'s 16 scores are one vector built by
// head_dim fused multiply-adds. With one, each key row is dotted in place
// into 16 lane chains that one fold turns into the block's scores (the
// lane order of attention.h).
#include "engine/cpu/attention_avx512_parts.h"

namespace troupe::cpu::avx512 {
namespace {

// Scores of kHeads heads of kRows rows against one block: each (row, head)
// is one chain of head_dim fmas in dimension order, as the portable
// kernel's, and the chains run side by side so each transposed key row is
// loaded once. Two rows' 7 heads make 14 chains: one row's 7 left the fmas
// waiting on their own latency.
template <int kVecs, int kHeads, int kRows>
void score_heads(const float* q, int64_t q_row, const float* kt, __m512 scale, float* s, int64_t s_row) {
  constexpr int d = 16 * kVecs;
  __m512 acc[kRows][kHeads];
  const __m512 k0 = _mm512_load_ps(kt);
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) acc[r][g] = _mm512_mul_ps(_mm512_set1_ps(q[r * q_row + g * d]), k0);
  for (int i = 1; i < d; ++i) {
    const __m512 ki = _mm512_load_ps(kt + i * kB);
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
      for (int g = 0; g < kHeads; ++g) acc[r][g] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * q_row + g * d + i]), ki, acc[r][g]);
  }
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) _mm512_store_ps(s + r * s_row + g * kB, _mm512_mul_ps(acc[r][g], scale));
}

// The scores of kRows consecutive rows' `heads` heads (queries q_row apart,
// scores s_row apart).
template <int kVecs, int kRows>
void score_group(const float* q, int64_t q_row, const float* kt, __m512 scale, int64_t heads, float* s, int64_t s_row) {
  constexpr int d = 16 * kVecs;
  in_eights(heads, [&](auto k, int64_t g) {
    score_heads<kVecs, decltype(k)::value, kRows>(q + g * d, q_row, kt, scale, s + g * kB, s_row);
  });
}


// Phase two for kHeads heads: o = o * corr + the block's probabilities times its values.
template <int kVecs, int kHeads, class Values>
void accumulate_heads(const float (*ph)[kB], const float* corr, const Values& value, int32_t first, int32_t valid,
                      float* o) {
  constexpr int d = 16 * kVecs;
  __m512 acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h) {
    const __m512 vc = _mm512_set1_ps(corr[h]);
    for (int c = 0; c < kVecs; ++c) acc[h][c] = _mm512_mul_ps(_mm512_loadu_ps(o + h * d + 16 * c), vc);
  }
  // A position's values once into registers, where they fit beside the
  // accumulators: read again from L1 for each head they cost more loads
  // than the two a cycle take.
  constexpr bool kHeld = (kHeads + 1) * kVecs + 2 <= 32;
  for (int j = first; j < valid; ++j) {
    __m512 v[kHeld ? kVecs : 1];
    if constexpr (kHeld)
      for (int c = 0; c < kVecs; ++c) {
        v[c] = value(j, c);
        asm("" : "+v"(v[c]));  // keeps it in a register: GCC would fold the load into each fma again
      }
    for (int h = 0; h < kHeads; ++h) {
      const __m512 pj = _mm512_set1_ps(ph[h][j]);
      for (int c = 0; c < kVecs; ++c) acc[h][c] = _mm512_fmadd_ps(pj, kHeld ? v[c] : value(j, c), acc[h][c]);
    }
  }
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(o + h * d + 16 * c, acc[h][c]);
}

// The online softmax step of one row's heads [0, heads) (at most 64) over a
// block, state m, l and o (d a head), in two phases. First each head's new
// max, its probabilities (rounded to half, into ph) and its block sum:
// independent chains, side by side. Then the values, value(j, c) for vector
// c of position j, accumulated into each head's output after its rescale,
// two or three heads at a time: one head's four fma chains wait on each
// other, several heads' keep the fmas busy. A head none of whose scores
// passes its running max keeps that max, and its rescale factor is
// attention_exp(0), exactly 1: its reduction and exp are skipped with the
// same bits. That is most blocks of a long context, once its largest scores
// (often its first positions) are behind.
template <int kVecs, class Values>
void update_row(const float* s_block, const Values& value, int64_t heads, int32_t first, int32_t valid, float* m,
                float* l, float* o) {
  constexpr int d = 16 * kVecs;
  alignas(64) float ph[64][kB];
  alignas(64) float corr[64];
  softmax_heads(s_block, heads, live_lanes(first, valid), m, l, corr,
                [&](int64_t h, __m512 p) { _mm512_store_ps(ph[h], round_half(p)); });
  in_head_groups<kVecs>(heads, [&](auto k, int64_t g) {
    accumulate_heads<kVecs, decltype(k)::value>(ph + g, corr + g, value, first, valid, o + g * d);
  });
}

// A tile's queries (rows x its query heads [first_head, first_head +
// heads)) into qs, in the keys' basis and rounded to half; its softmax state
// from nothing.
template <int kVecs>
void start_tile(const KvCache& cache, int64_t layer, const AttentionTile& tile, int64_t first_head, int64_t heads,
                float* qs, float* o, float* m, float* l) {
  constexpr int d = 16 * kVecs;
  const int64_t group = heads;
  const bool rotated_keys = kv_rotated(cache.key_format(layer));
  for (int32_t r = 0; r < tile.rows; ++r)
    for (int64_t g = 0; g < group; ++g) {
      const float* src = tile.q + r * tile.q_stride + (first_head + g) * d;
      float* dst = qs + (r * group + g) * d;
      std::memcpy(dst, src, sizeof(float) * d);
      if (rotated_keys) kv_rotate(dst, d);  // the keys' basis: dot products unchanged
      for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(dst + 16 * c, round_half(_mm512_loadu_ps(dst + 16 * c)));
    }
  const int64_t rh_count = tile.rows * group;
  for (int64_t i = 0; i < rh_count; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  std::memset(o, 0, sizeof(float) * static_cast<size_t>(rh_count * d));
}

// The tile's softmax state over the blocks in [p0, p1), from scratch (attention.h, chunks).
template <int kVecs>
void attend(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
            const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l) {
  constexpr int d = 16 * kVecs;
  const int64_t group = shape.n_head / shape.n_head_kv;
  alignas(64) float kt[d * kB];
  alignas(64) float vb[kB * d];
  constexpr int64_t kRowScores = 64 * kB;  // one row's heads (a KV group has at most 64)
  alignas(64) float scores[2 * kRowScores];
  start_tile<kVecs>(cache, layer, tile, tile.kv_head * group, group, qs, o, m, l);
  const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(d)));
  const auto decoded = [&vb](int j, int c) { return _mm512_load_ps(vb + j * d + 16 * c); };
  const TileBlocks blocks = tile_blocks(tile, p0, p1);
  for (int32_t b0 = blocks.start; b0 < blocks.end; b0 += kB) {
    const int32_t n = blocks.positions(b0);
    prefetch_block_ahead(cache, layer, table, tile.kv_head, b0, blocks.end);
    load_block<kVecs>(cache, layer, table, b0, n, tile.kv_head, kt, vb);
    // Rows two at a time (a row's context only grows: once one reads the
    // block, so does the next); a row behind its window wastes its scores.
    for (int32_t r = 0; r < tile.rows;) {
      if (tile.first_ctx + r <= b0) {
        ++r;
        continue;
      }
      const int32_t rows = r + 1 < tile.rows ? 2 : 1;
      const float* q = qs + r * group * d;
      if (rows == 2)
        score_group<kVecs, 2>(q, group * d, kt, scale, group, scores, kRowScores);
      else
        score_group<kVecs, 1>(q, group * d, kt, scale, group, scores, kRowScores);
      for (int32_t k = 0; k < rows; ++k, ++r) {
        const int32_t ctx = tile.first_ctx + r;
        const int32_t valid = ctx - b0 < kB ? ctx - b0 : kB;
        const int32_t first = first_in_window(tile, ctx, b0);
        if (first >= valid) continue;  // the block is behind this row's window
        float* row_scores = scores + k * kRowScores;
        if (shape.slopes) add_alibi(shape.slopes + tile.kv_head * group, group, b0 - (ctx - 1), row_scores);
        const int64_t rh = r * group;
        update_row<kVecs>(row_scores, decoded, group, first, valid, m + rh, l + rh, o + rh * d);
      }
    }
  }
}

// Lane order (attention.h, lane_order_scores): one query head per KV head.
//
// Position j's 16 lane chains, v[j] (lane l: the dimensions l, l + 16, ...),
// folded into one vector whose lane j is that position's score: c + 8 onto
// c, then c + 4, c + 2, c + 1, as tree16 (and the portable tree_sum16) add
// them, two positions' lanes side by side in each add. The shuffles leave
// the positions in the order 0 2 1 3 8 10 9 11 4 6 5 7 12 14 13 15; one
// permute restores it.
inline __m512 fold16(const __m512 (&v)[kB]) {
  __m512 w[8], x[4], y[2];
  for (int j = 0; j < 8; ++j)  // [t_j | t_j+8], 8 lanes each
    w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[j], v[j + 8], 0x44), _mm512_shuffle_f32x4(v[j], v[j + 8], 0xEE));
  for (int j = 0; j < 4; ++j)  // [u_j, u_j+8, u_j+4, u_j+12], 4 lanes each
    x[j] = _mm512_add_ps(_mm512_shuffle_f32x4(w[j], w[j + 4], 0x88), _mm512_shuffle_f32x4(w[j], w[j + 4], 0xDD));
  for (int j = 0; j < 2; ++j)  // pairs of lanes, positions p and p + 2 per 128 bits
    y[j] = _mm512_add_ps(_mm512_shuffle_ps(x[j], x[j + 2], 0x44), _mm512_shuffle_ps(x[j], x[j + 2], 0xEE));
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), z);
}

// A query's 16 lane chains against one key row.
template <int kVecs>
inline __m512 lane_chains(const float* q, const __m512 (&k)[kVecs]) {
  __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), k[0]);
  for (int c = 1; c < kVecs; ++c) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), k[c], acc);
  return acc;
}

// The kernel for one query head per KV head. Each key row is dotted in
// place (a transposed block would serve a single head), once for all the
// tile's rows. A lone row (a decode step) reads its values in place too;
// several rows decode the block's values once.
template <int kVecs>
void attend_lanes(const KvCache& cache, int64_t layer, const int32_t* table, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l) {
  constexpr int d = 16 * kVecs;
  alignas(64) float vb[kB * d];
  alignas(64) float scores[kB];
  alignas(64) float chains[kTileRows * kB * 16];  // row r, position j: 16 lane chains
  start_tile<kVecs>(cache, layer, tile, tile.kv_head, tile.heads, qs, o, m, l);
  const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(d)));
  const int32_t ps = cache.page_size();
  const KvRowFormat kf = cache.key_format(layer), vf = cache.value_format();
  const uint8_t* value_rows[kB] = {};
  const auto decoded = [&vb](int j, int c) { return _mm512_load_ps(vb + j * d + 16 * c); };
  const auto in_place = [&value_rows, vf](int j, int c) {
    switch (vf) {
      case KvRowFormat::f16: return f16_vec(value_rows[j], c);
      case KvRowFormat::q8_0: return q8_0_vec(value_rows[j], c);
      case KvRowFormat::q4_0: break;
    }
    return q4_0_vec(value_rows[j], c);
  };
  const TileBlocks blocks = tile_blocks(tile, p0, p1);
  for (int32_t b0 = blocks.start; b0 < blocks.end; b0 += kB) {
    const int32_t n = blocks.positions(b0);
    // The rows that read this block: [r0, tile.rows) (a row's context only grows).
    int32_t r0 = 0;
    while (tile.first_ctx + r0 <= b0) ++r0;
    // Head by head within the block: the heads' runs of a page lie side by side.
    for (int32_t hh = 0; hh < tile.heads; ++hh) {
      const int64_t head = tile.kv_head + hh;
      prefetch_block_ahead(cache, layer, table, head, b0, blocks.end);
      __m512 lone[kB];  // a single row's chains
      for (int32_t j = 0; j < kB; ++j) {
        if (j >= n) {
          lone[j] = _mm512_setzero_ps();
          for (int32_t r = r0; r < tile.rows; ++r) _mm512_store_ps(chains + (r * kB + j) * 16, lone[j]);
          continue;
        }
        const int32_t p = b0 + j;
        __m512 k[kVecs];
        row_vecs<kVecs>(kf, cache.key_row(layer, table[p / ps], p % ps, head), k);
        value_rows[j] = cache.value_row(layer, table[p / ps], p % ps, head);
        if (tile.rows == 1) {
          lone[j] = lane_chains<kVecs>(qs + hh * d, k);
          continue;
        }
        for (int32_t r = r0; r < tile.rows; ++r)
          _mm512_store_ps(chains + (r * kB + j) * 16, lane_chains<kVecs>(qs + r * d, k));
      }
      if (tile.rows > 1) {
        for (int32_t j = 0; j < n; ++j) decode_row<kVecs>(vf, value_rows[j], vb + j * d);
        std::memset(vb + n * d, 0, sizeof(float) * (kB - n) * d);
      }
      for (int32_t r = r0; r < tile.rows; ++r) {
        const int32_t ctx = tile.first_ctx + r;
        const int32_t valid = ctx - b0 < kB ? ctx - b0 : kB;
        const int32_t first = first_in_window(tile, ctx, b0);
        if (first >= valid) continue;  // the block is behind this row's window
        if (tile.rows > 1)
          for (int32_t j = 0; j < kB; ++j) lone[j] = _mm512_load_ps(chains + (r * kB + j) * 16);
        _mm512_store_ps(scores, _mm512_mul_ps(fold16(lone), scale));
        if (shape.slopes) add_alibi(shape.slopes + head, 1, b0 - (ctx - 1), scores);
        const int64_t rh = r * tile.heads + hh;  // heads > 1 only for a lone row
        if (tile.rows == 1)
          update_row<kVecs>(scores, in_place, 1, first, valid, m + rh, l + rh, o + rh * d);
        else
          update_row<kVecs>(scores, decoded, 1, first, valid, m + rh, l + rh, o + rh * d);
      }
    }
  }
}

// The shape's score order (attention.h) picks the kernel.
template <int kVecs>
void attend_either(const KvCache& cache, int64_t layer, const int32_t* t, const AttentionShape& shape,
                   const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l) {
  if (lane_order_scores(shape))
    attend_lanes<kVecs>(cache, layer, t, shape, tile, p0, p1, qs, o, m, l);
  else
    attend<kVecs>(cache, layer, t, shape, tile, p0, p1, qs, o, m, l);
}

}  // namespace

// attention.cpp's merge, 16 (row, head)s at a time: the same bits (exp16 is
// attention_exp lane by lane; products and sums in the same order, unfused).
void merge_partial(int64_t rh_count, int64_t d, const AttentionPartial& c, AttentionPartial& t) {
  for (int64_t rh0 = 0; rh0 < rh_count; rh0 += 16) {
    const int64_t n = rh_count - rh0 < 16 ? rh_count - rh0 : 16;
    const __mmask16 lanes = static_cast<__mmask16>((1u << n) - 1);
    const __m512 cl = _mm512_maskz_loadu_ps(lanes, &c.l[rh0]), cm = _mm512_maskz_loadu_ps(lanes, &c.m[rh0]);
    const __m512 tl = _mm512_maskz_loadu_ps(lanes, &t.l[rh0]), tm = _mm512_maskz_loadu_ps(lanes, &t.m[rh0]);
    const __m512 zero = _mm512_setzero_ps();
    // Lanes whose chunk held positions; of those, the first (copied) and the others (merged).
    const __mmask16 held = _mm512_mask_cmp_ps_mask(lanes, cl, zero, _CMP_NEQ_UQ);
    const __mmask16 first = _mm512_mask_cmp_ps_mask(held, tl, zero, _CMP_EQ_OQ);
    const __mmask16 merged = held & ~first;
    const __m512 m = _mm512_max_ps(tm, cm);  // tm > cm ? tm : cm
    alignas(64) float a[16], b[16];
    _mm512_store_ps(a, exp16(_mm512_sub_ps(tm, m)));
    _mm512_store_ps(b, exp16(_mm512_sub_ps(cm, m)));
    const __m512 merged_l = _mm512_add_ps(_mm512_mul_ps(tl, _mm512_load_ps(a)), _mm512_mul_ps(cl, _mm512_load_ps(b)));
    _mm512_mask_storeu_ps(&t.m[rh0], first, cm);
    _mm512_mask_storeu_ps(&t.m[rh0], merged, m);
    _mm512_mask_storeu_ps(&t.l[rh0], first, cl);
    _mm512_mask_storeu_ps(&t.l[rh0], merged, merged_l);
    for (int64_t i = 0; i < n; ++i) {
      const float* co = &c.o[(rh0 + i) * d];
      float* to = &t.o[(rh0 + i) * d];
      if (first >> i & 1) {
        std::memcpy(to, co, sizeof(float) * static_cast<size_t>(d));
      } else if (merged >> i & 1) {
        const __m512 va = _mm512_set1_ps(a[i]), vb = _mm512_set1_ps(b[i]);
        for (int64_t k = 0; k < d; k += 16)
          _mm512_storeu_ps(to + k, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(to + k), va),
                                                 _mm512_mul_ps(_mm512_loadu_ps(co + k), vb)));
      }
    }
  }
}

bool attention_fits(int64_t head_dim) {
  bool fits = false;
  for_head_dim(head_dim, [&](auto) { fits = true; });
  return fits;
}

void attend_chunk(const KvCache& cache, int64_t layer, const int32_t* t, const AttentionShape& shape,
                  const AttentionTile& tile, int32_t p0, int32_t p1, float* qs, float* o, float* m, float* l) {
  for_head_dim(shape.head_dim, [&](auto vecs) {
    attend_either<decltype(vecs)::value>(cache, layer, t, shape, tile, p0, p1, qs, o, m, l);
  });
}

}  // namespace troupe::cpu::avx512
