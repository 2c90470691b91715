#pragma once
// The target verifier in another process (`troupe worker`), reached over
// ZeroMQ: this actor forwards each StepPlan's bytes on a DEALER socket and
// answers with the worker's StepResult, so the scheduler cannot tell it from
// the in-process verifier. It runs detached: the blocking socket wait
// occupies its own thread only. A worker that does not answer in time turns
// into a failed step (its requests end with the reason), not a hang.
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "messages/step_frames.h"

namespace troupe::actors {

struct RemoteVerifierState;

caf::behavior remote_verifier_actor(caf::stateful_actor<std::shared_ptr<RemoteVerifierState>>* self,
                                    std::string endpoint, std::chrono::milliseconds timeout);

// Asks a worker what it serves (an empty StepPlan); throws when it does not answer.
messages::WorkerInfo query_worker(const std::string& endpoint, std::chrono::milliseconds timeout);

}  // namespace troupe::actors
