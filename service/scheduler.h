#pragma once
// The scheduler's decisions, with no actor in sight: the requests'
// lifecycle, continuous batching (engine/schedule/batch_planner.h, which
// also accounts the KV pages of every step), speculation per sequence, and
// what each step's result means for every stream. Its actor only receives,
// calls and sends (actors/scheduler_actor.cpp):
//
//   admit / cancel / gone      a request arrives, is cancelled, its client is gone
//   next_step()                → a DraftPlan (the draft model first) or a StepPlan
//   apply_drafts(result)       the draft model's answer; next_step() then sends the step
//   apply(result)              the step's result: tokens stream, requests end
//   take_outbound()            → everything the calls above want sent, in order
//
// One plan is out at a time. Cancels that arrive meanwhile are applied when
// it returns, so a step's pages never change under the engine. A result that
// does not answer its step (wrong step, unknown sequences, tokens outside the
// vocabulary) ends that step's requests with the reason; others go on.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/schedule/batch_planner.h"
#include "engine/tokenizer.h"
#include "service/admit_request.h"
#include "service/cascade.h"
#include "service/kv_transfers.h"
#include "service/metrics.h"
#include "service/outbound.h"
#include "service/placement.h"
#include "service/recent_requests.h"
#include "service/response_stream.h"
#include "service/scheduled_sequence.h"
#include "service/scheduler_counters.h"
#include "service/speculation_planner.h"
#include "service/worker_health.h"

namespace troupe::service {

struct SliceOutcome;

struct SchedulerConfig {
  std::shared_ptr<const Tokenizer> tokenizer;
  int32_t kv_pages = 0;  // the verifier's KV capacity; the scheduler allocates its pages
  int32_t page_size = 16;
  // A sliding-window model's local slots on the verifier (engine/page_pool.h),
  // assigned by this scheduler's pool and sent with each step; 0: none.
  // planner.window is then the model's `sliding_window` (set here).
  int32_t kv_local_pages = 0;
  int32_t sliding_window = 0;
  PlannerLimits planner;
  std::string model_name;
  bool draft_model = false;     // a draft model proposes drafts (speculation draft and auto)
  int64_t suffix_memory = int64_t{256} << 20;  // suffix speculation's history (--suffix-memory); 0: none
  bool commit_sessions = true;  // session turns go to the store before their Done
  bool jump_forward = true;     // constrained requests: the worker appends tokens their grammar forces
  // KV tiers: the verifier can export and import pages (spill and restore).
  bool kv_transfer = false;
  int64_t page_bytes = 0;   // one spilled page (engine/kv_page_codec.h)
  uint8_t spill_codec = 0;  // its KvPageCodec
  // Preempted sequences' pages swap out to host memory (lossless) up to
  // this many bytes; beyond it they are recomputed. 0: always recompute.
  int64_t swap_bytes = int64_t{1} << 30;
  bool kv_shift = false;  // the verifier moves KV between positions (context shifts)
  bool kv_evict = false;  // the verifier cuts KV to a budget (a request's kv_budget)
  // Cascade tiers (service/cascade.h): this scheduler's tier (-1: the server
  // has none), its model's name, whether a larger tier follows (escalate
  // hands requests to it), and whether session pages are this tier's to
  // spill and restore (the store keeps one model's: the last tier's).
  int32_t tier = -1;
  std::string tier_name;
  bool next_tier = false;
  bool session_spill = true;
  // Data-parallel workers (service/placement.h): this scheduler's replica
  // among its tier's workers (-1: the only one), and whether a lost
  // worker's requests move to another replica (true) or end (false).
  int32_t replica = -1;
  bool failover = false;
  std::string worker_name;  // its worker's endpoint, for messages and stats
  // This front end's random id, in every StepPlan: a worker shared by several
  // front ends keeps each one's pages and sequences apart (StepPlan.front).
  uint64_t front = 0;
  std::function<int64_t()> clock;  // steady nanoseconds; empty: the steady clock
  std::shared_ptr<ServiceMetrics> metrics;  // null: none recorded
};

struct SchedulerPlan {
  enum class Kind : uint8_t { none, drafts, step };
  Kind kind = Kind::none;
  messages::Bytes bytes;  // the DraftPlan (drafts) or StepPlan (step)
  // A DraftPlan naming only sequences the draft model may drop: send it, no
  // answer is awaited. Empty: none.
  messages::Bytes draft_forget;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void admit(AdmitRequest request);
  void cancel(const std::string& peer, uint64_t request_id, uint64_t target);
  void gone(const std::string& peer);
  // Graceful drain (SIGTERM): admit nothing new; running requests go on.
  void drain() { draining_ = true; }
  // The drain's time is up: clients' requests end with shutting_down, the
  // server's own (job items, resumed after a restart) end unsaid.
  void stop_all();
  size_t live_requests() const { return requests_.size(); }

  // kind none: nothing to send now (idle, or a plan or a swap-in is out).
  SchedulerPlan next_step();
  void apply_drafts(const std::string& result, const std::string& error);
  void apply(const std::string& result, const std::string& error);  // error: no result came
  // A swap-in asked for by Outbound::swap_fetches (no data: recompute).
  void swap_arrived(SwappedPages pages);
  // The allocator found a session idle: its cached pages go back to the pool
  // unless a turn of it is live again.
  void drop_idle_session(const std::string& session_id, const std::vector<int32_t>& tokens);
  void set_draft_round_ms(double ms) { speculation_.set_round_ms(ms); }
  // The worker behind the verifier was lost (its connection dropped, it did
  // not answer, or it came back as a new process): its requests move to
  // another replica (failover) or end with `unavailable`, and this side
  // forgets every page: a worker comes back empty. Until it answers a probe,
  // nothing is stepped and new requests go elsewhere (or are refused).
  void worker_lost(const std::string& why);
  // A heartbeat's answer (the worker's reply to an empty StepPlan, or the
  // link's worker_lost result): notices a loss, or a lost worker that is back.
  void probed(const std::string& result);
  bool worker_down() const { return health_.down(); }
  // What a heartbeat sends the worker: an empty StepPlan, or the release of
  // a draining worker whose requests all moved away (once).
  messages::Bytes probe_plan();
  ReplicaLoad load() const;
  messages::WorkerStatsFields worker_stats();

