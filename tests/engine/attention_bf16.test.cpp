// bf16 attention (engine/attention_precision.h) against the float64
// reference over the keys and values as stored, and its invariances: a row's
// bits in any tile and chunk split, the same bits from the portable kernel
// with and without AVX2, and the AVX512_BF16 kernel within a bound of them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/alibi.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/isa.h"
#include "engine/kv_cache.h"
#include "tests/engine/attention_cache.h"
#include "tests/engine/random_data.h"

using namespace troupe;
using namespace troupe::cpu;
using troupe::test::Filled;
using troupe::test::max_abs_error;

namespace {

struct Bf16Shape {
  int64_t n_head, n_head_kv, head_dim;
  bool alibi;
};
// Qwen2.5-0.5B's groups of 7, one query head per KV head, ALiBi over
// groups of 3, a lone KV head, and head dims of 32 to 256 (80: an odd
// number of 16-value vectors; 256: Gemma's, one head's sums at a time).
constexpr Bf16Shape kShapes[] = {{14, 2, 64, false}, {8, 8, 128, false}, {12, 4, 64, true}, {16, 1, 32, false},
                                 {12, 4, 80, false},  {4, 1, 256, false}};

// A cache of the shape's, read in bf16.
struct Bf16Cache : Filled {
  Bf16Cache(const Bf16Shape& s, int32_t n_ctx, KvType type) : Filled(s.n_head, s.n_head_kv, s.head_dim, n_ctx, type) {
    precision = AttentionPrecision::bf16;
    if (s.alibi) slopes = alibi_slopes(s.n_head, 8.0f);
  }
};

}  // namespace

TEST_CASE("bf16 attention equals a float64 reference within bfloat16's rounding, for every KV type and shape, to 40,000 positions") {
  double largest = 0;
  for (const Bf16Shape& s : kShapes)
    for (KvType type : {KvType::f16, KvType::q8_0, KvType::k8v4, KvType::q4_0})
      for (int32_t n_ctx : {1, 17, 300, 4097, 40000}) {
        if (!kv_type_fits(type, s.head_dim) || (n_ctx == 40000 && (type != KvType::f16 || s.head_dim != 64))) continue;
        const Bf16Cache f(s, n_ctx, type);
        const int32_t rows = std::min(n_ctx, 5), first_ctx = n_ctx - rows + 1;
        const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 21, 0.5f);
        const double err = max_abs_error(f.attend(q, rows, first_ctx, kTileRows), f.reference(q, rows, first_ctx));
        largest = std::max(largest, err);
        INFO(s.n_head << "/" << s.n_head_kv << " heads of " << s.head_dim << (s.alibi ? ", ALiBi, " : ", ")
                      << kv_type_name(type) << ", " << n_ctx << " positions: largest error " << err);
        // Every operand rounded to 8 significant bits (half: 11). A lone
        // position's output is its value so rounded, off by up to 2^-7 for
        // these values (|v| < 4; 2^-8 below 2); a longer context averages
        // that away while the scores' rounding adds less. Measured: 2^-7.
        CHECK(err < 1.2e-2);
      }
  WARN("bf16 attention's largest error against float64: " << largest);
}

TEST_CASE("bf16 attention rounds every operand: within 1e-3 of a float64 reference over bfloat16 operands (2.5e-3 over a few positions), a lone position's value exactly") {
  double largest = 0;
  for (const Bf16Shape& s : kShapes)
    for (int32_t n_ctx : {1, 2, 17, 300, 4097}) {
      // ALiBi's few near keys take most of a row's weight, and a weight is
      // rounded at the running maximum of its block, not the row's: it
      // moves an output by up to 2^-9 of a value, as the unrounded bound.
      if (s.alibi) continue;
      const Bf16Cache f(s, n_ctx, KvType::f16);
      const int32_t rows = std::min(n_ctx, 5), first_ctx = n_ctx - rows + 1;
      const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 22, 0.5f);
      const auto got = f.attend(q, rows, first_ctx, kTileRows);
      const double err = max_abs_error(got, f.reference(q, rows, first_ctx, 0, true));
      largest = std::max(largest, err);
      INFO(s.n_head << "/" << s.n_head_kv << " heads of " << s.head_dim << ", " << n_ctx << " positions: error " << err);
      // A weight is rounded where the kernel holds it: against its (row,
      // head)'s running max, which stays up to 2^8 below the row's max
      // (cpu/attention_exp.h), not against the row's max as here; the two
      // roundings differ by up to 2^-8 of the weight, and the exponential's
      // 1.1e-4 tips one now and then. A few weights (17 positions) show it
      // most: measured 2.0e-3 there, 7.4e-4 at 300, 3.9e-4 at 4,097.
      CHECK(err < (n_ctx < 100 ? 2.5e-3 : 1e-3));  // unrounded operands are up to 2^-7 away (above)
      if (n_ctx == 1) {   // the one probability is 1: the output is the value, rounded
        const auto want = f.reference(q, rows, first_ctx, 0, true);
        CHECK(std::equal(got.begin(), got.end(), want.begin(), [](float a, double b) { return a == b; }));
      }
    }
  WARN("bf16 attention's largest error against float64 over bfloat16 operands: " << largest);
}

