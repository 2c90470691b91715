#pragma once
// The scheduler: owns the requests' lifecycle and the KV pages' allocation
// (BatchPlanner, with its prefix cache), sends one StepPlan per engine step
// to the target verifier (first, when sequences draft with the draft model,
// one DraftPlan to the draft actor, whose drafts join the step's verify
// windows) and, when the StepResult returns, streams each
// request's new text to its client, ends requests (end of generation, stop
// string, length, context, cancel, gone client) and plans the next step.
// Cancels that arrive during a step are applied when it returns, so a step's
// pages never change under the engine.
#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "engine/schedule/batch_planner.h"
#include "engine/tokenizer.h"

namespace troupe::actors {

class ClientGateway;

struct SchedulerConfig {
  std::shared_ptr<const Tokenizer> tokenizer;
  int32_t kv_pages = 0;  // the verifier's KV capacity; this actor allocates its pages
  int32_t page_size = 16;
  PlannerLimits planner;
  std::string model_name;
  std::shared_ptr<ClientGateway> gateway;
  caf::actor verifier;
  caf::actor drafter;      // the draft model actor; none: no draft model
  caf::actor persistence;  // session turns are committed there before their Done
  // KV tiers: the verifier can export and import pages (spill and restore).
  bool kv_transfer = false;
  int64_t page_bytes = 0;  // one spilled page (engine/kv_page_codec.h)
  uint8_t spill_codec = 0;  // its KvPageCodec
  // After this long without a turn, a session's cached pages (already
  // spilled) go back to the pool.
  std::chrono::milliseconds session_idle{300000};
  // Preempted sequences' pages swap out to host memory (lossless) up to
  // this many bytes, and back in when the sequence is next to run; beyond
  // it they are recomputed. 0: always recompute.
  int64_t swap_bytes = int64_t{1} << 30;
};

struct SchedulerState;
caf::behavior scheduler_actor(caf::stateful_actor<std::shared_ptr<SchedulerState>>* self, SchedulerConfig config);

}  // namespace troupe::actors
