#pragma once
// Automatic prefix caching over full KV pages. A page's key is a hash chain:
// key(i) = mix(key(i-1), the page's tokens), so a key names the whole prefix
// up to and including the page, not only its own tokens. The cache holds one
// reference on every page it knows; a page whose only holder is the cache is
// "cached": reusable by a later request with the same prefix, and evicted
// least-recently-used first when free pages run out. A hit also compares the
// stored tokens, so a hash collision can never hand out a wrong page.
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/page_pool.h"

namespace troupe {

class PrefixCache {
 public:
  PrefixCache(PagePool& pool, int32_t page_size);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Pages holding the longest cached prefix of `tokens` (whole pages only),
  // each retained once for the caller; at most max_pages.
  std::vector<int32_t> match(std::span<const int32_t> tokens, size_t max_pages);

  // Records the full pages of a sequence: block_table[i] holds tokens
  // [i*page_size, (i+1)*page_size). Pages already known are skipped.
  void insert(std::span<const int32_t> tokens, std::span<const int32_t> block_table);

  // Releases least-recently-used cached pages until `free_pages` are free
  // (and `free_local` local slots, in a pool with them) or none is left to
  // evict; true when enough are free.
  bool make_free(int32_t free_pages, int32_t free_local = 0);

  // Sliding-window models (engine/page_pool.h, local slots): the cache keeps
  // the local rows of the pages a finished sequence's window still reached
  // (keep_local), so that its next turn can start from them; a sequence that
  // takes such pages over answers for them from then on (release_local).
  // mark_local sets needed[page] for every page the cache keeps local.
  void keep_local(std::span<const int32_t> pages);
  void release_local(std::span<const int32_t> pages);
  void mark_local(std::vector<uint8_t>& needed) const;

  // Pages for the first `n_pages` full pages of `tokens` whose K/V the
  // caller will write (restored from a colder tier): for each page not
  // already cached, a free page (evicting LRU ones if needed) is taken and
  // cached under the prefix. Returns (page index in `tokens`, page) of the
  // pages to fill; stops early when no page can be freed. The caller must
  // fill them before any step reads them.
  // Pages from index `local_from` on get a local slot and are kept local
  // (their data carries the local layers' rows); those before it do not.
  std::vector<std::pair<int32_t, int32_t>> adopt(std::span<const int32_t> tokens, int32_t n_pages,
                                                 int32_t local_from = 0);

  // Releases the cached pages of `tokens`' prefix that only the cache holds
  // (an idle session's memory); pages in use stay.
  int32_t drop(std::span<const int32_t> tokens);

  int32_t cached_pages() const;  // held by the cache alone

  // The key of a page whose predecessors' chain key is `prev` (0 for the
  // first page): what persisted pages are stored under too.
  static uint64_t chain_key(uint64_t prev, std::span<const int32_t> page_tokens);
  int32_t known_pages() const { return static_cast<int32_t>(entries_.size()); }

 private:
  struct Entry {
    int32_t page;
    std::vector<int32_t> tokens;  // the page's own tokens, checked on a hit
    std::list<uint64_t>::iterator lru;
    bool keep_local = false;  // the cache holds the page's local slot (keep_local)
  };
  bool enough_free(int32_t pages, int32_t local) const {
    return pool_.free_count() >= pages && (pool_.local_capacity() == 0 || pool_.local_free_count() >= local);
  }
  uint64_t chain(uint64_t prev, std::span<const int32_t> page_tokens) const { return chain_key(prev, page_tokens); }
  void touch(const std::vector<std::list<uint64_t>::iterator>& chain_in_order);

  PagePool& pool_;
  int32_t page_size_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::unordered_map<int32_t, uint64_t> key_of_page_;
  std::list<uint64_t> lru_;  // front: most recently used
};

}  // namespace troupe
