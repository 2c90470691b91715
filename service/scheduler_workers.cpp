// The scheduler's worker (service/scheduler.h): its loss and return, a
// drain, failover to another replica; and the figures it reports: load for
// placement, counters for `troupe stats` and /metrics.
#include <algorithm>

#include "messages/step_frames.h"
#include "service/hand_off.h"
#include "service/scheduler.h"

namespace troupe::service {

void Scheduler::worker_lost(const std::string& why) {
  if (!health_.lose(why)) return;
  out_.worker = -1;
  // The step in flight is void; what ended meanwhile ends as it would have.
  in_step_.clear();
  (void)transfers_.step_done();
  transfers_ = KvTransfers();
  apply_deferred();
  std::vector<RequestKey> keys;
  for (const auto& [key, seqs] : requests_) keys.push_back(key);
  for (const RequestKey& key : keys) {
    auto it = requests_.find(key);
    if (it == requests_.end()) continue;
    const std::vector<uint64_t> seqs = it->second;
    // One stream moves as it is; n parallel samples share a prompt's pages and end.
    if (cfg_.failover && seqs.size() == 1 && !draining_ && planner_->find(seqs.front())) move(seqs.front());
    else fail(seqs.front(), wire::ErrorCode::unavailable, "the worker running it was lost (" + why + "); retry");
  }
  // A worker comes back empty: every page this side accounted is gone.
  forget_.clear();
  swapped_ = SwapLedger(cfg_.swap_bytes);
  fresh_pages();
  account();
  push_figures();
}

void Scheduler::probed(const std::string& result) {
  if (phase_ != Phase::ready) return;  // a step or a swap is out: its own result tells
  const auto* res = messages::check_step_result(result);
  if (std::string why = health_.probe(res); !why.empty()) {
    if (res && res->draining() && !health_.down() && cfg_.failover) release_due_ = true;
    return worker_lost(why);  // lost before: only its reason is the latest
  }
  if (health_.down()) {
    health_.back(res->instance());
    worker_draining_ = false;
    out_.worker = 1;
    push_figures();
  }
}

// A worker that drains is told apart from one that died: its KV is intact,
// so the session pages that finished turns owe the store go out with one
// more step before its requests move. With no other worker to move to
// (no failover), its requests finish there while its drain time lasts.
void Scheduler::worker_drains() {
  if (health_.down() || !cfg_.failover) return;
  if (!worker_draining_) {
    worker_draining_ = true;
    out_.worker = -1;  // nothing new is placed there
  }
  if (transfers_.spills_pending()) return;
  release_due_ = true;
  worker_lost("worker " + cfg_.worker_name + " is shutting down");
}

messages::Bytes Scheduler::probe_plan() {
  if (!std::exchange(release_due_, false)) return messages::step_plan(0, {}, {}, {}, cfg_.front);
  return messages::release_plan(cfg_.front);
}

// Failover: the request continues on another replica of this tier from its
// prompt and every token its client was sent; the tokens computed since
// the last step are the only work lost. Held tokens were never sent: the
// other replica writes (and holds) them again.
void Scheduler::move(uint64_t seq) {
  Sequence& s = sequences_.at(seq);
  AdmitRequest a = carry(seq, s, 0);
  a.moved_from = cfg_.replica;
  out_.escalations.push_back(std::move(a));
  ++counters_.moved_out;
  drop(seq, true);
}

ReplicaLoad Scheduler::load() const {
  ReplicaLoad l;
  l.total_pages = cfg_.kv_pages;
  l.free_pages = health_.down() ? 0 : planner_->free_pages();
  const int32_t running = planner_->running();
  l.waiting = std::max<int32_t>(static_cast<int32_t>(requests_.size()) - running, 0);
  l.step_ms = counters_.step_ms_avg;
  return l;
}

messages::WorkerStatsFields Scheduler::worker_stats() {
  return counters_.worker(cfg_.worker_name, cfg_.tier >= 0 ? cfg_.tier_name : std::string(), !health_.down(),
                          health_.losses(), planner_->stats());
}

messages::TierStatsFields Scheduler::tier_stats() { return counters_.tier(cfg_.tier_name, planner_->stats()); }

void Scheduler::push_figures() {
  if (!cfg_.metrics) return;
  if (cfg_.tier >= 0) cfg_.metrics->tier(cfg_.tier, std::max(cfg_.replica, 0), tier_stats());
  if (cfg_.replica >= 0) cfg_.metrics->worker(std::max(cfg_.tier, 0), cfg_.replica, worker_stats());
}

messages::StatsFields Scheduler::stats() {
  account();
  messages::StatsFields f = counters_.stats(planner_->stats());
  f.steps = step_;
  f.model = cfg_.model_name;
  f.draining = draining_;
  f.suffix_tree_bytes = static_cast<uint64_t>(speculation_.history().bytes());
  f.suffix_trees = static_cast<int32_t>(speculation_.history().scopes());
  f.suffix_tree_tokens = static_cast<uint64_t>(speculation_.history().tokens());
  if (cfg_.metrics) {
    f.speculation = cfg_.metrics->speculation_sources();
    if (const StoreState store = cfg_.metrics->store_state(); store.known && !store.writable) f.store_degraded = store.reason;
  }
  if (!cfg_.metrics) return f;
  // Cascade tiers: every tier's figures; requests counted across them all
  // (the pages above are this, the last, tier's).
  if (cfg_.tier >= 0) {
    push_figures();
    f.tiers = cfg_.metrics->tiers();
    f.escalation_classes = cfg_.metrics->escalation_classes();
    f.running = f.waiting = 0;
    for (const auto& t : f.tiers) f.running += t.running, f.waiting += t.waiting;
  }
  // Several workers: the pool and work figures are all of theirs together.
  if (cfg_.replica >= 0) {
    push_figures();
    f.workers = cfg_.metrics->workers();
    f.pages_total = f.pages_used = 0;
    f.steps = f.tokens_generated = 0;
    int32_t running = 0, waiting = 0;
    for (const auto& w : f.workers) {
      f.pages_total += w.pages_total, f.pages_used += w.pages_used;
      f.steps += w.steps, f.tokens_generated += w.tokens;
      running += w.running, waiting += w.waiting;
    }
    f.pages_free = f.pages_total - f.pages_used - f.pages_cached;
    if (cfg_.tier < 0) f.running = running, f.waiting = waiting;
  }
  return f;
}

}  // namespace troupe::service
