#pragma once
// What speculation learned of each draft source's acceptance, kept past the
// sequence that learned it. A speculation controller lives as long as its
// request, so every request used to start from the same default (0.4 for
// every source) and spent its first windows relearning what its session's
// or job's earlier requests had measured: turn 30 of a coding session copies
// code as turn 29 did, item 500 of a job writes like item 499. A sequence
// now starts from its scope's last estimates (suffix_scope(): its session or
// job), else the server's, each weighted as a few observations
// (SpeculationController::kPriorTries), so its own windows soon take over.
//
// Memory: a few dozen bytes a scope, the least recently used dropped past
// max_scopes. Nothing is stored: after a restart the estimates are
// relearned in a few windows.
#include <array>
#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>

#include "engine/speculation/controller.h"

namespace troupe::service {

class AcceptanceMemory {
 public:
  static constexpr size_t kDefaultMaxScopes = 4096;
  explicit AcceptanceMemory(size_t max_scopes = kDefaultMaxScopes) : max_scopes_(max_scopes) {}

  // What a new sequence of `scope` starts from: its scope's estimates, else
  // the server's; null before any sequence drafted.
  const AcceptanceEstimates* prior(const std::string& scope) const;
  // An ended sequence's estimates: each source it drafted from (a window or
  // more in `stats`) replaces that source's in its scope; the server's moves
  // halfway toward it (or takes it, the first time that source is seen).
  void remember(const std::string& scope, const AcceptanceEstimates& estimates, const SpeculationStats& stats);

  size_t scopes() const { return scopes_.size(); }

 private:
  struct Scope {
    AcceptanceEstimates estimates;
    std::list<std::string>::iterator recent;
  };
  // The scope's entry, made if new, now the most recently used.
  Scope& touch(const std::string& scope);

  size_t max_scopes_;
  bool server_known_ = false;          // any source seen
  std::array<bool, 4> server_seen_{};  // by DraftSource
  AcceptanceEstimates server_{};
  std::list<std::string> recent_;  // scopes, most recently remembered first
  std::unordered_map<std::string, Scope> scopes_;
};

}  // namespace troupe::service
