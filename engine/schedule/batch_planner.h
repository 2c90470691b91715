#pragma once
// Iteration-level continuous batching, as a plain class the scheduler actor
// drives: every step mixes one decode token for each running sequence with
// prefill chunks of new or partly prefilled ones, under a token budget
// (chunked prefill). Order is priority (interactive > chat > batch), then
// arrival; batch-priority work only fills what more important requests
// leave (at most PlannerLimits::batch_tokens_when_busy a step while any
// runs or waits). A sequence is admitted only when pages for its next chunk are
// free (after evicting unreferenced cached prefix pages); when a running
// sequence cannot get the page for its next token or the rest of its
// prompt, the lowest-priority,
// newest running sequence is preempted: its pages are released and it goes
// back to the queue to be recomputed later. Nothing blocks, nothing is lost.
//
// Fairness between tenants (client identities): within a priority, the
// queue and the step's budget go to the tenant that has been served least
// for its weight (start-time fair queueing over computed tokens; a tenant
// returning from idle starts at the least-served active one, so idle time
// is not banked). A tenant holding more than its weighted share of running
// slots or KV pages gives way — its newest sequence is preempted — to an
// equally important sequence of another tenant, if it still holds at least
// as much as that tenant afterwards, so a newcomer waits at most a step
// behind a flood, and a move is never undone by the reverse move (with many
// tenants each one's share is smaller than one request: a rule that let any
// tenant under its share take from any over it made two take turns for
// ever). Hard caps per tenant (queue, slots, pages as fractions of the
// whole) hold even with no one else around for the queue, and while another
// tenant is active for slots and pages.
//
// Use: add() requests; per step plan() → batch() → Backend::forward_choose
// → commit(sampled tokens); finish() or cancel() ends a sequence. Not
// thread-safe, and batch()'s spans point into the planner: the scheduler
// calls cancel()/finish() only between commit() and the next plan().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/batch.h"
#include "engine/kv_cache.h"
#include "engine/kv_eviction.h"
#include "engine/page_pool.h"
#include "engine/schedule/prefix_cache.h"

