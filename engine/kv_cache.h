#pragma once
// Paged KV storage for every layer, and the block tables that address it.
//
// Storage of one layer, K and V alike (IEEE half, see cpu/kv_kernels.h):
//
//   page 0                     page 1
//   +--------+--------+-----+  +--------+-----
//   | slot 0 | slot 1 | ... |  | slot 0 | ...        page_size slots a page
//   +--------+--------+-----+  +--------+-----
//   slot = [n_head_kv][head_dim]
//
// Token at position p of a sequence lives in page block_table[p / page_size],
// slot p % page_size. All layers share the page numbering, so one block table
// serves the whole model.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/page_pool.h"

namespace troupe {

struct ModelConfig;

class KvCache {
 public:
  KvCache(const ModelConfig& config, int32_t n_pages, int32_t page_size = 16);

  int32_t page_size() const { return page_size_; }
  int64_t slot_values() const { return slot_values_; }
  int64_t bytes() const;
  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }

  // Copies every layer's K and V of page src into page dst (copy-on-write).
  void copy_page(int32_t src, int32_t dst);

  uint16_t* key(int64_t layer, int32_t page, int32_t slot) { return at(keys_, layer, page, slot); }
  uint16_t* value(int64_t layer, int32_t page, int32_t slot) { return at(values_, layer, page, slot); }
  const uint16_t* key(int64_t layer, int32_t page, int32_t slot) const { return at(keys_, layer, page, slot); }
  const uint16_t* value(int64_t layer, int32_t page, int32_t slot) const { return at(values_, layer, page, slot); }

 private:
  uint16_t* at(const std::vector<uint16_t>& v, int64_t layer, int32_t page, int32_t slot) const {
    return const_cast<uint16_t*>(v.data()) + ((layer * pool_.capacity() + page) * page_size_ + slot) * slot_values_;
  }
  int32_t page_size_;
  int64_t n_layer_;
  int64_t slot_values_;
  PagePool pool_;
  std::vector<uint16_t> keys_;
  std::vector<uint16_t> values_;
};

// One sequence's pages. Grows a page at a time; truncation (rejected draft
// tokens, a cut conversation) releases whole pages past the new end.
class KvSequence {
 public:
  explicit KvSequence(KvCache& cache) : pool_(&cache.pool()), page_size_(cache.page_size()) {}
  // Pages of any backend's pool (engine/backend.h: Backend::pages()).
  KvSequence(PagePool& pool, int32_t page_size) : pool_(&pool), page_size_(page_size) {}
  ~KvSequence();
  KvSequence(KvSequence&& other) noexcept;
  KvSequence& operator=(KvSequence&& other) noexcept;
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  // Puts `page` (already retained for this sequence) at block-table index
  // `index`; the caller releases the page it replaces (copy-on-write).
  void replace_page(size_t index, int32_t page) { pages_.at(index) = page; }
  // Takes over pages already retained for this sequence (a cached prefix);
  // the sequence must be empty. They are released like its own.
  void adopt(std::span<const int32_t> retained_pages);
  // Ensures pages cover positions [0, n_tokens); false (and no change) if the pool is exhausted.
  bool reserve(int32_t n_tokens);
  void truncate(int32_t n_tokens);
  void clear() { truncate(0); }

  std::span<const int32_t> block_table() const { return pages_; }
  int32_t capacity_tokens() const { return static_cast<int32_t>(pages_.size()) * page_size_; }

 private:
  PagePool* pool_;
  int32_t page_size_;
  std::vector<int32_t> pages_;
};

}  // namespace troupe
