#include "persistence/response_cache.h"

#include <cstring>

namespace troupe::persistence {
namespace {

constexpr char kEntry = 'r', kByTime = 't';

std::string entry_key(std::string_view key) { return std::string(1, kEntry).append(key); }
std::string time_key(int64_t stored_ms, std::string_view key) {
  return std::string(1, kByTime).append(be64(static_cast<uint64_t>(stored_ms))).append(key);
}

std::string encode(const CachedAnswer& a) {
  std::string v = be64(static_cast<uint64_t>(a.stored_ms));
  v.push_back(static_cast<char>(a.finish_reason));
  v += be32(static_cast<uint32_t>(a.prompt_tokens));
  v += be32(static_cast<uint32_t>(a.tokens.size()));
  const size_t at = v.size();
  v.resize(at + a.tokens.size() * 4);
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    const auto u = static_cast<uint32_t>(a.tokens[i]);
    for (int b = 0; b < 4; ++b) v[at + i * 4 + static_cast<size_t>(b)] = static_cast<char>(u >> (8 * b));
  }
  return v + a.text;
}

// A damaged or truncated value reads as nothing: a cache miss.
std::optional<CachedAnswer> decode(std::string_view v) {
  constexpr size_t kHead = 8 + 1 + 4 + 4;
  if (v.size() < kHead) return std::nullopt;
  CachedAnswer a;
  a.stored_ms = static_cast<int64_t>(read_be64(v));
  a.finish_reason = static_cast<uint8_t>(v[8]);
  a.prompt_tokens = static_cast<int32_t>(read_be32(v.substr(9)));
  const uint32_t n = read_be32(v.substr(13));
  if ((v.size() - kHead) / 4 < n) return std::nullopt;
  a.tokens.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t u = 0;
    for (int b = 0; b < 4; ++b) u |= static_cast<uint32_t>(static_cast<uint8_t>(v[kHead + i * 4 + static_cast<size_t>(b)])) << (8 * b);
    a.tokens[i] = static_cast<int32_t>(u);
  }
  a.text = std::string(v.substr(kHead + size_t{n} * 4));
  return a;
}

}  // namespace

ResponseCache::ResponseCache(Store& store, ResponseCachePolicy policy) : store_(store), policy_(policy) {
  store_.scan(Family::responses, std::string(1, kByTime), [&](std::string_view, std::string_view value) {
    bytes_ += static_cast<int64_t>(read_be64(value));
    ++entries_;
    return true;
  });
}

std::optional<CachedAnswer> ResponseCache::find(std::string_view key, int64_t now_ms) {
  if (key.size() != kKeyBytes) return std::nullopt;
  const auto value = store_.get(Family::responses, entry_key(key));
  if (!value) return std::nullopt;
  auto answer = decode(*value);
  const int64_t stored = answer ? answer->stored_ms : static_cast<int64_t>(read_be64(*value));
  if (answer && now_ms - stored < policy_.ttl_ms) return answer;
  Batch b;  // expired or unreadable: gone now rather than at the next sweep
  std::string tkey = time_key(stored, key);
  if (!answer)  // its time is unreadable too: find its index entry (rare, so a scan)
    store_.scan(Family::responses, std::string(1, kByTime), [&](std::string_view t, std::string_view) {
      if (t.substr(9) != key) return true;
      tkey = std::string(t);
      return false;
    });
  if (const auto size = store_.get(Family::responses, tkey)) drop(tkey, static_cast<int64_t>(read_be64(*size)), b);
  b.erase(Family::responses, entry_key(key));
  store_.write(b, false);
  return std::nullopt;
}

bool ResponseCache::put(std::string_view key, const CachedAnswer& answer, int64_t now_ms) {
  if (key.size() != kKeyBytes || policy_.max_bytes <= 0) return false;
  CachedAnswer stamped = answer;
  stamped.stored_ms = now_ms;
  std::string value = encode(stamped);
  const auto bytes = static_cast<int64_t>(1 + key.size() + value.size());
  if (bytes > policy_.max_bytes) return false;
  Batch b;
  if (const auto old = store_.get(Family::responses, entry_key(key))) {  // the same request again: replace it
    const std::string tkey = time_key(static_cast<int64_t>(read_be64(*old)), key);
    if (const auto size = store_.get(Family::responses, tkey)) drop(tkey, static_cast<int64_t>(read_be64(*size)), b);
    b.erase(Family::responses, entry_key(key));
    store_.write(b, false);
    b = Batch();
  }
  evict(now_ms, bytes);
  b.put(Family::responses, entry_key(key), std::move(value));
  b.put(Family::responses, time_key(now_ms, key), be64(static_cast<uint64_t>(bytes)));
  store_.write(b, false);
  bytes_ += bytes;
  ++entries_;
  return true;
}

int64_t ResponseCache::expire(int64_t now_ms) {
  const int64_t before = entries_;
  evict(now_ms, 0);
  return before - entries_;
}

void ResponseCache::drop(std::string_view time_key, int64_t entry_bytes, Batch& b) {
  b.erase(Family::responses, std::string(time_key));
  bytes_ -= entry_bytes;
  --entries_;
}

// Oldest first: the time index is in key order.
void ResponseCache::evict(int64_t now_ms, int64_t room) {
  Batch b;
  store_.scan(Family::responses, std::string(1, kByTime), [&](std::string_view tkey, std::string_view value) {
    const auto stored = static_cast<int64_t>(read_be64(tkey.substr(1)));
    if (now_ms - stored < policy_.ttl_ms && bytes_ + room <= policy_.max_bytes) return false;
    drop(tkey, static_cast<int64_t>(read_be64(value)), b);
    b.erase(Family::responses, entry_key(tkey.substr(9)));
    return true;
  });
  if (!b.empty()) store_.write(b, false);
}

}  // namespace troupe::persistence