namespace troupe {

enum class Priority : uint8_t { interactive = 0, chat = 1, batch = 2 };

// A request's life: waiting (queued, or preempted back to the queue),
// running (admitted: holds pages, in every step), finished (removed).
enum class RequestState : uint8_t { waiting, running, finished };
const char* request_state_name(RequestState s);

struct PlannerLimits {
  int32_t token_budget = 256;  // tokens per step, decode and prefill together
  int32_t max_running = 64;    // sequences per step
  int32_t max_waiting = 1024;  // queued requests before add() says queue_full
  int32_t max_context = 4096;  // prompt + generated tokens of one sequence
  bool prefix_caching = true;
  // While an interactive or chat request runs or waits, batch-priority
  // sequences get at most this many tokens of a step (decode and prefill).
  // On a 2-core CPU each token of a step costs ~7 ms at small batches, so
  // the default, 2, adds at most ~14 ms to an interactive stream's token.
  int32_t batch_tokens_when_busy = 2;
  // With nothing more important in the system, batch work still takes at
  // most this many tokens a step: a request arriving meanwhile waits for at
  // most one such step (~0.15 s here at 64) before it runs.
  int32_t batch_tokens_when_idle = 64;
  // Per tenant: the most of max_waiting it may have queued, and of
  // max_running and of the KV pages it may hold while another tenant is
  // active (fractions, 0 < share <= 1).
  double tenant_queue_share = 0.5;
  double tenant_slot_share = 1.0;
  double tenant_page_share = 1.0;
  // Sliding-window models whose pool has local slots (engine/page_pool.h):
  // the window in positions. After every step the planner gives back the
  // local slots no running sequence's window and no cached prefix's end
  // reaches, and a cached prefix is used only as far as its end's window
  // still has them. 0: no local slots to manage.
  int32_t window = 0;
  // KV eviction (engine/kv_eviction.h): a sequence about to decode past
  // eviction.budget slots is cut to eviction.keep() first (PlannedEviction).
  // Off by default; not with a window.
  EvictionPolicy eviction;
};

// A client identity, as the caller numbers them (0: anyone unnamed).
using TenantId = uint32_t;

struct PlannedSequence {
  uint64_t id = 0;
  Priority priority = Priority::interactive;
  TenantId tenant = 0;
  uint64_t arrival = 0;
  std::vector<int32_t> tokens;  // prompt, then every sampled token
  int32_t prompt_tokens = 0;
  int32_t max_new_tokens = 0;
  int32_t computed = 0;         // positions whose K/V are computed (some may be evicted since)
  int32_t evicted = 0;          // positions gone from its KV: position p is in slot p - evicted
  int32_t cached_prompt_tokens = 0;  // served from the prefix cache at (last) admission
  int32_t preemptions = 0;
  int32_t registered_pages = 0;  // full pages already offered to the prefix cache
  int32_t kv_budget = 0;         // its own KV budget (set_kv_budget); 0: PlannerLimits::eviction's
  RequestState state = RequestState::waiting;
  std::vector<int32_t> drafts;  // proposed for the next step (set_drafts), consumed by plan()
  std::vector<int32_t> window;  // a planned draft window: [last token, drafts...]
  KvSequence kv;
  PlannedSequence(PagePool& pool, int32_t page_size) : kv(pool, page_size) {}
  int32_t generated() const { return static_cast<int32_t>(tokens.size()) - prompt_tokens; }
  int32_t slots() const { return computed - evicted; }  // KV slots it holds computed
};

// A planned KV eviction (engine/kv_eviction.h KvEviction), run before the
// step's forward: `length` slots read through `src` (the sequence's pages
// until now, held until commit()), `keep` written to fresh pages `dst`,
// which the sequence holds from this step on.
struct PlannedEviction {
  uint64_t id = 0;
  std::vector<int32_t> src, dst;
  int32_t length = 0, keep = 0;
  int32_t rope_offset = 0;  // positions evicted before this one
};

struct PlannedSlice {
  uint64_t id;
  int32_t start;  // first position computed this step
  int32_t count;
  bool wants_token;  // the slice reaches the sequence's end: its next token is sampled
  int32_t drafts = 0;  // a verify window: the last token then `drafts` drafted ones (count = 1 + drafts)
};

struct PlannerStats {
  int32_t running = 0, waiting = 0;
  int32_t pages_total = 0, pages_used = 0, pages_cached = 0, pages_free = 0;
  int32_t local_pages_total = 0, local_pages_used = 0;  // local slots (sliding-window models), 0 without
  float live_token_fraction = 0;  // of the KV slots in pages sequences hold
  uint64_t preemptions = 0;
  uint64_t evictions = 0, positions_evicted = 0;  // KV evictions run, and the positions they dropped
};

// A sequence's computed full pages as it was preempted: a caller that can
// swap them out (before the next forward reuses them) and back in spares the
// recompute.
struct PreemptedPages {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // the full pages' tokens
  std::vector<int32_t> pages;
};

class BatchPlanner {
 public:
  BatchPlanner(PagePool& pool, int32_t page_size, PlannerLimits limits);
  ~BatchPlanner();

  // tenant_queue_full: that tenant's share of the queue is taken (others may still queue).
  enum class AddResult { accepted, queue_full, tenant_queue_full, too_long, duplicate };
  // `weight`: the tenant's weight in the fair shares (at least 1; the
  // latest request's weight is the tenant's).
  AddResult add(uint64_t id, Priority priority, std::vector<int32_t> prompt, int32_t max_new_tokens,
                TenantId tenant = 0, uint32_t weight = 1);
  bool cancel(uint64_t id);  // false for an unknown id
  // A new running sequence `child` sharing `parent`'s first at + 1 tokens
  // and the pages holding them (reference counts, no copy). Its next slice
  // recomputes position `at` (so it samples its own next token); the page
  // it writes there is copied first if still shared (copy-on-write). For
  // parallel samples: at = prompt length - 1. False if the parent is not
  // running with positions [0, at) computed.
  bool fork(uint64_t parent, uint64_t child, int32_t at);
  void finish(uint64_t id);  // the caller decided it is done (end token, stop string, length)

