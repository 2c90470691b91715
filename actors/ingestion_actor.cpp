#include "actors/ingestion_actor.h"

#include <memory>
#include <variant>

#include <caf/send.hpp>

#include "actors/replies.h"
#include "service/clock.h"
#include "service/response_tier.h"

namespace troupe::actors {
namespace {

using IngestionSelf = ingestion_actor::stateful_pointer<IngestionState>;

void reject(IngestionSelf self, const std::string& peer, const messages::Rejection& r) {
  if (self->state.links.metrics) self->state.links.metrics->request_done(wire::EnumNameErrorCode(r.code), 0, 0, 0);
  self->state.links.replies->send(peer, r.client_request_id,
                                  messages::error_response(r.client_request_id, r.code, r.message));
}

// The last checks, then the scheduler. A session turn refused here frees its session.
void admit(IngestionSelf self, service::AdmitRequest a) {
  if (auto r = self->state.gate->check(a)) {
    reject(self, a.peer, *r);
    if (!a.session_id.empty()) self->send(self->state.links.persistence, session_release_atom::value, a.session_id);
    return;
  }
  if (a.summarize_through > 0)
    self->send(self->state.links.jobs, summarize_atom::value,
               service::SummaryTask{a.session_id, std::move(a.summary_messages), a.summarize_through});
  auto count = [self](wire::ResponseCacheOutcome o) {
    if (self->state.links.metrics) self->state.links.metrics->response_cache(wire::EnumNameResponseCacheOutcome(o));
  };
  if (a.response_cache == wire::ResponseCacheOutcome::bypassed) count(a.response_cache);
  if (a.response_cache_key.empty()) return self->send(self->state.links.scheduler, admit_atom::value, std::move(a));
  // The response cache tier first: a hit is answered here, the model never runs.
  // The request waits for the lookup in one shared copy (its prompt may be long).
  auto held = std::make_shared<service::AdmitRequest>(std::move(a));
  auto to_scheduler = [self, held] { self->send(self->state.links.scheduler, admit_atom::value, std::move(*held)); };
  self->request(self->state.links.persistence, caf::infinite, response_find_atom::value, held->response_cache_key)
      .then(
          [self, held, count, to_scheduler](persistence::CacheLookup& r) {
            count(r.found ? wire::ResponseCacheOutcome::hit : wire::ResponseCacheOutcome::miss);
            if (!r.found) return to_scheduler();
            const double ms = static_cast<double>(service::steady_ns() - held->accepted_ns) / 1e6;
            for (auto& frame : service::cached_answer_frames(held->client_id, r.answer, ms))
              self->state.links.replies->send(held->peer, held->client_id, frame);
            if (self->state.links.metrics)
              self->state.links.metrics->request_done(
                  wire::EnumNameFinishReason(static_cast<wire::FinishReason>(r.answer.finish_reason)), r.answer.prompt_tokens,
                  r.answer.prompt_tokens, static_cast<int32_t>(r.answer.tokens.size()));
          },
          [to_scheduler](caf::error&) { to_scheduler(); });
}

// The turn on its session's history (`start`: begun, so the session is busy).
void continue_turn(IngestionSelf self, service::SessionTurn turn, persistence::SessionStart start) {
  const std::string sid = turn.request.session_id, peer = turn.request.peer;
  auto next = self->state.gate->with_history(std::move(turn), std::move(start));
  if (auto* r = std::get_if<messages::Rejection>(&next)) {
    reject(self, peer, *r);
    return self->send(self->state.links.persistence, session_release_atom::value, sid);
  }
  admit(self, std::get<service::AdmitRequest>(std::move(next)));
}

// A session this store does not hold may be another front end's: the peers
// are asked, and one that holds it hands it over (stored here, then
// confirmed to it) before the turn goes on. Held (busy) here meanwhile.
void take_from_peers(IngestionSelf self, service::SessionTurn turn, persistence::SessionStart fresh) {
  const std::string sid = turn.request.session_id, peer = turn.request.peer;
  const uint64_t id = turn.request.client_id;
  const persistence::Principal who = turn.who;
  auto fail = [self, sid, peer, id](wire::ErrorCode code, const std::string& message) {
    self->send(self->state.links.persistence, session_release_atom::value, sid);
    self->state.links.replies->send(peer, id, messages::error_response(id, code, message));
  };
  self->request(self->state.links.peers, caf::infinite, peer_take_atom::value, sid, who)
      .then(
          [self, sid, peer, id, who, fail, turn = std::move(turn), fresh = std::move(fresh)](PeerHandOff& found) mutable {
            if (found.error != wire::ErrorCode::none) return fail(found.error, found.message);
            if (!found.found) return continue_turn(self, std::move(turn), std::move(fresh));
            const std::string holder = found.peer;
            self->request(self->state.links.persistence, caf::infinite, session_adopt_atom::value, sid,
                          std::move(found.hand_off), who)
                .then(
                    [self, sid, peer, id, holder, turn = std::move(turn)](persistence::SessionStart& start) mutable {
                      // Stored here: the holder lets it go, even if this turn cannot start.
                      self->send(self->state.links.peers, peer_confirm_atom::value, holder, sid, start.adopted);
                      if (start.error != wire::ErrorCode::none)  // nothing begun
                        return self->state.links.replies->send(peer, id, messages::error_response(id, start.error, start.message));
                      continue_turn(self, std::move(turn), std::move(start));
                    },
                    [self, sid, holder, fail](caf::error&) {
                      self->send(self->state.links.peers, peer_confirm_atom::value, holder, sid, false);
                      fail(wire::ErrorCode::internal, "the session store is unreachable");
                    });
          },
          [fail](caf::error&) { fail(wire::ErrorCode::internal, "the other front ends could not be asked"); });
}

void begin_turn(IngestionSelf self, service::SessionTurn turn) {
  const std::string sid = turn.request.session_id, peer = turn.request.peer;
  const uint64_t id = turn.request.client_id;
  self->request(self->state.links.persistence, caf::infinite, session_begin_atom::value, sid, turn.who)
      .then(
          [self, sid, peer, id, turn = std::move(turn)](persistence::SessionStart& start) mutable {
            if (start.error != wire::ErrorCode::none)  // not begun: nothing to release
              return self->state.links.replies->send(peer, id, messages::error_response(id, start.error, start.message));
            if (start.turns.empty() && self->state.links.peers)
              return take_from_peers(self, std::move(turn), std::move(start));
            continue_turn(self, std::move(turn), std::move(start));
          },
          [self, peer, id](caf::error&) {
            self->state.links.replies->send(
                peer, id, messages::error_response(id, wire::ErrorCode::internal, "the session store is unreachable"));
          });
}

void route(IngestionSelf self, const service::Query& q) {
  const IngestionLinks& to = self->state.links;
  switch (q.kind) {
    case service::Query::Kind::ping: return to.replies->send(q.peer, q.client_id, messages::pong_response(q.client_id, q.number));
    case service::Query::Kind::stats: return self->send(to.scheduler, stats_atom::value, q.peer, q.client_id);
    case service::Query::Kind::cancel: return self->send(to.scheduler, cancel_atom::value, q.peer, q.client_id, q.number);
    case service::Query::Kind::list_sessions:
      return self->send(to.persistence, list_sessions_atom::value, q.peer, q.client_id, q.who);
    case service::Query::Kind::show_session:
      return self->send(to.persistence, show_session_atom::value, q.peer, q.client_id, q.name, q.who);
    case service::Query::Kind::delete_session:
      return self->send(to.persistence, delete_session_atom::value, q.peer, q.client_id, q.name, q.who);
    case service::Query::Kind::job:
      return self->send(to.jobs, job_query_atom::value, q.peer, q.client_id, q.job, q.name, q.who);
    case service::Query::Kind::file:
      return self->send(to.persistence, file_atom::value, q.peer, q.client_id, q.request, q.who);
    case service::Query::Kind::take_session:
      return self->send(to.persistence, take_session_atom::value, q.peer, q.client_id, q.take);
  }
}

}  // namespace

ingestion_actor::behavior_type ingestion(IngestionSelf self, service::GateConfig config, IngestionLinks links) {
  self->state.gate = std::make_unique<service::RequestGate>(std::move(config));
  self->state.links = std::move(links);
  return {
      [self](request_atom, const gateways::ClientFrame& frame) {
        const std::string& peer = frame.peer;
        service::Admission what = self->state.gate->to_admit(peer, frame.bytes, service::steady_ns(), frame.client);
        // Read and tokenized: its bytes leave the backlog (the tokens are the scheduler's to bound).
        if (frame.counted && self->state.links.backlog) self->state.links.backlog->release(frame.bytes.size());
        if (self->state.draining && !std::holds_alternative<service::Query>(what) &&
            !std::holds_alternative<messages::Rejection>(what)) {
          const uint64_t id = std::visit([](const auto& w) -> uint64_t {
            using T = std::decay_t<decltype(w)>;
            if constexpr (std::is_same_v<T, service::SessionTurn>) return w.request.client_id;
            else if constexpr (std::is_same_v<T, service::Query> || std::is_same_v<T, messages::Rejection>) return 0;
            else return w.client_id;
          }, what);
          return reject(self, peer, messages::Rejection{wire::ErrorCode::shutting_down,
                                                        "the server is draining: retry after it restarts", id});
        }
        if (auto* a = std::get_if<service::AdmitRequest>(&what)) return admit(self, std::move(*a));
        if (auto* t = std::get_if<service::SessionTurn>(&what)) return begin_turn(self, std::move(*t));
        if (auto* q = std::get_if<service::Query>(&what)) return route(self, *q);
        if (auto* j = std::get_if<service::JobSubmission>(&what))
          return self->send(self->state.links.jobs, submit_job_atom::value, std::move(*j));
        reject(self, peer, std::get<messages::Rejection>(what));
      },
      [self](drain_atom) { self->state.draining = true; },
      [self](gone_atom, const std::string& peer) { self->send(self->state.links.scheduler, gone_atom::value, peer); },
  };
}

namespace {

class IngestionIntake final : public gateways::FrameIntake {
 public:
  explicit IngestionIntake(ingestion_actor ingestion) : ingestion_(std::move(ingestion)) {}
  void frame(gateways::ClientFrame frame) override {
    if (frame.counted)
      caf::anon_send(ingestion_, request_atom::value, std::move(frame));
    else
      caf::anon_send<caf::message_priority::high>(ingestion_, request_atom::value, std::move(frame));
  }
  void gone(const std::string& peer) override { caf::anon_send(ingestion_, gone_atom::value, peer); }

 private:
  ingestion_actor ingestion_;
};

}  // namespace

std::shared_ptr<gateways::FrameIntake> frame_intake(ingestion_actor ingestion) {
  return std::make_shared<IngestionIntake>(std::move(ingestion));
}

}  // namespace troupe::actors
