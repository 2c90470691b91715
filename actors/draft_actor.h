#pragma once
// The draft model actor: runs each DraftPlan (messages/draft.fbs) on the
// draft model (engine/speculation/model_drafter.h), every drafting sequence
// of the step in one batch per drafted position, and answers a DraftResult.
// It runs detached on its own thread, like the verifier; `troupe worker
// --role draft` runs the same DraftRunner in a process of its own.
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <memory>
#include <string>

#include "engine/backend.h"

namespace troupe::actors {

struct DraftState;

// `name`: what the draft model is called (reported in every DraftResult).
caf::behavior draft_actor(caf::stateful_actor<std::shared_ptr<DraftState>>* self, std::shared_ptr<Backend> backend,
                          std::string name);

// The work of one plan, outside any actor (the worker process calls it too).
class DraftRunner {
 public:
  DraftRunner(std::shared_ptr<Backend> backend, std::string name);
  ~DraftRunner();
  std::string run(const std::string& plan_bytes);  // DraftPlan bytes -> DraftResult bytes, never throws

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
