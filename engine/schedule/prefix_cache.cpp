#include "engine/schedule/prefix_cache.h"

#include <algorithm>
#include <stdexcept>

namespace troupe {
namespace {

uint64_t mix_hash(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

}  // namespace

PrefixCache::PrefixCache(PagePool& pool, int32_t page_size) : pool_(pool), page_size_(page_size) {
  if (page_size <= 0) throw std::invalid_argument("page size must be positive");
}

PrefixCache::~PrefixCache() {
  for (auto& [key, e] : entries_) pool_.release(e.page);
}

uint64_t PrefixCache::chain_key(uint64_t prev, std::span<const int32_t> page_tokens) {
  uint64_t h = mix_hash(prev, 0x7472'6f75'7065ull);  // "troupe"
  for (int32_t t : page_tokens) h = mix_hash(h, static_cast<uint32_t>(t));
  return h;
}

// Most recently used first, and a prefix's root before its descendants: a
// descendant is useless without its root, so the root must be evicted last.
void PrefixCache::touch(const std::vector<std::list<uint64_t>::iterator>& chain_in_order) {
  for (auto it = chain_in_order.rbegin(); it != chain_in_order.rend(); ++it) lru_.splice(lru_.begin(), lru_, *it);
}

std::vector<int32_t> PrefixCache::match(std::span<const int32_t> tokens, size_t max_pages) {
  std::vector<int32_t> pages;
  std::vector<std::list<uint64_t>::iterator> touched;
  uint64_t key = 0;
  for (size_t i = 0; pages.size() < max_pages && (i + 1) * page_size_ <= tokens.size(); ++i) {
    const auto page_tokens = tokens.subspan(i * page_size_, page_size_);
    key = chain(key, page_tokens);
    auto it = entries_.find(key);
    if (it == entries_.end() || !std::equal(page_tokens.begin(), page_tokens.end(), it->second.tokens.begin())) break;
    touched.push_back(it->second.lru);
    pool_.retain(it->second.page);
    pages.push_back(it->second.page);
  }
  touch(touched);
  return pages;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> block_table) {
  uint64_t key = 0;
  std::vector<std::list<uint64_t>::iterator> touched;
  for (size_t i = 0; i < block_table.size() && (i + 1) * page_size_ <= tokens.size(); ++i) {
    const auto page_tokens = tokens.subspan(i * page_size_, page_size_);
    key = chain(key, page_tokens);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      touched.push_back(it->second.lru);
      continue;
    }
    const int32_t page = block_table[i];
    if (key_of_page_.count(page)) continue;  // this page already caches another prefix
    pool_.retain(page);
    lru_.push_front(key);
    entries_.emplace(key, Entry{page, std::vector<int32_t>(page_tokens.begin(), page_tokens.end()), lru_.begin()});
    key_of_page_.emplace(page, key);
    touched.push_back(lru_.begin());
  }
  touch(touched);
}

bool PrefixCache::make_free(int32_t free_pages, int32_t free_local) {
  for (auto it = lru_.end(); !enough_free(free_pages, free_local) && it != lru_.begin();) {
    --it;
    auto e = entries_.find(*it);
    if (pool_.ref_count(e->second.page) != 1) continue;  // still in use by a sequence
    // Short of local slots only: a page without one frees none.
    if (pool_.free_count() >= free_pages && !pool_.has_local(e->second.page)) continue;
    pool_.release(e->second.page);
    key_of_page_.erase(e->second.page);
    entries_.erase(e);
    it = lru_.erase(it);
  }
  return enough_free(free_pages, free_local);
}

void PrefixCache::keep_local(std::span<const int32_t> pages) {
  for (int32_t page : pages) {
    auto k = key_of_page_.find(page);
    if (k == key_of_page_.end() || !pool_.has_local(page)) continue;
    entries_.at(k->second).keep_local = true;
  }
}

void PrefixCache::release_local(std::span<const int32_t> pages) {
  for (int32_t page : pages)
    if (auto k = key_of_page_.find(page); k != key_of_page_.end()) entries_.at(k->second).keep_local = false;
}

void PrefixCache::mark_local(std::vector<uint8_t>& needed) const {
  for (const auto& [key, e] : entries_)
    if (e.keep_local) needed[static_cast<size_t>(e.page)] = 1;
}

std::vector<std::pair<int32_t, int32_t>> PrefixCache::adopt(std::span<const int32_t> tokens, int32_t n_pages,
                                                            int32_t local_from) {
  std::vector<std::pair<int32_t, int32_t>> fill;
  std::vector<int32_t> held;
  std::vector<std::list<uint64_t>::iterator> touched;
  uint64_t key = 0;
  for (int32_t i = 0; i < n_pages && static_cast<size_t>(i + 1) * page_size_ <= tokens.size(); ++i) {
    const auto page_tokens = tokens.subspan(static_cast<size_t>(i) * page_size_, page_size_);
    key = chain(key, page_tokens);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (!std::equal(page_tokens.begin(), page_tokens.end(), it->second.tokens.begin())) break;  // a collision
      touched.push_back(it->second.lru);
      pool_.retain(it->second.page);  // held for this call, as adopted pages are
      held.push_back(it->second.page);
      continue;
    }
    const bool local = i >= local_from && pool_.local_capacity() > 0;
    if (!enough_free(1, local ? 1 : 0) && !make_free(1, local ? 1 : 0)) break;
    const auto page = pool_.allocate(local);
    if (!page) break;
    lru_.push_front(key);
    entries_.emplace(key, Entry{*page, std::vector<int32_t>(page_tokens.begin(), page_tokens.end()), lru_.begin(), local});
    key_of_page_.emplace(*page, key);
    touched.push_back(lru_.begin());
    pool_.retain(*page);  // held for this call: making room for the next page must not evict it
    held.push_back(*page);
    fill.emplace_back(i, *page);  // the allocation's reference is the cache's
  }
  touch(touched);
  for (int32_t page : held) pool_.release(page);
  return fill;
}

int32_t PrefixCache::drop(std::span<const int32_t> tokens) {
  int32_t dropped = 0;
  uint64_t key = 0;
  for (size_t i = 0; (i + 1) * page_size_ <= tokens.size(); ++i) {
    key = chain(key, tokens.subspan(i * page_size_, page_size_));
    auto it = entries_.find(key);
    if (it == entries_.end()) break;
    if (pool_.ref_count(it->second.page) != 1) continue;  // a sequence uses it
    pool_.release(it->second.page);
    key_of_page_.erase(it->second.page);
    lru_.erase(it->second.lru);
    entries_.erase(it);
    ++dropped;
  }
  return dropped;
}

int32_t PrefixCache::cached_pages() const {
  int32_t n = 0;
  for (const auto& [key, e] : entries_) n += pool_.ref_count(e.page) == 1;
  return n;
}

}  // namespace troupe
