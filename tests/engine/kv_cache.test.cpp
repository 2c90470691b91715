#include <catch2/catch.hpp>

#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/page_pool.h"

using namespace troupe;

namespace {
ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 8;
  c.n_embd = 32;
  return c;
}
}  // namespace

TEST_CASE("a page returns to the pool when its last holder releases it") {
  PagePool pool(3);
  auto a = pool.allocate();
  REQUIRE(a);
  pool.retain(*a);
  CHECK(pool.ref_count(*a) == 2);
  pool.release(*a);
  CHECK(pool.free_count() == 2);
  pool.release(*a);
  CHECK(pool.free_count() == 3);
  CHECK_THROWS_AS(pool.release(*a), std::logic_error);
  CHECK_THROWS_AS(pool.retain(7), std::out_of_range);
}

TEST_CASE("an exhausted pool says so instead of handing out a page twice") {
  PagePool pool(2);
  auto a = pool.allocate(), b = pool.allocate();
  REQUIRE((a && b));
  CHECK(*a != *b);
  CHECK_FALSE(pool.allocate().has_value());
}

TEST_CASE("a sequence grows a page at a time and truncation frees whole pages") {
  KvCache cache(tiny_config(), 4, 16);
  KvSequence seq(cache);
  REQUIRE(seq.reserve(1));
  CHECK(seq.block_table().size() == 1);
  REQUIRE(seq.reserve(17));
  CHECK(seq.block_table().size() == 2);
  CHECK(cache.pool().free_count() == 2);
  CHECK_FALSE(seq.reserve(16 * 5));  // more than the pool: no partial growth
  CHECK(seq.block_table().size() == 2);
  seq.truncate(16);
  CHECK(seq.block_table().size() == 1);
  CHECK(cache.pool().free_count() == 3);
}

TEST_CASE("a destroyed sequence gives its pages back") {
  KvCache cache(tiny_config(), 4, 16);
  {
    KvSequence seq(cache);
    REQUIRE(seq.reserve(64));
    CHECK(cache.pool().free_count() == 0);
    KvSequence moved(std::move(seq));
    CHECK(moved.block_table().size() == 4);
  }
  CHECK(cache.pool().free_count() == 4);
}

TEST_CASE("keys of different layers, pages and slots do not overlap") {
  KvCache cache(tiny_config(), 3, 4);
  uint16_t* a = cache.key(0, 2, 3);
  uint16_t* b = cache.key(1, 0, 0);
  CHECK(b - a == cache.slot_values());
  CHECK(cache.value(1, 2, 3) - cache.value(0, 0, 0) == (2 * 3 * 4 - 1) * cache.slot_values());
}
