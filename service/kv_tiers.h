#pragma once
// The KV-page allocator actor's state (actors/kv_allocator_actor.cpp): the
// asynchronous side of KV pages, between engine steps. Which page holds
// what, reference counts and the prefix index are accounted synchronously
// by the scheduler's planner, every step (an actor hop there would cost
// ~60 µs a step); what happens to page contents that leave the worker is
// kept here:
//
//   host tier   a preempted sequence's pages (lossless) until it runs again
//   idle        a session between turns keeps its pages cached; after
//               session_idle without a turn they go back to the pool
//   store       spilled pages go to the persistence actor; counted once written
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "service/outbound.h"

namespace troupe::service {

class KvTiers {
 public:
  explicit KvTiers(int64_t session_idle_ns) : session_idle_ns_(session_idle_ns) {}

  void keep(SwappedPages pages);
  SwappedPages take(uint64_t sequence);  // no data when none is kept
  void drop(uint64_t sequence);

  void session_idle(SessionPages session, int64_t now);
  void session_active(const std::string& session_id) { idle_.erase(session_id); }
  // Sessions idle for session_idle by `now`: their pages may go back to the pool.
  std::vector<SessionPages> expire(int64_t now);

  void spilled(int32_t pages) { pages_spilled_ += static_cast<uint64_t>(pages); }
  uint64_t pages_spilled() const { return pages_spilled_; }
  int64_t host_bytes() const { return host_bytes_; }
  size_t idle_sessions() const { return idle_.size(); }

 private:
  struct Idle {
    std::vector<int32_t> tokens;
    int64_t since = 0;
  };
  int64_t session_idle_ns_;
  std::map<uint64_t, SwappedPages> host_;
  int64_t host_bytes_ = 0;
  std::map<std::string, Idle> idle_;
  uint64_t pages_spilled_ = 0;
};

}  // namespace troupe::service
