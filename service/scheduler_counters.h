#pragma once
// What a scheduler counts, and the figures `troupe stats` and /metrics
// read from them: the server's (StatsFields), its cascade tier's and its
// worker's. One set of counters, turned into each view in one place.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/schedule/batch_planner.h"
#include "messages/client_frames.h"

namespace troupe::service {

struct SchedulerCounters {
  // Requests by how they came: from a client, escalated from the tier
  // before, moved from a lost replica; and handed on.
  uint64_t requests_in = 0, escalated_in = 0, moved_in = 0;
  uint64_t escalations_out = 0, moved_out = 0;
  uint64_t tokens_generated = 0;              // sent to clients
  uint64_t forward_tokens = 0, forward_steps = 0;  // steps that computed any
  uint64_t drafted = 0, accepted = 0;         // speculation, of ended sequences
  uint64_t pages_restored = 0, pages_swapped_out = 0, pages_swapped_in = 0, tokens_shifted = 0;
  std::vector<uint64_t> expert_tokens;  // the worker's latest StepResult.expert_tokens
  double engine_ms = 0;    // sum of the verifier's step times
  double step_ms_avg = 0;  // its recent step time, for placement
  double busy_ms = 0;      // wall time with requests in the system

  // A step's result: its forward time and the tokens it computed.
  void stepped(double forward_ms, int64_t tokens);
  // Busy time: call after anything that may start or end work.
  void account(bool busy, int64_t now_ns);

  // The server's figures from this scheduler alone (tiers and workers
  // are merged by the caller).
  messages::StatsFields stats(const PlannerStats& planner) const;
  messages::TierStatsFields tier(const std::string& name, const PlannerStats& planner) const;
  messages::WorkerStatsFields worker(const std::string& endpoint, const std::string& tier, bool up, uint64_t losses,
                                     const PlannerStats& planner) const;

 private:
  int64_t busy_since_ns_ = 0;  // 0 while idle
};

}  // namespace troupe::service
