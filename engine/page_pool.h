#pragma once
// Reference-counted KV pages. A page is an index into the KV storage; a
// sequence's block table lists the pages that hold its tokens in order.
// Sharing a page (prefix caching, parallel samples) is a retain; a page
// returns to the free list when its last holder releases it.
//
// Local slots (sliding-window models): the local layers' rows of a page live
// in a second, smaller store, one local slot per page that still needs them.
// A page is allocated with a local slot; the slot goes back when the page is
// freed, or earlier, once no sequence's window reaches the page any more
// (drop_local: the planner decides; engine/schedule/batch_planner.h). A pool
// without local slots (local_capacity() == 0) keeps every layer in the page.
//
// A worker's pool is a mirror: the front end's pool decides which page holds
// which local slot and sends the changes (take_local_changes / set_local).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace troupe {

class PagePool {
 public:
  explicit PagePool(int32_t n_pages, int32_t n_local = 0);

  // A free page with one reference (and a free local slot when the pool has
  // them), or nullopt when none is free.
  std::optional<int32_t> allocate() { return allocate(true); }
  // with_local false: a page whose local rows are never read (restored
  // behind a sequence's window).
  std::optional<int32_t> allocate(bool with_local);
  void retain(int32_t page);
  void release(int32_t page);

  int32_t capacity() const { return static_cast<int32_t>(refs_.size()); }
  int32_t free_count() const { return static_cast<int32_t>(free_.size()); }
  int32_t used_count() const { return capacity() - free_count(); }
  int32_t ref_count(int32_t page) const;

  // Pages that can still be allocated with their local slot.
  int32_t allocatable() const { return local_capacity() > 0 ? std::min(free_count(), local_free_count()) : free_count(); }
  int32_t local_capacity() const { return n_local_; }
  int32_t local_free_count() const { return static_cast<int32_t>(local_free_.size()); }
  int32_t local_used_count() const { return local_capacity() - local_free_count(); }
  // The page's local slot, or -1 (none held, or the pool has no local slots).
  int32_t local_slot(int32_t page) const { return local_.empty() ? -1 : local_[static_cast<size_t>(page)]; }
  bool has_local(int32_t page) const { return local_slot(page) >= 0; }
  // The page's local rows are no longer read by anyone: its slot is free.
  void drop_local(int32_t page);

  // Mirror side: page -> slot (-1: none) as the front end's pool decided.
  void set_local(int32_t page, int32_t slot);
  // Front end side: (page, slot or -1) changes since the last call, in order,
  // once record_local_changes(true) (a worker's pool mirrors them).
  // The first change is (-1, -1): the mirror starts over (every page none).
  void record_local_changes(bool on) {
    recording_ = on;
    changes_.assign(on ? 1 : 0, {-1, -1});
  }
  std::vector<std::pair<int32_t, int32_t>> take_local_changes() { return std::exchange(changes_, {}); }
  // The next changes start over and list every page's slot (after a step
  // that failed: the mirror may have applied part of a list, or none).
  void resend_local_slots();

 private:
  void check(int32_t page) const;
  void set_slot(int32_t page, int32_t slot);
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // used as a stack: recently freed pages are warm in cache
  std::vector<int32_t> local_;       // per page: its local slot or -1 (empty: no local slots)
  std::vector<int32_t> local_free_;
  int32_t n_local_ = 0;
  bool recording_ = false;
  std::vector<std::pair<int32_t, int32_t>> changes_;
};

}  // namespace troupe
