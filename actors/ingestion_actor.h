#pragma once
// Ingestion: the first actor a client's bytes meet. It asks the request gate
// (service/request_gate.h) what a frame is, answers Ping and rejections
// itself, fetches a session turn's history from the persistence actor, and
// hands prompts to the scheduler and queries to whoever answers them. The
// socket thread sends control frames at high priority, so they overtake
// prompts waiting here for the tokenizer (service/intake.h).
#include <memory>

#include "actors/interfaces.h"
#include "actors/session_peers.h"
#include "service/intake.h"
#include "service/metrics.h"
#include "service/request_gate.h"

namespace troupe::actors {

class Replies;

struct IngestionLinks {
  std::shared_ptr<Replies> replies;
  scheduler_actor scheduler;
  persistence_actor persistence;  // sessions
  job_actor jobs;
  std::shared_ptr<service::IntakeBacklog> backlog;  // what the socket thread counted, released once read
  std::shared_ptr<service::ServiceMetrics> metrics;  // refusals counted by code; may be null
  session_peers_actor peers;  // other front ends to take unknown sessions from (serve --peer); may be null
};

struct IngestionState {
  std::unique_ptr<service::RequestGate> gate;
  IngestionLinks links;
  bool draining = false;  // new prompts, turns and jobs are answered shutting_down
};

ingestion_actor::behavior_type ingestion(ingestion_actor::stateful_pointer<IngestionState> self, service::GateConfig config,
                                         IngestionLinks links);

// The gateways' intake (gateways/frame_intake.h): frames and gone peers as
// messages to `ingestion`, control frames at high priority.
std::shared_ptr<gateways::FrameIntake> frame_intake(ingestion_actor ingestion);

}  // namespace troupe::actors
