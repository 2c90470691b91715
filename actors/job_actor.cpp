#include "actors/job_actor.h"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <unordered_map>
#include <utility>

#include "actors/client_gateway.h"
#include "actors/clock.h"
#include "actors/local_messages.h"
#include "actors/persistence_actor.h"
#include "messages/client_validation.h"
#include "messages/job_frames.h"

namespace troupe::actors {
namespace {


Priority priority_of(wire::Priority p) {
  switch (p) {
    case wire::Priority::interactive: return Priority::interactive;
    case wire::Priority::chat: return Priority::chat;
    default: return Priority::batch;
  }
}

std::string new_job_id() {
  static std::mt19937_64 rng(std::random_device{}());
  char buf[48];
  std::snprintf(buf, sizeof buf, "job-%llx-%04llx", static_cast<unsigned long long>(unix_ms()),
                static_cast<unsigned long long>(rng() & 0xffff));
  return buf;
}

struct InFlight {
  std::string job;
  int32_t index = 0;
  std::string text;
  int32_t prompt_tokens = 0;
};

}  // namespace

struct JobState {
  JobConfig cfg;
  bool loaded = false;
  std::map<std::string, persistence::JobRecord> jobs;
  std::unordered_map<std::string, int64_t> started_ns;       // when this server began running the job
  std::unordered_map<std::string, int64_t> tokens_this_run;  // completion tokens since then
  std::deque<std::pair<std::string, int32_t>> pending;       // items to run, in order
  std::unordered_map<uint64_t, InFlight> in_flight;          // by the item request's client id
  std::unordered_map<std::string, int32_t> writing;          // results being stored, per job
  uint64_t next_id = 1;
  std::vector<JobSubmission> early;  // submitted before the stored jobs were loaded
  struct EarlyQuery {
    std::string peer;
    uint64_t id;
    JobQuery query;
    std::string job;
  };
  std::vector<EarlyQuery> early_queries;  // asked before then: answered once they are

  explicit JobState(JobConfig c) : cfg(std::move(c)) {}

