#include "engine/kv_cache.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/model_config.h"

namespace troupe {

KvCache::KvCache(const ModelConfig& config, int32_t n_pages, int32_t page_size, KvType type, int32_t local_pages)
    : type_(type),
      page_size_(page_size),
      n_layer_(config.n_layer),
      n_head_kv_(config.n_head_kv),
      head_dim_(config.head_dim),
      value_format_(troupe::value_format(type)),
      value_row_(kv_row_bytes(value_format_, config.head_dim)),
      pool_(n_pages, config.sliding_window > 0 && !config.local_layers.empty() ? local_pages : 0) {
  if (page_size <= 0) throw std::invalid_argument("KV page size must be positive");
  if (!kv_type_fits(type, head_dim_))
    throw std::invalid_argument(std::string("KV type ") + kv_type_name(type) + " needs a head dimension that is a multiple of " +
                                std::to_string(kKvBlock) + "; this model's is " + std::to_string(head_dim_));
  // A local layer's block holds the local slots and the spare zero page.
  const int64_t page_rows = static_cast<int64_t>(page_size) * n_head_kv_;
  int64_t key_bytes = 0, value_bytes = 0;
  for (int64_t l = 0; l < n_layer_; ++l) {
    local_.push_back(pool_.local_capacity() > 0 && config.is_local(l));
    const int64_t layer_rows = page_rows * (local_.back() ? pool_.local_capacity() + 1 : n_pages);
    const bool wide = type != KvType::f16 && std::find(config.wide_key_layers.begin(), config.wide_key_layers.end(), l) !=
                                                 config.wide_key_layers.end();
    key_formats_.push_back(wide ? KvRowFormat::f16 : troupe::key_format(type));
    key_rows_.push_back(kv_row_bytes(key_formats_.back(), head_dim_));
    key_base_.push_back(key_bytes);
    key_bytes += layer_rows * key_rows_.back();
    value_base_.push_back(value_bytes);
    value_bytes += layer_rows * value_row_;
    page_bytes_ += page_rows * (key_rows_.back() + value_row_);
  }
  keys_.assign(static_cast<size_t>(key_bytes), 0);
  values_.assign(static_cast<size_t>(value_bytes), 0);
  key_offsets_.assign(static_cast<size_t>(n_layer_ * n_head_kv_ * head_dim_), 0.0f);
}

void KvCache::set_key_offsets(std::span<const float> offsets) {
  if (offsets.size() != key_offsets_.size()) throw std::invalid_argument("KvCache::set_key_offsets: wrong size");
  std::copy(offsets.begin(), offsets.end(), key_offsets_.begin());
}

void KvCache::copy_page(int32_t src, int32_t dst) {
  if (src < 0 || dst < 0 || src >= pool_.capacity() || dst >= pool_.capacity())
    throw std::out_of_range("KV page copy " + std::to_string(src) + " -> " + std::to_string(dst) + " out of range");
  const int64_t rows = page_size_ * n_head_kv_;
  for (int64_t layer = 0; layer < n_layer_; ++layer) {
    if (!holds(layer, dst)) continue;
    std::copy_n(key_row(layer, src, 0, 0), rows * key_row_bytes(layer), key_row(layer, dst, 0, 0));
    std::copy_n(value_row(layer, src, 0, 0), rows * value_row_, value_row(layer, dst, 0, 0));
  }
}

void KvCache::read_page(int32_t page, uint8_t* out) const {
  if (page < 0 || page >= pool_.capacity()) throw std::out_of_range("KV page " + std::to_string(page) + " out of range");
  for (int64_t layer = 0; layer < n_layer_; ++layer)
    for (const bool keys : {true, false}) {
      const auto bytes = static_cast<size_t>(keys ? key_row_bytes(layer) : value_row_);
      for (int32_t slot = 0; slot < page_size_; ++slot)
        for (int64_t h = 0; h < n_head_kv_; ++h)
          out = std::copy_n(keys ? key_row(layer, page, slot, h) : value_row(layer, page, slot, h), bytes, out);
    }
}

void KvCache::write_page(int32_t page, const uint8_t* in) {
  if (page < 0 || page >= pool_.capacity()) throw std::out_of_range("KV page " + std::to_string(page) + " out of range");
  for (int64_t layer = 0; layer < n_layer_; ++layer) {
    const bool held = holds(layer, page);  // released local rows: nothing reads them again
    for (const bool keys : {true, false}) {
      const auto bytes = static_cast<size_t>(keys ? key_row_bytes(layer) : value_row_);
      for (int32_t slot = 0; slot < page_size_; ++slot)
        for (int64_t h = 0; h < n_head_kv_; ++h, in += bytes)
          if (held) std::copy_n(in, bytes, keys ? key_row(layer, page, slot, h) : value_row(layer, page, slot, h));
    }
  }
}

void KvCache::store(int64_t layer, int32_t page, int32_t slot, const float* k, const float* v) {
  float row[1024];
  auto put = [&](KvRowFormat f, const float* x, const float* offset, uint8_t* out) {
    if (!kv_rotated(f)) return encode_kv_row(f, x, head_dim_, out);
    for (int64_t i = 0; i < head_dim_; ++i) row[i] = offset ? x[i] - offset[i] : x[i];
    kv_rotate(row, head_dim_);
    encode_kv_row(f, row, head_dim_, out);
  };
  if (!holds(layer, page))
    throw std::logic_error("KV page " + std::to_string(page) + " has no local slot for layer " + std::to_string(layer));
  const float* m = key_offset(layer);
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    put(key_format(layer), k + h * head_dim_, m + h * head_dim_, key_row(layer, page, slot, h));
    put(value_format_, v + h * head_dim_, nullptr, value_row(layer, page, slot, h));
  }
}

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
  if (static_cast<size_t>(pool_->allocatable()) < needed - pages_.size()) return false;
  while (pages_.size() < needed) pages_.push_back(*pool_->allocate());
  return true;
}

void KvSequence::drop_local_behind(int32_t next_position, int32_t window) {
  if (window <= 0) return;
  const auto first = std::min(pages_.size(), static_cast<size_t>(local_pages_from(next_position, window, page_size_)));
  for (size_t i = 0; i < first; ++i) pool_->drop_local(pages_[i]);
}

int32_t local_pages_from(int32_t next_position, int32_t window, int32_t page_size) {
  if (window <= 0) return 0;
  return std::max(0, next_position - window - 2 * page_size + 1) / page_size;
}

int32_t local_pages_for(int32_t sequences, int32_t window, int32_t chunk, int32_t page_size) {
  if (window <= 0 || sequences <= 0) return 0;
  const int64_t per = (window + 2 * page_size + std::max(chunk, 1) + page_size - 1) / page_size + 2;
  return static_cast<int32_t>(std::min<int64_t>(per * sequences, std::numeric_limits<int32_t>::max()));
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
