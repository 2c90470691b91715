// Spilled KV pages in the store (persistence/kv_pages.h) on a real store in
// a temporary directory: keys that name a whole prefix under one identity,
// pages found only for the same identity, tokens and size, up to the first
// gap, and erased by prefix.
#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "persistence/kv_pages.h"
#include "persistence/store.h"
#include "tests/persistence/temp_dir.h"

using namespace troupe;
using namespace troupe::persistence;

namespace {

using test::TempDir;

std::vector<int32_t> tokens_from(int32_t first, size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

int stored_pages(const Store& store) {
  int n = 0;
  store.scan(Family::kv_pages, "", [&](std::string_view, std::string_view) { return ++n, true; });
  return n;
}

}  // namespace

TEST_CASE("stored KV pages are found only for the same identity and tokens, up to the first gap", "[persistence]") {
  TempDir dir("kv");
  Store store(dir.path);
  const KvIdentity id{1, 2};
  KvPageStore pages(store, id, 4, 10);
  std::vector<int32_t> tokens(12);
  std::iota(tokens.begin(), tokens.end(), 1);
  {
    Batch b;
    pages.put(tokens, 0, std::vector<std::string>{std::string(10, 'a'), std::string(10, 'b')}, b);
    store.write(b, false);
  }
  CHECK(pages.get(tokens, 3) == std::vector<std::string>{std::string(10, 'a'), std::string(10, 'b')});
  CHECK(pages.get(tokens, 1).size() == 1);
  auto other = tokens;
  other[5] = 99;  // the second page differs: only the first is there
  CHECK(pages.get(other, 3).size() == 1);
  CHECK(KvPageStore(store, KvIdentity{1, 3}, 4, 10).get(tokens, 3).empty());  // another layout
  CHECK(KvPageStore(store, KvIdentity{9, 2}, 4, 10).get(tokens, 3).empty());  // another model file
  CHECK(KvPageStore(store, id, 4, 11).get(tokens, 3).empty());                // another page size in bytes
  Batch b;
  pages.erase(tokens, 2, b);
  store.write(b, false);
  CHECK(pages.get(tokens, 3).empty());
}

TEST_CASE("kv pages: a page's key is the identity's 16 bytes and a chain key naming its whole prefix",
          "[persistence]") {
  const KvIdentity id{0x0102030405060708ull, 0x1112131415161718ull};
  const auto tokens = tokens_from(1, 12);
  const auto keys = kv_page_keys(id, tokens, 3, 4);
  REQUIRE(keys.size() == 3);
  for (const auto& k : keys) {
    CHECK(k.size() == 24);
    CHECK(k.substr(0, 16) == id.key_prefix());
  }
  CHECK(id.key_prefix() == be64(id.model) + be64(id.layout));
  CHECK(keys[0] != keys[1]);
  CHECK(keys[1] != keys[2]);
  // A prompt sharing the first page shares its key; from the first differing
  // page on, every key differs (each names everything before it).
  auto other = tokens;
  other[5] = 99;
  const auto other_keys = kv_page_keys(id, other, 3, 4);
  CHECK(other_keys[0] == keys[0]);
  CHECK(other_keys[1] != keys[1]);
  CHECK(other_keys[2] != keys[2]);
  // The same page of tokens after another prefix is another page.
  auto swapped = tokens;
  std::swap(swapped[0], swapped[1]);
  CHECK(kv_page_keys(id, swapped, 3, 4)[2] != keys[2]);
  // Another identity: other keys for the same tokens.
  CHECK(kv_page_keys(KvIdentity{id.model, id.layout + 1}, tokens, 1, 4)[0] != keys[0]);
}

TEST_CASE("kv pages: keys are made for full pages only, and none for no pages or no tokens", "[persistence]") {
  const KvIdentity id{1, 2};
  CHECK(kv_page_keys(id, tokens_from(1, 10), 5, 4).size() == 2);  // 10 tokens: 2 full pages of 4
  CHECK(kv_page_keys(id, tokens_from(1, 12), 2, 4).size() == 2);  // no more than asked
  CHECK(kv_page_keys(id, tokens_from(1, 3), 1, 4).empty());
  CHECK(kv_page_keys(id, tokens_from(1, 12), 0, 4).empty());
  CHECK(kv_page_keys(id, {}, 3, 4).empty());
}

TEST_CASE("kv pages: pages put after the first join those stored, and a missing first page finds none",
          "[persistence]") {
  TempDir dir("kv-first");
  Store store(dir.path);
  const KvPageStore pages(store, KvIdentity{1, 2}, 4, 3);
  CHECK(pages.identity().model == 1);
  CHECK(pages.identity().layout == 2);
  const auto tokens = tokens_from(10, 12);
  {
    Batch b;
    pages.put(tokens, 1, std::vector<std::string>{"bbb", "ccc"}, b);  // pages 1 and 2
    store.write(b, false);
  }
  CHECK(stored_pages(store) == 2);
  CHECK(pages.get(tokens, 3).empty());  // page 0 is missing: nothing after it is used
  {
    Batch b;
    pages.put(tokens, 0, std::vector<std::string>{"aaa"}, b);
    store.write(b, false);
  }
  CHECK(pages.get(tokens, 3) == std::vector<std::string>{"aaa", "bbb", "ccc"});
  CHECK(pages.get(tokens, 2) == std::vector<std::string>{"aaa", "bbb"});
  CHECK(pages.get(tokens, 0).empty());
  CHECK(pages.get(tokens_from(10, 7), 3) == std::vector<std::string>{"aaa"});  // only one full page asked for
}

TEST_CASE("kv pages: pages past the tokens' full pages are not stored", "[persistence]") {
  TempDir dir("kv-past");
  Store store(dir.path);
  const KvPageStore pages(store, KvIdentity{1, 2}, 4, 3);
  const auto tokens = tokens_from(1, 6);  // one full page and two tokens
  Batch b;
  pages.put(tokens, 0, std::vector<std::string>{"aaa", "bbb", "ccc"}, b);
  store.write(b, false);
  CHECK(stored_pages(store) == 1);
  CHECK(pages.get(tokens_from(1, 12), 3) == std::vector<std::string>{"aaa"});
}

TEST_CASE("kv pages: a stored page is used only if its stored tokens and size are the ones asked for",
          "[persistence]") {
  TempDir dir("kv-check");
  Store store(dir.path);
  const KvIdentity id{1, 2};
  const KvPageStore pages(store, id, 4, 3);
  const auto tokens = tokens_from(1, 8);
  const auto keys = kv_page_keys(id, tokens, 2, 4);
  auto value = [](std::vector<int32_t> page_tokens, const std::string& page) {
    return std::string(reinterpret_cast<const char*>(page_tokens.data()), page_tokens.size() * sizeof(int32_t)) + page;
  };
  SECTION("the same key over other tokens, as a hash collision would store it") {
    Batch b;
    b.put(Family::kv_pages, keys[0], value({1, 2, 3, 4}, "aaa"));
    b.put(Family::kv_pages, keys[1], value({5, 6, 7, 99}, "bbb"));
    store.write(b, false);
    CHECK(pages.get(tokens, 2) == std::vector<std::string>{"aaa"});
  }
  SECTION("a page of another size") {
    Batch b;
    b.put(Family::kv_pages, keys[0], value({1, 2, 3, 4}, "aaa"));
    b.put(Family::kv_pages, keys[1], value({5, 6, 7, 8}, "bbbb"));
    store.write(b, false);
    CHECK(pages.get(tokens, 2) == std::vector<std::string>{"aaa"});
  }
  SECTION("a value shorter than its tokens") {
    Batch b;
    b.put(Family::kv_pages, keys[0], "short");
    store.write(b, false);
    CHECK(pages.get(tokens, 2).empty());
  }
}

TEST_CASE("kv pages: erasing the first n pages leaves those after them stored but unreachable", "[persistence]") {
  TempDir dir("kv-erase");
  Store store(dir.path);
  const KvPageStore pages(store, KvIdentity{1, 2}, 4, 3);
  const auto tokens = tokens_from(1, 12);
  {
    Batch b;
    pages.put(tokens, 0, std::vector<std::string>{"aaa", "bbb", "ccc"}, b);
    store.write(b, false);
  }
  Batch b;
  pages.erase(tokens, 1, b);
  store.write(b, false);
  CHECK(stored_pages(store) == 2);
  CHECK(pages.get(tokens, 3).empty());
  Batch rest;
  pages.erase(tokens, 3, rest);
  store.write(rest, false);
  CHECK(stored_pages(store) == 0);
}
