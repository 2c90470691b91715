#pragma once
// A role that runs in another process (`troupe worker`), reached over
// ZeroMQ: the target verifier (StepPlan → StepResult) or the draft model
// (DraftPlan → DraftResult). This actor forwards each plan's bytes on a
// DEALER socket and answers with the worker's result, so the scheduler
// cannot tell it from the in-process actor. It runs detached: the blocking
// socket wait occupies its own thread only. A worker that does not answer in
// time turns into a failed step (its requests end with the reason) or a step
// without drafts, not a hang.
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "messages/draft_frames.h"
#include "messages/step_frames.h"

namespace troupe::actors {

struct RemoteWorkerState;

caf::behavior remote_worker_actor(caf::stateful_actor<std::shared_ptr<RemoteWorkerState>>* self, std::string endpoint,
                                  std::chrono::milliseconds timeout);

// Asks a verifier worker what it serves (an empty StepPlan); throws when it does not answer.
messages::WorkerInfo query_worker(const std::string& endpoint, std::chrono::milliseconds timeout);
// Asks a draft worker what it serves (an empty DraftPlan); throws when it
// does not answer or is not a draft worker.
messages::DrafterInfo query_draft_worker(const std::string& endpoint, std::chrono::milliseconds timeout);

}  // namespace troupe::actors
