#include "engine/page_pool.h"

#include <stdexcept>
#include <string>

namespace troupe {

PagePool::PagePool(int32_t n_pages, int32_t n_local) {
  if (n_pages <= 0) throw std::invalid_argument("PagePool needs at least one page");
  if (n_local < 0 || n_local > n_pages) throw std::invalid_argument("PagePool: local slots must be 0 to the page count");
  refs_.assign(static_cast<size_t>(n_pages), 0);
  free_.reserve(static_cast<size_t>(n_pages));
  for (int32_t p = n_pages - 1; p >= 0; --p) free_.push_back(p);
  n_local_ = n_local;
  if (n_local > 0) {
    local_.assign(static_cast<size_t>(n_pages), -1);
    local_free_.reserve(static_cast<size_t>(n_local));
    for (int32_t s = n_local - 1; s >= 0; --s) local_free_.push_back(s);
  }
}

std::optional<int32_t> PagePool::allocate(bool with_local) {
  if (free_.empty()) return std::nullopt;
  with_local = with_local && !local_.empty();
  if (with_local && local_free_.empty()) return std::nullopt;
  const int32_t p = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(p)] = 1;
  if (with_local) {
    set_slot(p, local_free_.back());
    local_free_.pop_back();
  }
  return p;
}

void PagePool::check(int32_t page) const {
  if (page < 0 || page >= capacity()) throw std::out_of_range("page " + std::to_string(page) + " out of range");
  if (refs_[static_cast<size_t>(page)] == 0) throw std::logic_error("page " + std::to_string(page) + " is not allocated");
}

void PagePool::retain(int32_t page) {
  check(page);
  ++refs_[static_cast<size_t>(page)];
}

void PagePool::release(int32_t page) {
  check(page);
  if (--refs_[static_cast<size_t>(page)] > 0) return;
  drop_local(page);
  free_.push_back(page);
}

void PagePool::drop_local(int32_t page) {
  if (!has_local(page)) return;
  local_free_.push_back(local_[static_cast<size_t>(page)]);
  set_slot(page, -1);
}

void PagePool::set_slot(int32_t page, int32_t slot) {
  local_[static_cast<size_t>(page)] = slot;
  if (recording_) changes_.emplace_back(page, slot);
}

void PagePool::set_local(int32_t page, int32_t slot) {
  if (page < 0 || page >= capacity()) throw std::out_of_range("page " + std::to_string(page) + " out of range");
  if (local_.empty() || slot < -1 || slot >= local_capacity())
    throw std::out_of_range("local slot " + std::to_string(slot) + " outside this pool's " + std::to_string(local_capacity()));
  local_[static_cast<size_t>(page)] = slot;
}

void PagePool::resend_local_slots() {
  if (!recording_) return;
  changes_.assign(1, {-1, -1});
  for (int32_t p = 0; p < capacity(); ++p)
    if (has_local(p)) changes_.emplace_back(p, local_slot(p));
}

int32_t PagePool::ref_count(int32_t page) const {
  if (page < 0 || page >= capacity()) throw std::out_of_range("page " + std::to_string(page) + " out of range");
  return refs_[static_cast<size_t>(page)];
}

}  // namespace troupe
