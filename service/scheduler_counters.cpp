#include "service/scheduler_counters.h"

namespace troupe::service {

void SchedulerCounters::stepped(double forward_ms, int64_t tokens) {
  engine_ms += forward_ms;
  step_ms_avg = step_ms_avg > 0 ? 0.8 * step_ms_avg + 0.2 * forward_ms : forward_ms;
  if (tokens > 0) forward_tokens += static_cast<uint64_t>(tokens), ++forward_steps;
}

void SchedulerCounters::account(bool busy, int64_t now_ns) {
  if (busy_since_ns_) busy_ms += static_cast<double>(now_ns - busy_since_ns_) / 1e6;
  busy_since_ns_ = busy ? now_ns : 0;
}

messages::StatsFields SchedulerCounters::stats(const PlannerStats& ps) const {
  messages::StatsFields f;
  f.running = ps.running;
  f.waiting = ps.waiting;
  f.pages_total = ps.pages_total;
  f.pages_used = ps.pages_used;
  f.pages_cached = ps.pages_cached;
  f.pages_free = ps.pages_free;
  f.local_pages_total = ps.local_pages_total;
  f.local_pages_used = ps.local_pages_used;
  f.live_token_fraction = ps.live_token_fraction;
  f.preemptions = ps.preemptions;
  f.kv_evictions = ps.evictions;
  f.kv_positions_evicted = ps.positions_evicted;
  f.tokens_generated = tokens_generated;
  f.engine_ms = engine_ms;
  f.busy_ms = busy_ms;
  f.pages_restored = pages_restored;
  f.pages_swapped_out = pages_swapped_out;
  f.pages_swapped_in = pages_swapped_in;
  f.tokens_shifted = tokens_shifted;
  f.expert_tokens = expert_tokens;
  return f;
}

messages::TierStatsFields SchedulerCounters::tier(const std::string& name, const PlannerStats& ps) const {
  messages::TierStatsFields t;
  t.name = name;
  t.requests = requests_in;
  t.escalated_in = escalated_in;
  t.escalations = escalations_out;
  t.tokens = tokens_generated;
  t.forward_tokens = forward_tokens;
  t.steps = forward_steps;
  t.drafted = drafted;
  t.accepted = accepted;
  t.running = ps.running;
  t.waiting = ps.waiting;
  t.pages_used = ps.pages_used;
  t.pages_total = ps.pages_total;
  return t;
}

messages::WorkerStatsFields SchedulerCounters::worker(const std::string& endpoint, const std::string& tier, bool up,
                                                      uint64_t losses, const PlannerStats& ps) const {
  messages::WorkerStatsFields w;
  w.endpoint = endpoint;
  w.tier = tier;
  w.up = up;
  w.requests = requests_in + escalated_in + moved_in;
  w.moved_in = moved_in;
  w.moved_out = moved_out;
  w.lost = losses;
  w.tokens = tokens_generated;
  w.forward_tokens = forward_tokens;
  w.steps = forward_steps;
  w.running = ps.running;
  w.waiting = ps.waiting;
  w.pages_used = ps.pages_used;
  w.pages_total = ps.pages_total;
  w.step_ms = step_ms_avg;
  return w;
}

}  // namespace troupe::service
