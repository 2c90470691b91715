#include "actors/job_actor.h"

#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdio>

#include "actors/replies.h"

namespace troupe::actors {
namespace {

using JobSelf = job_actor::stateful_pointer<JobActorState>;

void publish(EventSocket& events, const std::string& topic, const messages::Bytes& event) {
  try {
    events.pub.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    events.pub.send(zmq::buffer(event), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // A PUB socket does not block or fail on slow subscribers; anything else
    // is lost events, never lost results (the store has them).
  }
}

void deliver(JobSelf self);

// How often the event socket's subscriptions are read under CURVE (each is
// also read before any event goes out): a subscriber's first events wait
// at most this long.
constexpr std::chrono::milliseconds kSubscriptionPoll{50};

// CURVE's event socket is an XPUB in manual mode: a subscription takes
// effect only once admitted here, for the subscriber's own jobs (any topic
// for an admin). Subscriptions from unknown names are ignored.
void admit_subscriptions(JobSelf self) {
  EventSocket* events = self->state.links.events.get();
  if (!events || !events->clients) return;
  zmq::message_t m;
  try {
    while (events->pub.recv(m, zmq::recv_flags::dontwait)) {
      if (m.size() == 0) continue;
      const auto* bytes = static_cast<const char*>(m.data());
      const std::string topic(bytes + 1, m.size() - 1);
      const messages::ClientPolicy* c = events->clients->by_name(messages::peer_name(m));
      if (!c) continue;
      if (bytes[0] == 0) {
        events->pub.set(zmq::sockopt::unsubscribe, topic);
      } else if (self->state.jobs->may_subscribe({c->name, c->admin}, topic)) {
        events->pub.set(zmq::sockopt::subscribe, topic);
      } else {
        ++events->refused;
      }
    }
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "troupe serve: event subscriptions: %s\n", e.what());
  }
}

void store(JobSelf self, service::JobWork& w) {
  const persistence_actor& db = self->state.links.persistence;
  for (auto& c : w.creates)
    self->request(db, caf::infinite, job_create_atom::value, c.job)
        .then([self, c](const std::string& error) { self->state.jobs->created(c.job, c.peer, c.client_id, error); deliver(self); },
              [self, c](caf::error& err) {
                self->state.jobs->created(c.job, c.peer, c.client_id, "the store is unreachable: " + self->system().render(err));
                deliver(self);
              });
  for (auto& r : w.results)
    self->request(db, caf::infinite, job_result_atom::value, r.job, r.result)
        .then([self, id = r.job.id, res = r.result](const std::string& error) { self->state.jobs->stored(id, res, error); deliver(self); },
              [self, id = r.job.id](caf::error&) { self->state.jobs->store_unreachable(id); });
  for (auto& h : w.headers)
    self->request(db, caf::infinite, job_header_atom::value, h).then([](const std::string& e) {
      if (!e.empty()) std::fprintf(stderr, "troupe serve: a job's final state was not stored: %s\n", e.c_str());
    }, [](caf::error&) {});
  for (auto& l : w.loads)
    self->request(db, caf::infinite, job_get_atom::value, l.job_id)
        .then(
            [self, l](JobRecords& got) {
              std::optional<persistence::JobRecord> job;
              if (!got.jobs.empty()) job = std::move(got.jobs.front());
              self->state.jobs->loaded(l, job, got.damage);
              deliver(self);
            },
            [self, l](caf::error& err) {
              self->state.jobs->loaded(l, std::nullopt, "the store is unreachable: " + self->system().render(err));
              deliver(self);
            });
  for (auto& c : w.cancel_writes)
    self->request(db, caf::infinite, job_header_atom::value, c.job)
        .then([self, c](const std::string& error) { self->state.jobs->cancel_stored(c.job, c.peer, c.client_id, error); deliver(self); },
              [](caf::error&) {});
}

// Everything the last calls decided, sent.
void deliver(JobSelf self) {
  service::JobWork w = self->state.jobs->take();
  const JobLinks& to = self->state.links;
  for (const auto& r : w.replies) to.replies->send(r.peer, r.client_id, r.bytes);
  if (!self->state.draining)
    for (auto& a : w.admits) self->send(to.scheduler, admit_atom::value, std::move(a));
  for (const auto& [peer, id] : w.cancels) self->send(to.scheduler, cancel_atom::value, peer, uint64_t{0}, id);
  for (auto& s : w.summaries) self->send(to.persistence, session_summary_atom::value, std::move(s));
  if (to.events) {
    if (!w.events.empty()) admit_subscriptions(self);
    for (const auto& [topic, event] : w.events) publish(*to.events, topic, event);
  }
  store(self, w);
  if (to.metrics) to.metrics->jobs_running(self->state.jobs->running_jobs());
  if (to.metrics)
    for (const auto& tier : w.check_failures) to.metrics->check_failure(tier);
  if (w.retry_after_ms > 0) self->delayed_send(self, std::chrono::milliseconds(w.retry_after_ms), tick_atom::value);
}

}  // namespace

job_actor::behavior_type job_runner(JobSelf self, service::BatchJobsConfig config, JobLinks links) {
  self->state.jobs = std::make_unique<service::BatchJobs>(std::move(config));
  self->state.links = std::move(links);
  if (self->state.links.events && self->state.links.events->clients) self->send(self, subscriptions_atom::value);
  self->request(self->state.links.persistence, caf::infinite, job_load_atom::value)
      .then([self](JobRecords& all) {
        self->state.jobs->load(std::move(all.jobs), std::move(all.damage));
        deliver(self);
      }, [](caf::error&) {});
  return {
      [self](submit_job_atom, service::JobSubmission& s) { self->state.jobs->submit(std::move(s)); deliver(self); },
      [self](job_query_atom, const std::string& peer, uint64_t id, service::JobQuery q, const std::string& job,
             const persistence::Principal& who) {
        self->state.jobs->query(peer, id, q, job, who);
        deliver(self);
      },
      [self](subscriptions_atom) {
        admit_subscriptions(self);
        self->delayed_send(self, kSubscriptionPoll, subscriptions_atom::value);
      },
      [self](job_item_atom, uint64_t id, const std::string& bytes) { self->state.jobs->on_item(id, bytes); deliver(self); },
      [self](summarize_atom, service::SummaryTask& t) { self->state.jobs->summarize(std::move(t)); deliver(self); },
      [self](tick_atom) { self->state.jobs->retry(); deliver(self); },  // after a failed write or a full queue
      [self](drain_atom) { self->state.draining = true; },
      [self](jobs_swept_atom, const std::vector<std::string>& ids) { self->state.jobs->forget(ids); },
  };
}

}  // namespace troupe::actors
