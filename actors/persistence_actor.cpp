#include "actors/persistence_actor.h"

#include <caf/actor_system.hpp>

#include <cstdio>

#include "actors/replies.h"
#include "service/clock.h"

namespace troupe::actors {
namespace {

// A write the job actor asked for: "" when durable, else why not.
template <typename Write>
std::string failure_of(Write&& write) {
  try {
    write();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Every job that can be read; a damaged record or block costs only what it holds.
JobRecords load_jobs(persistence::JobBook& book) {
  JobRecords all;
  std::string listing;
  for (const auto& id : book.ids(&listing)) {
    try {
      if (auto j = book.load(id)) all.jobs.push_back(std::move(*j));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe serve: job '%s' is not resumed: %s\n", id.c_str(), e.what());
      all.damage = e.what();
    }
  }
  if (!listing.empty()) {
    std::fprintf(stderr, "troupe serve: some stored jobs cannot be listed (%zu were): %s\n", all.jobs.size(),
                 listing.c_str());
    all.damage = listing;
  }
  if (!all.damage.empty()) std::fprintf(stderr, "troupe serve: the store is damaged: run `troupe store check`\n");
  return all;
}

int64_t steady_ms() { return service::steady_ns() / 1000000; }

}  // namespace

persistence_actor::behavior_type persistence_role(persistence_actor::stateful_pointer<PersistenceState> self,
                                                  std::shared_ptr<persistence::Store> store,
                                                  std::shared_ptr<Replies> replies, persistence::SessionPolicy policy) {
  PersistenceState& st = self->state;
  st.store = std::move(store);
  st.replies = std::move(replies);
  st.sessions = std::make_unique<persistence::SessionTurns>(*st.store, std::move(policy));
  st.jobs = std::make_unique<persistence::JobBook>(*st.store);
  // An error message (say, a reply some peer could not handle) must never
  // stop the one actor that keeps the store: log it and go on.
  self->set_error_handler([self](caf::error& err) {
    std::fprintf(stderr, "troupe serve: persistence: %s\n", self->system().render(err).c_str());
  });
  auto reply = [self](const std::string& peer, uint64_t id, const messages::Bytes& b) { self->state.replies->send(peer, id, b); };
  return {
      [self](session_begin_atom, const std::string& id) { return self->state.sessions->begin(id, steady_ms()); },
      [self](session_release_atom, const std::string& id) { self->state.sessions->release(id); },
      [self, reply](session_commit_atom, persistence::SessionCommit& c) {
        const std::string peer = c.peer;
        const uint64_t id = c.client_id;
        reply(peer, id, self->state.sessions->commit(std::move(c), steady_ms(), service::unix_ms()));
      },
      [self](kv_spill_atom, const persistence::KvSpill& spill) { return self->state.sessions->spill(spill); },
      [self, reply](list_sessions_atom, const std::string& peer, uint64_t id) { reply(peer, id, self->state.sessions->list(id)); },
      [self, reply](show_session_atom, const std::string& peer, uint64_t id, const std::string& sid) {
        reply(peer, id, self->state.sessions->show(id, sid));
      },
      [self, reply](delete_session_atom, const std::string& peer, uint64_t id, const std::string& sid) {
        reply(peer, id, self->state.sessions->remove(id, sid));
      },
      [self](job_create_atom, const persistence::JobRecord& job) {
        return failure_of([&] { self->state.jobs->create(job); });
      },
      [self](job_result_atom, const persistence::JobRecord& job, const messages::JobItemFields& result) {
        return failure_of([&] { self->state.jobs->record_result(job, result); });
      },
      [self](job_header_atom, const persistence::JobRecord& job) {
        return failure_of([&] { self->state.jobs->write_header(job); });
      },
      [self](job_load_atom) { return load_jobs(*self->state.jobs); },
      [self](job_get_atom, const std::string& id) {
        JobRecords one;
        try {
          if (auto j = self->state.jobs->load(id)) one.jobs.push_back(std::move(*j));
        } catch (const std::exception& e) {
          one.damage = e.what();
        }
        return one;
      },
      [self](session_summary_atom, const service::SummaryResult& s) {
        self->state.sessions->summarize(s.session_id, s.text, s.through);
      },
  };
}

}  // namespace troupe::actors
