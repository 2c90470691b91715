#include "worker/front_shares.h"

#include <random>
#include <stdexcept>

namespace troupe::worker {

uint64_t random_id() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t id = ((uint64_t{rd()} << 32) | rd()) ^ (t * 0x9e3779b97f4a7c15ull);
  return id ? id : 1;
}

FrontShares::FrontShares(int32_t capacity, int32_t fronts, std::chrono::milliseconds idle)
    : slots_(static_cast<size_t>(fronts > 0 ? fronts : 1)), idle_(idle) {
  if (fronts < 1) throw std::invalid_argument("a worker serves at least one front end");
  share_pages_ = capacity / fronts;
  if (share_pages_ < 1)
    throw std::invalid_argument(std::to_string(capacity) + " KV pages cannot be shared by " + std::to_string(fronts) +
                                " front ends");
}

FrontShares::Clock::duration FrontShares::silence(const Slot& s, Clock::time_point now) const {
  return (now - s.last_seen) - (busy_ - s.busy_at_seen);
}

std::optional<FrontShares::Share> FrontShares::hold(uint64_t front, Clock::time_point now, std::vector<uint64_t>& evicted,
                                                    std::string& why) {
  Slot* slot = nullptr;
  for (Slot& s : slots_)
    if (s.taken && s.front == front) slot = &s;
  if (!slot) {
    for (Slot& s : slots_)
      if (!s.taken) {
        slot = &s;
        break;
      }
    // A front end that crashed never let go: its share is free once it has
    // been silent for `idle` (it probes every second while it lives).
    if (!slot)
      for (Slot& s : slots_)
        if (silence(s, now) >= idle_ && (!slot || silence(s, now) > silence(*slot, now))) slot = &s;
    if (!slot) {
      why = (slots_.size() == 1 ? std::string("this worker serves one front end (troupe worker --fronts 1) and another holds "
                                              "it, so every share is held")
                                : "this worker's KV pool is shared by " + std::to_string(slots_.size()) +
                                      " front ends (troupe worker --fronts) and every share is held") +
            "; a share is freed when its front end stops, or after " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(idle_).count()) + " s without word from it";
      return std::nullopt;
    }
    if (slot->taken) evicted.push_back(slot->front);
    *slot = {front, true, random_id(), now, busy_};
  }
  slot->last_seen = now;
  slot->busy_at_seen = busy_;
  const int32_t index = static_cast<int32_t>(slot - slots_.data());
  return Share{index * share_pages_, share_pages_, slot->epoch};
}

void FrontShares::release(uint64_t front) {
  for (Slot& s : slots_)
    if (s.taken && s.front == front) s = {};
}

void FrontShares::worked(Clock::duration busy) { busy_ += busy; }

int32_t FrontShares::held() const {
  int32_t n = 0;
  for (const Slot& s : slots_) n += s.taken ? 1 : 0;
  return n;
}

}  // namespace troupe::worker
