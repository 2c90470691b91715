#pragma once
// The scheduler actor: receives admits, cancels and gone clients, calls the
// Scheduler (service/scheduler.h) and sends what it decides. One plan is out
// at a time: a DraftPlan to the draft model first when sequences draft with
// it, then the StepPlan to the verifier; each answer is applied and the next
// step planned at once.
#include <chrono>
#include <memory>

#include "actors/interfaces.h"
#include "service/scheduler.h"

namespace troupe::actors {

class Replies;

struct SchedulerLinks {
  std::shared_ptr<Replies> replies;
  verifier_actor verifier;
  draft_actor drafter;  // none: no draft model
  persistence_actor persistence;
  kv_allocator_actor allocator;
  tier_router_actor router;  // tiers or several workers: escalations, moves and loads go to it; none: one scheduler
  // A worker behind the verifier: probed this often while idle or lost (its
  // death mid-step shows on the link at once); 0: the verifier is in process.
  std::chrono::milliseconds heartbeat{0};
};

struct SchedulerActorState {
  int32_t tier = -1, replica = -1;  // its coordinates (service::SchedulerConfig)
  std::unique_ptr<service::Scheduler> scheduler;
  SchedulerLinks links;
};

scheduler_actor::behavior_type scheduler(scheduler_actor::stateful_pointer<SchedulerActorState> self,
                                         service::SchedulerConfig config, SchedulerLinks links);

}  // namespace troupe::actors
