#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/cpu/half.h"
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

TEST_CASE("a page keeps each KV head's rows together, and pages travel slot by slot") {
  KvCache cache(tiny_config(), 3, 4);  // 2 layers, 2 KV heads of 8, pages of 4 slots
  const int64_t row = cache.key_row_bytes(0);
  REQUIRE(row == 8 * 2);
  // A head's slots are one run; the next head's follow; the layer's last row ends where the next layer starts.
  CHECK(cache.key_row(0, 1, 3, 0) - cache.key_row(0, 1, 2, 0) == row);
  CHECK(cache.key_row(0, 1, 0, 1) - cache.key_row(0, 1, 0, 0) == 4 * row);
  CHECK(cache.key_row(0, 2, 0, 0) - cache.key_row(0, 1, 0, 0) == 2 * 4 * row);
  CHECK(cache.key_row(1, 0, 0, 0) - cache.key_row(0, 2, 3, 1) == row);
  CHECK(cache.value_row(1, 2, 3, 1) - cache.value_row(0, 0, 0, 0) == (2 * 3 * 4 * 2 - 1) * row);

  // Every (layer, slot, head)'s values differ: value = 100 * layer + 10 * slot + head.
  for (int64_t layer = 0; layer < 2; ++layer)
    for (int32_t slot = 0; slot < 4; ++slot) {
      std::vector<float> k(16), v(16);
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 8; ++i) {
          k[static_cast<size_t>(h * 8 + i)] = static_cast<float>(100 * layer + 10 * slot + h);
          v[static_cast<size_t>(h * 8 + i)] = -static_cast<float>(100 * layer + 10 * slot + h);
        }
      cache.store(layer, 1, slot, k.data(), v.data());
    }
  std::vector<uint8_t> bytes(static_cast<size_t>(cache.page_bytes()));
  cache.read_page(1, bytes.data());
  // Travel order: per layer its K rows then its V rows, slot by slot, each slot's heads in order.
  const auto half_at = [&](size_t row_index) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + row_index * static_cast<size_t>(row), sizeof h);
    return h;
  };
  size_t r = 0;
  for (int64_t layer = 0; layer < 2; ++layer)
    for (const bool keys : {true, false})
      for (int32_t slot = 0; slot < 4; ++slot)
        for (int64_t h = 0; h < 2; ++h, ++r) {
          INFO("layer " << layer << " slot " << slot << " head " << h << (keys ? " K" : " V"));
          const float want = static_cast<float>(100 * layer + 10 * slot + h);
          CHECK(cpu::fp16_to_fp32(half_at(r)) == (keys ? want : -want));
        }
  CHECK(r * static_cast<size_t>(row) == bytes.size());
  // A page written from those bytes holds the same rows.
  cache.write_page(2, bytes.data());
  for (int64_t layer = 0; layer < 2; ++layer)
    for (int32_t slot = 0; slot < 4; ++slot)
      for (int64_t h = 0; h < 2; ++h) {
        CHECK(std::memcmp(cache.key_row(layer, 2, slot, h), cache.key_row(layer, 1, slot, h), 16) == 0);
        CHECK(std::memcmp(cache.value_row(layer, 2, slot, h), cache.value_row(layer, 1, slot, h), 16) == 0);
      }
}

TEST_CASE("each KV type names its key and value formats, their bytes, and round-trips its name") {
  struct Want {
    KvType type;
    KvRowFormat key, value;
    int64_t row_bytes;  // a key row plus a value row of 64 values
  };
  for (const Want& w : {Want{KvType::f16, KvRowFormat::f16, KvRowFormat::f16, 256},
                        Want{KvType::q8_0, KvRowFormat::q8_0, KvRowFormat::q8_0, 136},
                        Want{KvType::k8v4, KvRowFormat::q8_0, KvRowFormat::q4_0, 104},
                        Want{KvType::q4_0, KvRowFormat::q4_0, KvRowFormat::q4_0, 72}}) {
    INFO(kv_type_name(w.type));
    CHECK(kv_type_from_name(kv_type_name(w.type)) == w.type);
    CHECK(key_format(w.type) == w.key);
    CHECK(value_format(w.type) == w.value);
    CHECK(kv_row_bytes(w.key, 64) + kv_row_bytes(w.value, 64) == w.row_bytes);
  }
  CHECK_THROWS_WITH(kv_type_from_name("q4"), "unknown KV type 'q4' (f16, q8_0, k8v4, q4_0)");
  // A q4_0 row: each value within half a step of its block's scale, a NaN stored as 0.
  std::vector<float> x(64), back(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (i < 32 ? 1.0f : 40.0f);
  x[5] = std::nanf("");
  std::vector<uint8_t> row(static_cast<size_t>(kv_row_bytes(KvRowFormat::q4_0, 64)));
  encode_kv_row(KvRowFormat::q4_0, x.data(), 64, row.data());
  decode_kv_row(KvRowFormat::q4_0, row.data(), 64, back.data());
  CHECK(back[5] == 0.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i == 5) continue;
    const float step = (i < 32 ? 1.0f : 40.0f) / 7.0f;
    CHECK(std::fabs(back[i] - x[i]) <= 0.5f * step * 1.01f);
  }
}
