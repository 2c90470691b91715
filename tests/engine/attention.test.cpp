// The tiled attention kernel against a float64 reference over the cache's
// own stored values, and its invariances: a row's bits do not depend on its
// tile, its heads' KV group split or the instruction set.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "engine/alibi.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/half.h"
#include "engine/cpu/isa.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "tests/engine/attention_cache.h"
#include "tests/engine/random_data.h"

using namespace troupe;
using namespace troupe::cpu;
using troupe::test::Filled;
using troupe::test::max_abs_error;

TEST_CASE("tiled attention equals a float64 reference from 1 to 40,000 positions, with GQA and a ragged block table") {
  // 14 query heads over 2 KV heads (groups of 7), as Qwen2.5-0.5B.
  for (int32_t n_ctx : {1, 2, 15, 16, 17, 33, 200, 1000, 4097, 40000}) {
    const int32_t rows = std::min(n_ctx, 5);
    const Filled f(14, 2, 64, n_ctx);
    const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), static_cast<uint32_t>(n_ctx), 0.5f);
    const auto got = f.attend(q, rows, n_ctx - rows + 1, kTileRows);
    const double err = max_abs_error(got, f.reference(q, rows, n_ctx - rows + 1));
    INFO(n_ctx << " positions: largest error " << err);
    // Queries and probabilities are rounded to half (11 bits) before their
    // products; values are O(1), so outputs are good to ~1e-3.
    CHECK(err < 2e-3);
  }
}

TEST_CASE("tiled attention reads q8_0, k8v4 and q4_0 pages directly, within the rounding of half-precision kernels") {
  for (bool wide : {false, true})  // a wide key layer: f16 keys beside quantized values
  for (KvType type : {KvType::q8_0, KvType::k8v4, KvType::q4_0}) {
    for (int32_t n_ctx : {7, 64, 1500}) {
      const Filled f(14, 2, 64, n_ctx, type, wide);
      INFO("wide keys " << wide);
      const auto q = troupe::test::gaussian(static_cast<size_t>(3 * f.config.q_dim()), 7, 0.5f);
      const double err = max_abs_error(f.attend(q, 3, n_ctx - 2, kTileRows), f.reference(q, 3, n_ctx - 2));
      INFO(kv_type_name(type) << ", " << n_ctx << " positions: largest error " << err);
      CHECK(err < 2e-3);  // against the values as stored: the kernel adds no error of its own
    }
  }
}

TEST_CASE("a row's attention is bitwise the same alone, in any tile, and with its KV heads run apart") {
  for (int32_t first_ctx : {1, 9, 16, 100}) {
    const int32_t rows = 37;  // prefill chunks of 16 + 16 + 5, or one row at a time
    const Filled f(14, 2, 64, first_ctx + rows - 1);
    const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 3, 0.5f);
    const auto tiled = f.attend(q, rows, first_ctx, kTileRows);
    CHECK(f.attend(q, rows, first_ctx, 1) == tiled);
    CHECK(f.attend(q, rows, first_ctx, 5) == tiled);
  }
}

TEST_CASE("with one query head per KV head the keys are dotted in place: equal to the reference, the same bits in any tile, window and instruction set") {
  for (KvType type : {KvType::f16, KvType::q8_0, KvType::k8v4, KvType::q4_0})
    for (int64_t head_dim : {64, 128})
      for (int32_t n_ctx : {1, 17, 300}) {
        if (!kv_type_fits(type, head_dim)) continue;
        const Filled f(4, 4, head_dim, n_ctx, type);
        const int32_t rows = std::min(n_ctx, 20), first_ctx = n_ctx - rows + 1;
        const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 9, 0.5f);
        for (int32_t window : {0, 24}) {
          INFO(kv_type_name(type) << ", head_dim " << head_dim << ", " << n_ctx << " positions, window " << window);
          const auto whole = f.attend(q, rows, first_ctx, kTileRows, window);
          CHECK(f.attend(q, rows, first_ctx, 1, window) == whole);  // decode rows read their values in place
          CHECK(f.attend(q, rows, first_ctx, 5, window) == whole);
          CHECK(max_abs_error(whole, f.reference(q, rows, first_ctx, window)) < 2e-3);
          set_isa_override(Isa::scalar);
          const auto portable = f.attend(q, rows, first_ctx, kTileRows, window);
          clear_isa_override();
          CHECK(portable == whole);
        }
      }
}

