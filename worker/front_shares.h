#pragma once
// A worker shared by several front ends (`troupe worker --fronts N`): its KV
// pool is cut into N equal shares, and each front end that steps it holds
// one. A front end's scheduler allocates the pages of its own share,
// numbered from 0, and its sequence ids are its own, so two front ends never
// touch each other's pages or samplers (docs/SCALE_OUT.md, "Several front
// ends").
//
// A share is held from a front end's first plan until it lets go (a release
// plan at its shutdown) or falls silent: no plan for `idle` of the worker's
// own idle time. Time the worker spends running steps does not count, so a
// front end waiting behind another's long prefill keeps its share. Each
// holding gets a fresh random epoch, which the worker reports as its
// instance: a front end that sees it change knows its pages were lost.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::worker {

class FrontShares {
 public:
  using Clock = std::chrono::steady_clock;

  struct Share {
    int32_t first_page = 0;  // where this share starts in the worker's pool
    int32_t pages = 0;       // its size: the front end's whole pool
    uint64_t epoch = 0;      // random per holding (StepResult.instance)
  };

  FrontShares(int32_t capacity, int32_t fronts, std::chrono::milliseconds idle);

  // The share `front` holds, or a free one it now takes (or that of a front
  // end silent past `idle`, whose id `evicted` then names). nullopt: every
  // share is held by a live front end; `why` says so.
  std::optional<Share> hold(uint64_t front, Clock::time_point now, std::vector<uint64_t>& evicted, std::string& why);
  // The front end is done with this worker: its share is free.
  void release(uint64_t front);
  // The worker ran a step for this long: nobody's silence grows meanwhile.
  void worked(Clock::duration busy);
  int32_t held() const;
  int32_t fronts() const { return static_cast<int32_t>(slots_.size()); }
  int32_t share_pages() const { return share_pages_; }

 private:
  struct Slot {
    uint64_t front = 0;  // 0: free
    bool taken = false;
    uint64_t epoch = 0;
    Clock::time_point last_seen{};
    Clock::duration busy_at_seen{};
  };
  Clock::duration silence(const Slot& s, Clock::time_point now) const;

  std::vector<Slot> slots_;
  int32_t share_pages_ = 0;
  Clock::duration idle_;
  Clock::duration busy_{};
};

// A random nonzero id (worker instances, share epochs).
uint64_t random_id();

}  // namespace troupe::worker
