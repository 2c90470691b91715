#include "service/scheduler.h"

#include <algorithm>
#include <stdexcept>

#include "service/clock.h"
#include "service/hand_off.h"

namespace troupe::service {
namespace {

SchedulerConfig checked(SchedulerConfig c) {
  if (!c.clock) c.clock = steady_ns;
  // A sequence can never hold more KV than the whole cache: admitting one
  // that could would stall it mid-prefill.
  c.planner.max_context = static_cast<int32_t>(std::min<int64_t>(c.planner.max_context, int64_t{c.kv_pages} * c.page_size));
  c.planner.window = c.kv_local_pages > 0 ? c.sliding_window : 0;
  c.planner.eviction.check();
  if (c.planner.eviction.on() && c.sliding_window > 0)
    throw std::invalid_argument("--kv-budget: KV eviction does not run on sliding-window models (their windows count slots)");
  if (c.planner.window > 0) {
    // One sequence's window and its step's chunk must fit the verifier's
    // local slots (sized by its own --max-running and a 256-token step), or
    // a long prefill waits for slots that never come: the chunk shrinks.
    const int32_t ps = c.page_size, w = c.planner.window;
    const int32_t fits = (std::min(c.kv_local_pages, c.kv_pages) - 2) * ps - w - 3 * ps + 1;
    if (fits < ps) throw std::invalid_argument("the verifier's " + std::to_string(c.kv_local_pages) +
                                               " local KV pages cannot hold one " + std::to_string(w) + "-token window");
    c.planner.token_budget = std::min(c.planner.token_budget, fits);
  }
  return c;
}

// The pool this side allocates from; with local slots, their changes go to
// the verifier with each step (its pool mirrors them).
std::unique_ptr<PagePool> make_pool(const SchedulerConfig& c) {
  auto pool = std::make_unique<PagePool>(c.kv_pages, std::min(c.kv_local_pages, c.kv_pages));
  if (pool->local_capacity() > 0) pool->record_local_changes(true);
  return pool;
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config)
    : cfg_(checked(std::move(config))),
      pool_(make_pool(cfg_)),
      planner_(std::make_unique<BatchPlanner>(*pool_, cfg_.page_size, cfg_.planner)),
      speculation_(cfg_.draft_model, SuffixLimits{.max_bytes = cfg_.suffix_memory}),
      swapped_(cfg_.swap_bytes),
      health_(WorkerShape{cfg_.worker_name, cfg_.kv_pages, cfg_.page_size, cfg_.kv_local_pages}) {
  push_figures();  // every tier and worker is in the stats from the start
}

// A worker that comes back after it was lost comes back empty: so do the
// pool and the planner that account its pages.
void Scheduler::fresh_pages() {
  planner_.reset();
  pool_ = make_pool(cfg_);
  planner_ = std::make_unique<BatchPlanner>(*pool_, cfg_.page_size, cfg_.planner);
}

Scheduler::~Scheduler() = default;

void Scheduler::refuse(const AdmitRequest& a, wire::ErrorCode code, const std::string& message) {
  if (cfg_.metrics) cfg_.metrics->request_done(wire::EnumNameErrorCode(code), 0, 0, 0);
  out_.replies.push_back({a.peer, a.client_id, messages::error_response(a.client_id, code, message)});
  release_session(a.session_id);
  // A duplicate id names a request that runs: the router's record of it stays.
  if (code != wire::ErrorCode::duplicate_id) ended(a.peer, a.client_id);
}

void Scheduler::ended(const std::string& peer, uint64_t client_id, RouteOutcome outcome) {
  // A router stands in front (tiers, or several workers): it forgets the request.
  if (cfg_.tier >= 0 || cfg_.replica >= 0) out_.ended.push_back({peer, client_id, outcome});
}

void Scheduler::admit(AdmitRequest a) {
  if (admit_cancelled(a) || refuse_unplaceable(a)) return;
  const RequestKey key{a.peer, a.client_id};
  if (requests_.count(key))
    return refuse(a, wire::ErrorCode::duplicate_id,
                  "request id " + std::to_string(a.client_id) + " is already running on this connection");
  const uint64_t seq = next_seq_++;
  const auto prompt_tokens = static_cast<int32_t>(a.prompt.size());
  if (!a.session_id.empty()) out_.active_sessions.push_back(a.session_id);
  // Another tier's pages do not fit this one: they wait for the tier they
  // belong to, should the request escalate there. Pages of a shifted history
  // (restore_tokens) hold other positions than the prompt's: those are dropped.
  std::vector<std::string> foreign_pages;
  if (!cfg_.session_spill) {
    foreign_pages = std::exchange(a.restore_pages, {});
    if (!a.restore_tokens.empty()) foreign_pages.clear();
  }
  restore(a.restore_tokens.empty() ? a.prompt : a.restore_tokens, a.restore_pages);
  plan_reuse(a.restore_tokens.empty() ? a.prompt : a.restore_tokens, a.prompt, a.reuse);
  std::string tenant = a.tenant.empty() ? a.peer : a.tenant;
  if (!add_to_planner(a, seq, tenant)) return;
  Sequence s = make_sequence(a, seq, std::move(tenant), std::move(foreign_pages));
  if (!a.carried)
    s.stream.send(messages::accepted_response(a.client_id, prompt_tokens, planner_->queue_position(seq), a.tool_seed), out_);
  requests_.emplace(key, std::vector<uint64_t>{seq});
  sequences_.emplace(seq, std::move(s));
  account();
  push_figures();
}

// A cancel that overtook its request: the request ends as it arrives.
bool Scheduler::admit_cancelled(AdmitRequest& a) {
  if (!early_cancels_.take_fresh({a.peer, a.client_id}, now())) return false;
  messages::DoneFields d;
  d.reason = wire::FinishReason::cancelled;
  d.prompt_tokens = static_cast<int32_t>(a.prompt.size());
  if (cfg_.metrics) cfg_.metrics->request_done("cancelled", 0, 0, 0);
  out_.replies.push_back({a.peer, a.client_id, messages::done_response(a.client_id, d)});
  ended(a.peer, a.client_id);
  release_session(a.session_id);
  return true;
}

// Nothing runs here while the server drains or the worker is down: the
// request is refused, or goes to another replica (failover).
bool Scheduler::refuse_unplaceable(AdmitRequest& a) {
  if (draining_) {
    refuse(a, wire::ErrorCode::shutting_down, "the server is draining: retry on another or after it restarts");
  } else if (a.unplaced) {
    refuse(a, wire::ErrorCode::unavailable,
           "no worker is up to run it (lost workers are probed until they answer); retry shortly");
  } else if (health_.down() && cfg_.failover) {
    // Placed here before the router heard of the loss: it goes elsewhere,
    // counted as moved out, as the replica that continues it counts it
    // moved in (once: a request already moved off another worker stays
    // that one's).
    if (a.moved_from < 0) ++counters_.moved_out;
    a.moved_from = cfg_.replica;
    out_.escalations.push_back(std::move(a));
    // The stats may be answered by another replica's scheduler: it reads
    // this one's last pushed figures, so the count goes out now.
    push_figures();
  } else if (health_.down()) {
    refuse(a, wire::ErrorCode::unavailable, "the worker is not answering (" + health_.reason() + "); retry shortly");
  } else {
    return false;
  }
  return true;
}

// False: the planner refused it (the request is refused with why).
bool Scheduler::add_to_planner(AdmitRequest& a, uint64_t seq, const std::string& tenant) {
  if (a.sampling.kv_budget > 0 && (!cfg_.kv_evict || cfg_.sliding_window > 0)) {
    refuse(a, wire::ErrorCode::invalid_field,
           "Sampling.kv_budget: this server's engine cannot evict KV (it needs the CPU backend and a model without "
           "sliding-window layers)");
    return false;
  }
  const TenantId tid = tenant_id(tenant);
  const auto added = planner_->add(seq, a.priority, std::move(a.prompt), a.sampling.max_tokens, tid, a.weight);
  if (added == BatchPlanner::AddResult::accepted) planner_->set_kv_budget(seq, a.sampling.kv_budget);
  if (added != BatchPlanner::AddResult::accepted) release_tenant(tenant);
  switch (added) {
    case BatchPlanner::AddResult::queue_full:
      refuse(a, wire::ErrorCode::queue_full,
             "the queue is full (" + std::to_string(cfg_.planner.max_waiting) + " waiting); try again later");
      return false;
    case BatchPlanner::AddResult::tenant_queue_full:
      refuse(a, wire::ErrorCode::queue_full,
             "this client has its share of the queue waiting (" + std::to_string(planner_->tenant_load(tid).waiting) +
                 " requests); try again when some have run");
      return false;
    case BatchPlanner::AddResult::too_long:
    case BatchPlanner::AddResult::duplicate:
      refuse(a, wire::ErrorCode::too_long, "the prompt does not fit the context");
      return false;
    case BatchPlanner::AddResult::accepted: return true;
  }
  return false;
}

// The admitted request's sequence: a fresh stream, or the one a hand-off
// carried here (service/hand_off.h).
Scheduler::Sequence Scheduler::make_sequence(AdmitRequest& a, uint64_t seq, std::string tenant,
                                             std::vector<std::string> foreign_pages) {
  const bool carried = static_cast<bool>(a.carried);
  Sequence s{carried ? ResponseStream(*a.carried)
                     : ResponseStream(*cfg_.tokenizer, {a.peer, a.client_id, 0}, a.sampling, a.logprobs, a.ignore_eos,
                                      !a.session_id.empty(), a.accepted_ns),
             std::move(a.sampling)};
  if (cfg_.tier >= 0) s.stream.begin_segment(cfg_.tier_name);
  if (a.tool_format && !carried) s.stream.read_tool_calls(*a.tool_format, a.tool_seed);
  if (!carried) s.stream.report_top(a.top_logprobs);
  ++(a.moved_from >= 0 ? counters_.moved_in : carried ? counters_.escalated_in : counters_.requests_in);
  s.route = a.route;
  s.route.confidence = -1.0f;  // judged here afresh, if at all
  if (a.route.kind == RouteKind::escalate && cfg_.next_tier && a.samples == 1) {
    s.watch.emplace(a.route.threshold, a.route.window, a.route.within, a.route.hold, a.route.signal);
    s.watch->sent_before(s.stream.completion());
  }
  s.weight = a.weight;
  s.priority = a.priority;
  s.first_prompt_tokens = carried ? a.first_prompt_tokens : -1;
  s.session_escalations = a.session_escalations;
  s.restore_pages = std::move(foreign_pages);
  s.forks_pending = a.samples - 1;
  s.session_id = std::move(a.session_id);
  s.turn_messages = std::move(a.turn_messages);
  s.pinned_messages = std::move(a.pinned_messages);
  s.persisted_pages = a.persisted_pages;
  s.window_first_turn = a.window_first_turn;
  s.tenant = std::move(tenant);
  s.cache = a.response_cache;
  s.cache_key = std::move(a.response_cache_key);
  if (!s.cache_key.empty()) s.stream.record();
  if (a.speculation != SpeculationMode::off && a.samples == 1) {
    const PlannedSequence* planned = planner_->find(seq);  // holds the prompt (a's was moved there)
    std::string scope = suffix_scope(s.session_id, job_of_peer(a.peer));
    if (!a.suffix_seed.empty()) speculation_.seed(scope, a.suffix_seed);
    speculation_.add(seq, a.speculation, a.max_draft, s.sampling, std::move(scope),
                     planned ? static_cast<int32_t>(planned->tokens.size()) : 0);
  }
  return s;
}

void Scheduler::cancel(const std::string& peer, uint64_t request_id, uint64_t target) {
  auto it = requests_.find({peer, target});
  if (it == requests_.end()) {
    if (escalated_.contains({peer, target})) return out_.moved_cancels.push_back({peer, request_id, target});
    if (is_internal_peer(peer)) return;  // a job item that already ended
    // It may still be on its way (a prompt being tokenized): remembered for a while.
    early_cancels_.remember({peer, target}, now());
    out_.replies.push_back({peer, request_id,
                            messages::error_response(request_id, wire::ErrorCode::unknown_request,
                                                     "no running request " + std::to_string(target) + " on this connection")});
    return;
  }
  for (uint64_t seq : std::vector<uint64_t>(it->second)) end_or_defer(seq, true);
  account();
}

void Scheduler::gone(const std::string& peer) {
  std::vector<uint64_t> mine;
  for (const auto& [key, seqs] : requests_)
    if (key.first == peer) mine.insert(mine.end(), seqs.begin(), seqs.end());
  for (uint64_t seq : mine) end_or_defer(seq, false);
  account();
}

void Scheduler::stop_all() {
  std::vector<std::pair<RequestKey, std::vector<uint64_t>>> all(requests_.begin(), requests_.end());
  for (const auto& [key, seqs] : all) {
    if (!is_internal_peer(key.first)) {
      if (cfg_.metrics) cfg_.metrics->request_done("shutting_down", 0, 0, 0);
      out_.replies.push_back({key.first, key.second,
                              messages::error_response(key.second, wire::ErrorCode::shutting_down,
                                                       "the server drained before this request finished")});
    }
    for (uint64_t seq : seqs) end_or_defer(seq, false);
  }
  account();
}

void Scheduler::end_or_defer(uint64_t seq, bool tell) {
  if (plan_out()) deferred_.emplace_back(seq, tell);
  else end(seq, wire::FinishReason::cancelled, tell);
}

bool Scheduler::ends_after_step(uint64_t seq) const {
  return std::any_of(deferred_.begin(), deferred_.end(), [&](const auto& d) { return d.first == seq; });
}

void Scheduler::apply_deferred() {
  for (auto [seq, tell] : std::exchange(deferred_, {})) end(seq, wire::FinishReason::cancelled, tell);
}

// Ends a sequence between steps: its Done (unless the client is gone), its pages freed.
void Scheduler::end(uint64_t seq, wire::FinishReason reason, bool tell) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  it->second.unhold();  // held tokens never reached the client: its Done does not count them
  if (tell) tell_done(seq, it->second, reason);
  else if (cfg_.metrics) cfg_.metrics->request_done("client_gone", 0, 0, 0);
  release_session(it->second.session_id);
  drop(seq);
}

void Scheduler::tell_done(uint64_t seq, Sequence& s, wire::FinishReason reason) {
  s.stream.flush(reason, out_);
  // Samples of an n > 1 request that were never forked end with it.
  for (int32_t i = 1; i <= s.forks_pending; ++i) {
    messages::DoneFields unforked;
    unforked.reason = reason == wire::FinishReason::cancelled ? reason : wire::FinishReason::stop;
    unforked.sample = i;
    s.stream.send(messages::done_response(s.stream.target().client_id, unforked), out_);
  }
  const PlannedSequence* p = planner_->find(seq);
  // An escalated request's prompt is the one its client sent; the rest was its answer so far.
  const int32_t prompt = s.first_prompt_tokens >= 0 ? s.first_prompt_tokens : p ? p->prompt_tokens : 0;
  messages::DoneFields d = s.stream.done(reason, prompt, p ? std::min(p->cached_prompt_tokens, prompt) : 0,
                                         speculation_.stats(seq), now());
  d.response_cache = s.cache;
  // An answer that ended by itself is the request's: the response cache keeps it.
  if (!s.cache_key.empty() && (reason == wire::FinishReason::stop || reason == wire::FinishReason::length ||
                               reason == wire::FinishReason::stop_string))
    out_.cache_answers.push_back({std::move(s.cache_key),
                                  {s.stream.take_tokens(), s.stream.take_answer(), static_cast<uint8_t>(reason), d.prompt_tokens, 0}});
  if (cfg_.metrics) {
    cfg_.metrics->request_done(wire::EnumNameFinishReason(reason), d.prompt_tokens, d.cached_prompt_tokens,
                               d.completion_tokens);
    if (const SpeculationStats* spec = speculation_.stats(seq))
      for (size_t src = 0; src < spec->by_source.size(); ++src)
        if (spec->by_source[src].drafted > 0)
          cfg_.metrics->speculation(draft_source_name(static_cast<DraftSource>(src)), spec->by_source[src].drafted,
                                    spec->by_source[src].accepted, spec->by_source[src].windows);
  }
  if (!s.session_id.empty() && reason != wire::FinishReason::cancelled && cfg_.commit_sessions)
    commit_turn(seq, s, std::move(d));  // its Done is sent once the turn is durable
  else
    s.stream.send(messages::done_response(s.stream.target().client_id, d), out_);
}

// A finished session turn goes to the store; its computed full pages not yet
// stored are spilled by the next step, before anything can reuse them.
void Scheduler::commit_turn(uint64_t seq, Sequence& s, messages::DoneFields done) {
  persistence::SessionCommit c;
  c.peer = s.stream.target().peer;
  c.client_id = s.stream.target().client_id;
  c.session_id = s.session_id;
  c.messages = std::move(s.turn_messages);
  c.pinned = std::move(s.pinned_messages);
  c.messages.push_back({"assistant", s.stream.take_answer()});
  if (const PlannedSequence* p = planner_->find(seq)) {
    c.tokens = p->tokens;
    // A sequence cut to its KV budget holds no token prefix past the pages
    // the prefix cache took before the first cut: nothing of it is spilled.
    const int32_t full = p->evicted > 0 ? p->registered_pages : p->computed / cfg_.page_size;
    std::vector<int32_t> kept(p->tokens.begin(), p->tokens.begin() + static_cast<int64_t>(full) * cfg_.page_size);
    if (cfg_.kv_transfer && cfg_.session_spill && p->evicted == 0 && full > s.persisted_pages) {
      const auto table = p->kv.block_table();
      transfers_.spill(s.session_id, kept, s.persisted_pages,
                       std::vector<int32_t>(table.begin() + s.persisted_pages, table.begin() + full));
    }
    out_.idle_sessions.push_back({s.session_id, std::move(kept)});
  }
  c.sampling = s.sampling;
  // A turn's constraint is its own: the session's next turn is free text
  // unless it asks again.
  c.sampling.constraint = {};
  c.sampling.grammar.clear();
  c.done = std::move(done);
  c.window_first_turn = s.window_first_turn;
  c.model = cfg_.tier_name;
  c.escalated = s.stream.segments().size() > 1;
  out_.commits.push_back(std::move(c));
  s.session_id.clear();
}

// Ends the whole request of `seq` (every sample) with one Error.
void Scheduler::fail(uint64_t seq, wire::ErrorCode code, const std::string& message) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  const StreamTarget target = it->second.stream.target();
  if (cfg_.metrics) cfg_.metrics->request_done(wire::EnumNameErrorCode(code), 0, 0, 0);
  out_.replies.push_back({target.peer, target.client_id, messages::error_response(target.client_id, code, message)});
  release_session(it->second.session_id);
  auto g = requests_.find({target.peer, target.client_id});
  const std::vector<uint64_t> members = g != requests_.end() ? g->second : std::vector<uint64_t>{seq};
  for (uint64_t m : members) drop(m);
}

