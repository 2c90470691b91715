#include "actors/persistence_actor.h"

#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <set>
#include <span>
#include <unordered_map>

#include "actors/client_gateway.h"
#include "actors/clock.h"
#include "actors/local_messages.h"
#include "messages/session_frames.h"
#include "persistence/kv_pages.h"
#include "persistence/sessions.h"

namespace troupe::actors {
namespace {



// One line per large KV transfer: what operators (and ops/bench/sessions.sh) read.
void log_transfer(const char* verb, const std::string& session, size_t pages, const std::vector<std::string>& data,
                  int64_t us) {
  size_t bytes = 0;
  for (const auto& d : data) bytes += d.size();
  std::fprintf(stderr, "troupe serve: kv: session '%s' %s %zu pages (%.2f MiB) in %.1f ms\n", session.c_str(), verb, pages,
               static_cast<double>(bytes) / (1 << 20), static_cast<double>(us) / 1000.0);
}

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

// Leading full pages in which `a` and `b` hold the same tokens.
int32_t common_pages(std::span<const int32_t> a, std::span<const int32_t> b, int32_t page_size) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return static_cast<int32_t>(n / static_cast<size_t>(page_size));
}


std::vector<messages::RoleContent> role_content(const std::vector<ChatMessage>& history) {
  std::vector<messages::RoleContent> out;
  out.reserve(history.size());
  for (const auto& m : history) out.emplace_back(m.role, m.content);
  return out;
}

}  // namespace

struct PersistenceState {
  PersistenceConfig cfg;
  persistence::SessionBook sessions;
  persistence::JobBook jobs;
  std::set<std::string> busy;  // sessions with a turn running
  // Sessions read or written since start: the store is read once per session.
  std::unordered_map<std::string, persistence::SessionRecord> cache;
  std::unordered_map<std::string, int64_t> last_turn;  // steady ms of each session's last turn here
  persistence::KvPageStore kv;

  explicit PersistenceState(PersistenceConfig c)
      : cfg(std::move(c)), sessions(*cfg.store), jobs(*cfg.store),
        kv(*cfg.store, cfg.kv_identity, cfg.page_size, cfg.page_bytes) {}

  bool kv_valid(const persistence::SessionRecord& s) const {
    return cfg.kv && s.kv_pages > 0 && s.kv_model == cfg.kv_identity.model && s.kv_layout == cfg.kv_identity.layout;
  }

  // The session, from memory or the store; nullptr if it does not exist.
  const persistence::SessionRecord* find(const std::string& id) {
    if (auto it = cache.find(id); it != cache.end()) return &it->second;
    auto loaded = sessions.load(id);
    if (!loaded) return nullptr;
    return &cache.emplace(id, std::move(*loaded)).first->second;
  }

  void reply(const std::string& peer, const messages::Bytes& bytes) { cfg.gateway->send(peer, bytes); }
};

