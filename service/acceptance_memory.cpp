#include "service/acceptance_memory.h"

namespace troupe::service {

const AcceptanceEstimates* AcceptanceMemory::prior(const std::string& scope) const {
  if (!scope.empty())
    if (auto it = scopes_.find(scope); it != scopes_.end()) return &it->second.estimates;
  return server_known_ ? &server_ : nullptr;
}

void AcceptanceMemory::remember(const std::string& scope, const AcceptanceEstimates& estimates,
                                const SpeculationStats& stats) {
  bool drafted = false;
  for (size_t s = 1; s < estimates.size(); ++s) drafted = drafted || stats.by_source[s].windows > 0;
  if (!drafted) return;
  for (size_t s = 1; s < estimates.size(); ++s) {
    if (stats.by_source[s].windows == 0) continue;
    // The server's: the mean of its old and the new acceptance, as a few tries.
    const AcceptanceEstimate& e = estimates[s];
    const double a = e.tried > 0 ? e.kept / e.tried : 0.0;
    AcceptanceEstimate& mine = server_[s];
    const double old = mine.tried > 0 ? mine.kept / mine.tried : 0.0;
    const double mean = server_known_ ? (old + a) / 2 : a;
    mine = {mean * SpeculationController::kPriorTries, SpeculationController::kPriorTries};
  }
  server_known_ = true;
  if (scope.empty() || max_scopes_ == 0) return;
  auto [it, fresh] = scopes_.try_emplace(scope);
  if (fresh) {
    recent_.push_front(scope);
  } else {
    recent_.splice(recent_.begin(), recent_, it->second.recent);
  }
  it->second.recent = recent_.begin();
  for (size_t s = 1; s < estimates.size(); ++s)
    if (stats.by_source[s].windows > 0) it->second.estimates[s] = estimates[s];
  while (scopes_.size() > max_scopes_) {
    scopes_.erase(recent_.back());
    recent_.pop_back();
  }
}

}  // namespace troupe::service
