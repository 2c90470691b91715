#pragma once
// Requests remembered for a while by (peer, client id): cancels that
// overtook their request, requests handed to the next tier (their later
// cancels follow them). Bounded in count and age, so a client that sends
// cancels for requests that never come cannot grow it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace troupe::service {

class RecentRequests {
 public:
  using Key = std::pair<std::string, uint64_t>;  // (peer, client request id)
  static constexpr int64_t kMaxAgeNs = 30'000'000'000;
  static constexpr size_t kMaxEntries = 4096;

  // Remembered at `now` unless full of entries younger than kMaxAgeNs.
  void remember(const Key& key, int64_t now) {
    if (when_.size() >= kMaxEntries) std::erase_if(when_, [now](const auto& e) { return now - e.second > kMaxAgeNs; });
    if (when_.size() < kMaxEntries) when_[key] = now;
  }
  bool contains(const Key& key) const { return when_.count(key) > 0; }
  // Forgets `key`; true if it was remembered within kMaxAgeNs of `now`.
  bool take_fresh(const Key& key, int64_t now) {
    auto it = when_.find(key);
    if (it == when_.end()) return false;
    const bool fresh = now - it->second <= kMaxAgeNs;
    when_.erase(it);
    return fresh;
  }
  size_t size() const { return when_.size(); }

 private:
  std::map<Key, int64_t> when_;
};

}  // namespace troupe::service
