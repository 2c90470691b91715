#pragma once
// A role that runs in another process (`troupe worker`), reached over
// ZeroMQ: the target verifier (StepPlan → StepResult) or the draft model
// (DraftPlan → DraftResult). The actor forwards each plan's bytes on a
// DEALER socket and answers with the worker's result, so the scheduler
// cannot tell it from the in-process actor: it has the same typed
// interface. It runs detached: the blocking socket wait occupies its own
// thread only. A worker that does not answer in time turns into a failed
// step (its requests end with the reason) or a step without drafts, not a hang.
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "actors/interfaces.h"
#include "messages/draft_frames.h"
#include "messages/step_frames.h"
#include "messages/zmq_sockets.h"

namespace troupe::actors {

class WorkerLink;

// A worker's endpoint, and the CURVE keys to reach it when it requires them
// (this server's pair, the worker's public key).
struct WorkerAddress {
  std::string endpoint;
  messages::CurveKeys curve;
};

struct RemoteWorkerState {
  WorkerAddress address;
  std::chrono::milliseconds timeout{0};
  std::unique_ptr<WorkerLink> link;
  RemoteWorkerState();
  ~RemoteWorkerState();
};

verifier_actor::behavior_type remote_verifier(verifier_actor::stateful_pointer<RemoteWorkerState> self, WorkerAddress address,
                                              std::chrono::milliseconds timeout);
draft_actor::behavior_type remote_drafter(draft_actor::stateful_pointer<RemoteWorkerState> self, WorkerAddress address,
                                          std::chrono::milliseconds timeout);

// A worker that answered but has no share of its pool for this front end
// (every share held by another live front end: worker/front_shares.h).
struct WorkerRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Asks a verifier worker what it serves (an empty StepPlan from front end
// `front`, which takes that front end's share of its pool); throws when it
// does not answer, or WorkerRefused when it has no share for it.
messages::WorkerInfo query_worker(const WorkerAddress& address, std::chrono::milliseconds timeout, uint64_t front);
// Tells a verifier worker that front end `front` is done with it (its
// shutdown): its share of the pool is free for another. Best effort.
void release_worker(const WorkerAddress& address, std::chrono::milliseconds timeout, uint64_t front);
// Asks a draft worker what it serves (an empty DraftPlan); throws when it
// does not answer or is not a draft worker.
messages::DrafterInfo query_draft_worker(const WorkerAddress& address, std::chrono::milliseconds timeout);

}  // namespace troupe::actors
