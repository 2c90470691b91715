#pragma once
// The other front ends this one takes sessions from (`serve --peer`): a
// turn for a session this front end's store does not hold asks each peer in
// turn, and the one that holds it hands it over (docs/SCALE_OUT.md, "A
// session's hand-off"). Detached: a peer's answer is a network round trip,
// which must not hold up ingestion or the store.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/interfaces.h"
#include "messages/client_connection.h"

namespace troupe::actors {

// What the peers said of a session: found (and held there for this front
// end until it confirms), or refused by the one that holds it (it runs a
// turn of it, or it is another client's), or unknown to all that answered.
struct PeerHandOff {
  bool found = false;
  std::string peer;  // the front end that holds it
  persistence::SessionHandOff hand_off;
  wire::ErrorCode error = wire::ErrorCode::none;  // the holder's refusal
  std::string message;
};

using session_peers_actor = caf::typed_actor<
    caf::replies_to<peer_take_atom, std::string, persistence::Principal>::with<PeerHandOff>,
    // (peer, session, done): the taker stored it (done) or could not (abort)
    caf::reacts_to<peer_confirm_atom, std::string, std::string, bool>>;

struct SessionPeersOptions {
  std::vector<std::string> peers;  // their client endpoints
  std::string self;                // this front end's client endpoint, recorded where a session went
  messages::CurveKeys curve;       // under CURVE: this front end's pair, and the peers' public key (the same pair)
  // A peer must answer a ping within `reach` to be asked at all (else it is
  // down: the session starts here); one that answered it has `timeout` to
  // hand a session over (its pages may be many MB), else the turn is refused
  // as unavailable (retry) rather than fork the session.
  std::chrono::milliseconds reach{1000}, timeout{20000};
};

struct SessionPeersState {
  SessionPeersOptions options;
  std::vector<std::unique_ptr<messages::ClientConnection>> links;  // one per peer, made again after a timeout
  // A peer that did not answer is not asked again for this long: while it
  // is down, new sessions' first turns do not each wait out its timeout.
  std::vector<std::chrono::steady_clock::time_point> quiet_until;
  std::chrono::milliseconds quiet{10000};
};

session_peers_actor::behavior_type session_peers(session_peers_actor::stateful_pointer<SessionPeersState> self,
                                                 SessionPeersOptions options);

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::PeerHandOff)
