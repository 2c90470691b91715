#include "actors/replies.h"

#include <caf/send.hpp>

#include "gateways/client_gateway.h"
#include "gateways/http_gateway.h"

namespace troupe::actors {

void Replies::send(const std::string& peer, uint64_t client_id, const messages::Bytes& bytes) const {
  if (service::is_internal_peer(peer)) {
    if (jobs_) caf::anon_send(jobs_, job_item_atom::value, client_id, bytes);
    return;
  }
  if (gateways::is_http_peer(peer)) {
    if (http_) http_->deliver(peer, bytes);
    return;
  }
  gateway_->send(peer, bytes);
}

}  // namespace troupe::actors