  void publish(wire::JobEventKind kind, const persistence::JobRecord& job, const messages::JobItemFields* item) {
    if (!cfg.events) return;
    const int64_t since = started_ns.count(job.id) ? started_ns[job.id] : steady_ns();
    const double secs = static_cast<double>(steady_ns() - since) / 1e9;
    const double tps = secs > 0 ? static_cast<double>(tokens_this_run[job.id]) / secs : 0.0;
    const messages::Bytes event = messages::job_event(kind, job.summary(), item, tps);
    try {
      cfg.events->pub.send(zmq::buffer(job.id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      cfg.events->pub.send(zmq::buffer(event), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // A PUB socket does not block or fail on slow subscribers; anything
      // else is lost events, never lost results (the store has them).
    }
  }

  void queue_unfinished(const persistence::JobRecord& job) {
    started_ns.emplace(job.id, steady_ns());
    for (int32_t i = 0; i < static_cast<int32_t>(job.items.size()); ++i)
      if (!job.results.count(i)) pending.emplace_back(job.id, i);
  }
};

namespace {

using Self = caf::stateful_actor<std::shared_ptr<JobState>>;

void pump(Self* self);

// The item's result is stored; only then is it in memory and published.
void finish_item(Self* self, const std::string& job_id, messages::JobItemFields result) {
  JobState& st = *self->state;
  auto it = st.jobs.find(job_id);
  if (it == st.jobs.end() || it->second.state != wire::JobState::running) return;
  persistence::JobRecord next = it->second;
  next.results[result.index] = result;
  next.updated_ms = unix_ms();
  if (next.results.size() == next.items.size()) next.state = wire::JobState::finished;
  ++st.writing[job_id];
  self->request(st.cfg.persistence, caf::infinite, job_result_atom::value, next, result)
      .then([self, job_id, result](const std::string& error) {
        JobState& st = *self->state;
        --st.writing[job_id];
        auto it = st.jobs.find(job_id);
        if (it == st.jobs.end()) return;
        persistence::JobRecord& job = it->second;
        if (!error.empty()) {
          // Not stored, so not done: it runs again later (the disk may recover).
          std::fprintf(stderr, "troupe serve: job %s item %d not stored, will retry: %s\n", job_id.c_str(), result.index,
                       error.c_str());
          self->delayed_send(self, std::chrono::seconds(2), tick_atom::value);  // pump() again then
          st.pending.emplace_back(job_id, result.index);
          return;
        }
        job.results[result.index] = result;
        job.updated_ms = unix_ms();
        st.tokens_this_run[job_id] += result.completion_tokens;
        st.publish(wire::JobEventKind::item_finished, job, &result);
        if (job.state == wire::JobState::running && job.results.size() == job.items.size()) {
          job.state = wire::JobState::finished;
          // Results written concurrently may each have carried "running": the
          // last one out writes the final state.
          if (st.writing[job_id] == 0)
            self->request(st.cfg.persistence, caf::infinite, job_header_atom::value, job).then([](const std::string& e) {
              if (!e.empty()) std::fprintf(stderr, "troupe serve: a job's final state was not stored: %s\n", e.c_str());
            });
          st.publish(wire::JobEventKind::job_finished, job, nullptr);
        }
        pump(self);
      },
      [self, job_id](caf::error&) { --self->state->writing[job_id]; });
}

void pump(Self* self) {
  JobState& st = *self->state;
  while (static_cast<int32_t>(st.in_flight.size()) < st.cfg.max_in_flight && !st.pending.empty()) {
    auto [job_id, index] = st.pending.front();
    st.pending.pop_front();
    auto it = st.jobs.find(job_id);
    if (it == st.jobs.end() || it->second.state != wire::JobState::running || it->second.results.count(index)) continue;
    const persistence::JobRecord& job = it->second;
    AdmitRequest a;
    a.peer = internal_peer("job/" + job_id);
    a.client_id = st.next_id++;
    a.sampling = job.sampling;
    a.priority = priority_of(job.priority);
    a.accepted_ns = steady_ns();
    a.sink = caf::actor_cast<caf::actor>(self);
    std::string problem;
    try {
      const std::vector<ChatMessage> chat{{"user", job.prompt(index)}};
      a.prompt = encode_chat(*st.cfg.tokenizer, st.cfg.chat_format, chat, true);
      if (static_cast<int64_t>(a.prompt.size()) >= st.cfg.max_context)
        problem = "the item's prompt has " + std::to_string(a.prompt.size()) + " tokens; the context holds " +
                  std::to_string(st.cfg.max_context);
    } catch (const std::exception& e) {
      problem = std::string("the item's prompt: ") + e.what();
    }
    if (!problem.empty()) {
      messages::JobItemFields r;
      r.index = index;
      r.error = problem;
      finish_item(self, job_id, r);
      continue;
    }
    st.in_flight.emplace(a.client_id, InFlight{job_id, index, {}, 0});
    self->send(st.cfg.scheduler, admit_atom::value, std::move(a));
  }
}

// One response of an item's request.
void on_item(Self* self, uint64_t id, const std::string& bytes) {
  JobState& st = *self->state;
  auto it = st.in_flight.find(id);
  if (it == st.in_flight.end()) return;
  InFlight& f = it->second;
  const auto* r = messages::check_response(bytes);
  if (!r) return;
  switch (r->body_type()) {
    case wire::ResponseBody::Accepted: f.prompt_tokens = r->body_as_Accepted()->prompt_tokens(); return;
    case wire::ResponseBody::Tokens:
      if (const auto* t = r->body_as_Tokens()->text()) f.text += t->string_view();
      return;
    case wire::ResponseBody::Done: {
      const auto* d = r->body_as_Done();
      messages::JobItemFields res;
      res.index = f.index;
      res.text = std::move(f.text);
      res.finish_reason = d->finish_reason();
      res.prompt_tokens = d->usage() ? d->usage()->prompt_tokens() : f.prompt_tokens;
      res.completion_tokens = d->usage() ? d->usage()->completion_tokens() : 0;
      const std::string job = f.job;
      st.in_flight.erase(it);
      if (res.finish_reason != wire::FinishReason::cancelled) finish_item(self, job, std::move(res));
      break;
    }
    case wire::ResponseBody::Error: {
      const auto* e = r->body_as_Error();
      const std::string job = f.job;
      const int32_t index = f.index;
      st.in_flight.erase(it);
      if (e->code() == wire::ErrorCode::queue_full || e->code() == wire::ErrorCode::shutting_down) {
        st.pending.emplace_back(job, index);  // not the item's fault: later
        self->delayed_send(self, std::chrono::milliseconds(500), tick_atom::value);
        return;
      }
      messages::JobItemFields res;
      res.index = index;
      res.error = std::string(messages::error_code_name(e->code())) + ": " + (e->message() ? e->message()->str() : "");
      finish_item(self, job, std::move(res));
      break;
    }
    default: return;
  }
  pump(self);
}

void submit(Self* self, JobSubmission s) {
  JobState& st = *self->state;
  persistence::JobRecord job;
  job.id = new_job_id();
  while (st.jobs.count(job.id)) job.id = new_job_id();
  job.items = std::move(s.items);
  job.item_template = std::move(s.item_template);
  job.sampling = std::move(s.sampling);
  job.priority = s.priority;
  job.created_ms = job.updated_ms = unix_ms();
  const std::string peer = s.peer;
  const uint64_t id = s.client_id;
  self->request(st.cfg.persistence, caf::infinite, job_create_atom::value, job)
      .then([self, job, peer, id](const std::string& error) {
        JobState& st = *self->state;
        if (!error.empty()) {
          st.cfg.gateway->send(peer, messages::error_response(id, wire::ErrorCode::storage_failed,
                                                              "the job was not stored, nothing will run: " + error));
          return;
        }
        st.jobs.emplace(job.id, job);
        st.cfg.gateway->send(peer, messages::job_accepted_response(id, job.summary()));
        st.queue_unfinished(job);
        pump(self);
      },
      [self, peer, id](caf::error& err) {
        self->state->cfg.gateway->send(peer, messages::error_response(id, wire::ErrorCode::internal,
                                                                      "the store is unreachable: " + self->system().render(err)));
      });
}

void query(Self* self, const std::string& peer, uint64_t id, JobQuery q, const std::string& job_id) {
  JobState& st = *self->state;
  if (q == JobQuery::list) {
    std::vector<messages::JobSummaryFields> all;
    for (const auto& [jid, job] : st.jobs) all.push_back(job.summary());
    return st.cfg.gateway->send(peer, messages::job_list_response(id, all));
  }
  auto it = st.jobs.find(job_id);
  if (it == st.jobs.end())
    return st.cfg.gateway->send(peer, messages::error_response(id, wire::ErrorCode::unknown_job, "no job '" + job_id + "'"));
  persistence::JobRecord& job = it->second;
  if (q == JobQuery::results) {
    std::vector<messages::JobItemFields> results;
    for (const auto& [i, r] : job.results) results.push_back(r);
    return st.cfg.gateway->send(peer, messages::job_reply_response(id, job.summary(), results));
  }
  if (q == JobQuery::cancel && job.state == wire::JobState::running) {
    persistence::JobRecord next = job;
    next.state = wire::JobState::cancelled;
    next.updated_ms = unix_ms();
    self->request(st.cfg.persistence, caf::infinite, job_header_atom::value, next)
        .then([self, peer, id, next](const std::string& error) {
          JobState& st = *self->state;
          if (!error.empty())
            return st.cfg.gateway->send(peer, messages::error_response(id, wire::ErrorCode::storage_failed,
                                                                       "the job was not cancelled: " + error));
          auto it = st.jobs.find(next.id);
          if (it == st.jobs.end()) return;
          it->second.state = wire::JobState::cancelled;
          it->second.updated_ms = next.updated_ms;
          for (const auto& [cid, f] : st.in_flight)
            if (f.job == next.id) self->send(st.cfg.scheduler, cancel_atom::value, internal_peer("job/" + next.id), uint64_t{0}, cid);
          st.cfg.gateway->send(peer, messages::job_reply_response(id, it->second.summary()));
          st.publish(wire::JobEventKind::job_cancelled, it->second, nullptr);
        });
    return;
  }
  st.cfg.gateway->send(peer, messages::job_reply_response(id, job.summary()));
}

}  // namespace

caf::behavior job_actor(Self* self, JobConfig config) {
  self->state = std::make_shared<JobState>(std::move(config));
  self->request(self->state->cfg.persistence, caf::infinite, job_load_atom::value)
      .then([self](JobRecords& all) {
        JobState& st = *self->state;
        for (auto& job : all) {
          const bool resume = job.state == wire::JobState::running;
          auto& j = st.jobs.emplace(job.id, std::move(job)).first->second;
          if (!resume) continue;
          st.queue_unfinished(j);
          st.publish(wire::JobEventKind::job_resumed, j, nullptr);
          std::fprintf(stderr, "troupe serve: resuming job %s (%zu of %zu items done)\n", j.id.c_str(), j.results.size(),
                       j.items.size());
        }
        st.loaded = true;
        for (auto& s : std::exchange(st.early, {})) submit(self, std::move(s));
        for (auto& q : std::exchange(st.early_queries, {})) query(self, q.peer, q.id, q.query, q.job);
        pump(self);
      });
  return {
      [self](submit_job_atom, JobSubmission& s) {
        if (!self->state->loaded) return self->state->early.push_back(std::move(s));
        submit(self, std::move(s));
      },
      [self](job_query_atom, const std::string& peer, uint64_t id, JobQuery q, const std::string& job_id) {
        if (!self->state->loaded) return self->state->early_queries.push_back({peer, id, q, job_id});
        query(self, peer, id, q, job_id);
      },
      [self](job_item_atom, uint64_t id, const std::string& bytes) { on_item(self, id, bytes); },
      [self](tick_atom) { pump(self); },  // retry after a failed write or a full queue
  };
}

}  // namespace troupe::actors
