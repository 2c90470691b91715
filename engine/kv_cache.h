#pragma once
// Paged KV storage for every layer, and the block tables that address it.
//
// Storage of one layer, K and V alike:
//
//   page 0                                  page 1
//   +-------------------+-------------------+-----+  +-------------------+----
//   | head 0: slot 0..  | head 1: slot 0..  | ... |  | head 0: slot 0..  | ...
//   +-------------------+-------------------+-----+  +-------------------+----
//   a page holds each KV head's page_size rows together, a row = one head's
//   head_dim values of one slot in the cache's format (engine/kv_type.h: f16,
//   q8_0 or q4_0 rows); a quantized cache keeps the keys of a model's wide
//   key layers in f16 (engine/kv_key_layers.h), so key rows differ in size
//   between layers
//
// Head by head because attention reads a page one KV head at a time: a
// head's rows are then one contiguous run (key_row(l, p, s + 1, h) ==
// key_row(l, p, s, h) + key_row_bytes(l)), which the kernels prefetch as
// one range, not rows a slot apart (docs/DECISIONS.md). Pages travel and
// are stored slot by slot (read_page, write_page: engine/kv_page_codec.h's
// order), so the layout in memory is this cache's own business.
//
// Token at position p of a sequence lives in page block_table[p / page_size],
// slot p % page_size. All layers share the page numbering, so one block table
// serves the whole model.
//
// Sliding-window models (Gemma 3) may keep their local layers' rows apart, in
// `local_pages` pages addressed through the pool's local slots
// (engine/page_pool.h): a page behind every window gives its local slot back
// and keeps only its global layers. A page without one reads its local rows
// as zeros (a spare zero page: the window masks them, and nothing reads
// uninitialized memory) and its local rows are never written.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_type.h"
#include "engine/page_pool.h"

namespace troupe {

struct ModelConfig;

class KvCache {
 public:
  KvCache(const ModelConfig& config, int32_t n_pages, int32_t page_size = 16, KvType type = KvType::f16,
          int32_t local_pages = 0);

  KvType type() const { return type_; }
  int32_t page_size() const { return page_size_; }
  int64_t slot_values() const { return n_head_kv_ * head_dim_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t n_head_kv() const { return n_head_kv_; }
  KvRowFormat key_format(int64_t layer) const { return key_formats_[static_cast<size_t>(layer)]; }
  KvRowFormat value_format() const { return value_format_; }
  int64_t key_row_bytes(int64_t layer) const { return key_rows_[static_cast<size_t>(layer)]; }
  int64_t value_row_bytes() const { return value_row_; }
  int64_t bytes() const { return static_cast<int64_t>(keys_.size() + values_.size()); }
  // Layer `layer` lives in the local store (a pool with local slots only).
  bool local_layer(int64_t layer) const { return local_[static_cast<size_t>(layer)] != 0; }
  // Whether page `page` holds its rows of `layer` (false: released local rows).
  bool holds(int64_t layer, int32_t page) const { return !local_layer(layer) || pool_.has_local(page); }
  // Bytes of one page, every layer's K and V: read_page()/write_page() move these.
  int64_t page_bytes() const { return page_bytes_; }
  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }

  // Copies every layer's K and V of page src into page dst (copy-on-write).
  void copy_page(int32_t src, int32_t dst);
  // A page's contents in the cache's format, as pages travel and are
  // stored: per layer, its K rows then its V rows, slot by slot, each slot's
  // heads in order.
  void read_page(int32_t page, uint8_t* out) const;
  void write_page(int32_t page, const uint8_t* in);

  // One token's K and V (kv_dim floats each) into a slot, in the cache's format.
  // Throws std::logic_error for a local layer of a page without a local slot.
  void store(int64_t layer, int32_t page, int32_t slot, const float* k, const float* v);

