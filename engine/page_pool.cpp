#include "engine/page_pool.h"

#include <stdexcept>
#include <string>

namespace troupe {

PagePool::PagePool(int32_t n_pages) {
  if (n_pages <= 0) throw std::invalid_argument("PagePool needs at least one page");
  refs_.assign(n_pages, 0);
  free_.reserve(n_pages);
  for (int32_t p = n_pages - 1; p >= 0; --p) free_.push_back(p);
}

std::optional<int32_t> PagePool::allocate() {
  if (free_.empty()) return std::nullopt;
  int32_t p = free_.back();
  free_.pop_back();
  refs_[p] = 1;
  return p;
}

void PagePool::check(int32_t page) const {
  if (page < 0 || page >= capacity()) throw std::out_of_range("page " + std::to_string(page) + " out of range");
  if (refs_[page] == 0) throw std::logic_error("page " + std::to_string(page) + " is not allocated");
}

void PagePool::retain(int32_t page) {
  check(page);
  ++refs_[page];
}

void PagePool::release(int32_t page) {
  check(page);
  if (--refs_[page] == 0) free_.push_back(page);
}

int32_t PagePool::ref_count(int32_t page) const {
  if (page < 0 || page >= capacity()) throw std::out_of_range("page " + std::to_string(page) + " out of range");
  return refs_[page];
}

}  // namespace troupe
