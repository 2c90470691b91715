#include "engine/cpu_backend.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace troupe {

CpuBackend::CpuBackend(std::unique_ptr<Model> model, int32_t kv_pages, int32_t page_size)
    : model_(std::move(model)), cache_(model_->config(), kv_pages, page_size) {}

std::string CpuBackend::describe() const {
  return "cpu, " + std::to_string(model_->pool().size()) + " threads, KV " +
         std::to_string(cache_.pool().capacity()) + " pages x " + std::to_string(cache_.page_size()) + " tokens";
}

namespace {

void check_page(const KvCache& cache, int32_t page, size_t keys, size_t values, int64_t n_layer) {
  const size_t n = static_cast<size_t>(n_layer * cache.page_size() * cache.slot_values());
  if (page < 0 || page >= cache.pool().capacity() || keys != n || values != n)
    throw std::out_of_range("KV page " + std::to_string(page) + " transfer out of range");
}

}  // namespace

void CpuBackend::read_page(int32_t page, std::span<uint16_t> keys, std::span<uint16_t> values) const {
  const int64_t n_layer = model_->config().n_layer;
  check_page(cache_, page, keys.size(), values.size(), n_layer);
  const size_t n = static_cast<size_t>(cache_.page_size() * cache_.slot_values());
  for (int64_t l = 0; l < n_layer; ++l) {
    std::copy_n(cache_.key(l, page, 0), n, keys.begin() + l * n);
    std::copy_n(cache_.value(l, page, 0), n, values.begin() + l * n);
  }
}

void CpuBackend::write_page(int32_t page, std::span<const uint16_t> keys, std::span<const uint16_t> values) {
  const int64_t n_layer = model_->config().n_layer;
  check_page(cache_, page, keys.size(), values.size(), n_layer);
  const size_t n = static_cast<size_t>(cache_.page_size() * cache_.slot_values());
  for (int64_t l = 0; l < n_layer; ++l) {
    std::copy_n(keys.begin() + l * n, n, cache_.key(l, page, 0));
    std::copy_n(values.begin() + l * n, n, cache_.value(l, page, 0));
  }
}

}  // namespace troupe
