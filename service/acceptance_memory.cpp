#include "service/acceptance_memory.h"

namespace troupe::service {

namespace {
double rate(const AcceptanceEstimate& e) { return e.tried > 0 ? e.kept / e.tried : 0.0; }
}  // namespace

const AcceptanceEstimates* AcceptanceMemory::prior(const std::string& scope) const {
  if (!scope.empty())
    if (auto it = scopes_.find(scope); it != scopes_.end()) return &it->second.estimates;
  return server_known_ ? &server_ : nullptr;
}

AcceptanceMemory::Scope& AcceptanceMemory::touch(const std::string& scope) {
  auto [it, fresh] = scopes_.try_emplace(scope);
  if (fresh)
    recent_.push_front(scope);
  else
    recent_.splice(recent_.begin(), recent_, it->second.recent);
  it->second.recent = recent_.begin();
  return it->second;
}

void AcceptanceMemory::remember(const std::string& scope, const AcceptanceEstimates& estimates,
                                const SpeculationStats& stats) {
  Scope* held = nullptr;  // the scope's entry, from the first source the sequence drafted from
  for (size_t s = 1; s < estimates.size(); ++s) {
    if (stats.by_source[s].windows == 0) continue;  // nothing learned of this source
    // The server's: halfway from what it had of this source to the new acceptance, as a few tries.
    const double a = rate(estimates[s]);
    const double mean = server_seen_[s] ? (rate(server_[s]) + a) / 2 : a;
    server_[s] = {mean * SpeculationController::kPriorTries, SpeculationController::kPriorTries};
    server_seen_[s] = server_known_ = true;
    if (scope.empty() || max_scopes_ == 0) continue;
    if (!held) held = &touch(scope);
    held->estimates[s] = estimates[s];
  }
  while (scopes_.size() > max_scopes_) {
    scopes_.erase(recent_.back());
    recent_.pop_back();
  }
}

}  // namespace troupe::service
