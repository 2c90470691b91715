#include "service/route_request.h"

namespace troupe::service {

// Escalate watches the small tier's own probabilities, so it does not
// speculate; verify is speculation with the first tier's model drafting.
// A draft model serves only the last tier: elsewhere speculation is n-gram.
std::optional<std::string> route_request(const TierTable* tiers, AdmitRequest& a) {
  static const TierTable kNone;
  const TierTable& t = tiers ? *tiers : kNone;
  auto r = resolve_route(t, a.sampling, a.samples);
  if (auto* why = std::get_if<std::string>(&r)) return *why;
  a.route = std::get<Route>(r);
  if (t.empty()) return std::nullopt;
  switch (a.route.kind) {
    case RouteKind::escalate: a.speculation = SpeculationMode::off; break;
    case RouteKind::verify: a.speculation = SpeculationMode::draft; break;
    case RouteKind::automatic: break;  // the router chooses
    case RouteKind::fixed:
      if (a.route.tier != t.last() && a.speculation != SpeculationMode::off) a.speculation = SpeculationMode::ngram;
      break;
  }
  if (a.max_draft <= 0) a.max_draft = 8;
  return std::nullopt;
}

}  // namespace troupe::service
