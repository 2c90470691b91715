#include "service/kv_tiers.h"

namespace troupe::service {

void KvTiers::keep(SwappedPages pages) {
  drop(pages.sequence);
  host_bytes_ += pages.bytes();
  const uint64_t seq = pages.sequence;
  host_.emplace(seq, std::move(pages));
}

SwappedPages KvTiers::take(uint64_t sequence) {
  auto it = host_.find(sequence);
  if (it == host_.end()) return SwappedPages{sequence, {}, {}};
  SwappedPages out = std::move(it->second);
  host_bytes_ -= out.bytes();
  host_.erase(it);
  return out;
}

void KvTiers::drop(uint64_t sequence) {
  auto it = host_.find(sequence);
  if (it == host_.end()) return;
  host_bytes_ -= it->second.bytes();
  host_.erase(it);
}

void KvTiers::session_idle(SessionPages session, int64_t now) {
  idle_[session.session_id] = {std::move(session.tokens), now};
}

std::vector<SessionPages> KvTiers::expire(int64_t now) {
  std::vector<SessionPages> out;
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (now - it->second.since < session_idle_ns_) {
      ++it;
      continue;
    }
    out.push_back({it->first, std::move(it->second.tokens)});
    it = idle_.erase(it);
  }
  return out;
}

}  // namespace troupe::service
