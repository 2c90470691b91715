#pragma once
// The KV-page allocator actor: the asynchronous side of KV pages (its state
// is service::KvTiers). The scheduler's planner accounts pages per step;
// this actor keeps what leaves the worker between steps: preempted
// sequences' pages in host memory until they run again, spilled pages on
// their way to the store (through the persistence actor), and the clock of
// idle sessions whose cached pages go back to the pool.
#include <chrono>

#include "actors/interfaces.h"
#include "service/kv_tiers.h"

namespace troupe::actors {

struct KvAllocatorState {
  std::unique_ptr<service::KvTiers> tiers;
  persistence_actor persistence;
};

kv_allocator_actor::behavior_type kv_allocator(kv_allocator_actor::stateful_pointer<KvAllocatorState> self,
                                               persistence_actor persistence, std::chrono::milliseconds session_idle);

}  // namespace troupe::actors
