// Prefix caching over full pages: hits need the whole chain before a page,
// collisions cannot hand out a wrong page, eviction is LRU and never takes a
// page a sequence still holds.
#include <catch2/catch.hpp>

#include <numeric>

#include "engine/schedule/prefix_cache.h"

using namespace troupe;

namespace {
std::vector<int32_t> seq(int32_t n, int32_t first = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}
}  // namespace

TEST_CASE("a cached prefix is found page by page and retained for the caller") {
  PagePool pool(8);
  PrefixCache cache(pool, 4);
  const std::vector<int32_t> table{*pool.allocate(), *pool.allocate(), *pool.allocate()};
  const auto tokens = seq(10);  // pages 0 and 1 full, page 2 partial
  cache.insert(tokens, table);
  CHECK(cache.known_pages() == 2);
  CHECK(pool.ref_count(table[0]) == 2);

  auto hit = cache.match(seq(12), 8);
  CHECK(hit == std::vector<int32_t>{table[0], table[1]});
  CHECK(pool.ref_count(table[0]) == 3);
  for (int32_t p : hit) pool.release(p);

  // A different first page breaks the chain even when later pages agree.
  auto other = seq(12);
  other[0] = 99;
  CHECK(cache.match(other, 8).empty());
  CHECK(cache.match(seq(12), 1).size() == 1);  // at most max_pages
  pool.release(table[0]);  // max_pages hit above
}

TEST_CASE("eviction frees least recently used pages no sequence holds") {
  PagePool pool(4);
  PrefixCache cache(pool, 2);
  std::vector<int32_t> a{*pool.allocate()}, b{*pool.allocate()};
  cache.insert(seq(2, 0), a);
  cache.insert(seq(2, 100), b);
  pool.release(a[0]);  // sequence a is done: its page is now cached only
  pool.release(b[0]);
  CHECK(cache.cached_pages() == 2);
  CHECK(pool.free_count() == 2);
  auto hit = cache.match(seq(2, 0), 1);  // a is used again: b is now the LRU
  REQUIRE(hit.size() == 1);
  CHECK(cache.make_free(3));
  CHECK(cache.known_pages() == 1);           // b went
  CHECK(pool.ref_count(hit[0]) == 2);        // a stays: the caller holds it
  CHECK_FALSE(cache.make_free(4));           // a cannot go while held
  pool.release(hit[0]);
  CHECK(cache.make_free(4));
  CHECK(cache.known_pages() == 0);
}
