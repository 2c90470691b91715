#include "actors/tier_router_actor.h"

#include <caf/actor_system.hpp>

#include <algorithm>
#include <cstdio>

#include "actors/replies.h"
#include "messages/client_frames.h"
#include "service/metrics.h"
#include "service/clock.h"

namespace troupe::actors {
namespace {

using RouterSelf = tier_router_actor::stateful_pointer<TierRouterState>;
using Place = service::TierRouter::Place;

void unknown(RouterSelf self, const std::string& peer, uint64_t id, uint64_t target) {
  self->state.replies->send(peer, id,
                            messages::error_response(id, wire::ErrorCode::unknown_request,
                                                     "no running request " + std::to_string(target) + " on this connection"));
}

const scheduler_actor& at(RouterSelf self, Place p) {
  return self->state.tiers[static_cast<size_t>(p.tier)][static_cast<size_t>(p.worker)];
}

// Every scheduler's live requests, asked one after another, summed.
void drain_from(RouterSelf self, size_t at, bool stop, int32_t sum, caf::typed_response_promise<int32_t> promise) {
  std::vector<scheduler_actor> all;
  for (const auto& tier : self->state.tiers) all.insert(all.end(), tier.begin(), tier.end());
  if (at == all.size()) {
    promise.deliver(sum);
    return;
  }
  self->request(all[at], std::chrono::seconds(30), drain_atom::value, stop)
      .then([=](int32_t left) mutable { drain_from(self, at + 1, stop, sum + left, promise); },
            [=](caf::error&) mutable { drain_from(self, at + 1, stop, sum, promise); });
}

// No worker of its tier is up: a scheduler of that tier ends the request
// with the reason (and frees its session, as it would for any refusal).
void unavailable(RouterSelf self, service::AdmitRequest& a, int32_t tier) {
  a.unplaced = true;
  const auto t = static_cast<size_t>(std::clamp<int32_t>(tier, 0, static_cast<int32_t>(self->state.tiers.size()) - 1));
  self->send(self->state.tiers[t].front(), admit_atom::value, std::move(a));
}

// The budget's figures go to the store every so many judgements, on ticks
// and at a drain, so a restart goes on from them.
constexpr int64_t kBudgetSaveEvery = 64;
// Its figures go to `troupe stats` and /metrics as they change.
void save_budget(RouterSelf self, int64_t at_least) {
  service::EscalationBudget& b = self->state.router->budget();
  if (!b.on() || b.unsaved() == 0) return;
  if (self->state.metrics) self->state.metrics->escalation_classes(b.figures());
  if (b.unsaved() >= std::max<int64_t>(at_least, 1)) self->send(self->state.store, budget_store_atom::value, b.save());
}

void load_budget(RouterSelf self) {
  if (!self->state.router->budget().on()) return;
  self->request(self->state.store, caf::infinite, budget_load_atom::value).then([self](const std::string& bytes) {
    if (bytes.empty()) return;
    if (!self->state.router->budget().load(bytes))
      std::fprintf(stderr, "troupe serve: the stored escalation budget is unreadable; its classes start afresh\n");
    else if (self->state.metrics)
      self->state.metrics->escalation_classes(self->state.router->budget().figures());
  });
}

void on_tick(RouterSelf self) {
  save_budget(self, 1);
  for (const auto& tier : self->state.tiers)
    for (const auto& s : tier) self->send(s, tick_atom::value);
}

void on_ended(RouterSelf self, const std::vector<service::Outbound::Ended>& ended) {
  for (const auto& e : ended) self->state.router->ended(e.peer, e.client_id, e.outcome);
  save_budget(self, kBudgetSaveEvery);
}

}  // namespace

tier_router_actor::behavior_type tier_router(RouterSelf self, std::shared_ptr<const service::TierTable> table,
                                             std::shared_ptr<Replies> replies,
                                             std::vector<std::pair<int32_t, service::PlacementConfig>> workers,
                                             persistence_actor store, std::shared_ptr<service::ServiceMetrics> metrics) {
  self->state.router = std::make_unique<service::TierRouter>(std::move(table));
  for (size_t t = 0; t < workers.size(); ++t)
    self->state.router->set_workers(static_cast<int32_t>(t), workers[t].first, workers[t].second);
  self->state.replies = std::move(replies);
  self->state.store = std::move(store);
  self->state.metrics = std::move(metrics);
  load_budget(self);
  return {
      [self](admit_atom, service::AdmitRequest& a) {
        const Place p = self->state.router->admit(a, service::steady_ns());
        if (p.tier == service::TierRouter::kDuplicate) {
          const uint64_t id = a.client_id;
          return self->state.replies->send(a.peer, id,
                                           messages::error_response(id, wire::ErrorCode::duplicate_id,
                                                                    "request id " + std::to_string(id) +
                                                                        " is already running on this connection"));
        }
        if (p.tier < 0) return unavailable(self, a, a.route.tier);
        self->send(at(self, p), admit_atom::value, std::move(a));
      },
      [self](cancel_atom, const std::string& peer, uint64_t id, uint64_t target) {
        Place p = self->state.router->where(peer, target);
        if (p.tier < 0) {
          self->state.router->cancel_ahead(peer, target, service::steady_ns());
          p = {0, 0};
        }
        self->send(at(self, p), cancel_atom::value, peer, id, target);
      },
      [self](gone_atom, const std::string& peer) {
        self->state.router->gone(peer);
        for (const auto& tier : self->state.tiers)
          for (const auto& s : tier) self->send(s, gone_atom::value, peer);
      },
      [self](stats_atom, const std::string& peer, uint64_t id) {
        self->send(self->state.tiers.back().front(), stats_atom::value, peer, id);  // it reports them all
      },
      [self](drain_atom, bool stop) {
        save_budget(self, 1);
        auto promise = self->make_response_promise<int32_t>();
        drain_from(self, 0, stop, 0, promise);
        return promise;
      },
      [self](tick_atom) { on_tick(self); },
      [](heartbeat_atom) {},
      [self](escalate_atom, service::AdmitRequest& a) {
        const Place p = self->state.router->moved(a);
        save_budget(self, kBudgetSaveEvery);
        // Its client went away while it moved: a scheduler refuses it, which
        // frees its session (never one that would hand it back: unplaced).
        if (p.tier < 0) return unavailable(self, a, a.route.tier);
        self->send(at(self, p), admit_atom::value, std::move(a));
      },
      [self](escalate_atom, const std::string& peer, uint64_t id, uint64_t target) {
        const Place p = self->state.router->where(peer, target);
        if (p.tier < 0) return unknown(self, peer, id, target);
        self->send(at(self, p), cancel_atom::value, peer, id, target);
      },
      [self](ended_atom, std::vector<service::Outbound::Ended>& ended) { on_ended(self, ended); },
      [self](load_atom, int32_t tier, int32_t worker, const service::ReplicaLoad& load) {
        self->state.router->report(tier, worker, load);
      },
      [self](worker_atom, int32_t tier, int32_t worker, bool up) {
        if (up) self->state.router->worker_up(tier, worker);
        else self->state.router->worker_down(tier, worker);
      },
      [self](tiers_atom, TierSchedulers& tiers) { self->state.tiers = std::move(tiers); },
      [self](join_atom, int32_t tier, scheduler_actor& s) {
        if (tier < 0 || tier >= static_cast<int32_t>(self->state.tiers.size())) return;
        self->state.router->add_worker(tier);
        self->state.tiers[static_cast<size_t>(tier)].push_back(std::move(s));
      },
  };
}

}  // namespace troupe::actors