caf::behavior persistence_actor(caf::stateful_actor<std::shared_ptr<PersistenceState>>* self, PersistenceConfig config) {
  self->state = std::make_shared<PersistenceState>(std::move(config));
  // An error message (say, a reply some peer could not handle) must never
  // stop the one actor that keeps the store: log it and go on.
  self->set_error_handler([self](caf::error& err) {
    std::fprintf(stderr, "troupe serve: persistence: %s\n", self->system().render(err).c_str());
  });
  return {
      [self](session_begin_atom, const std::string& id) -> SessionStart {
        PersistenceState& st = *self->state;
        SessionStart start;
        if (st.busy.count(id)) {
          start.error = wire::ErrorCode::session_busy;
          start.message = "session '" + id + "' has a turn running; send the next turn after its Done";
          return start;
        }
        try {
          if (const auto* s = st.find(id)) {
            start.history = s->history();
            if (st.kv_valid(*s)) {
              start.kv_stored = s->kv_pages;
              start.kv_tokens = s->tokens;
              auto last = st.last_turn.find(id);
              const bool in_memory = last != st.last_turn.end() && steady_ns() / 1000000 - last->second < st.cfg.idle_ms;
              if (!in_memory) {
                const int64_t t0 = steady_ns() / 1000;
                start.kv_data = st.kv.get(s->tokens, s->kv_pages);
                if (!start.kv_data.empty())
                  log_transfer("read", id, start.kv_data.size(), start.kv_data, steady_ns() / 1000 - t0);
              }
            }
          }
        } catch (const std::exception& e) {
          start.error = wire::ErrorCode::storage_failed;
          start.message = "session '" + id + "' cannot be read: " + e.what();
          return start;
        }
        st.busy.insert(id);
        return start;
      },
      [self](session_release_atom, const std::string& id) { self->state->busy.erase(id); },
      [self](session_commit_atom, SessionCommit& c) {
        PersistenceState& st = *self->state;
        st.busy.erase(c.session_id);
        persistence::SessionRecord next;
        try {
          if (const auto* s = st.find(c.session_id)) next = *s;
        } catch (const std::exception&) {
          // Unreadable before (begin answered the same): write a fresh session.
        }
        const int64_t now = unix_ms();
        if (next.id.empty()) {
          next.id = c.session_id;
          next.created_ms = now;
        }
        next.updated_ms = now;
        // Stored pages stay valid for the prefix the new history shares.
        next.kv_pages = st.kv_valid(next) ? std::min(next.kv_pages, common_pages(next.tokens, c.tokens, st.cfg.page_size)) : 0;
        next.kv_model = st.cfg.kv_identity.model;
        next.kv_layout = st.cfg.kv_identity.layout;
        next.model = st.cfg.model_name;
        next.model_fingerprint = st.cfg.model_fingerprint;
        next.tokens = std::move(c.tokens);
        next.sampling = std::move(c.sampling);
        persistence::SessionTurnRecord turn;
        turn.messages = std::move(c.messages);
        turn.finish_reason = c.done.reason;
        turn.prompt_tokens = c.done.prompt_tokens;
        turn.completion_tokens = c.done.completion_tokens;
        turn.time_ms = now;
        next.turns.push_back(std::move(turn));
        try {
          st.sessions.append_last_turn(next);
        } catch (const std::exception& e) {
          st.reply(c.peer, messages::error_response(c.client_id, wire::ErrorCode::storage_failed,
                                                    std::string("the turn was not saved, session '") + c.session_id +
                                                        "' is unchanged: " + e.what()));
          return;
        }
        st.last_turn[c.session_id] = steady_ns() / 1000000;
        st.cache[c.session_id] = std::move(next);
        st.reply(c.peer, messages::done_response(c.client_id, c.done));
      },
      [self](kv_spill_atom, KvSpill& spill) -> int32_t {
        PersistenceState& st = *self->state;
        if (!st.cfg.kv || spill.data.empty()) return 0;
        try {
          const auto* s = st.find(spill.session_id);
          if (!s) return 0;  // deleted meanwhile
          persistence::SessionRecord next = *s;
          // Only pages of the history the session has now, contiguous with what is stored.
          const int32_t valid = common_pages(next.tokens, spill.tokens, st.cfg.page_size);
          const int32_t have = st.kv_valid(next) ? next.kv_pages : 0;
          if (spill.first > have) return 0;
          persistence::Batch b;
          st.kv.put(spill.tokens, spill.first, spill.data, b);
          next.kv_pages = std::max(have, std::min(valid, spill.first + static_cast<int32_t>(spill.data.size())));
          next.kv_model = st.cfg.kv_identity.model;
          next.kv_layout = st.cfg.kv_identity.layout;
          st.sessions.write_header(next, b);
          const int64_t t0 = steady_ns() / 1000;
          st.cfg.store->write(b, false);  // a page lost in a crash is recomputed
          if (spill.data.size() >= 32) log_transfer("wrote", spill.session_id, spill.data.size(), spill.data, steady_ns() / 1000 - t0);
          st.cache[spill.session_id] = std::move(next);
          return static_cast<int32_t>(spill.data.size());
        } catch (const std::exception& e) {
          std::fprintf(stderr, "troupe serve: KV pages of session '%s' not spilled: %s\n", spill.session_id.c_str(), e.what());
          return 0;
        }
      },
      [self](list_sessions_atom, const std::string& peer, uint64_t id) {
        PersistenceState& st = *self->state;
        try {
          const auto list = st.sessions.list();
          st.reply(peer, messages::session_list_response(id, list));
        } catch (const std::exception& e) {
          st.reply(peer, messages::error_response(id, wire::ErrorCode::storage_failed, e.what()));
        }
      },
      [self](show_session_atom, const std::string& peer, uint64_t id, const std::string& sid) {
        PersistenceState& st = *self->state;
        try {
          const auto* s = st.find(sid);
          if (!s) return st.reply(peer, messages::error_response(id, wire::ErrorCode::unknown_session, "no session '" + sid + "'"));
          const auto msgs = role_content(s->history());
          st.reply(peer, messages::session_response(id, s->summary(), msgs));
        } catch (const std::exception& e) {
          st.reply(peer, messages::error_response(id, wire::ErrorCode::storage_failed, e.what()));
        }
      },
      [self](delete_session_atom, const std::string& peer, uint64_t id, const std::string& sid) {
        PersistenceState& st = *self->state;
        if (st.busy.count(sid))
          return st.reply(peer, messages::error_response(id, wire::ErrorCode::session_busy,
                                                         "session '" + sid + "' has a turn running"));
        try {
          if (const auto* s = st.find(sid); s && s->kv_pages > 0) {
            persistence::Batch b;
            st.kv.erase(s->tokens, s->kv_pages, b);
            st.cfg.store->write(b, false);
          }
          if (!st.sessions.remove(sid))
            return st.reply(peer, messages::error_response(id, wire::ErrorCode::unknown_session, "no session '" + sid + "'"));
          st.cache.erase(sid);
          st.last_turn.erase(sid);
          st.reply(peer, messages::ack_response(id, "deleted session '" + sid + "'"));
        } catch (const std::exception& e) {
          st.reply(peer, messages::error_response(id, wire::ErrorCode::storage_failed, e.what()));
        }
      },
      [self](job_create_atom, const persistence::JobRecord& job) {
        return failure_of([&] { self->state->jobs.create(job); });
      },
      [self](job_result_atom, const persistence::JobRecord& job, const messages::JobItemFields& result) {
        return failure_of([&] { self->state->jobs.record_result(job, result); });
      },
      [self](job_header_atom, const persistence::JobRecord& job) {
        return failure_of([&] { self->state->jobs.write_header(job); });
      },
      [self](job_load_atom) -> JobRecords {
        JobRecords all;
        try {
          for (const auto& id : self->state->jobs.ids()) {
            try {
              if (auto j = self->state->jobs.load(id)) all.push_back(std::move(*j));
            } catch (const std::exception& e) {
              std::fprintf(stderr, "troupe serve: job '%s' is not resumed: %s\n", id.c_str(), e.what());
            }
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "troupe serve: stored jobs cannot be listed: %s\n", e.what());
        }
        return all;
      },
  };
}

}  // namespace troupe::actors
