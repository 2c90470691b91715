#include "actors/draft_actor.h"

namespace troupe::actors {

draft_actor::behavior_type drafter(draft_actor::stateful_pointer<DraftState> self, std::shared_ptr<Backend> backend,
                                   std::string name) {
  self->state.runner = std::make_unique<worker::DraftRunner>(std::move(backend), std::move(name));
  return {
      [self](propose_atom, const DraftPlanBytes& plan) { return DraftResultBytes{self->state.runner->run(plan.bytes)}; },
  };
}

}  // namespace troupe::actors
