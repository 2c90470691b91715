#pragma once
// Batch jobs: SubmitJob becomes a durable job (through the persistence
// actor) before JobAccepted; its items then run as requests the server makes
// itself, at the job's priority (batch by default), at most `max_in_flight`
// at a time so interactive streams keep the engine. Each finished item is
// stored before its event is published on the event socket (PUB, topic =
// job id). On start, every stored job still running resumes with exactly
// its items that have no stored result.
#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <memory>
#include <string>
#include <zmq.hpp>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"

namespace troupe::actors {

class ClientGateway;

// The bound PUB socket (bound by the service at start, so a taken endpoint
// fails there); only the job actor sends on it.
struct EventSocket {
  zmq::context_t ctx;
  zmq::socket_t pub;
};

struct JobConfig {
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatFormat chat_format = ChatFormat::chatml;
  int64_t max_context = 4096;
  int32_t max_in_flight = 4;   // job items in the scheduler at once, all jobs together
  std::shared_ptr<EventSocket> events;
  std::shared_ptr<ClientGateway> gateway;
  caf::actor scheduler, persistence;
};

struct JobState;
caf::behavior job_actor(caf::stateful_actor<std::shared_ptr<JobState>>* self, JobConfig config);

}  // namespace troupe::actors
