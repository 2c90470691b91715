#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/isa.h"
#include "engine/cpu/kv_kernels.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "tests/engine/random_data.h"

using namespace troupe;
using namespace troupe::cpu;

namespace {

// A cache of one layer holding n_ctx random positions over shuffled pages.
struct Filled {
  ModelConfig config;
  KvCache cache;
  std::vector<int32_t> table;
  Filled(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int32_t n_ctx)
      : config(make_config(n_head, n_head_kv, head_dim)), cache(config, (n_ctx + 15) / 16 + 3, 16) {
    for (int32_t i = 0; i < (n_ctx + 15) / 16; ++i) table.push_back((i * 5 + 2) % ((n_ctx + 15) / 16 + 3));
    const auto k = troupe::test::gaussian(static_cast<size_t>(n_ctx * config.kv_dim()), 11, 1.5f);
    const auto v = troupe::test::gaussian(static_cast<size_t>(n_ctx * config.kv_dim()), 12);
    for (int32_t p = 0; p < n_ctx; ++p) {
      to_f16(&k[static_cast<size_t>(p * config.kv_dim())], cache.key(0, table[p / 16], p % 16), config.kv_dim());
      to_f16(&v[static_cast<size_t>(p * config.kv_dim())], cache.value(0, table[p / 16], p % 16), config.kv_dim());
    }
  }
  static ModelConfig make_config(int64_t n_head, int64_t n_head_kv, int64_t head_dim) {
    ModelConfig c;
    c.n_layer = 1;
    c.n_head = n_head;
    c.n_head_kv = n_head_kv;
    c.head_dim = head_dim;
    c.n_embd = n_head * head_dim;
    return c;
  }
  std::vector<float> attend(const std::vector<float>& q, int32_t n_ctx, std::initializer_list<int64_t> cuts) const {
    const AttentionShape shape{config.n_head, config.n_head_kv, config.head_dim};
    std::vector<float> out(static_cast<size_t>(config.q_dim()), -1.0f), scores(static_cast<size_t>(attention_scratch(n_ctx)));
    int64_t begin = 0;
    for (int64_t end : cuts) {
      paged_attention(q.data(), cache, 0, table, n_ctx, shape, begin, end, out.data(), scores.data());
      begin = end;
    }
    return out;
  }
};

}  // namespace

TEST_CASE("attention gives each head the same bits however the heads are split") {
  // 14 query heads over 2 KV heads (groups of 7), as Qwen2.5-0.5B; odd lengths.
  for (int32_t n_ctx : {1, 15, 16, 17, 133}) {
    const Filled f(14, 2, 64, n_ctx);
    const auto q = troupe::test::gaussian(14 * 64, static_cast<uint32_t>(n_ctx));
    const auto whole = f.attend(q, n_ctx, {14});
    CHECK(f.attend(q, n_ctx, {3, 7, 8, 14}) == whole);
    CHECK(f.attend(q, n_ctx, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}) == whole);
  }
}

TEST_CASE("attention on every instruction set agrees with the scalar path, AVX-512 bitwise with AVX2") {
  struct Shape {
    int64_t n_head, n_head_kv, head_dim;
  };
  for (const Shape s : {Shape{14, 2, 64}, Shape{8, 8, 128}, Shape{12, 4, 80}, Shape{16, 1, 32}, Shape{4, 2, 256}, Shape{6, 3, 48}}) {
    for (int32_t n_ctx : {1, 29, 200}) {
      const Filled f(s.n_head, s.n_head_kv, s.head_dim, n_ctx);
      const auto q = troupe::test::gaussian(static_cast<size_t>(s.n_head * s.head_dim), 5, 0.5f);
      clear_isa_override();
      set_isa_override(Isa::scalar);
      const auto want = f.attend(q, n_ctx, {s.n_head});
      clear_isa_override();
      std::vector<float> avx2;
      for (Isa isa : {Isa::avx2, Isa::avx512}) {
        if (isa > detect_isa()) continue;
        set_isa_override(isa);
        const auto got = f.attend(q, n_ctx, {s.n_head});
        clear_isa_override();
        INFO("head_dim " << s.head_dim << ", " << n_ctx << " positions, " << isa_name(isa));
        for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(2e-4));
        // The grouped AVX-512 kernel keeps the per-head path's summation
        // order, so its bits are the AVX2 path's.
        if (isa == Isa::avx2) avx2 = got;
        else CHECK(got == avx2);
      }
    }
  }
}
