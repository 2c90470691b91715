#include "actors/kv_allocator_actor.h"

#include "service/clock.h"

namespace troupe::actors {

kv_allocator_actor::behavior_type kv_allocator(kv_allocator_actor::stateful_pointer<KvAllocatorState> self,
                                               persistence_actor persistence, std::chrono::milliseconds session_idle) {
  self->state.tiers = std::make_unique<service::KvTiers>(std::chrono::nanoseconds(session_idle).count());
  self->state.persistence = std::move(persistence);
  return {
      [self](kv_spill_atom, persistence::KvSpill& spill) {
        // Counted once written: pages_spilled is what the store holds.
        self->request(self->state.persistence, caf::infinite, kv_spill_atom::value, std::move(spill))
            .then([self](int32_t written) { self->state.tiers->spilled(written); }, [](caf::error&) {});
      },
      [self](swap_keep_atom, service::SwappedPages& pages) { self->state.tiers->keep(std::move(pages)); },
      [self](swap_fetch_atom, uint64_t seq) { return self->state.tiers->take(seq); },
      [self](swap_drop_atom, uint64_t seq) { self->state.tiers->drop(seq); },
      [self](session_idle_atom, service::SessionPages& s) { self->state.tiers->session_idle(std::move(s), service::steady_ns()); },
      [self](session_active_atom, const std::string& id) { self->state.tiers->session_active(id); },
      [self](expire_atom) { return self->state.tiers->expire(service::steady_ns()); },
      [self](stats_atom) { return self->state.tiers->pages_spilled(); },
  };
}

}  // namespace troupe::actors
