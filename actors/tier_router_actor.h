#pragma once
// The router: in front of the schedulers of a server with model tiers
// (`serve --tiers`) or several workers (`serve --worker A --worker B`), one
// scheduler per tier and worker. It places each new request on its tier and
// worker (service/tier_router.h), moves escalated requests to the next tier
// and a lost worker's requests to another, sends cancels where their
// request now runs, and answers drain and stats for them all.
#include <memory>
#include <utility>
#include <vector>

#include "actors/interfaces.h"
#include "service/tier_router.h"

namespace troupe::service {
class ServiceMetrics;
}

namespace troupe::actors {

class Replies;

struct TierRouterState {
  std::unique_ptr<service::TierRouter> router;
  TierSchedulers tiers;  // smallest first, one per worker (sent once, before any request)
  std::shared_ptr<Replies> replies;
  persistence_actor store;  // where the escalation budget's figures are kept
  std::shared_ptr<service::ServiceMetrics> metrics;  // ... and shown (may be null)
};

// `workers`: per tier, how many workers and how to place among them.
tier_router_actor::behavior_type tier_router(tier_router_actor::stateful_pointer<TierRouterState> self,
                                             std::shared_ptr<const service::TierTable> table,
                                             std::shared_ptr<Replies> replies,
                                             std::vector<std::pair<int32_t, service::PlacementConfig>> workers,
                                             persistence_actor store, std::shared_ptr<service::ServiceMetrics> metrics);

}  // namespace troupe::actors
