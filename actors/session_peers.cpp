#include "actors/session_peers.h"

#include <cstdio>
#include <optional>

#include "messages/client_validation.h"
#include "messages/session_frames.h"

namespace troupe::actors {
namespace {

using PeersSelf = session_peers_actor::stateful_pointer<SessionPeersState>;

// One request to peer `i` and its answer (nullopt: no answer in time; its
// connection is made again, so a late answer is never read as the next one's).
messages::ClientConnection* link_to(PeersSelf self, size_t i) {
  SessionPeersState& st = self->state;
  auto& link = st.links[i];
  try {
    if (!link)
      link = std::make_unique<messages::ClientConnection>(st.options.peers[i], messages::SocketLimits{}, st.options.curve);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: peer %s cannot be reached: %s\n", st.options.peers[i].c_str(), e.what());
    return nullptr;
  }
  return link.get();
}

// Whether peer `i` answers at all (a ping within `reach`).
bool reachable(PeersSelf self, size_t i) {
  messages::ClientConnection* link = link_to(self, i);
  if (link && link->ping(self->state.options.reach)) return true;
  self->state.links[i].reset();
  return false;
}

std::optional<messages::Bytes> ask(PeersSelf self, size_t i, const messages::TakeSessionFields& t,
                                   std::chrono::milliseconds timeout) {
  SessionPeersState& st = self->state;
  auto& link = st.links[i];
  if (!link_to(self, i)) return std::nullopt;
  const uint64_t id = link->next_id();
  link->send(messages::take_session_request(id, t));
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    std::optional<messages::Bytes> frame;
    try {
      frame = link->receive(std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      break;  // a malformed frame: this connection is not to be trusted
    }
    if (!frame) break;
    const auto* r = messages::check_response(*frame);
    if (r && r->client_request_id() == id) return frame;
  }
  link.reset();
  return std::nullopt;
}

PeerHandOff take(PeersSelf self, const std::string& session, const persistence::Principal& who) {
  SessionPeersState& st = self->state;
  const messages::TakeSessionFields t{session, wire::HandOffStep::ask, who.name, who.admin, st.options.self};
  PeerHandOff out;
  for (size_t i = 0; i < st.options.peers.size(); ++i) {
    const std::string& peer = st.options.peers[i];
    // It may hold the session: the turn starts a new one here (nothing of
    // the old is lost; it stays where it is). Said in the log.
    if (std::chrono::steady_clock::now() < st.quiet_until[i]) {
      std::fprintf(stderr, "troupe serve: peer %s is not asked whether it holds session '%s' (it did not answer lately)\n",
                   peer.c_str(), session.c_str());
      continue;
    }
    if (!reachable(self, i)) {
      st.quiet_until[i] = std::chrono::steady_clock::now() + st.quiet;
      std::fprintf(stderr, "troupe serve: peer %s did not answer whether it holds session '%s'\n", peer.c_str(),
                   session.c_str());
      continue;
    }
    const auto answer = ask(self, i, t, st.options.timeout);
    if (!answer) {
      // It is up but did not hand the session over in time: it may hold it
      // for us now. Let it go there, and refuse the turn rather than fork.
      ask(self, i, {session, wire::HandOffStep::abort, "", false, st.options.self}, st.options.reach);
      out.error = wire::ErrorCode::unavailable;
      out.message = "the front end " + peer + " did not say in time whether it holds session '" + session +
                    "' (it may be busy moving it): retry";
      return out;
    }
    const auto* r = messages::check_response(*answer);
    if (const auto* records = r->body_as_SessionRecords()) {
      const messages::SessionRecordsFields f = messages::read_session_records(*records);
      out.found = true;
      out.peer = peer;
      out.hand_off.records = {f.header, f.turns};
      out.hand_off.kv_data = f.kv_pages;
      return out;
    }
    if (const auto* e = r->body_as_Error(); e && e->code() != wire::ErrorCode::unknown_session) {
      out.error = e->code();
      out.message = (e->message() ? e->message()->str() : "") + " (at the front end " + peer + ")";
      return out;
    }
  }
  return out;
}

}  // namespace

session_peers_actor::behavior_type session_peers(session_peers_actor::stateful_pointer<SessionPeersState> self,
                                                 SessionPeersOptions options) {
  self->state.options = std::move(options);
  self->state.links.resize(self->state.options.peers.size());
  self->state.quiet_until.resize(self->state.options.peers.size());
  return {
      [self](peer_take_atom, const std::string& session, const persistence::Principal& who) { return take(self, session, who); },
      [self](peer_confirm_atom, const std::string& peer, const std::string& session, bool done) {
        SessionPeersState& st = self->state;
        for (size_t i = 0; i < st.options.peers.size(); ++i) {
          if (st.options.peers[i] != peer) continue;
          const messages::TakeSessionFields t{session, done ? wire::HandOffStep::done : wire::HandOffStep::abort, "", false,
                                              st.options.self};
          const auto answer = ask(self, i, t, st.options.timeout);
          const auto* r = answer ? messages::check_response(*answer) : nullptr;
          const auto* e = r ? r->body_as_Error() : nullptr;
          if (!r || e)
            // Unconfirmed, the peer holds the session for a while, then serves it again: both have it.
            std::fprintf(stderr, "troupe serve: peer %s did not confirm the hand-off of session '%s': %s\n", peer.c_str(),
                         session.c_str(), e && e->message() ? e->message()->c_str() : "no answer");
        }
      },
  };
}

}  // namespace troupe::actors