void Scheduler::fail_step(const std::string& message) {
  for (uint64_t seq : in_step_) fail(seq, wire::ErrorCode::internal, message);
}

// `moved`: escalated to the next tier, where the request goes on.
void Scheduler::drop(uint64_t seq, bool moved) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  if (swapped_.erase(seq)) out_.swap_drops.push_back(seq);
  planner_->finish(seq);
  forget_.push_back(seq);
  RouteOutcome outcome;
  const Sequence& s = it->second;
  outcome.kind = s.route.kind;
  outcome.workload = s.route.chosen_by_auto ? s.route.workload : -1;
  outcome.tokens = s.stream.completion();
  outcome.budget_class = s.route.budget_class;
  outcome.confidence = s.route.confidence;
  if (!cfg_.next_tier && s.stream.segments().size() > 1)
    outcome.large_tokens = s.stream.segments().back().second;
  if (const SpeculationStats* spec = speculation_.stats(seq)) {
    counters_.drafted += spec->drafted, counters_.accepted += spec->accepted;
    outcome.drafted = static_cast<int32_t>(spec->drafted);
    outcome.accepted = static_cast<int32_t>(spec->accepted);
    outcome.windows = static_cast<int32_t>(spec->verify_steps);
  }
  speculation_.remove(seq, !moved);  // what it wrote joins the suffix history (moved: it goes on elsewhere)
  const StreamTarget& t = s.stream.target();
  if (auto g = requests_.find({t.peer, t.client_id}); g != requests_.end()) {
    std::erase(g->second, seq);
    if (g->second.empty()) {
      if (!moved) ended(t.peer, t.client_id, outcome);
      requests_.erase(g);
      release_tenant(s.tenant);
    }
  }
  sequences_.erase(it);
}

