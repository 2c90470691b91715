#pragma once
// What the cascade's tests share (cascade, route_request, tier_router): a
// table of two tiers, mini < maxi, on the switch rule (hold 0; the hold
// rule's tests set it), and sampling that names a tier.
#include <memory>
#include <string>

#include "messages/client_frames.h"
#include "service/cascade.h"

namespace troupe::test {

inline std::shared_ptr<service::TierTable> two_tiers() {
  auto t = std::make_shared<service::TierTable>();
  t->names = {"mini", "maxi"};
  t->aliases = {{"mini", "mini-q8"}, {"maxi"}};
  t->default_threshold = 0.5f;
  t->window = 4;
  t->within = 0;
  t->hold = 0;
  t->escalate_for_good = 2;
  return t;
}

inline messages::SamplingFields with_tier(const std::string& tier, float temperature = 0) {
  messages::SamplingFields s;
  s.temperature = temperature;
  s.tier = tier;
  return s;
}

}  // namespace troupe::test
