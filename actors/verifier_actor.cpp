#include "actors/verifier_actor.h"

namespace troupe::actors {

verifier_actor::behavior_type verifier(verifier_actor::stateful_pointer<VerifierState> self, std::shared_ptr<Backend> backend) {
  self->state.runner = std::make_unique<worker::StepRunner>(std::move(backend));
  return {
      [self](step_atom, const StepPlanBytes& plan) { return StepResultBytes{self->state.runner->run(plan.bytes)}; },
  };
}

}  // namespace troupe::actors
