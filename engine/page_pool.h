#pragma once
// Reference-counted KV pages. A page is an index into the KV storage; a
// sequence's block table lists the pages that hold its tokens in order.
// Sharing a page (prefix caching, parallel samples) is a retain; a page
// returns to the free list when its last holder releases it.
#include <cstdint>
#include <optional>
#include <vector>

namespace troupe {

class PagePool {
 public:
  explicit PagePool(int32_t n_pages);

  // A free page with one reference, or nullopt when none is free.
  std::optional<int32_t> allocate();
  void retain(int32_t page);
  void release(int32_t page);

  int32_t capacity() const { return static_cast<int32_t>(refs_.size()); }
  int32_t free_count() const { return static_cast<int32_t>(free_.size()); }
  int32_t used_count() const { return capacity() - free_count(); }
  int32_t ref_count(int32_t page) const;

 private:
  void check(int32_t page) const;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // used as a stack: recently freed pages are warm in cache
};

}  // namespace troupe