TEST_CASE("bf16 attention: a row's bits are the same alone, in any tile, and read chunk by chunk") {
  for (const Bf16Shape& s : kShapes)
    for (int32_t first_ctx : {1, 9, 100, 600}) {
      const int32_t rows = 37;  // tiles of 16 + 16 + 5, or one row at a time
      const Bf16Cache f(s, first_ctx + rows - 1, KvType::f16);
      const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 3, 0.5f);
      const auto tiled = f.attend(q, rows, first_ctx, kTileRows);
      INFO(s.n_head << "/" << s.n_head_kv << " heads of " << s.head_dim << ", from " << first_ctx);
      CHECK(f.attend(q, rows, first_ctx, 1) == tiled);
      CHECK(f.attend(q, rows, first_ctx, 5) == tiled);
      // The last row alone, its chunks read apart and merged.
      std::vector<float> out(q.size(), -1.0f);
      const int64_t last = (rows - 1) * f.config.q_dim();
      AttentionScratch scratch;
      for (int64_t h = 0; h < f.config.n_head_kv; ++h) {
        const AttentionTile t{q.data() + last, out.data() + last, f.config.q_dim(), 1, first_ctx + rows - 1, h};
        const ChunkRange chunks = tile_chunks(t);
        std::vector<AttentionPartial> parts(static_cast<size_t>(chunks.last - chunks.first));
        for (int32_t c = chunks.first; c < chunks.last; ++c)
          attend_chunk(f.cache, 0, f.table, f.shape(), t, c, scratch, parts[static_cast<size_t>(c - chunks.first)]);
        finish_tile(f.cache, f.shape(), t, parts);
      }
      CHECK(std::equal(out.begin() + last, out.end(), tiled.begin() + last));
    }
}

TEST_CASE("bf16 attention gives the same bits with and without AVX2, and the AVX512_BF16 kernel stays within 1e-5 of them") {
  if (!detect_avx512_bf16()) WARN("this CPU has no AVX512_BF16: its kernel is not checked here");
  for (const Bf16Shape& s : kShapes)
    for (KvType type : {KvType::f16, KvType::q8_0, KvType::k8v4})
      for (int32_t n_ctx : {1, 29, 200, 600}) {
        if (!kv_type_fits(type, s.head_dim)) continue;
        const Bf16Cache f(s, n_ctx, type);
        const int32_t rows = std::min(n_ctx, 18), first_ctx = n_ctx - rows + 1;
        const auto q = troupe::test::gaussian(static_cast<size_t>(rows * f.config.q_dim()), 5, 0.5f);
        clear_isa_override();
        set_isa_override(Isa::scalar);
        const auto want = f.attend(q, rows, first_ctx, kTileRows);
        clear_isa_override();
        INFO(s.n_head << "/" << s.n_head_kv << " heads of " << s.head_dim << ", " << kv_type_name(type) << ", "
                      << n_ctx << " positions");
        for (Isa isa : {Isa::avx2, Isa::avx512}) {
          if (isa > detect_isa()) continue;
          set_isa_override(isa);
          const auto got = f.attend(q, rows, first_ctx, kTileRows);
          clear_isa_override();
          INFO(isa_name(isa));
          // vdpbf16ps flushes subnormal partial sums (cpu/attention_avx512bf16.cpp).
          const bool own_kernel = isa == Isa::avx512 && detect_avx512_bf16();
          if (own_kernel) {
            std::vector<double> want64(want.begin(), want.end());
            CHECK(max_abs_error(got, want64) < 1e-5);
          } else {
            CHECK(got == want);
          }
        }
      }
}

TEST_CASE("bf16 attention differs from fp32's by bfloat16's rounding, no more") {
  const Bf16Shape s = kShapes[0];
  Bf16Cache f(s, 3000, KvType::f16);
  const auto q = troupe::test::gaussian(static_cast<size_t>(4 * f.config.q_dim()), 8, 0.5f);
  const auto bf16 = f.attend(q, 4, 2997, kTileRows);
  f.precision = AttentionPrecision::fp32;
  const auto fp32 = f.attend(q, 4, 2997, kTileRows);
  CHECK(bf16 != fp32);  // the precision reached the kernel
  const std::vector<double> fp32_64(fp32.begin(), fp32.end());
  CHECK(max_abs_error(bf16, fp32_64) < 1.2e-2);
}
