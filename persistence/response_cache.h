#pragma once
// The response cache tier: finished answers to requests whose answer the
// request alone determines (greedy, or sampled with a seed), in the store's
// `responses` column family, so the same request again is answered at once
// from the store instead of by the model.
//
//   'r' <key: 32 bytes>                     →  <stored_ms: be64> <finish: u8> <prompt tokens: be32>
//                                              <n: be32> <n token ids: i32 LE> <text>
//   't' <stored_ms: be64> <key: 32 bytes>   →  <the entry's bytes: be64>   (oldest first, for eviction)
//
// The key (service/response_cache_key.h) hashes the model file and
// everything in the request that shapes the answer. Entries live for the
// TTL and within a byte bound (keys and values as written): a put that
// would pass it drops the oldest first. Writes are not synced: a cache
// entry lost in a crash is computed again.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "persistence/store.h"

namespace troupe::persistence {

struct CachedAnswer {
  std::vector<int32_t> tokens;
  std::string text;
  uint8_t finish_reason = 0;  // wire::FinishReason
  int32_t prompt_tokens = 0;
  int64_t stored_ms = 0;      // unix time it was stored
};

// A lookup's answer, as one message between actors.
struct CacheLookup {
  bool found = false;
  CachedAnswer answer;
};

struct ResponseCachePolicy {
  int64_t ttl_ms = 3600 * 1000;
  int64_t max_bytes = 256ll << 20;  // 0: no response cache
};

class ResponseCache {
 public:
  static constexpr size_t kKeyBytes = 32;
  // Counts what the family holds already (a restart keeps the cache).
  ResponseCache(Store& store, ResponseCachePolicy policy);

  // The answer stored under `key`, if it has not expired (an expired one is dropped).
  std::optional<CachedAnswer> find(std::string_view key, int64_t now_ms);
  // Stores `answer` (stamped now_ms), dropping expired entries and then the
  // oldest until it fits; an answer larger than the whole bound is not kept.
  // False when it was not kept.
  bool put(std::string_view key, const CachedAnswer& answer, int64_t now_ms);
  // Drops every entry past its TTL; returns how many.
  int64_t expire(int64_t now_ms);

  const ResponseCachePolicy& policy() const { return policy_; }
  int64_t bytes() const { return bytes_; }
  int64_t entries() const { return entries_; }

 private:
  // Drops the oldest entries (all expired ones, then more until `room` bytes fit).
  void evict(int64_t now_ms, int64_t room);
  void drop(std::string_view time_key, int64_t entry_bytes, Batch& b);

  Store& store_;
  ResponseCachePolicy policy_;
  int64_t bytes_ = 0, entries_ = 0;
};

}  // namespace troupe::persistence