// The request of `seq` as another scheduler continues it (service/hand_off.h),
// less its last `unsent` tokens and any held ones; later cancels follow it.
AdmitRequest Scheduler::carry(uint64_t seq, Sequence& s, int32_t unsent) {
  const PlannedSequence* p = planner_->find(seq);
  std::vector<int32_t> prompt = p ? s.sent(p->tokens, unsent) : std::vector<int32_t>();
  const int32_t first = s.first_prompt_tokens >= 0 ? s.first_prompt_tokens : p ? p->prompt_tokens : 0;
  AdmitRequest a = hand_off(s, std::move(prompt), first);
  a.restore_pages = std::move(s.restore_pages);
  escalated_.remember({a.peer, a.client_id}, now());
  return a;
}

// The small tier's confidence fell: the next tier continues the same stream
// from the prompt and the tokens sent so far (its prefix cache serves what
// it already holds), and this tier lets the sequence go. `unsent`: the
// answer's last tokens, besides any held ones, that its client was never
// sent (the unsure one); the next tier writes their positions.
void Scheduler::escalate(uint64_t seq, int32_t unsent) {
  if (!planner_->find(seq)) return;
  Sequence& s = sequences_.at(seq);
  AdmitRequest a = carry(seq, s, unsent);
  a.route.tier = cfg_.tier + 1;
  a.route.confidence = s.watch ? s.watch->confidence() : -1.0f;  // the router's budget counts it
  out_.escalations.push_back(std::move(a));
  ++counters_.escalations_out;
  drop(seq, true);
}

// Counted per request: a tenant's number lives while it has one.
TenantId Scheduler::tenant_id(const std::string& tenant) {
  auto [it, fresh] = tenants_.try_emplace(tenant);
  if (fresh) it->second.id = next_tenant_++;
  ++it->second.requests;
  return it->second.id;
}

void Scheduler::release_tenant(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end() && --it->second.requests <= 0) tenants_.erase(it);
}

void Scheduler::release_session(const std::string& session_id) {
  if (!session_id.empty()) out_.released_sessions.push_back(session_id);
}

void Scheduler::drop_idle_session(const std::string& session_id, const std::vector<int32_t>& tokens) {
  for (const auto& [seq, s] : sequences_)
    if (s.session_id == session_id) return;  // a turn of it is live again
  planner_->drop_prefix(tokens);
}

}  // namespace troupe::service
