#pragma once
// The tier router: in front of the schedulers of a server with model tiers
// (`serve --tiers`), one scheduler per tier. It places each new request on
// its tier (service/tier_router.h), moves escalated requests to the next
// tier, sends cancels where their request now runs, and answers drain and
// stats for the tiers together.
#include <memory>
#include <vector>

#include "actors/interfaces.h"
#include "service/tier_router.h"

namespace troupe::actors {

class Replies;

struct TierRouterState {
  std::unique_ptr<service::TierRouter> router;
  std::vector<scheduler_actor> tiers;  // smallest first (sent once, before any request)
  std::shared_ptr<Replies> replies;
};

tier_router_actor::behavior_type tier_router(tier_router_actor::stateful_pointer<TierRouterState> self,
                                             std::shared_ptr<const service::TierTable> table,
                                             std::shared_ptr<Replies> replies);

}  // namespace troupe::actors
