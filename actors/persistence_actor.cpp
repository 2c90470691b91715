#include "actors/persistence_actor.h"

#include <caf/actor_system.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/send.hpp>

#include <cstdio>
#include <string_view>

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

using PersistenceSelf = persistence_actor::stateful_pointer<PersistenceState>;

void log_sweep(const PersistenceState& st, const persistence::SweepStep& s) {
  const auto& c = s.counts;
  const double mib = 1.0 / (1 << 20);
  char cap[128] = "";
  if (c.over_cap)
    std::snprintf(cap, sizeof cap, "; the store was %.1f MiB, over its cap of %.1f MiB: compacting",
                  static_cast<double>(c.store_bytes) * mib, static_cast<double>(st.sweeper->policy().max_store_bytes) * mib);
  std::fprintf(stderr, "troupe serve: retention: deleted %lld sessions, %lld jobs, %lld KV pages (%.2f MiB) in %d slices, %.1f ms%s\n",
               static_cast<long long>(c.sessions), static_cast<long long>(c.jobs), static_cast<long long>(c.pages),
               static_cast<double>(c.bytes) * mib, st.sweep_slices,
               static_cast<double>(service::steady_ns() - st.sweep_started_ns) / 1e6, cap);
}

// The stored-sessions gauge, after anything that may change the count.
void count_sessions(PersistenceSelf self) {
  PersistenceState& st = self->state;
  if (!st.metrics) return;
  try {
    st.metrics->sessions_stored(st.sessions->stored());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: persistence: cannot count the sessions: %s\n", e.what());
  }
}

// The store's health, for /metrics, /readyz and Stats; a store that refuses
// writes (a full disk) is opened afresh each second, so writing resumes once
// space returns, with or without a write asking.
void check_store(PersistenceSelf self) {
  PersistenceState& st = self->state;
  persistence::StoreHealth h = st.store->health();
  if (!h.writable && st.store->recover()) {
    std::fprintf(stderr, "troupe serve: the store takes writes again\n");
    h = st.store->health();
  }
  if (!h.writable && (st.store_writable || h.reason != st.store_reason))
    std::fprintf(stderr, "troupe serve: the store refuses writes (sessions' turns and jobs answer storage_failed): %s\n",
                 h.reason.c_str());
  st.store_writable = h.writable;
  st.store_reason = h.reason;
  if (st.metrics) st.metrics->store_state({true, h.writable, h.reason, h.write_failures});
}

// One slice of the retention pass. The next goes as a message of its own, so
// whatever was queued meanwhile (a turn's commit) is served first.
void sweep(PersistenceSelf self) {
  PersistenceState& st = self->state;
  if (!st.sweeper->running()) st.sweep_started_ns = service::steady_ns(), st.sweep_slices = 0;
  ++st.sweep_slices;
  persistence::SweepStep step;
  try {
    step = st.sweeper->step(service::unix_ms());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: retention: the sweep stopped, next in %lld s: %s\n",
                 static_cast<long long>(st.sweep_interval.count() / 1000), e.what());
    st.next_sweep_ms = steady_ms() + st.sweep_interval.count();
    return;
  }
  for (const auto& id : step.sessions) st.sessions->forget(id);
  if (!step.sessions.empty()) count_sessions(self);
  if (!step.jobs.empty() && st.job_watcher) self->send(st.job_watcher, jobs_swept_atom::value, std::move(step.jobs));
  if (!step.done) {
    self->send(self, sweep_atom::value);
    return;
  }
  if (step.counts.any()) log_sweep(st, step);
  st.last_pass_ms = steady_ms();
  st.next_sweep_ms = st.last_pass_ms + st.sweep_interval.count();
  if (!step.compact) return;
  // Compaction rewrites whole files: on a thread of its own, while turns go
  // on here. Then at once another pass: is the store under its cap now?
  st.compacting->store(true);
  self->spawn([store = st.store, compacting = st.compacting, me = caf::actor_cast<persistence_actor>(self)](
                  caf::blocking_actor*) {
    try {
      store->compact();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe serve: retention: %s\n", e.what());
    }
    compacting->store(false);
    caf::anon_send(me, sweep_atom::value);
  });
}