TEST_CASE("a decode row's KV heads in one tile, read page by page, give the bits of a tile per head, whole or chunk by chunk, on every instruction set") {
  {  // several heads are for one row, at most 16, within the model's
    const Filled f(20, 20, 64, 8);
    std::vector<float> q(static_cast<size_t>(2 * f.config.q_dim()), 0.5f), out(q.size());
    AttentionScratch scratch;
    for (const AttentionTile& bad : {AttentionTile{q.data(), out.data(), f.config.q_dim(), 2, 7, 0, 0, 4},
                                     AttentionTile{q.data(), out.data(), f.config.q_dim(), 1, 8, 0, 0, 17},
                                     AttentionTile{q.data(), out.data(), f.config.q_dim(), 1, 8, 16, 0, 5}})
      CHECK_THROWS_AS(attend_tile(f.cache, 0, f.table, f.shape(), bad, scratch), std::invalid_argument);
  }
  for (KvType type : {KvType::f16, KvType::q8_0, KvType::k8v4, KvType::q4_0})
    for (int64_t head_dim : {64, 128})
    for (bool alibi : {false, true})
    for (int32_t n_ctx : {1, 40, 300}) {
      for (int32_t window : {0, 24}) {
        if (!kv_type_fits(type, head_dim)) continue;
        Filled f(20, 20, head_dim, n_ctx, type);  // 20 heads: a tile of 16 and one of 4
        if (alibi) f.slopes = alibi_slopes(20, 8.0f);
        const auto q = troupe::test::gaussian(static_cast<size_t>(f.config.q_dim()), 13, 0.5f);
        INFO(kv_type_name(type) << ", head_dim " << head_dim << (alibi ? ", ALiBi, " : ", ") << n_ctx
                                << " positions, window " << window);
        for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
          if (isa > detect_isa()) continue;
          set_isa_override(isa);
          const auto per_head = f.attend(q, 1, n_ctx, 1, window);
          std::vector<float> whole(q.size(), -1.0f), chunked(q.size(), -1.0f);
          AttentionScratch scratch;
          for (int32_t h0 = 0; h0 < 20; h0 += kTileHeads) {
            const int32_t heads = std::min(kTileHeads, 20 - h0);
            const AttentionTile t{q.data(), whole.data(), f.config.q_dim(), 1, n_ctx, h0, window, heads};
            attend_tile(f.cache, 0, f.table, f.shape(), t, scratch);
            AttentionTile tc = t;
            tc.out = chunked.data();
            const ChunkRange chunks = tile_chunks(tc);
            std::vector<AttentionPartial> parts(static_cast<size_t>(chunks.last - chunks.first));
            for (int32_t c = chunks.first; c < chunks.last; ++c)
              attend_chunk(f.cache, 0, f.table, f.shape(), tc, c, scratch, parts[static_cast<size_t>(c - chunks.first)]);
            finish_tile(f.cache, f.shape(), tc, parts);
          }
          clear_isa_override();
          INFO(isa_name(isa));
          CHECK(whole == per_head);
          CHECK(chunked == per_head);
        }
      }
    }
}

TEST_CASE("tiled attention gives the same bits on every instruction set") {
  struct Shape {
    int64_t n_head, n_head_kv, head_dim;
  };
  for (const Shape s : {Shape{14, 2, 64}, Shape{8, 8, 128}, Shape{12, 4, 80}, Shape{16, 1, 32}, Shape{4, 2, 256}, Shape{6, 3, 48},
                        Shape{4, 2, 40}}) {
    for (KvType type : {KvType::f16, KvType::q8_0, KvType::k8v4, KvType::q4_0}) {
      if (!kv_type_fits(type, s.head_dim)) continue;
      for (int32_t n_ctx : {1, 29, 200, 600}) {  // 600: three chunks, merged
        const Filled f(s.n_head, s.n_head_kv, s.head_dim, n_ctx, type);
        const int32_t rows = std::min(n_ctx, 3);
        const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 5, 0.5f);
        clear_isa_override();
        set_isa_override(Isa::scalar);
        const auto want = f.attend(q, rows, n_ctx - rows + 1, kTileRows);
        clear_isa_override();
        for (Isa isa : {Isa::avx2, Isa::avx512}) {
          if (isa > detect_isa()) continue;
          set_isa_override(isa);
          const auto got = f.attend(q, rows, n_ctx - rows + 1, kTileRows);
          clear_isa_override();
          INFO("head_dim " << s.head_dim << ", " << kv_type_name(type) << ", " << n_ctx << " positions, " << isa_name(isa));
          CHECK(got == want);
        }
      }
    }
  }
}

TEST_CASE("sliding-window attention equals the reference below, at and beyond the window, in any tile and on every instruction set") {
  // Gemma 3 270M's shape: 4 query heads over 1 KV head of 256; its window of
  // 512, and windows that end inside a KV block.
  for (int32_t window : {512, 20, 16, 1}) {
    for (int32_t n_ctx : {1, 7, window - 1, window, window + 1, window + 17, 3 * window + 5, 2000}) {
      if (n_ctx < 1) continue;
      const int32_t rows = std::min(n_ctx, 21);  // a prefill chunk crossing tiles
      const int32_t first_ctx = n_ctx - rows + 1;
      for (KvType type : {KvType::f16, KvType::q8_0}) {
        const Filled f(4, 1, 256, n_ctx, type);
        const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), static_cast<uint32_t>(n_ctx), 0.5f);
        const auto got = f.attend(q, rows, first_ctx, kTileRows, window);
        const double err = max_abs_error(got, f.reference(q, rows, first_ctx, window));
        INFO("window " << window << ", " << n_ctx << " positions, " << kv_type_name(type) << ": largest error " << err);
        CHECK(err < 2e-3);
        // A row's bits do not depend on its tile (decode alone, or a chunk).
        CHECK(f.attend(q, rows, first_ctx, 1, window) == got);
        CHECK(f.attend(q, rows, first_ctx, 5, window) == got);
        clear_isa_override();
        for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
          if (isa > detect_isa()) continue;
          set_isa_override(isa);
          const auto other = f.attend(q, rows, first_ctx, kTileRows, window);
          clear_isa_override();
          INFO(isa_name(isa));
          CHECK(other == got);
        }
        // Past the window, a local row differs from a global one (the window is really applied).
        if (n_ctx > window + 16 && window >= 16) CHECK(f.attend(q, rows, first_ctx, kTileRows) != got);
      }
    }
  }
}

