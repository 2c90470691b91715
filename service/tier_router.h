#pragma once
// Where each request of a server with model tiers runs (service/cascade.h):
// the tier a new request starts on (auto's choice and a session's
// escalations decide it), where it went when a tier escalated it, and
// which requests are still somewhere, so a cancel finds its request. Its
// actor (actors/tier_router_actor.cpp) sends; this class decides.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "service/admit_request.h"
#include "service/cascade.h"

namespace troupe::service {

class TierRouter {
 public:
  explicit TierRouter(std::shared_ptr<const TierTable> tiers, int32_t explore_every = 16);

  static constexpr int32_t kDuplicate = -1;
  // A new request: its tier (its route and speculation settled), or
  // kDuplicate when its id already runs on this connection.
  int32_t admit(AdmitRequest& a, int64_t now_ns);
  // A tier handed the request on: the tier it continues on, or -1 when its
  // client went away meanwhile (the tier is then told the client is gone).
  int32_t escalated(const AdmitRequest& a);
  // The tier a request runs on; -1: none (ended, or not here yet).
  int32_t where(const std::string& peer, uint64_t client_id) const;
  void ended(const std::string& peer, uint64_t client_id, const RouteOutcome& outcome);
  void gone(const std::string& peer);
  // A cancel found no request: it may have overtaken it (control frames skip
  // prompts waiting to be tokenized). The request then goes to the first
  // tier, whose scheduler holds the early cancel.
  void cancel_ahead(const std::string& peer, uint64_t client_id, int64_t now_ns);
  size_t live() const { return where_.size(); }
  const AutoChooser& chooser() const { return auto_; }

 private:
  using Key = std::pair<std::string, uint64_t>;
  std::shared_ptr<const TierTable> tiers_;
  AutoChooser auto_;
  std::map<Key, int32_t> where_;
  std::map<Key, int64_t> early_;  // cancels ahead of their request
  static constexpr int64_t kEarlyNs = 30'000'000'000;
  static constexpr size_t kMaxEarly = 4096;
};

}  // namespace troupe::service
