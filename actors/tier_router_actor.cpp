#include "actors/tier_router_actor.h"

#include <caf/actor_system.hpp>

#include "actors/replies.h"
#include "service/clock.h"

namespace troupe::actors {
namespace {

using Self = tier_router_actor::stateful_pointer<TierRouterState>;

void unknown(Self self, const std::string& peer, uint64_t id, uint64_t target) {
  self->state.replies->send(peer, id,
                            messages::error_response(id, wire::ErrorCode::unknown_request,
                                                     "no running request " + std::to_string(target) + " on this connection"));
}

// Every tier's live requests, asked one after another, summed.
void drain_from(Self self, size_t tier, bool stop, int32_t sum, caf::typed_response_promise<int32_t> promise) {
  if (tier == self->state.tiers.size()) {
    promise.deliver(sum);
    return;
  }
  self->request(self->state.tiers[tier], std::chrono::seconds(30), drain_atom::value, stop)
      .then([=](int32_t left) mutable { drain_from(self, tier + 1, stop, sum + left, promise); },
            [=](caf::error&) mutable { drain_from(self, tier + 1, stop, sum, promise); });
}

}  // namespace

tier_router_actor::behavior_type tier_router(Self self, std::shared_ptr<const service::TierTable> table,
                                             std::shared_ptr<Replies> replies) {
  self->state.router = std::make_unique<service::TierRouter>(std::move(table));
  self->state.replies = std::move(replies);
  return {
      [self](admit_atom, service::AdmitRequest& a) {
        const int32_t tier = self->state.router->admit(a, service::steady_ns());
        if (tier == service::TierRouter::kDuplicate) {
          const uint64_t id = a.client_id;
          return self->state.replies->send(a.peer, id,
                                           messages::error_response(id, wire::ErrorCode::duplicate_id,
                                                                    "request id " + std::to_string(id) +
                                                                        " is already running on this connection"));
        }
        self->send(self->state.tiers[static_cast<size_t>(tier)], admit_atom::value, std::move(a));
      },
      [self](cancel_atom, const std::string& peer, uint64_t id, uint64_t target) {
        const int32_t tier = self->state.router->where(peer, target);
        if (tier < 0) self->state.router->cancel_ahead(peer, target, service::steady_ns());
        self->send(self->state.tiers[static_cast<size_t>(std::max(tier, 0))], cancel_atom::value, peer, id, target);
      },
      [self](gone_atom, const std::string& peer) {
        self->state.router->gone(peer);
        for (const auto& t : self->state.tiers) self->send(t, gone_atom::value, peer);
      },
      [self](stats_atom, const std::string& peer, uint64_t id) {
        self->send(self->state.tiers.back(), stats_atom::value, peer, id);  // it reports every tier
      },
      [self](drain_atom, bool stop) {
        auto promise = self->make_response_promise<int32_t>();
        drain_from(self, 0, stop, 0, promise);
        return promise;
      },
      [self](tick_atom) {
        for (const auto& t : self->state.tiers) self->send(t, tick_atom::value);
      },
      [self](escalate_atom, service::AdmitRequest& a) {
        const int32_t tier = self->state.router->escalated(a);
        const size_t to = static_cast<size_t>(std::clamp<int32_t>(a.route.tier, 0, static_cast<int32_t>(self->state.tiers.size()) - 1));
        const std::string peer = a.peer;
        self->send(self->state.tiers[to], admit_atom::value, std::move(a));
        // Its client went away while it moved: the tier ends it, and frees its session.
        if (tier < 0) self->send(self->state.tiers[to], gone_atom::value, peer);
      },
      [self](escalate_atom, const std::string& peer, uint64_t id, uint64_t target) {
        const int32_t tier = self->state.router->where(peer, target);
        if (tier < 0) return unknown(self, peer, id, target);
        self->send(self->state.tiers[static_cast<size_t>(tier)], cancel_atom::value, peer, id, target);
      },
      [self](ended_atom, std::vector<service::Outbound::Ended>& ended) {
        for (const auto& e : ended) self->state.router->ended(e.peer, e.client_id, e.outcome);
      },
      [self](tiers_atom, std::vector<scheduler_actor>& tiers) { self->state.tiers = std::move(tiers); },
  };
}

}  // namespace troupe::actors
