#pragma once
// The draft model in this process: each DraftPlan runs on the draft model's
// backend (worker::DraftRunner), every drafting sequence of the step in one
// batch per drafted position. Detached, like the verifier.
#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "engine/backend.h"
#include "worker/draft_runner.h"

namespace troupe::actors {

struct DraftState {
  std::unique_ptr<worker::DraftRunner> runner;
};

// `name`: what the draft model is called (reported in every DraftResult).
draft_actor::behavior_type drafter(draft_actor::stateful_pointer<DraftState> self, std::shared_ptr<Backend> backend,
                                   std::string name);

}  // namespace troupe::actors
