#include "service/tier_router.h"

namespace troupe::service {

TierRouter::TierRouter(std::shared_ptr<const TierTable> tiers, int32_t explore_every)
    : tiers_(std::move(tiers)), auto_(explore_every), budget_({.share = tiers_->escalate_budget}) {
  placement_.assign(static_cast<size_t>(std::max(tiers_->last() + 1, 1)), Placement(1));
}

void TierRouter::set_workers(int32_t tier, int32_t workers, PlacementConfig config) {
  if (valid(tier)) placement_[static_cast<size_t>(tier)] = Placement(workers, config);
}

TierRouter::Place TierRouter::place(int32_t tier, const AdmitRequest& a, int32_t avoid) {
  const Placement::Choice c = placement_[static_cast<size_t>(tier)].place(a.prompt, a.session_id, avoid);
  if (c.replica == Placement::kNone) return {kUnavailable, 0};
  return {tier, c.replica};
}

TierRouter::Place TierRouter::admit(AdmitRequest& a, int64_t now_ns) {
  const Key key{a.peer, a.client_id};
  if (where_.count(key)) return {kDuplicate, 0};
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
  set_budget_threshold(a);
  bool early = false;
  if (auto e = early_.find(key); e != early_.end()) {
    early = now_ns - e->second <= kEarlyNs;
    if (early) r.tier = 0;  // where its cancel waits: the first tier's first worker
    early_.erase(e);
  }
  if (r.tier < 0 || r.tier > tiers_->last()) r.tier = tiers_->last();
  Place p;
  if (early && placement_[0].is_up(0)) {
    placement_[0].pin(0);
    p = {0, 0};
  } else {
    p = place(r.tier, a, Placement::kNone);
  }
  if (p.tier >= 0) where_[key] = p;
  return p;
}

// The budget rule judges the first tier's answers; a request's own
// escalate_threshold, the switch rule and later tiers keep the threshold rule.
void TierRouter::set_budget_threshold(AdmitRequest& a) {
  Route& r = a.route;
  if (!budget_rules(*tiers_, r, a.sampling)) return;
  r.budget_class = escalation_class(a.sampling.escalate_class, job_of_peer(a.peer), static_cast<uint8_t>(a.priority),
                                    static_cast<int64_t>(a.prompt.size()));
  r.threshold = budget_.threshold(r.budget_class, r.threshold);
}

TierRouter::Place TierRouter::moved(AdmitRequest& a) {
  auto it = where_.find({a.peer, a.client_id});
  if (it == where_.end()) return {kGone, 0};
  if (a.moved_from < 0 && !a.route.budget_class.empty()) {
    budget_.judged(a.route.budget_class, a.route.confidence, true);
    a.route.budget_class.clear();
    a.route.threshold = tiers_->default_threshold;
  }
  placement_[static_cast<size_t>(it->second.tier)].ended(it->second.worker);
  const int32_t tier = valid(a.route.tier) ? a.route.tier : tiers_->last();
  const Place p = place(tier, a, a.moved_from >= 0 ? a.moved_from : Placement::kNone);
  if (p.tier < 0) where_.erase(it);
  else it->second = p;
  return p;
}

TierRouter::Place TierRouter::where(const std::string& peer, uint64_t client_id) const {
  auto it = where_.find({peer, client_id});
  return it == where_.end() ? Place{-1, 0} : it->second;
}

void TierRouter::ended(const std::string& peer, uint64_t client_id, const RouteOutcome& outcome) {
  if (auto it = where_.find({peer, client_id}); it != where_.end()) {
    placement_[static_cast<size_t>(it->second.tier)].ended(it->second.worker);
    where_.erase(it);
  }
  if (outcome.workload >= 0) auto_.learn(outcome);
  if (!outcome.budget_class.empty()) budget_.judged(outcome.budget_class, outcome.confidence, false);
}

void TierRouter::gone(const std::string& peer) {
  std::erase_if(where_, [&](const auto& e) {
    if (e.first.first != peer) return false;
    placement_[static_cast<size_t>(e.second.tier)].ended(e.second.worker);
    return true;
  });
}

void TierRouter::report(int32_t tier, int32_t worker, const ReplicaLoad& load) {
  if (valid(tier)) placement_[static_cast<size_t>(tier)].report(worker, load);
}
void TierRouter::worker_down(int32_t tier, int32_t worker) {
  if (valid(tier)) placement_[static_cast<size_t>(tier)].down(worker);
}
void TierRouter::worker_up(int32_t tier, int32_t worker) {
  if (valid(tier)) placement_[static_cast<size_t>(tier)].up(worker);
}

int32_t TierRouter::add_worker(int32_t tier) {
  return valid(tier) ? placement_[static_cast<size_t>(tier)].add() : -1;
}

void TierRouter::cancel_ahead(const std::string& peer, uint64_t client_id, int64_t now_ns) {
  if (early_.size() >= kMaxEarly) std::erase_if(early_, [&](const auto& e) { return now_ns - e.second > kEarlyNs; });
  if (early_.size() < kMaxEarly) early_[{peer, client_id}] = now_ns;
}

}  // namespace troupe::service
