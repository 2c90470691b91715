#include "persistence/kv_pages.h"

#include <cstring>

#include "engine/schedule/prefix_cache.h"

namespace troupe::persistence {

std::vector<std::string> kv_page_keys(const KvIdentity& identity, std::span<const int32_t> tokens, int32_t n_pages,
                                      int32_t page_size) {
  std::vector<std::string> out;
  const std::string prefix = identity.key_prefix();
  uint64_t chain = 0;
  for (int32_t i = 0; i < n_pages && static_cast<size_t>(i + 1) * page_size <= tokens.size(); ++i) {
    chain = PrefixCache::chain_key(chain, tokens.subspan(static_cast<size_t>(i) * page_size, page_size));
    std::string k = prefix;
    for (int shift = 56; shift >= 0; shift -= 8) k.push_back(static_cast<char>(chain >> shift));
    out.push_back(std::move(k));
  }
  return out;
}

std::vector<std::string> KvPageStore::keys(std::span<const int32_t> tokens, int32_t n_pages) const {
  return kv_page_keys(identity_, tokens, n_pages, page_size_);
}

void KvPageStore::put(std::span<const int32_t> tokens, int32_t first, std::span<const std::string> pages, Batch& b) const {
  const auto k = keys(tokens, first + static_cast<int32_t>(pages.size()));
  for (size_t j = 0; j < pages.size() && first + j < k.size(); ++j) {
    const auto page_tokens = tokens.subspan((first + j) * page_size_, page_size_);
    std::string value(reinterpret_cast<const char*>(page_tokens.data()), page_tokens.size_bytes());
    value += pages[j];
    b.put(Family::kv_pages, k[first + j], std::move(value));
  }
}

std::vector<std::string> KvPageStore::get(std::span<const int32_t> tokens, int32_t n_pages) const {
  std::vector<std::string> out;
  const auto k = keys(tokens, n_pages);
  const size_t token_bytes = static_cast<size_t>(page_size_) * sizeof(int32_t);
  for (size_t i = 0; i < k.size(); ++i) {
    auto value = store_.get(Family::kv_pages, k[i]);
    if (!value || value->size() != token_bytes + static_cast<size_t>(page_bytes_)) break;
    if (std::memcmp(value->data(), tokens.data() + i * page_size_, token_bytes) != 0) break;  // a hash collision
    out.push_back(value->substr(token_bytes));
  }
  return out;
}

void KvPageStore::erase(std::span<const int32_t> tokens, int32_t n_pages, Batch& b) const {
  for (auto& k : keys(tokens, n_pages)) b.erase(Family::kv_pages, std::move(k));
}

}  // namespace troupe::persistence