  // The next step (empty when nothing can run). Valid until commit().
  const std::vector<PlannedSlice>& plan();
  // The step as the engine's Batch: spans into the sequences' tokens and tables.
  Batch batch() const;
  // The slices of the step planned last (until commit()).
  const std::vector<PlannedSlice>& planned() const { return slices_; }
  // Page copies the step needs before its forward (copy-on-write of shared pages).
  std::span<const PageCopy> copies() const { return copies_; }
  // KV evictions the step runs before its forward (PlannerLimits::eviction).
  std::span<const PlannedEviction> evictions() const { return evictions_; }
  // One sampled token per slice that wants one, in slice order.
  void commit(std::span<const int32_t> sampled);
  // Per slice that wants tokens, in slice order: the drafts the verifier
  // accepted (a prefix of the window's), then its own next token. Positions
  // of rejected drafts are rolled back by truncating the sequence's pages.
  void commit(std::span<const std::vector<int32_t>> kept);

  // Drafted tokens to verify after a running sequence's last token in the
  // next plan(), in the budget prompts leave and in pages free (fewer, or
  // none, otherwise).
  void set_drafts(uint64_t id, std::vector<int32_t> drafts);
  // What the next plan() will hold before any window, and the budget left
  // for windows: an estimate for pricing drafts, made before plan() (waiting
  // prompts counted as admitted while slots are free, pages or not, so it
  // errs toward less room).
  struct WindowRoom {
    int32_t step_tokens = 0;  // decode tokens and prompt chunks
    int32_t sequences = 0;    // sequences with a slice (all wait for the step)
    int32_t tokens = 0, batch_tokens = 0;  // left for windows: any sequence's, batch work's
    int32_t of(Priority p) const { return p == Priority::batch ? std::min(tokens, batch_tokens) : tokens; }
    void spend(Priority p, int32_t n) {
      tokens -= n;
      if (p == Priority::batch) batch_tokens -= n;
    }
  };
  WindowRoom window_room() const;
  // A sequence's own KV budget in positions, over PlannerLimits::eviction's (0: that one).
  void set_kv_budget(uint64_t id, int32_t budget);
  // The eviction policy a sequence runs under (off: no budget).
  EvictionPolicy eviction_of(const PlannedSequence& s) const {
    EvictionPolicy p = limits_.eviction;
    if (s.kv_budget > 0) p.budget = s.kv_budget;
    return p;
  }
  // Tokens decided without a forward (a grammar's jump-forward), appended
  // after the sampled one: the next step computes them as one chunk.
  void extend(uint64_t id, std::span<const int32_t> tokens);

  // Sequences the last plan() preempted (their pages now free or cached).
  std::vector<PreemptedPages> take_preempted() { return std::exchange(preempted_, {}); }
  int32_t free_pages() const { return pool_.free_count(); }

  // Cold-tier restore: see PrefixCache::adopt. Empty when prefix caching is off.
  std::vector<std::pair<int32_t, int32_t>> adopt_prefix(std::span<const int32_t> tokens, int32_t n_pages,
                                                        int32_t local_from = 0);
  // An idle prefix's cached pages go back to the pool (PrefixCache::drop).
  int32_t drop_prefix(std::span<const int32_t> tokens);
  // The cached pages of `tokens`' longest cached prefix (at most max_pages),
  // held for the caller until release_pages(): a context shift reads them.
  std::vector<int32_t> retain_prefix(std::span<const int32_t> tokens, size_t max_pages);
  void release_pages(std::span<const int32_t> pages);
  // Cached pages whose local rows a pending context shift reads: kept
  // through the settling of steps until release_local (no-ops without a window).
  void hold_local(std::span<const int32_t> pages);
  void release_local(std::span<const int32_t> pages);

  const PlannedSequence* find(uint64_t id) const;
  PlannerStats stats() const;
  int32_t running() const;  // sequences running (cheaper than stats())
  int32_t queue_position(uint64_t id) const;  // requests ahead in the queue, or -1
  // Requests of `tenant` waiting and running, and the pages they hold.
  struct TenantLoad {
    int32_t waiting = 0, running = 0, pages = 0;
  };
  TenantLoad tenant_load(TenantId tenant) const;
  bool idle() const { return seqs_.empty(); }

