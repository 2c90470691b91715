#pragma once
// Where each request of a server with model tiers or several workers runs
// (service/cascade.h, service/placement.h): the tier a new request starts on
// (auto's choice and a session's escalations decide it) and the worker of
// that tier (placement), where it went when a tier escalated it or its
// worker was lost, and which requests are still somewhere, so a cancel
// finds its request. Its actor (actors/tier_router_actor.cpp) sends; this
// class decides.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <vector>

#include "service/admit_request.h"
#include "service/cascade.h"
#include "service/escalation_budget.h"
#include "service/placement.h"

namespace troupe::service {

class TierRouter {
 public:
  // Every tier has one worker until set_workers() says otherwise.
  explicit TierRouter(std::shared_ptr<const TierTable> tiers, int32_t explore_every = 16);
  void set_workers(int32_t tier, int32_t workers, PlacementConfig config);

  static constexpr int32_t kDuplicate = -1;    // Place::tier: the id already runs on this connection
  static constexpr int32_t kGone = -2;         // ... its client went away while it moved
  static constexpr int32_t kUnavailable = -3;  // ... no worker of its tier is up
  struct Place {
    int32_t tier = -1;
    int32_t worker = 0;
    bool operator==(const Place&) const = default;
  };
  // A new request: where it runs (its route and speculation settled).
  Place admit(AdmitRequest& a, int64_t now_ns);
  // A tier handed the request on (escalation), or its worker was lost
  // (a.moved_from): where it continues. An escalation under the budget rule
  // is counted, and the next tier judges by the threshold rule.
  Place moved(AdmitRequest& a);
  // Where a request runs; tier -1: nowhere (ended, or not here yet).
  Place where(const std::string& peer, uint64_t client_id) const;
  void ended(const std::string& peer, uint64_t client_id, const RouteOutcome& outcome);
  void gone(const std::string& peer);
  // A worker's scheduler reports its load, or that its worker was lost or is back.
  void report(int32_t tier, int32_t worker, const ReplicaLoad& load);
  void worker_down(int32_t tier, int32_t worker);
  void worker_up(int32_t tier, int32_t worker);
  // A worker joined the tier: its index, the next one.
  int32_t add_worker(int32_t tier);
  const Placement& placement(int32_t tier) const { return placement_[static_cast<size_t>(tier)]; }
  // A cancel found no request: it may have overtaken it (control frames skip
  // prompts waiting to be tokenized). The request then goes to the first
  // tier, whose scheduler holds the early cancel.
  void cancel_ahead(const std::string& peer, uint64_t client_id, int64_t now_ns);
  size_t live() const { return where_.size(); }
  const AutoChooser& chooser() const { return auto_; }
  EscalationBudget& budget() { return budget_; }

 private:
  using Key = std::pair<std::string, uint64_t>;
  std::shared_ptr<const TierTable> tiers_;
  AutoChooser auto_;
  EscalationBudget budget_;
  void set_budget_threshold(AdmitRequest& a);
  bool valid(int32_t tier) const { return tier >= 0 && tier < static_cast<int32_t>(placement_.size()); }
  Place place(int32_t tier, const AdmitRequest& a, int32_t avoid);
  std::vector<Placement> placement_;  // per tier
  std::map<Key, Place> where_;
  std::map<Key, int64_t> early_;  // cancels ahead of their request
  static constexpr int64_t kEarlyNs = 30'000'000'000;
  static constexpr size_t kMaxEarly = 4096;
};

}  // namespace troupe::service
