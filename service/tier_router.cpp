#include "service/tier_router.h"

namespace troupe::service {

TierRouter::TierRouter(std::shared_ptr<const TierTable> tiers, int32_t explore_every)
    : tiers_(std::move(tiers)), auto_(explore_every) {}

int32_t TierRouter::admit(AdmitRequest& a, int64_t now_ns) {
  const Key key{a.peer, a.client_id};
  if (where_.count(key)) return kDuplicate;
  Route& r = a.route;
  if (r.kind == RouteKind::automatic) {
    r.workload = AutoChooser::workload(static_cast<uint8_t>(a.priority), static_cast<int64_t>(a.prompt.size()));
    r.kind = auto_.choose(r.workload);
    r.chosen_by_auto = true;
    r.tier = r.kind == RouteKind::verify ? tiers_->last() : 0;
    a.speculation = r.kind == RouteKind::verify ? SpeculationMode::draft : SpeculationMode::off;
  }
  // A session that keeps outgrowing the small tier stays on the last one.
  if (r.kind == RouteKind::escalate && !a.session_id.empty() && tiers_->escalate_for_good > 0 &&
      a.session_escalations >= tiers_->escalate_for_good) {
    r.kind = RouteKind::fixed;
    r.tier = tiers_->last();
  }
  if (auto e = early_.find(key); e != early_.end()) {
    if (now_ns - e->second <= kEarlyNs) r.tier = 0;  // where its cancel waits
    early_.erase(e);
  }
  if (r.tier < 0 || r.tier > tiers_->last()) r.tier = tiers_->last();
  where_[key] = r.tier;
  return r.tier;
}

int32_t TierRouter::escalated(const AdmitRequest& a) {
  auto it = where_.find({a.peer, a.client_id});
  if (it == where_.end()) return -1;
  it->second = a.route.tier;
  return a.route.tier;
}

int32_t TierRouter::where(const std::string& peer, uint64_t client_id) const {
  auto it = where_.find({peer, client_id});
  return it == where_.end() ? -1 : it->second;
}

void TierRouter::ended(const std::string& peer, uint64_t client_id, const RouteOutcome& outcome) {
  where_.erase({peer, client_id});
  if (outcome.workload >= 0) auto_.learn(outcome);
}

void TierRouter::gone(const std::string& peer) {
  std::erase_if(where_, [&](const auto& e) { return e.first.first == peer; });
}

void TierRouter::cancel_ahead(const std::string& peer, uint64_t client_id, int64_t now_ns) {
  if (early_.size() >= kMaxEarly) std::erase_if(early_, [&](const auto& e) { return now_ns - e.second > kEarlyNs; });
  if (early_.size() < kMaxEarly) early_[{peer, client_id}] = now_ns;
}

}  // namespace troupe::service