 private:
  PlannedSequence* get(uint64_t id);
  bool windowed() const { return limits_.window > 0 && pool_.local_capacity() > 0; }
  // Gives back the local slots nothing reaches any more (see PlannerLimits::window).
  void settle_local();
  // Whether the pages of `table` a query at `next` reads through its window all hold local rows.
  bool window_intact(std::span<const int32_t> table, int32_t next) const;
  // The last page of that window without local rows, or -1.
  int64_t missing_local(std::span<const int32_t> table, int32_t next) const;
  struct StepBudget;
  struct PrefillRound;
  void plan_once(bool admit_waiting);
  StepBudget step_budget() const;
  void plan_decodes(StepBudget& budget);
  void plan_windows(StepBudget& budget);
  PrefillRound prefill_round(bool admit_waiting);
  bool yields(const PlannedSequence& s, const PrefillRound& round, const StepBudget& budget) const;
  void prefill(PlannedSequence& s, StepBudget& budget, PrefillRound& round);
  bool continue_prefill(PlannedSequence& s, StepBudget& budget, PrefillRound& round);
  bool admit_prefill(PlannedSequence& s, StepBudget& budget, PrefillRound& round);
  void refund(StepBudget& budget);  // the budget of slices a preemption removed, back
  double weighted_load(TenantId t) const;  // its sequences over its weight
  // A share of a whole, at least one.
  static int32_t share_of(int32_t whole, double share) {
    return std::max<int32_t>(1, static_cast<int32_t>(std::ceil(static_cast<double>(whole) * share)));
  }
  bool reserve(PlannedSequence& s, int32_t n_tokens);  // pages for positions [0, n_tokens), evicted ones aside
  // Cuts `s` to the eviction policy's keep() before a step that takes its
  // slots past the budget (false: no pages for the kept rows now; it goes on uncut).
  bool plan_eviction(PlannedSequence& s, int32_t incoming);
  void release_retired();  // the pages evictions read, once their step is over
  bool unshare_for_write(PlannedSequence& s, int32_t start);
  void admit(PlannedSequence& s);
  // Preempts one sequence that gives way to `keep`, which asks for pages up to position `until`.
  bool preempt_one(const PlannedSequence& keep, int32_t until);
  void preempt(PlannedSequence& victim);
  void release(PlannedSequence& s, bool preempted = false);
  std::vector<PlannedSequence*> by_priority(RequestState state);
  // Waiting and running-with-prefill-left sequences in fair order.
  std::vector<PlannedSequence*> prefill_order();

  // Fair-share bookkeeping, per active tenant (one with a sequence).
  struct Tenant {
    uint32_t weight = 1;
    double served = 0;  // computed tokens / weight: the virtual time
    int32_t sequences = 0;
  };
  Tenant& tenant(TenantId t);  // created when it has none
  void tenant_done(TenantId t);
  double weight_share(TenantId t) const;  // its weight over all active tenants' weights
  // Its tenant holds more slots or pages than its share; with `until` >= 0,
  // counting `s` as running with pages up to that position (as it asks).
  bool over_share(const PlannedSequence& s, int32_t until = -1) const;
  bool fair_page_move(const PlannedSequence& victim, const PlannedSequence& keep, int32_t until) const;
  bool fair_slot_move(const PlannedSequence& victim, const PlannedSequence& keep) const;
  PlannedSequence* slot_victim(const PlannedSequence& s);
  bool fair_victim_exists(const PlannedSequence& s, int32_t until) const;
  bool other_tenant_active(TenantId t) const { return tenants_.size() > 1 || (tenants_.size() == 1 && !tenants_.count(t)); }
  int32_t tenant_pages(TenantId t) const;
  // The pages of `s`'s tenant were `s` to hold pages up to position `until`.
  int32_t tenant_pages_with(const PlannedSequence& s, int32_t until) const;
  int32_t tenant_running(TenantId t) const;

  PagePool& pool_;
  int32_t page_size_;
  PlannerLimits limits_;
  PrefixCache cache_;
  std::map<uint64_t, std::unique_ptr<PlannedSequence>> seqs_;
  uint64_t arrivals_ = 0;
  uint64_t preemptions_ = 0;
  uint64_t evictions_run_ = 0, positions_evicted_ = 0;
  std::vector<PlannedSlice> slices_;
  std::vector<PageCopy> copies_;
  std::vector<PlannedEviction> evictions_;
  std::vector<int32_t> retired_;  // pages an eviction of the step in flight reads, one reference each
  int32_t refund_ = 0;  // budget of slices removed by preemption while planning
  std::vector<PreemptedPages> preempted_;
  std::map<TenantId, Tenant> tenants_;
  std::vector<uint8_t> needed_local_;  // settle_local's marks, per page
};

}  // namespace troupe