  // Quantized keys are stored less a fixed vector per layer (kv_dim floats):
  // every key of a query then loses the same q . m from its score, which
  // softmax does not see, while the quantizer no longer spends its range on
  // what all keys share (Qwen2's key bias: see Model::key_offsets). Zero
  // unless set; f16 caches ignore it.
  void set_key_offsets(std::span<const float> offsets);  // n_layer x kv_dim
  const float* key_offset(int64_t layer) const { return key_offsets_.data() + layer * slot_values(); }

  const uint8_t* key_row(int64_t layer, int32_t page, int32_t slot, int64_t head) const {
    return keys_.data() + key_offset_bytes(layer, page, slot, head);
  }
  const uint8_t* value_row(int64_t layer, int32_t page, int32_t slot, int64_t head) const {
    return values_.data() + value_base_[static_cast<size_t>(layer)] + row_index(layer, page, slot, head) * value_row_;
  }
  uint8_t* key_row(int64_t layer, int32_t page, int32_t slot, int64_t head) {
    return keys_.data() + key_offset_bytes(layer, page, slot, head);
  }
  uint8_t* value_row(int64_t layer, int32_t page, int32_t slot, int64_t head) {
    return values_.data() + value_base_[static_cast<size_t>(layer)] + row_index(layer, page, slot, head) * value_row_;
  }

 private:
  // Where a page's rows of a layer are: the page itself, or for a local
  // layer its local slot (the spare zero page when it has none).
  int64_t stored_page(int64_t layer, int32_t page) const {
    if (!local_layer(layer)) return page;
    const int32_t s = pool_.local_slot(page);
    return s >= 0 ? s : pool_.local_capacity();
  }
  // In rows, within the layer's block: a page's heads, each its slots.
  int64_t row_index(int64_t layer, int32_t page, int32_t slot, int64_t head) const {
    return (stored_page(layer, page) * n_head_kv_ + head) * page_size_ + slot;
  }
  // Key rows: each layer's block of the pool, rows of that layer's size.
  int64_t key_offset_bytes(int64_t layer, int32_t page, int32_t slot, int64_t head) const {
    const auto l = static_cast<size_t>(layer);
    return key_base_[l] + row_index(layer, page, slot, head) * key_rows_[l];
  }

  KvType type_;
  int32_t page_size_;
  int64_t n_layer_, n_head_kv_, head_dim_;
  std::vector<KvRowFormat> key_formats_;
  std::vector<int64_t> key_rows_, key_base_;  // per layer: row bytes, first byte
  std::vector<int64_t> value_base_;           // per layer: first byte
  std::vector<uint8_t> local_;                // per layer: 1 = in the local store
  KvRowFormat value_format_;
  int64_t value_row_, page_bytes_ = 0;
  PagePool pool_;
  std::vector<uint8_t> keys_;
  std::vector<uint8_t> values_;
  std::vector<float> key_offsets_;
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
  // A sliding-window sequence whose next query is at `next_position` gives
  // back the local slots of its pages that no window of `window` positions
  // from there reaches (local_pages_from). For a sequence that shares no
  // pages (the planner settles shared ones: BatchPlanner).
  void drop_local_behind(int32_t next_position, int32_t window);
  void truncate(int32_t n_tokens);
  void clear() { truncate(0); }

  std::span<const int32_t> block_table() const { return pages_; }
  int32_t capacity_tokens() const { return static_cast<int32_t>(pages_.size()) * page_size_; }

 private:
  PagePool* pool_;
  int32_t page_size_;
  std::vector<int32_t> pages_;
};

// The first page (of size page_size) whose local rows a sequence still keeps
// when its next query is at `next_position` under a window of `window`
// positions: the window's own pages, and two pages more, so that a query a
// few positions back (a fork's recomputed token, a prefix matched up to a
// page boundary) still finds its window. 0 without a window.
int32_t local_pages_from(int32_t next_position, int32_t window, int32_t page_size);
// Local pages that `sequences` sequences hold at most, each stepping up to
// `chunk` tokens at a time: its window, the two pages more, the step's pages
// and a partly filled one. 0 without a window.
int32_t local_pages_for(int32_t sequences, int32_t window, int32_t chunk, int32_t page_size);

}  // namespace troupe
