#pragma once
// The job actor: batch jobs (service/batch_jobs.h). It stores each job
// through the persistence actor before JobAccepted, sends its items to the
// scheduler as the server's own requests, receives their responses (job
// items are internal peers, actors/replies.h), stores each result before
// its event is published on the event socket (PUB, topic = job id), and on
// start resumes every stored job still running.
#include <memory>
#include <zmq.hpp>

#include "actors/interfaces.h"
#include "messages/curve_auth.h"
#include "service/batch_jobs.h"
#include "service/metrics.h"

namespace troupe::actors {

class Replies;

// The bound PUB socket (bound by the service at start, so a taken endpoint
// fails there); only the job actor sends on it.
struct EventSocket {
  zmq::context_t ctx;
  std::unique_ptr<messages::ZapHandler> zap;  // before `pub`: it outlives it
  zmq::socket_t pub;
  // Under CURVE: who may subscribe (`pub` is then an XPUB in manual mode).
  std::shared_ptr<const messages::ClientDirectory> clients;
  uint64_t refused = 0;  // subscriptions to others' jobs, not admitted
};

struct JobLinks {
  std::shared_ptr<EventSocket> events;
  std::shared_ptr<Replies> replies;
  scheduler_actor scheduler;
  persistence_actor persistence;
  std::shared_ptr<service::ServiceMetrics> metrics;  // the running-jobs gauge; may be null
};

struct JobActorState {
  std::unique_ptr<service::BatchJobs> jobs;
  JobLinks links;
  bool draining = false;  // items not yet admitted wait in the store for the next start
};

job_actor::behavior_type job_runner(job_actor::stateful_pointer<JobActorState> self, service::BatchJobsConfig config,
                                    JobLinks links);

}  // namespace troupe::actors
