#include "engine/kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/model_config.h"

namespace troupe {

KvCache::KvCache(const ModelConfig& config, int32_t n_pages, int32_t page_size, KvType type)
    : type_(type),
      page_size_(page_size),
      n_layer_(config.n_layer),
      n_head_kv_(config.n_head_kv),
      head_dim_(config.head_dim),
      value_format_(troupe::value_format(type)),
      value_row_(kv_row_bytes(value_format_, config.head_dim)),
      pool_(n_pages) {
  if (page_size <= 0) throw std::invalid_argument("KV page size must be positive");
  if (!kv_type_fits(type, head_dim_))
    throw std::invalid_argument(std::string("KV type ") + kv_type_name(type) + " needs a head dimension that is a multiple of " +
                                std::to_string(kKvBlock) + "; this model's is " + std::to_string(head_dim_));
  const int64_t layer_rows = static_cast<int64_t>(n_pages) * page_size * n_head_kv_;
  int64_t key_bytes = 0;
  for (int64_t l = 0; l < n_layer_; ++l) {
    const bool wide = type != KvType::f16 && std::find(config.wide_key_layers.begin(), config.wide_key_layers.end(), l) !=
                                                 config.wide_key_layers.end();
    key_formats_.push_back(wide ? KvRowFormat::f16 : troupe::key_format(type));
    key_rows_.push_back(kv_row_bytes(key_formats_.back(), head_dim_));
    key_base_.push_back(key_bytes);
    key_bytes += layer_rows * key_rows_.back();
    page_bytes_ += static_cast<int64_t>(page_size) * n_head_kv_ * (key_rows_.back() + value_row_);
  }
  keys_.assign(static_cast<size_t>(key_bytes), 0);
  values_.assign(static_cast<size_t>(n_layer_ * layer_rows * value_row_), 0);
  key_offsets_.assign(static_cast<size_t>(n_layer_ * n_head_kv_ * head_dim_), 0.0f);
}

void KvCache::set_key_offsets(std::span<const float> offsets) {
  if (offsets.size() != key_offsets_.size()) throw std::invalid_argument("KvCache::set_key_offsets: wrong size");
  std::copy(offsets.begin(), offsets.end(), key_offsets_.begin());
}

uint16_t* KvCache::half_at(const std::vector<uint8_t>& v, int64_t layer, int32_t page, int32_t slot) const {
  if (type_ != KvType::f16) throw std::logic_error("KvCache::key/value: the cache does not hold half values");
  return reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(v.data())) + slot_offset(layer, page, slot) * head_dim_;
}

void KvCache::copy_page(int32_t src, int32_t dst) {
  if (src < 0 || dst < 0 || src >= pool_.capacity() || dst >= pool_.capacity())
    throw std::out_of_range("KV page copy " + std::to_string(src) + " -> " + std::to_string(dst) + " out of range");
  const int64_t rows = page_size_ * n_head_kv_;
  for (int64_t layer = 0; layer < n_layer_; ++layer) {
    std::copy_n(key_row(layer, src, 0, 0), rows * key_row_bytes(layer), key_row(layer, dst, 0, 0));
    std::copy_n(value_row(layer, src, 0, 0), rows * value_row_, value_row(layer, dst, 0, 0));
  }
}

void KvCache::read_page(int32_t page, uint8_t* out) const {
  if (page < 0 || page >= pool_.capacity()) throw std::out_of_range("KV page " + std::to_string(page) + " out of range");
  const int64_t rows = page_size_ * n_head_kv_;
  for (int64_t layer = 0; layer < n_layer_; ++layer) {
    out = std::copy_n(key_row(layer, page, 0, 0), rows * key_row_bytes(layer), out);
    out = std::copy_n(value_row(layer, page, 0, 0), rows * value_row_, out);
  }
}

void KvCache::write_page(int32_t page, const uint8_t* in) {
  if (page < 0 || page >= pool_.capacity()) throw std::out_of_range("KV page " + std::to_string(page) + " out of range");
  const int64_t rows = page_size_ * n_head_kv_;
  for (int64_t layer = 0; layer < n_layer_; ++layer) {
    std::copy_n(in, rows * key_row_bytes(layer), key_row(layer, page, 0, 0));
    in += rows * key_row_bytes(layer);
    std::copy_n(in, rows * value_row_, value_row(layer, page, 0, 0));
    in += rows * value_row_;
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
