#include "engine/kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/model_config.h"

namespace troupe {

KvCache::KvCache(const ModelConfig& config, int32_t n_pages, int32_t page_size)
    : page_size_(page_size), n_layer_(config.n_layer), slot_values_(config.kv_dim()), pool_(n_pages) {
  if (page_size <= 0) throw std::invalid_argument("KV page size must be positive");
  const size_t n = static_cast<size_t>(config.n_layer) * n_pages * page_size * slot_values_;
  keys_.assign(n, 0);
  values_.assign(n, 0);
}

void KvCache::copy_page(int32_t src, int32_t dst) {
  if (src < 0 || dst < 0 || src >= pool_.capacity() || dst >= pool_.capacity())
    throw std::out_of_range("KV page copy " + std::to_string(src) + " -> " + std::to_string(dst) + " out of range");
  const size_t n = static_cast<size_t>(page_size_ * slot_values_);
  for (int64_t layer = 0; layer < n_layer_; ++layer) {
    std::copy_n(key(layer, src, 0), n, key(layer, dst, 0));
    std::copy_n(value(layer, src, 0), n, value(layer, dst, 0));
  }
}

int64_t KvCache::bytes() const { return static_cast<int64_t>((keys_.size() + values_.size()) * sizeof(uint16_t)); }

KvSequence::~KvSequence() { clear(); }

KvSequence::KvSequence(KvSequence&& other) noexcept
    : pool_(other.pool_), page_size_(other.page_size_), pages_(std::move(other.pages_)) {
  other.pages_.clear();
}

KvSequence& KvSequence::operator=(KvSequence&& other) noexcept {
  if (this != &other) {
    clear();
    pool_ = other.pool_;
    page_size_ = other.page_size_;
    pages_ = std::move(other.pages_);
    other.pages_.clear();
  }
  return *this;
}

void KvSequence::adopt(std::span<const int32_t> retained_pages) {
  if (!pages_.empty()) throw std::logic_error("KvSequence::adopt on a sequence that has pages");
  pages_.assign(retained_pages.begin(), retained_pages.end());
}

bool KvSequence::reserve(int32_t n_tokens) {
  const int32_t ps = page_size_;
  const size_t needed = static_cast<size_t>((n_tokens + ps - 1) / ps);
  if (needed <= pages_.size()) return true;
  if (static_cast<size_t>(pool_->free_count()) < needed - pages_.size()) return false;
  while (pages_.size() < needed) pages_.push_back(*pool_->allocate());
  return true;
}

void KvSequence::truncate(int32_t n_tokens) {
  const int32_t ps = page_size_;
  const size_t keep = static_cast<size_t>((std::max(n_tokens, 0) + ps - 1) / ps);
  while (pages_.size() > keep) {
    pool_->release(pages_.back());
    pages_.pop_back();
  }
}

}  // namespace troupe