  // Everything but pages_spilled, which the allocator counts as the store confirms.
  messages::StatsFields stats();
  messages::TierStatsFields tier_stats();
  Outbound take_outbound() { return std::exchange(out_, {}); }
  bool plan_out() const { return phase_ == Phase::drafting || phase_ == Phase::stepping; }

 private:
  enum class Phase : uint8_t { ready, drafting, drafted, stepping, fetching };
  enum class Built : uint8_t { step, nothing, retry };
  using Sequence = ScheduledSequence;
  using RequestKey = std::pair<std::string, uint64_t>;  // (peer, client request id)

  int64_t now() const { return cfg_.clock(); }
  void refuse(const AdmitRequest& a, wire::ErrorCode code, const std::string& message);
  void restore(std::span<const int32_t> prompt, std::vector<std::string>& data);
  void plan_reuse(std::span<const int32_t> history, std::span<const int32_t> prompt, const KvReuse& reuse);
  bool fetch_swap_in();
  Built build_step(SchedulerPlan& plan);
  std::vector<messages::SliceSpec> slice_specs(const std::vector<PlannedSlice>& slices, const Batch& batch);
  std::vector<PreemptedPages> swaps_for_step();
  bool prepare_step(SchedulerPlan& plan);
  void take_tokens(const wire::step::StepResult& result);
  void take_slice(const SliceOutcome& outcome, int32_t window_drafts);
  void take_swapped(SwappedPages pages);
  void deliver(uint64_t seq, int32_t token, float logprob, std::span<const int32_t> top_ids = {},
               std::span<const float> top_logprobs = {});
  void fork_samples(uint64_t seq);
  void end(uint64_t seq, wire::FinishReason reason, bool tell);
  void tell_done(uint64_t seq, Sequence& s, wire::FinishReason reason);
  void commit_turn(uint64_t seq, Sequence& s, messages::DoneFields done);
  void end_or_defer(uint64_t seq, bool tell);
  void apply_deferred();
  void fail(uint64_t seq, wire::ErrorCode code, const std::string& message);
  void fail_step(const std::string& message);
  void drop(uint64_t seq, bool moved = false);
  void escalate(uint64_t seq, int32_t unsent);
  void release_held(Sequence& s, int64_t t);
  bool ends_after_step(uint64_t seq) const;  // a cancel or a gone client waits for the step out
  AdmitRequest carry(uint64_t seq, Sequence& s, int32_t unsent);
  bool admit_cancelled(AdmitRequest& a);
  bool refuse_unplaceable(AdmitRequest& a);
  bool add_to_planner(AdmitRequest& a, uint64_t seq, const std::string& tenant);
  Sequence make_sequence(AdmitRequest& a, uint64_t seq, std::string tenant, std::vector<std::string> foreign_pages);
  void move(uint64_t seq);  // failover: to another replica of this tier
  void push_figures();
  void ended(const std::string& peer, uint64_t client_id, RouteOutcome outcome = {});
  void release_session(const std::string& session_id);
  TenantId tenant_id(const std::string& tenant);
  void release_tenant(const std::string& tenant);
  void account() { counters_.account(!planner_->idle(), now()); }
  void fresh_pages();

  SchedulerConfig cfg_;
  // Owned through pointers: a worker that comes back after it was lost
  // comes back empty, and so do they (fresh_pages()).
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<BatchPlanner> planner_;
  SpeculationPlanner speculation_;
  KvTransfers transfers_;
  SwapLedger swapped_;
  std::unordered_map<uint64_t, Sequence> sequences_;        // by sequence id
  std::map<RequestKey, std::vector<uint64_t>> requests_;  // a request's sequences: one, or one per sample
  // Cancels that overtook their request (control frames skip queued prompts,
  // service/intake.h), so the request ends at once on arrival; requests
  // handed to the next tier, so later cancels follow them.
  RecentRequests early_cancels_, escalated_;
  // Fair-share tenants by name, numbered for the planner while they have requests.
  struct TenantSlot {
    TenantId id = 0;
    int32_t requests = 0;
  };
  std::unordered_map<std::string, TenantSlot> tenants_;
  TenantId next_tenant_ = 1;
  Outbound out_;
  Phase phase_ = Phase::ready;
  uint64_t next_seq_ = 1;
  uint64_t step_ = 0;
  bool step_has_slices_ = false;
  std::vector<uint64_t> in_step_;                     // sequences of the step in flight
  std::vector<uint64_t> forget_;                      // ended sequences the verifier may drop
  std::vector<std::pair<uint64_t, bool>> deferred_;  // (sequence, tell the client) ended while a plan was out
  SchedulerCounters counters_;
  bool draining_ = false;
  WorkerHealth health_;
  // The worker is shutting down (StepResult.draining): nothing new goes
  // there, and once the session pages it owes the store are out, its
  // requests move away and it is released.
  bool worker_draining_ = false, release_due_ = false;
  void worker_drains();
};

}  // namespace troupe::service