// A pass starts when one is due, or as soon as the store is over its cap
// (a write just took it there): with only a cap the interval is 60 s, and
// waiting for it let a store capped at 64 MiB reach twice that.
void sweep_if_due(PersistenceSelf self) {
  PersistenceState& st = self->state;
  if (!st.sweeper || !st.job_watcher || st.sweeper->running() || st.compacting->load()) return;
  const int64_t cap = st.sweeper->policy().max_store_bytes, now = steady_ms();
  // Over the cap, at most a pass a second: one that found nothing it may
  // delete (every session busy) is not run again for every write.
  if (now >= st.next_sweep_ms || (cap > 0 && now - st.last_pass_ms >= 1000 && st.store->approximate_bytes() > cap))
    sweep(self);
}

// Spilled KV pages are a cache (a page the store lacks is computed again),
// and the bulk of what a store holds: near its cap they wait until a pass
// and its compaction have made room, so the records that must be written
// (turns, results) and RocksDB's transient files fit under the cap.
bool spills_held_back(PersistenceSelf self) {
  constexpr double kSpillCeiling = 0.85;  // of the cap
  PersistenceState& st = self->state;
  const int64_t cap = st.sweeper ? st.sweeper->policy().max_store_bytes : 0;
  return cap > 0 && st.store->approximate_bytes() > static_cast<int64_t>(cap * kSpillCeiling);
}

void send_reply(PersistenceSelf self, const std::string& peer, uint64_t id, const messages::Bytes& b) {
  self->state.replies->send(peer, id, b);
}

// A session's records changed: retention counts its age from now.
void note_written(PersistenceSelf self, const std::string& id) {
  if (self->state.sweeper) self->state.sweeper->session_written(id);
}

// The store, its books and (when enabled) the response cache and the sweeper.
void open_books(PersistenceSelf self, std::shared_ptr<persistence::Store> store, std::shared_ptr<Replies> replies,
                persistence::SessionPolicy policy, const RetentionOptions& retention,
                std::shared_ptr<service::ServiceMetrics> metrics) {
  PersistenceState& st = self->state;
  st.metrics = std::move(metrics);
  st.store = std::move(store);
  st.replies = std::move(replies);
  st.sessions = std::make_unique<persistence::SessionTurns>(*st.store, std::move(policy));
  st.jobs = std::make_unique<persistence::JobBook>(*st.store);
  st.files = std::make_unique<persistence::FileBook>(*st.store);
  if (retention.responses.max_bytes > 0)
    st.responses = std::make_unique<persistence::ResponseCache>(*st.store, retention.responses);
  if (retention.policy.enabled()) {
    st.sweeper = std::make_unique<persistence::Sweeper>(*st.store, retention.policy,
                                                        [self](const std::string& id) { return self->state.sessions->busy(id); });
    st.sweep_interval = retention.interval.count() > 0
                            ? retention.interval
                            : std::chrono::milliseconds(persistence::default_sweep_interval_ms(retention.policy));
  }
}

// What the store holds, its health, and the first of the health checks
// that repeat every second.
void start_up(PersistenceSelf self) {
  count_sessions(self);
  check_store(self);
  self->delayed_send(self, std::chrono::seconds(1), store_health_atom::value);
}

persistence::SessionStart begin_session(PersistenceSelf self, const std::string& id, const persistence::Principal& who) {
  self->state.sessions->expire_hand_offs(steady_ms());
  return self->state.sessions->begin(id, steady_ms(), who);
}

// Another front end's hand-off of a session held here: ask, done or abort.
void hand_off_session(PersistenceSelf self, const std::string& peer, uint64_t id, const messages::TakeSessionFields& t) {
  persistence::SessionTurns& turns = *self->state.sessions;
  turns.expire_hand_offs(steady_ms());
  if (t.step == wire::HandOffStep::abort) {
    turns.hand_off_abort(t.session_id, t.to);
    return send_reply(self, peer, id, messages::ack_response(id, "session '" + t.session_id + "' stays here"));
  }
  if (t.step == wire::HandOffStep::done) {
    const std::string why = turns.hand_off_done(t.session_id, t.to);
    count_sessions(self);
    return send_reply(self, peer, id,
                 why.empty() ? messages::ack_response(id, "session '" + t.session_id + "' handed over")
                             : messages::error_response(id, wire::ErrorCode::storage_failed, why));
  }
  const persistence::SessionHandOff h = turns.hand_off(t.session_id, t.to, {t.owner, t.admin}, steady_ms());
  if (h.error != wire::ErrorCode::none) return send_reply(self, peer, id, messages::error_response(id, h.error, h.message));
  send_reply(self, peer, id, messages::session_records_response(id, {t.session_id, h.records.header, h.records.turns, h.kv_data}));
}

