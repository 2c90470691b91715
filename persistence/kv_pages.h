#pragma once
// Spilled KV pages in the store's `kv_pages` column family:
//
//   <identity: 16 bytes> <prefix chain key: be64>  →  <page tokens: page_size × i32 LE> <page: kv_page_codec>
//
// The identity (engine/model_identity.h) names the model file, the KV
// layout, RoPE and the codec; the chain key names the whole prefix up to
// and including the page (engine/schedule/prefix_cache.h). A page is only
// ever found by a server running the same model with the same layout, and
// is used only if its stored tokens equal the ones asked for and its size is
// the layout's: stale or foreign KV is never used. Pages are written without
// sync: one lost in a crash is recomputed.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/model_identity.h"
#include "persistence/store.h"

namespace troupe::persistence {

// The keys of the first `n_pages` full pages of `tokens` under `identity`:
// a page's key names its whole prefix, so sessions sharing a prefix share keys.
std::vector<std::string> kv_page_keys(const KvIdentity& identity, std::span<const int32_t> tokens, int32_t n_pages,
                                      int32_t page_size);

class KvPageStore {
 public:
  KvPageStore(Store& store, KvIdentity identity, int32_t page_size, int64_t page_bytes)
      : store_(store), identity_(std::move(identity)), page_size_(page_size), page_bytes_(page_bytes) {}

  const KvIdentity& identity() const { return identity_; }

  // Adds pages [first, first + pages.size()) of `tokens` to `b`.
  void put(std::span<const int32_t> tokens, int32_t first, std::span<const std::string> pages, Batch& b) const;
  // The stored pages for the first `n_pages` full pages of `tokens`, up to
  // the first missing or mismatched one.
  std::vector<std::string> get(std::span<const int32_t> tokens, int32_t n_pages) const;
  void erase(std::span<const int32_t> tokens, int32_t n_pages, Batch& b) const;

 private:
  std::vector<std::string> keys(std::span<const int32_t> tokens, int32_t n_pages) const;

  Store& store_;
  KvIdentity identity_;
  int32_t page_size_;
  int64_t page_bytes_;
};

}  // namespace troupe::persistence
