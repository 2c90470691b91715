#pragma once
// The target verifier in this process: each StepPlan runs on the model's
// backend (worker::StepRunner). It runs detached, on its own thread, so the
// engine step never shares a thread with socket I/O or the scheduler.
#include <memory>

#include "actors/interfaces.h"
#include "engine/backend.h"
#include "worker/step_runner.h"

namespace troupe::actors {

struct VerifierState {
  std::unique_ptr<worker::StepRunner> runner;
};

verifier_actor::behavior_type verifier(verifier_actor::stateful_pointer<VerifierState> self, std::shared_ptr<Backend> backend);

}  // namespace troupe::actors