// A session taken over from another front end, then begun here.
persistence::SessionStart adopt_session(PersistenceSelf self, const std::string& id, const persistence::SessionHandOff& h,
                                        const persistence::Principal& who) {
  persistence::SessionTurns& turns = *self->state.sessions;
  turns.release(id);  // begun as new, before the peers were asked
  const std::string why = turns.take(id, h);
  if (!why.empty()) {
    persistence::SessionStart failed;
    failed.error = wire::ErrorCode::storage_failed;
    failed.message = "session '" + id + "' could not be taken over from another front end: " + why;
    return failed;
  }
  note_written(self, id);
  count_sessions(self);
  persistence::SessionStart start = turns.begin(id, steady_ms(), who);
  start.adopted = true;
  return start;
}

void commit_turn(PersistenceSelf self, persistence::SessionCommit& c) {
  const std::string peer = c.peer, session = c.session_id;
  const uint64_t id = c.client_id;
  send_reply(self, peer, id, self->state.sessions->commit(std::move(c), steady_ms(), service::unix_ms()));
  note_written(self, session);
  count_sessions(self);
  sweep_if_due(self);
}

int32_t spill_pages(PersistenceSelf self, const persistence::KvSpill& spill) {
  if (spills_held_back(self)) {
    sweep_if_due(self);
    return int32_t{0};  // the pages stay recomputable: a later turn prefills them
  }
  const int32_t stored = self->state.sessions->spill(spill);
  if (stored > 0) note_written(self, spill.session_id);
  sweep_if_due(self);
  return stored;
}

JobRecords load_job(PersistenceSelf self, const std::string& id) {
  JobRecords one;
  try {
    if (auto j = self->state.jobs->load(id)) one.jobs.push_back(std::move(*j));
  } catch (const std::exception& e) {
    one.damage = e.what();
  }
  return one;
}

// A store that cannot be read or written makes the cache miss, never the request fail.
persistence::CacheLookup find_response(PersistenceSelf self, const std::string& key) {
  persistence::CacheLookup r;
  if (!self->state.responses) return r;
  try {
    if (auto a = self->state.responses->find(key, service::unix_ms())) r = {true, std::move(*a)};
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: response cache: %s\n", e.what());
  }
  return r;
}

void store_response(PersistenceSelf self, const std::string& key, const persistence::CachedAnswer& a) {
  if (!self->state.responses) return;
  try {
    self->state.responses->put(key, a, service::unix_ms());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: response cache: %s\n", e.what());
  }
}

// The escalation budget's figures: small, rewritten whole now and then, and
// worth no fsync (a crash loses the last few judgements, not a promise).
constexpr std::string_view kBudgetKey = "cascade/escalation_budget";

std::string load_budget(PersistenceSelf self) {
  try {
    return self->state.store->get(persistence::Family::meta, kBudgetKey).value_or(std::string());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: escalation budget: %s; starting without its figures\n", e.what());
    return {};
  }
}

