#pragma once
// The scheduler actor: receives admits, cancels and gone clients, calls the
// Scheduler (service/scheduler.h) and sends what it decides. One plan is out
// at a time: a DraftPlan to the draft model first when sequences draft with
// it, then the StepPlan to the verifier; each answer is applied and the next
// step planned at once.
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
  tier_router_actor router;  // cascade tiers: escalations go to it; none: one model
};

struct SchedulerActorState {
  std::unique_ptr<service::Scheduler> scheduler;
  SchedulerLinks links;
};

scheduler_actor::behavior_type scheduler(scheduler_actor::stateful_pointer<SchedulerActorState> self,
                                         service::SchedulerConfig config, SchedulerLinks links);

}  // namespace troupe::actors