TEST_CASE("a tile read chunk by chunk and merged gives the bits of reading it whole, with and without a window") {
  for (int32_t window : {0, 512, 40}) {
    for (int32_t n_ctx : {5, 256, 257, 700, 3000}) {
      const int32_t rows = std::min(n_ctx, 16);
      const int32_t first_ctx = n_ctx - rows + 1;
      const Filled f(4, 1, 256, n_ctx);
      const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 9, 0.5f);
      const auto whole = f.attend(q, rows, first_ctx, kTileRows, window);
      for (int32_t r : {0, rows - 1}) {  // a prefill tile, and a decode row alone
        const int32_t tile_rows = r == 0 ? rows : 1;
        std::vector<float> out(q.size(), -1.0f);
        const AttentionTile t{q.data() + r * f.config.q_dim(), out.data() + r * f.config.q_dim(), f.config.q_dim(),
                              tile_rows, first_ctx + r, 0, window};
        const ChunkRange chunks = tile_chunks(t);
        INFO("window " << window << ", " << n_ctx << " positions, " << tile_rows << " rows: chunks " << chunks.first
                       << " to " << chunks.last);
        CHECK(chunks.last - chunks.first == (n_ctx + kChunkPositions - 1) / kChunkPositions -
                                                (window > 0 ? std::max(0, first_ctx + r - window) / kChunkPositions : 0));
        std::vector<AttentionPartial> parts(static_cast<size_t>(chunks.last - chunks.first));
        AttentionScratch scratch;
        for (int32_t c = chunks.first; c < chunks.last; ++c)  // in reverse: each chunk stands alone
          attend_chunk(f.cache, 0, f.table, f.shape(), t, chunks.last - 1 - (c - chunks.first), scratch,
                       parts[static_cast<size_t>(chunks.last - 1 - c)]);
        finish_tile(f.cache, f.shape(), t, parts);
        const auto first = static_cast<size_t>(r * f.config.q_dim());
        CHECK(std::equal(out.begin() + static_cast<std::ptrdiff_t>(first),
                         out.begin() + static_cast<std::ptrdiff_t>(first + static_cast<size_t>(tile_rows * f.config.q_dim())),
                         whole.begin() + static_cast<std::ptrdiff_t>(first)));
      }
    }
  }
}

TEST_CASE("ALiBi attention equals the reference from 1 to 5,000 positions, in any tile, chunk split and instruction set") {
  // BLOOM-560M's 16 heads, and 12 (not a power of two) over 4 KV heads; no
  // trained context limits ALiBi, so lengths run past any model's.
  struct Shape {
    int64_t n_head, n_head_kv, head_dim;
  };
  for (const Shape sh : {Shape{16, 16, 64}, Shape{12, 4, 64}}) {
    for (int32_t n_ctx : {1, 17, 300, 5000}) {
      Filled f(sh.n_head, sh.n_head_kv, sh.head_dim, n_ctx);
      f.slopes = alibi_slopes(sh.n_head, 8.0f);
      const int32_t rows = std::min(n_ctx, 19);
      const int32_t first_ctx = n_ctx - rows + 1;
      const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 4, 0.5f);
      const auto got = f.attend(q, rows, first_ctx, kTileRows);
      const double err = max_abs_error(got, f.reference(q, rows, first_ctx));
      INFO(sh.n_head << " heads, " << n_ctx << " positions: largest error " << err);
      CHECK(err < 2e-3);
      CHECK(f.attend(q, rows, first_ctx, 1) == got);
      clear_isa_override();
      for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
        if (isa > detect_isa()) continue;
        set_isa_override(isa);
        const auto other = f.attend(q, rows, first_ctx, kTileRows);
        clear_isa_override();
        INFO(isa_name(isa));
        CHECK(other == got);
      }
      if (n_ctx > 32) {  // the bias matters: without it the output differs
        Filled plain(sh.n_head, sh.n_head_kv, sh.head_dim, n_ctx);
        CHECK(plain.attend(q, rows, first_ctx, kTileRows) != got);
      }
    }
  }
}
