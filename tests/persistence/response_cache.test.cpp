// The response cache tier's store: answers found by key, gone after their
// TTL, the oldest dropped to stay within the byte bound, kept over a
// reopen, and a damaged entry read as a miss.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "persistence/response_cache.h"
#include "persistence/store.h"
#include "tests/persistence/temp_dir.h"

using namespace troupe::persistence;

namespace {

using troupe::test::TempDir;

std::string key(char c) { return std::string(ResponseCache::kKeyBytes, c); }

CachedAnswer answer(const std::string& text, int n_tokens = 3) {
  CachedAnswer a;
  a.text = text;
  for (int i = 0; i < n_tokens; ++i) a.tokens.push_back(1000 + i);
  a.finish_reason = 2;
  a.prompt_tokens = 17;
  return a;
}

}  // namespace

TEST_CASE("a stored answer is found by its key, with its tokens, text, reason and prompt size") {
  TempDir dir("responses");
  Store store(dir.path);
  ResponseCache cache(store, {});
  CHECK_FALSE(cache.find(key('a'), 1000));
  REQUIRE(cache.put(key('a'), answer("def f(): pass", 4), 1000));
  const auto got = cache.find(key('a'), 2000);
  REQUIRE(got);
  CHECK(got->text == "def f(): pass");
  CHECK(got->tokens == std::vector<int32_t>{1000, 1001, 1002, 1003});
  CHECK(got->finish_reason == 2);
  CHECK(got->prompt_tokens == 17);
  CHECK(got->stored_ms == 1000);
  CHECK_FALSE(cache.find(key('b'), 2000));
  CHECK_FALSE(cache.find("short", 2000));  // not a key
  CHECK(cache.entries() == 1);
}

TEST_CASE("an answer past its TTL is a miss and leaves the store, and expire() drops the rest") {
  TempDir dir("responses");
  Store store(dir.path);
  ResponseCache cache(store, {.ttl_ms = 500, .max_bytes = 1 << 20});
  cache.put(key('a'), answer("one"), 1000);
  cache.put(key('b'), answer("two"), 1200);
  CHECK(cache.find(key('a'), 1499));
  CHECK_FALSE(cache.find(key('a'), 1500));
  CHECK(cache.entries() == 1);
  CHECK(cache.expire(1600) == 0);
  CHECK(cache.expire(1700) == 1);
  CHECK(cache.entries() == 0);
  CHECK(cache.bytes() == 0);
  int left = 0;
  store.scan(Family::responses, "", [&](std::string_view, std::string_view) { return ++left, true; });
  CHECK(left == 0);
}

TEST_CASE("the byte bound drops the oldest answers first, and one larger than the bound is not kept") {
  TempDir dir("responses");
  Store store(dir.path);
  const std::string text(1000, 'x');
  ResponseCache probe(store, {});
  probe.put(key('p'), answer(text), 0);
  const int64_t one = probe.bytes();
  probe.expire(probe.policy().ttl_ms);  // empty again
  REQUIRE(probe.entries() == 0);

  ResponseCache cache(store, {.ttl_ms = 1 << 30, .max_bytes = 3 * one});
  for (char c = 'a'; c <= 'e'; ++c) REQUIRE(cache.put(key(c), answer(text), 100 * (c - 'a')));
  CHECK(cache.entries() == 3);
  CHECK(cache.bytes() <= 3 * one);
  CHECK_FALSE(cache.find(key('a'), 1000));
  CHECK_FALSE(cache.find(key('b'), 1000));
  CHECK(cache.find(key('c'), 1000));
  CHECK(cache.find(key('e'), 1000));
  CHECK_FALSE(cache.put(key('z'), answer(std::string(4 * one, 'y')), 1000));
  CHECK(cache.entries() == 3);
  // Storing the same key again replaces it: still three entries, the newest text.
  REQUIRE(cache.put(key('e'), answer("shorter"), 1100));
  CHECK(cache.entries() == 3);
  CHECK(cache.find(key('e'), 1200)->text == "shorter");
}

TEST_CASE("the cache survives a reopen, counted as it was, and a damaged entry is a miss") {
  TempDir dir("responses");
  int64_t bytes = 0;
  {
    Store store(dir.path);
    ResponseCache cache(store, {});
    cache.put(key('a'), answer("kept"), 1000);
    cache.put(key('b'), answer("to damage"), 1000);
    bytes = cache.bytes();
  }
  Store store(dir.path);
  ResponseCache cache(store, {});
  CHECK(cache.entries() == 2);
  CHECK(cache.bytes() == bytes);
  CHECK(cache.find(key('a'), 2000)->text == "kept");
  Batch b;
  b.put(Family::responses, "r" + key('b'), std::string("\x00\x00", 2));
  store.write(b);
  CHECK_FALSE(cache.find(key('b'), 2000));
  CHECK(cache.entries() == 1);
}