void store_budget(PersistenceSelf self, std::string bytes) {
  try {
    persistence::Batch b;
    b.put(persistence::Family::meta, std::string(kBudgetKey), std::move(bytes));
    self->state.store->write(b, false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: escalation budget: %s\n", e.what());
  }
}

// The job actor asks to be told of the jobs retention deletes; sweeps start then.
void start_sweeps(PersistenceSelf self, job_actor& watcher) {
  if (!self->state.sweeper) return;
  self->state.job_watcher = std::move(watcher);
  sweep(self);
}

void on_health_tick(PersistenceSelf self) {
  check_store(self);
  sweep_if_due(self);
  self->delayed_send(self, std::chrono::seconds(1), store_health_atom::value);
}

persistence_actor::behavior_type persistence_behavior(PersistenceSelf self) {
  return {
      [self](session_begin_atom, const std::string& id, const persistence::Principal& who) {
        return begin_session(self, id, who);
      },
      [self](take_session_atom, const std::string& peer, uint64_t id, const messages::TakeSessionFields& t) {
        hand_off_session(self, peer, id, t);
      },
      [self](session_adopt_atom, const std::string& id, const persistence::SessionHandOff& h,
             const persistence::Principal& who) { return adopt_session(self, id, h, who); },
      [self](session_release_atom, const std::string& id) { self->state.sessions->release(id); },
      [self](session_commit_atom, persistence::SessionCommit& c) { commit_turn(self, c); },
      [self](kv_spill_atom, const persistence::KvSpill& spill) { return spill_pages(self, spill); },
      [self](list_sessions_atom, const std::string& peer, uint64_t id, const persistence::Principal& who) {
        send_reply(self, peer, id, self->state.sessions->list(id, who));
      },
      [self](show_session_atom, const std::string& peer, uint64_t id, const std::string& sid,
             const persistence::Principal& who) { send_reply(self, peer, id, self->state.sessions->show(id, sid, who)); },
      [self](delete_session_atom, const std::string& peer, uint64_t id, const std::string& sid,
             const persistence::Principal& who) {
        send_reply(self, peer, id, self->state.sessions->remove(id, sid, who));
        count_sessions(self);
      },
      [self](file_atom, const std::string& peer, uint64_t id, const std::string& request,
             const persistence::Principal& who) {
        send_reply(self, peer, id, self->state.files->answer(request, who, service::unix_ms()));
      },
      [self](job_create_atom, const persistence::JobRecord& job) {
        return failure_of([&] { self->state.jobs->create(job); });
      },
      [self](job_result_atom, const persistence::JobRecord& job, const messages::JobItemFields& result) {
        std::string why = failure_of([&] { self->state.jobs->record_result(job, result); });
        sweep_if_due(self);
        return why;
      },
      [self](job_header_atom, const persistence::JobRecord& job) {
        return failure_of([&] { self->state.jobs->write_header(job); });
      },
      [self](job_load_atom) { return load_jobs(*self->state.jobs); },
      [self](job_get_atom, const std::string& id) { return load_job(self, id); },
      [self](session_summary_atom, const service::SummaryResult& s) {
        self->state.sessions->summarize(s.session_id, s.text, s.through);
        note_written(self, s.session_id);
      },
      [self](response_find_atom, const std::string& key) { return find_response(self, key); },
      [self](response_store_atom, const std::string& key, const persistence::CachedAnswer& a) {
        store_response(self, key, a);
      },
      [self](budget_load_atom) { return load_budget(self); },
      [self](budget_store_atom, std::string& bytes) { store_budget(self, std::move(bytes)); },
      [self](sweep_atom, job_actor& watcher) { start_sweeps(self, watcher); },
      [self](sweep_atom) { sweep(self); },
      [self](store_health_atom) { on_health_tick(self); },
      [](drain_atom) { return true; },  // FIFO: everything before it is written
  };
}

}  // namespace

void report_damaged_sessions(persistence::Store& store) try {
  const persistence::SessionBook book(store);
  std::string listing;
  int damaged = 0;
  const auto listed = book.list(&listing);
  for (const auto& s : listed) {
    try {
      (void)book.load(s.session_id);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe serve: session '%s' is damaged and cannot be continued: %s\n", s.session_id.c_str(),
                   e.what());
      ++damaged;
    }
  }
  if (!listing.empty())
    std::fprintf(stderr, "troupe serve: some stored sessions cannot be listed (%zu were): %s\n", listed.size(),
                 listing.c_str());
  if (damaged > 0 || !listing.empty())
    std::fprintf(stderr, "troupe serve: the store is damaged: run `troupe store check`\n");
} catch (const std::exception& e) {
  std::fprintf(stderr, "troupe serve: the stored sessions cannot be read: %s\n", e.what());
}

persistence_actor::behavior_type persistence_role(persistence_actor::stateful_pointer<PersistenceState> self,
                                                  std::shared_ptr<persistence::Store> store,
                                                  std::shared_ptr<Replies> replies, persistence::SessionPolicy policy,
                                                  RetentionOptions retention,
                                                  std::shared_ptr<service::ServiceMetrics> metrics) {
  open_books(self, std::move(store), std::move(replies), std::move(policy), retention, std::move(metrics));
  // An error message (say, a reply some peer could not handle) must never
  // stop the one actor that keeps the store: log it and go on.
  self->set_error_handler([self](caf::error& err) {
    std::fprintf(stderr, "troupe serve: persistence: %s\n", self->system().render(err).c_str());
  });
  start_up(self);
  return persistence_behavior(self);
}

}  // namespace troupe::actors
