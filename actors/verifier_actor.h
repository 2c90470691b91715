#pragma once
// The target verifier: runs each StepPlan as one batched forward pass of the
// target model (prefill chunks and decode tokens together) and samples every
// sequence that wants a token, with that sequence's own sampler and history.
// It runs detached, on its own thread, so the engine step never shares a
// thread with socket I/O or the scheduler. Speculative acceptance joins it
// with the speculative decoding issue.
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <memory>
#include <string>

#include "engine/backend.h"

namespace troupe::actors {

struct VerifierState;

caf::behavior verifier_actor(caf::stateful_actor<std::shared_ptr<VerifierState>>* self, std::shared_ptr<Backend> backend);

// The work of one step, outside any actor (the worker process calls it too).
class StepRunner {
 public:
  explicit StepRunner(std::shared_ptr<Backend> backend);
  ~StepRunner();
  std::string run(const std::string& plan_bytes);  // StepPlan bytes -> StepResult bytes, never throws

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
