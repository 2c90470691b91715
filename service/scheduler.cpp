#include "service/scheduler.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>

#include "engine/kv_cache.h"
#include "engine/kv_page_codec.h"
#include "messages/draft_frames.h"
#include "messages/step_frames.h"
#include "service/clock.h"

namespace troupe::service {
namespace {

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

SchedulerConfig checked(SchedulerConfig c) {
  if (!c.clock) c.clock = steady_ns;
  // A sequence can never hold more KV than the whole cache: admitting one
  // that could would stall it mid-prefill.
  c.planner.max_context = static_cast<int32_t>(std::min<int64_t>(c.planner.max_context, int64_t{c.kv_pages} * c.page_size));
  c.planner.window = c.kv_local_pages > 0 ? c.sliding_window : 0;
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

// Restored pages from this index on carry their local layers' rows (those
// exported behind every window do not: engine/kv_page_codec.h).
int32_t local_rows_from(const std::vector<std::string>& data) {
  int32_t from = 0;
  for (size_t i = 0; i < data.size(); ++i)
    if (!kv_page_has_local_rows(data[i])) from = static_cast<int32_t>(i) + 1;
  return from;
}

// How many of the pages a verifier without local slots (every layer in every
// page) can take: those before the first one that lacks its local rows.
size_t restorable(const std::vector<std::string>& data, bool windowed) {
  if (windowed) return data.size();
  size_t n = 0;
  while (n < data.size() && kv_page_has_local_rows(data[n])) ++n;
  return n;
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config)
    : cfg_(checked(std::move(config))),
      pool_(make_pool(cfg_)),
      planner_(std::make_unique<BatchPlanner>(*pool_, cfg_.page_size, cfg_.planner)),
      speculation_(cfg_.draft_model),
      swapped_(cfg_.swap_bytes) {
  push_figures();  // every tier and worker is in the stats from the start
}

Scheduler::~Scheduler() = default;

// ------------------------------------------------------------ arrivals and ends

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
  const RequestKey key{a.peer, a.client_id};
  if (auto early = early_cancels_.find(key); early != early_cancels_.end()) {
    const bool fresh = now() - early->second <= kEarlyCancelNs;
    early_cancels_.erase(early);
    if (fresh) {
      messages::DoneFields d;
      d.reason = wire::FinishReason::cancelled;
      d.prompt_tokens = static_cast<int32_t>(a.prompt.size());
      if (cfg_.metrics) cfg_.metrics->request_done("cancelled", 0, 0, 0);
      out_.replies.push_back({a.peer, a.client_id, messages::done_response(a.client_id, d)});
      ended(a.peer, a.client_id);
      return release_session(a.session_id);
    }
  }
  if (draining_) return refuse(a, wire::ErrorCode::shutting_down, "the server is draining: retry on another or after it restarts");
  if (a.unplaced)
    return refuse(a, wire::ErrorCode::unavailable,
                  "no worker is up to run it (lost workers are probed until they answer); retry shortly");
  if (worker_down_) {
    // Placed here before the router heard of the loss: it goes elsewhere.
    if (cfg_.failover) {
      // It left this worker because the worker was lost: counted as moved
      // out, as the replica that continues it counts it moved in (once: a
      // request already moved off another worker stays that one's).
      if (a.moved_from < 0) ++moved_out_;
      a.moved_from = cfg_.replica;
      out_.escalations.push_back(std::move(a));
      // The stats may be answered by another replica's scheduler: it reads
      // this one's last pushed figures, so the count goes out now.
      return push_figures();
    }
    return refuse(a, wire::ErrorCode::unavailable, "the worker is not answering (" + down_reason_ + "); retry shortly");
  }
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
  const TenantId tid = tenant_id(tenant);
  const auto added = planner_->add(seq, a.priority, std::move(a.prompt), a.sampling.max_tokens, tid, a.weight);
  if (added != BatchPlanner::AddResult::accepted) release_tenant(tenant);
  switch (added) {
    case BatchPlanner::AddResult::queue_full:
      return refuse(a, wire::ErrorCode::queue_full,
                    "the queue is full (" + std::to_string(cfg_.planner.max_waiting) + " waiting); try again later");
    case BatchPlanner::AddResult::tenant_queue_full:
      return refuse(a, wire::ErrorCode::queue_full,
                    "this client has its share of the queue waiting (" + std::to_string(planner_->tenant_load(tid).waiting) +
                        " requests); try again when some have run");
    case BatchPlanner::AddResult::too_long:
    case BatchPlanner::AddResult::duplicate: return refuse(a, wire::ErrorCode::too_long, "the prompt does not fit the context");
    case BatchPlanner::AddResult::accepted: break;
  }
  const bool carried = static_cast<bool>(a.carried);
  Sequence s{carried ? ResponseStream(*a.carried)
                     : ResponseStream(*cfg_.tokenizer, {a.peer, a.client_id, 0}, a.sampling, a.logprobs, a.ignore_eos,
                                      !a.session_id.empty(), a.accepted_ns),
             std::move(a.sampling)};
  if (cfg_.tier >= 0) s.stream.begin_segment(cfg_.tier_name);
  if (a.tool_format && !carried) s.stream.read_tool_calls(*a.tool_format, a.tool_seed);
  if (!carried) s.stream.report_top(a.top_logprobs);
  ++(a.moved_from >= 0 ? moved_in_ : carried ? escalated_in_ : requests_in_);
  s.route = a.route;
  if (a.route.kind == RouteKind::escalate && cfg_.next_tier && a.samples == 1) {
    s.watch.emplace(a.route.threshold, a.route.window, a.route.within, a.route.hold);
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
  s.persisted_pages = a.persisted_pages;
  s.window_first_turn = a.window_first_turn;
  s.tenant = std::move(tenant);
  s.cache = a.response_cache;
  s.cache_key = std::move(a.response_cache_key);
  if (!s.cache_key.empty()) s.stream.record();
  if (a.speculation != SpeculationMode::off && a.samples == 1) speculation_.add(seq, a.speculation, a.max_draft, s.sampling);
  if (!carried)
    s.stream.send(messages::accepted_response(a.client_id, prompt_tokens, planner_->queue_position(seq), a.tool_seed), out_);
  requests_.emplace(key, std::vector<uint64_t>{seq});
  sequences_.emplace(seq, std::move(s));
  account();
  push_figures();
}

void Scheduler::cancel(const std::string& peer, uint64_t request_id, uint64_t target) {
  auto it = requests_.find({peer, target});
  if (it == requests_.end()) {
    if (escalated_.count({peer, target})) return out_.moved_cancels.push_back({peer, request_id, target});
    if (is_internal_peer(peer)) return;  // a job item that already ended
    // It may still be on its way (a prompt being tokenized): remembered for a while.
    if (early_cancels_.size() >= kMaxEarlyCancels)
      std::erase_if(early_cancels_, [t = now()](const auto& e) { return t - e.second > kEarlyCancelNs; });
    if (early_cancels_.size() < kMaxEarlyCancels) early_cancels_[{peer, target}] = now();
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
  unhold(it->second);  // held tokens never reached the client: its Done does not count them
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
    if (d.speculated) cfg_.metrics->speculation(d.spec_source, d.spec_drafted, d.spec_accepted);
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
  c.messages.push_back({"assistant", s.stream.take_answer()});
  if (const PlannedSequence* p = planner_->find(seq)) {
    c.tokens = p->tokens;
    const int32_t full = p->computed / cfg_.page_size;
    std::vector<int32_t> kept(p->tokens.begin(), p->tokens.begin() + static_cast<int64_t>(full) * cfg_.page_size);
    if (cfg_.kv_transfer && cfg_.session_spill && full > s.persisted_pages) {
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
  if (!cfg_.next_tier && s.stream.segments().size() > 1)
    outcome.large_tokens = s.stream.segments().back().second;
  if (const SpeculationStats* spec = speculation_.stats(seq)) {
    drafted_ += spec->drafted, accepted_ += spec->accepted;
    outcome.drafted = static_cast<int32_t>(spec->drafted);
    outcome.accepted = static_cast<int32_t>(spec->accepted);
    outcome.windows = static_cast<int32_t>(spec->verify_steps);
  }
  speculation_.remove(seq);
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

// The small tier's confidence fell: the next tier continues the same stream
// from the prompt and the tokens sent so far (its prefix cache serves what
// it already holds), and this tier lets the sequence go.
AdmitRequest Scheduler::carry(uint64_t seq, const Sequence& s, std::vector<int32_t> prompt) {
  const PlannedSequence* p = planner_->find(seq);
  AdmitRequest a;
  a.peer = s.stream.target().peer;
  a.client_id = s.stream.target().client_id;
  a.tenant = s.tenant;
  a.weight = s.weight;
  a.prompt = std::move(prompt);
  a.sampling = s.sampling;
  a.sampling.max_tokens = s.stream.max_tokens() - s.stream.completion();
  a.priority = s.priority;
  a.logprobs = s.stream.logprobs();
  a.top_logprobs = s.stream.top_logprobs();
  a.ignore_eos = s.stream.ignore_eos();
  a.accepted_ns = s.stream.accepted_ns();
  a.session_id = s.session_id;
  a.turn_messages = s.turn_messages;
  a.persisted_pages = s.persisted_pages;
  a.window_first_turn = s.window_first_turn;
  a.response_cache = s.cache;
  a.response_cache_key = s.cache_key;
  a.route = s.route;
  a.session_escalations = s.session_escalations;
  a.carried = std::make_shared<ResponseStream>(s.stream);
  a.first_prompt_tokens = s.first_prompt_tokens >= 0 ? s.first_prompt_tokens : p ? p->prompt_tokens : 0;
  if (escalated_.size() >= kMaxEarlyCancels)
    std::erase_if(escalated_, [t = now()](const auto& e) { return t - e.second > kEarlyCancelNs; });
  escalated_[{a.peer, a.client_id}] = now();  // later cancels follow it
  return a;
}

// `unsent`: the answer's last tokens, besides any held ones, that its client
// was never sent (the unsure one); the next tier writes their positions.
void Scheduler::escalate(uint64_t seq, int32_t unsent) {
  Sequence& s = sequences_.at(seq);
  const PlannedSequence* p = planner_->find(seq);
  if (!p) return;
  AdmitRequest a = carry(seq, s, sent_tokens(s, *p, unsent));
  a.restore_pages = std::move(s.restore_pages);
  a.route.tier = cfg_.tier + 1;
  out_.escalations.push_back(std::move(a));
  ++escalations_out_;
  drop(seq, true);
}

// What a request continues from elsewhere: its tokens less the last
// `unsent` and every held one, with the stream as its client saw it.
std::vector<int32_t> Scheduler::sent_tokens(Sequence& s, const PlannedSequence& p, int32_t unsent) {
  if (s.held) unsent += s.held->tokens;
  unhold(s);
  std::vector<int32_t> tokens = p.tokens;
  tokens.resize(tokens.size() - std::min(tokens.size(), static_cast<size_t>(unsent)));
  return tokens;
}

// Held tokens that will never be sent: the stream is as it was before them
// (they were never counted as written: counters only grow).
void Scheduler::unhold(Sequence& s) {
  if (!s.held) return;
  s.stream = std::move(s.held->before);
  s.held.reset();
}

// The watch kept the small tier's answer: its held frames go out now, and
// its first token reaches the client now.
void Scheduler::release_held(Sequence& s, int64_t t) {
  tokens_generated_ += static_cast<uint64_t>(s.stream.completion() - s.held->before.completion());
  auto& replies = s.held->out.replies;
  out_.replies.insert(out_.replies.end(), std::make_move_iterator(replies.begin()), std::make_move_iterator(replies.end()));
  if (cfg_.metrics && s.stream.completion() > 0) cfg_.metrics->ttft(static_cast<double>(t - s.stream.accepted_ns()) * 1e-9);
  s.stream.released(t);
  s.held.reset();
}

// Failover: the request continues on another replica of this tier from its
// prompt and every token its client was sent; the tokens computed since
// the last step are the only work lost.
void Scheduler::move(uint64_t seq) {
  Sequence& s = sequences_.at(seq);
  const PlannedSequence* p = planner_->find(seq);
  // Held tokens were never sent: the other replica writes (and holds) them again.
  AdmitRequest a = carry(seq, s, p ? sent_tokens(s, *p, 0) : std::vector<int32_t>());
  a.restore_pages = std::move(s.restore_pages);
  a.moved_from = cfg_.replica;
  out_.escalations.push_back(std::move(a));
  ++moved_out_;
  drop(seq, true);
}

void Scheduler::worker_lost(const std::string& why) {
  if (worker_down_) return;
  ++workers_lost_;
  worker_down_ = true;
  down_reason_ = why;
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
  planner_.reset();
  pool_ = make_pool(cfg_);
  planner_ = std::make_unique<BatchPlanner>(*pool_, cfg_.page_size, cfg_.planner);
  account();
  push_figures();
}

bool Scheduler::check_instance(uint64_t instance, std::string& why) {
  if (instance == 0) return true;  // an older worker: it cannot say
  if (worker_instance_ == 0 || worker_instance_ == instance) {
    worker_instance_ = instance;
    return true;
  }
  why = "worker " + cfg_.worker_name + " restarted: its KV cache is empty";
  return false;
}

void Scheduler::probed(const std::string& result) {
  if (phase_ != Phase::ready) return;  // a step or a swap is out: its own result tells
  const auto* res = messages::check_step_result(result);
  std::string why;
  if (!res) why = "worker " + cfg_.worker_name + " sent an unreadable answer";
  else if (res->worker_lost()) why = res->error() ? res->error()->str() : "worker " + cfg_.worker_name + " was lost";
  else if (res->error()) why = "worker " + cfg_.worker_name + ": " + res->error()->str();  // e.g. no share of its pool for us
  else if (worker_model_ != 0 && res->model_fingerprint() != 0 && res->model_fingerprint() != worker_model_)
    why = "worker " + cfg_.worker_name + " now serves another model (" + (res->model() ? res->model()->str() : "") + ")";
  else if (res->kv_local_pages() != cfg_.kv_local_pages)
    why = "worker " + cfg_.worker_name + " now keeps " + std::to_string(res->kv_local_pages()) +
          " local KV pages; this server planned for " + std::to_string(cfg_.kv_local_pages);
  else if (res->kv_pages() != cfg_.kv_pages || res->page_size() != cfg_.page_size)
    why = "worker " + cfg_.worker_name + " now has " + std::to_string(res->kv_pages()) + " KV pages of " +
          std::to_string(res->page_size()) + " tokens; this server planned for " + std::to_string(cfg_.kv_pages) + " of " +
          std::to_string(cfg_.page_size);
  else if (res->draining()) why = "worker " + cfg_.worker_name + " is shutting down";
  const uint64_t before = worker_instance_;
  if (why.empty() && worker_model_ == 0) worker_model_ = res->model_fingerprint();
  if (why.empty() && !worker_down_ && !check_instance(res->instance(), why)) worker_lost(why);
  if (!why.empty()) {
    if (res && res->draining() && !worker_down_ && cfg_.failover) release_due_ = true;
    if (!worker_down_) worker_lost(why);
    down_reason_ = why;
    return;
  }
  if (worker_down_) {
    worker_instance_ = res->instance() ? res->instance() : before;
    worker_down_ = false;
    worker_draining_ = false;
    down_reason_.clear();
    out_.worker = 1;
    push_figures();
  }
}

ReplicaLoad Scheduler::load() const {
  ReplicaLoad l;
  l.total_pages = cfg_.kv_pages;
  l.free_pages = worker_down_ ? 0 : planner_->free_pages();
  const int32_t running = planner_->running();
  l.waiting = std::max<int32_t>(static_cast<int32_t>(requests_.size()) - running, 0);
  l.step_ms = step_ms_avg_;
  return l;
}

messages::WorkerStatsFields Scheduler::worker_stats() {
  const PlannerStats ps = planner_->stats();
  messages::WorkerStatsFields w;
  w.endpoint = cfg_.worker_name;
  w.tier = cfg_.tier >= 0 ? cfg_.tier_name : std::string();
  w.up = !worker_down_;
  w.requests = requests_in_ + escalated_in_ + moved_in_;
  w.moved_in = moved_in_;
  w.moved_out = moved_out_;
  w.lost = workers_lost_;
  w.tokens = tokens_generated_;
  w.forward_tokens = forward_tokens_;
  w.steps = forward_steps_;
  w.running = ps.running;
  w.waiting = ps.waiting;
  w.pages_used = ps.pages_used;
  w.pages_total = ps.pages_total;
  w.step_ms = step_ms_avg_;
  return w;
}

void Scheduler::push_figures() {
  if (!cfg_.metrics) return;
  if (cfg_.tier >= 0) cfg_.metrics->tier(cfg_.tier, std::max(cfg_.replica, 0), tier_stats());
  if (cfg_.replica >= 0) cfg_.metrics->worker(std::max(cfg_.tier, 0), cfg_.replica, worker_stats());
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

// ------------------------------------------------------------ KV tiers

// Restored pages of an admitted session turn: into the prefix cache now,
// their contents written by the next step (before its forward).
void Scheduler::restore(std::span<const int32_t> prompt, std::vector<std::string>& data) {
  if (!cfg_.kv_transfer || data.empty()) return;
  for (const auto& d : data)
    if (static_cast<int64_t>(d.size()) != cfg_.page_bytes) return;  // not this layout: recompute instead
  data.resize(restorable(data, cfg_.planner.window > 0));
  if (data.empty()) return;
  const auto n = static_cast<int32_t>(data.size());
  std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + std::min<int64_t>(prompt.size(), int64_t{n} * cfg_.page_size));
  std::vector<messages::PageBytes> pages;
  const int32_t local_from = local_rows_from(data);
  for (const auto& [index, page] : planner_->adopt_prefix(prompt, n, local_from)) pages.push_back({page, std::move(data[index])});
  pages_restored_ += pages.size();
  transfers_.restore(std::move(tokens), std::move(pages));
}

// A session past its window: the kept turns' KV moves from the history's
// pages (cached, or restored just now) into pages adopted for the prompt,
// turned to their new positions by the next step; admission then finds the
// prompt's prefix cached and computes only what follows it. Only whole
// destination pages move (the prefix cache holds whole pages).
void Scheduler::plan_reuse(std::span<const int32_t> history, std::span<const int32_t> prompt, const KvReuse& r) {
  if (!cfg_.kv_shift || r.count <= 0 || !cfg_.planner.prefix_caching) return;
  const int32_t ps = cfg_.page_size;
  std::vector<int32_t> source = planner_->retain_prefix(history, static_cast<size_t>((r.src_begin + r.count + ps - 1) / ps));
  const int32_t count = std::min(r.count, static_cast<int32_t>(source.size()) * ps - r.src_begin);
  const int32_t dst_end = std::min<int32_t>((r.dst_begin + count) / ps * ps, static_cast<int32_t>(prompt.size()) / ps * ps);
  const int32_t gap = r.src_begin - r.dst_begin;
  // A sliding-window model: destination pages get local rows where every
  // position's source still has them, from the end down; those must reach
  // back as far as the new end's window reads (BatchPlanner's admission
  // checks the same), or the turn computes its history instead.
  int32_t local_from = 0;
  if (cfg_.planner.window > 0) {
    auto sourced = [&](int32_t page) {
      for (int32_t p = page * ps; p < (page + 1) * ps; ++p) {
        const int32_t src = (p < r.dst_begin ? p : p + gap) / ps;
        if (src >= static_cast<int32_t>(source.size()) || !pool_->has_local(source[static_cast<size_t>(src)])) return false;
      }
      return true;
    };
    local_from = dst_end / ps;
    while (local_from > local_pages_from(dst_end, cfg_.planner.window, ps) && sourced(local_from - 1)) --local_from;
    if (local_from > std::max(0, dst_end - 1 - cfg_.planner.window) / ps) return planner_->release_pages(source);
  }
  const auto fill = count > 0 && dst_end > r.dst_begin ? planner_->adopt_prefix(prompt, dst_end / ps, local_from)
                                                       : std::vector<std::pair<int32_t, int32_t>>();
  if (fill.empty()) return planner_->release_pages(source);
  // The sources' local rows must outlive this plan's settling until the shift runs.
  planner_->hold_local(source);
  PlannedShift sh;
  sh.tokens.assign(prompt.begin(), prompt.begin() + dst_end);
  sh.source = std::move(source);
  for (const auto& [index, page] : fill) {
    const int32_t p0 = index * ps, p1 = p0 + ps;
    if (p0 < r.dst_begin)  // the shared prefix's part of the page: the same positions
      sh.moves.push_back({{page}, p0, 0, std::min(p1, r.dst_begin) - p0, 0});
    if (p1 > r.dst_begin) {
      const int32_t a = std::max(p0, r.dst_begin);
      sh.moves.push_back({{page}, a + gap, a - p0, p1 - a, -gap});
      tokens_shifted_ += static_cast<uint64_t>(p1 - a);
    }
  }
  transfers_.shift(std::move(sh));
}

// The head of the queue, if preempted with its pages swapped out, asks for
// them back once the pool has room for them; its admission then skips their
// recompute. Planning waits for them (one actor hop, only at a swap-in).
bool Scheduler::fetch_swap_in() {
  int32_t room = -1;  // free + evictable pages, counted once (stats() walks the cache)
  std::vector<uint64_t> gone;
  uint64_t fetch = 0;
  for (const auto& [seq, entry] : swapped_.entries()) {
    const PlannedSequence* s = planner_->find(seq);
    if (!s || s->state == RequestState::finished) {
      gone.push_back(seq);
      continue;
    }
    if (s->state != RequestState::waiting || planner_->queue_position(seq) != 0) continue;
    if (room < 0) {
      const PlannerStats ps = planner_->stats();
      room = ps.pages_free + ps.pages_cached;
    }
    if (room >= entry.pages + 1) {
      fetch = seq;
      break;
    }
  }
  for (uint64_t seq : gone)
    if (swapped_.erase(seq)) out_.swap_drops.push_back(seq);
  if (!fetch) return false;
  swapped_.erase(fetch);
  out_.swap_fetches.push_back(fetch);
  return true;
}

void Scheduler::swap_arrived(SwappedPages pages) {
  if (phase_ == Phase::fetching) phase_ = Phase::ready;
  const PlannedSequence* s = planner_->find(pages.sequence);
  if (!s || s->state != RequestState::waiting || pages.data.empty()) return;
  pages.data.resize(restorable(pages.data, cfg_.planner.window > 0));
  if (pages.data.empty()) return;
  const auto n = static_cast<int32_t>(pages.data.size());
  std::vector<messages::PageBytes> imports;
  for (const auto& [index, page] : planner_->adopt_prefix(pages.tokens, n, local_rows_from(pages.data)))
    imports.push_back({page, std::move(pages.data[index])});
  pages_swapped_in_ += imports.size();
  transfers_.restore(std::move(pages.tokens), std::move(imports));
}

// Sequences the last plan preempted: their pages are read by this step
// (before it can reuse them) and kept in host memory, within the budget.
std::vector<PreemptedPages> Scheduler::swaps_for_step() {
  std::vector<PreemptedPages> swaps;
  for (auto& p : planner_->take_preempted()) {
    if (!cfg_.kv_transfer || !cfg_.planner.prefix_caching || p.pages.empty() || !swapped_.fits(p.pages.size(), cfg_.page_bytes))
      continue;
    swaps.push_back(std::move(p));
  }
  return swaps;
}

void Scheduler::take_swapped(SwappedPages pages) {
  const PlannedSequence* s = planner_->find(pages.sequence);
  if (!s || s->state != RequestState::waiting) return;
  pages_swapped_out_ += pages.data.size();
  swapped_.add(pages.sequence, pages.tokens, static_cast<int32_t>(pages.data.size()), pages.bytes());
  out_.swap_outs.push_back(std::move(pages));
}

// ------------------------------------------------------------ the step

SchedulerPlan Scheduler::next_step() {
  SchedulerPlan plan;
  while (phase_ == Phase::ready || phase_ == Phase::drafted) {
    if (phase_ == Phase::ready) {
      if (planner_->idle() && !transfers_.pending()) break;
      if (!planner_->idle()) {
        if (cfg_.kv_transfer && fetch_swap_in()) {
          phase_ = Phase::fetching;
          break;
        }
        auto remaining = [this](uint64_t seq) {
          const auto& s = sequences_.at(seq).stream;
          return s.max_tokens() - s.completion();
        };
        const auto model = speculation_.propose(*planner_, remaining, now());
        if (!model.empty() || speculation_.has_forget()) {
          messages::Bytes bytes = messages::draft_plan(step_ + 1, model, speculation_.take_forget());
          if (!model.empty()) {
            plan.kind = SchedulerPlan::Kind::drafts;
            plan.bytes = std::move(bytes);
            phase_ = Phase::drafting;  // the step goes out when the draft model answers
            break;
          }
          plan.draft_forget = std::move(bytes);  // only sequences to forget: no need to wait
        }
      }
    }
    const Built built = build_step(plan);
    phase_ = built == Built::step ? Phase::stepping : Phase::ready;
    if (built != Built::retry) break;
  }
  account();
  return plan;
}

void Scheduler::apply_drafts(const std::string& result, const std::string& error) {
  if (phase_ != Phase::drafting) return;
  phase_ = Phase::drafted;
  speculation_.take(result, error, step_ + 1, *planner_, static_cast<int32_t>(cfg_.tokenizer->size()), now());
  apply_deferred();  // cancels that came while the draft model worked: no step is out now
  account();
}

// Plans the step. `retry`: a request that can never get its pages was failed; plan again.
Scheduler::Built Scheduler::build_step(SchedulerPlan& plan) {
  const bool transfers = transfers_.pending();
  static const std::vector<PlannedSlice> kNone;
  const std::vector<PlannedSlice>* planned = &kNone;
  if (!planner_->idle()) {
    planned = &planner_->plan();
    if (planned->empty()) {
      // Nothing running and the head of the queue cannot get its pages: it never will.
      const PlannerStats ps = planner_->stats();
      if (ps.running == 0 && ps.waiting > 0) {
        uint64_t head = 0;
        int32_t best = INT32_MAX;
        for (const auto& [seq, s] : sequences_) {
          const int32_t pos = planner_->queue_position(seq);
          if (pos >= 0 && pos < best) best = pos, head = seq;
        }
        fail(head, wire::ErrorCode::too_long, "the request needs more KV pages than the server has");
        return Built::retry;
      }
      if (!transfers) return Built::nothing;
    }
  } else if (!transfers) {
    return Built::nothing;
  }
  const std::vector<PlannedSlice>& slices = *planned;
  step_has_slices_ = !slices.empty();
  std::vector<PreemptedPages> swaps = swaps_for_step();
  const Batch batch = slices.empty() ? Batch{} : planner_->batch();
  const std::vector<messages::SliceSpec> specs = slice_specs(slices, batch);
  std::vector<std::pair<int32_t, int32_t>> copies;
  if (!slices.empty())
    for (const PageCopy& c : planner_->copies()) copies.emplace_back(c.src, c.dst);
  // Spills and restores travel with this step (exports read before anything else).
  const StepPages pages = transfers_.take(std::move(swaps));
  plan.kind = SchedulerPlan::Kind::step;
  messages::StepKv kv;
  kv.copies = copies;
  kv.exports = pages.exports;
  kv.imports = pages.imports;
  kv.swap_outs = pages.swap_outs;
  kv.export_codec = cfg_.spill_codec;
  kv.shifts = pages.shifts;
  const std::vector<std::pair<int32_t, int32_t>> local_slots = pool_->take_local_changes();
  kv.local_slots = local_slots;
  plan.bytes = messages::step_plan(++step_, specs, forget_, kv, cfg_.front);
  forget_.clear();
  return Built::step;
}

std::vector<messages::SliceSpec> Scheduler::slice_specs(const std::vector<PlannedSlice>& slices, const Batch& batch) {
  std::vector<messages::SliceSpec> specs;
  specs.reserve(slices.size());
  in_step_.clear();
  const int64_t t = now();
  for (size_t i = 0; i < slices.size(); ++i) {
    Sequence& s = sequences_.at(slices[i].id);
    if (cfg_.metrics && s.stream.scheduled_ns() == 0 && s.stream.target().sample == 0)
      cfg_.metrics->queue_wait(static_cast<double>(t - s.stream.accepted_ns()) * 1e-9);
    s.stream.scheduled(t);
    const BatchSequence& b = batch.sequences[i];
    // The verifier learns a sequence's sampling (and any cached prefix) with
    // its first slice, and again after a preemption restarts it.
    const PlannedSequence& ps = *planner_->find(slices[i].id);
    const bool introduce = s.verifier_generation != ps.preemptions;
    s.verifier_generation = ps.preemptions;
    // The draft model's q for the drafts the window kept (the planner may cut it short).
    // A constrained output starts after the prompt its client sent (an
    // escalated request's prompt holds the answer so far).
    // Logprobs are the model's for every token: no token skips the forward (jump-forward off).
    const messages::GrammarSpec grammar{s.first_prompt_tokens >= 0 ? s.first_prompt_tokens : ps.prompt_tokens,
                                        cfg_.jump_forward && !s.stream.logprobs()};
    specs.push_back({slices[i].id, slices[i].start, b.tokens, b.block_table, slices[i].wants_token,
                     introduce ? &s.sampling : nullptr,
                     introduce ? std::span(ps.tokens).first(static_cast<size_t>(slices[i].start)) : std::span<const int32_t>(),
                     s.stream.logprobs() || s.watch.has_value(), slices[i].drafts,
                     speculation_.q(slices[i].id, slices[i].drafts), grammar, s.stream.top_logprobs()});
    in_step_.push_back(slices[i].id);
  }
  return specs;
}

void Scheduler::apply(const std::string& result, const std::string& error_text) {
  if (phase_ != Phase::stepping) return;
  phase_ = Phase::ready;
  std::string error = error_text;
  const auto* res = error.empty() ? messages::check_step_result(result) : nullptr;
  if (error.empty() && !res) error = "the verifier sent an unreadable step result";
  // No result came, or it came from a new worker process: its KV is gone.
  std::string lost;
  if (res && res->worker_lost()) lost = res->error() ? res->error()->str() : "worker " + cfg_.worker_name + " was lost";
  else if (res) check_instance(res->instance(), lost);
  if (!lost.empty()) return worker_lost(lost);
  if (res && worker_model_ == 0) worker_model_ = res->model_fingerprint();
  if (res && res->error()) error = res->error()->str();
  if (!error.empty()) {
    // The step's KV is unknown: its requests end with the reason; others go on.
    fail_step("engine step failed: " + error);
    // Restored pages may not have been written: they must not be reused.
    for (const auto& tokens : transfers_.unwritten()) planner_->drop_prefix(tokens);
    // Nor may the verifier's local slots be trusted to match ours: all of them again.
    pool_->resend_local_slots();
  } else {
    for (auto& spill : transfers_.exported(*res)) out_.spills.push_back(std::move(spill));
    for (auto& pages : transfers_.swapped(*res)) take_swapped(std::move(pages));
    try {
      take_tokens(*res);
    } catch (const std::exception& e) {
      // A bad result (or a token the tokenizer rejects) must not stop the
      // scheduler: the step's requests end with the reason, others go on.
      fail_step(std::string("engine step failed: ") + e.what());
    }
  }
  in_step_.clear();
  const std::vector<int32_t> shifted_from = transfers_.step_done();
  planner_->release_local(shifted_from);
  planner_->release_pages(shifted_from);
  apply_deferred();
  account();
  push_figures();
  if (res && res->draining()) worker_drains();
}

// A worker that drains is told apart from one that died: its KV is intact,
// so the session pages that finished turns owe the store go out with one
// more step before its requests move. With no other worker to move to
// (no failover), its requests finish there while its drain time lasts.
void Scheduler::worker_drains() {
  if (worker_down_ || !cfg_.failover) return;
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

void Scheduler::take_tokens(const wire::step::StepResult& res) {
  engine_ms_ += res.forward_ms();
  if (const auto* experts = res.expert_tokens()) expert_tokens_.assign(experts->begin(), experts->end());
  step_ms_avg_ = step_ms_avg_ > 0 ? 0.8 * step_ms_avg_ + 0.2 * res.forward_ms() : res.forward_ms();
  std::vector<std::vector<int32_t>> sampled;  // per wanting slice: accepted drafts, then the next token
  std::vector<std::pair<uint64_t, float>> who;
  std::vector<std::vector<int32_t>> forced;  // per wanting slice: jump-forward tokens after those
  std::vector<bool> blocked;                 // per wanting slice: its grammar allowed no token
  // Per wanting slice, with logprobs: one per token it gives, and N most likely per token.
  std::vector<std::vector<float>> token_lps, top_lps;
  std::vector<std::vector<int32_t>> top_ids;
  if (res.sampled())
    for (const auto* s : *res.sampled()) {
      token_lps.emplace_back(), top_ids.emplace_back(), top_lps.emplace_back();
      if (s->logprobs()) token_lps.back().assign(s->logprobs()->begin(), s->logprobs()->end());
      if (s->top_ids()) top_ids.back().assign(s->top_ids()->begin(), s->top_ids()->end());
      if (s->top_logprobs()) top_lps.back().assign(s->top_logprobs()->begin(), s->top_logprobs()->end());
      std::vector<int32_t> kept;
      if (s->accepted()) kept.assign(s->accepted()->begin(), s->accepted()->end());
      kept.push_back(s->token());
      sampled.push_back(std::move(kept));
      who.emplace_back(s->sequence_id(), s->logprob());
      forced.emplace_back();
      if (s->forced()) forced.back().assign(s->forced()->begin(), s->forced()->end());
      blocked.push_back(s->grammar_blocked());
    }
  int64_t step_tokens = 0;
  std::map<uint64_t, int32_t> window_drafts;
  std::vector<uint64_t> wanted;
  for (const PlannedSlice& p : planner_->planned()) {
    step_tokens += p.count;
    if (p.drafts > 0) window_drafts[p.id] = p.drafts;
    if (p.wants_token) wanted.push_back(p.id);
  }
  if (step_tokens > 0) speculation_.observe_step(step_tokens, res.forward_ms());
  if (step_tokens > 0) forward_tokens_ += static_cast<uint64_t>(step_tokens), ++forward_steps_;
  if (cfg_.metrics) cfg_.metrics->step(res.forward_ms() * 1e-3, step_tokens);
  // The result must answer this step, slice for slice.
  bool matches = res.step() == step_ && wanted.size() == who.size();
  for (size_t i = 0; matches && i < who.size(); ++i) matches = who[i].first == wanted[i];
  for (size_t i = 0; matches && i < sampled.size(); ++i) {
    for (int32_t t : sampled[i]) matches = matches && t >= 0 && static_cast<size_t>(t) < cfg_.tokenizer->size();
    for (int32_t t : forced[i]) matches = matches && t >= 0 && static_cast<size_t>(t) < cfg_.tokenizer->size();
    for (int32_t t : top_ids[i]) matches = matches && t >= 0 && static_cast<size_t>(t) < cfg_.tokenizer->size();
    matches = matches && (token_lps[i].empty() || token_lps[i].size() == sampled[i].size()) &&
              top_ids[i].size() == top_lps[i].size() && top_ids[i].size() % sampled[i].size() == 0;
  }
  if (!matches) throw std::runtime_error("the verifier's result does not answer step " + std::to_string(step_));
  if (step_has_slices_) planner_->commit(sampled);
  for (const auto& [seq, lp] : who) {  // before any sample can end: forks need the parent's pages
    auto s = sequences_.find(seq);
    if (s != sequences_.end() && s->second.forks_pending > 0 && !ends_after_step(seq)) fork_samples(seq);
  }
  for (size_t i = 0; i < sampled.size(); ++i) {
    const uint64_t seq = who[i].first;
    if (blocked[i]) {  // the output so far stands; nothing the grammar refuses is sent
      if (sequences_.count(seq) && !ends_after_step(seq)) end(seq, wire::FinishReason::grammar_blocked, true);
      continue;
    }
    if (auto w = window_drafts.find(seq); w != window_drafts.end())
      speculation_.observe_window(seq, w->second, static_cast<int32_t>(sampled[i].size()) - 1);
    const size_t per = top_ids[i].size() / sampled[i].size();
    for (size_t k = 0; k < sampled[i].size(); ++k) {
      if (!sequences_.count(seq)) break;  // ended (stop, length) part way through the window
      deliver(seq, sampled[i][k], token_lps[i].empty() ? who[i].second : token_lps[i][k],
              std::span(top_ids[i]).subspan(k * per, per), std::span(top_lps[i]).subspan(k * per, per));
    }
    // Jump-forward: forced tokens are certain (probability 1 under the grammar).
    for (int32_t token : forced[i]) {
      if (!sequences_.count(seq) || !planner_->find(seq)) break;
      planner_->extend(seq, std::span(&token, 1));
      deliver(seq, token, 0.0f);
    }
  }
}

// The prompt of a request with n samples is computed: fork the other n - 1
// from it, sharing its pages (each recomputes the last prompt position into
// its own copy of that page and samples from there).
void Scheduler::fork_samples(uint64_t seq) {
  Sequence& parent = sequences_.at(seq);
  const int32_t forks = std::exchange(parent.forks_pending, 0);
  // Copies, not references: adding children may rehash `sequences_`.
  const StreamTarget target = parent.stream.target();
  const messages::SamplingFields sampling = parent.sampling;
  const bool logprobs = parent.stream.logprobs(), ignore_eos = parent.stream.ignore_eos();
  const int32_t top = parent.stream.top_logprobs();
  const int64_t accepted_ns = parent.stream.accepted_ns(), scheduled_ns = parent.stream.scheduled_ns();
  const int32_t at = planner_->find(seq)->prompt_tokens - 1;
  const std::string parent_tenant = parent.tenant;
  std::vector<uint64_t>& group = requests_.at({target.peer, target.client_id});
  for (int32_t i = 1; i <= forks; ++i) {
    const uint64_t child = next_seq_++;
    if (!planner_->fork(seq, child, at)) break;
    messages::SamplingFields own = sampling;
    own.seed = sampling.seed + static_cast<uint64_t>(i);  // distinct draws
    Sequence s{ResponseStream(*cfg_.tokenizer, {target.peer, target.client_id, i}, own, logprobs, ignore_eos, false,
                              accepted_ns),
               own};
    s.stream.scheduled(scheduled_ns);
    s.stream.report_top(top);
    s.stream.read_tool_calls_as(parent.stream);
    s.tenant = parent_tenant;
    group.push_back(child);
    sequences_.emplace(child, std::move(s));
  }
}

// One sampled token reaches its sequence.
void Scheduler::deliver(uint64_t seq, int32_t token, float logprob, std::span<const int32_t> top_ids,
                        std::span<const float> top_logprobs) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  Sequence& s = it->second;
  using Verdict = EscalationWatch::Verdict;
  Verdict verdict = Verdict::send;
  if (s.watch) {
    // Cancelled (or its client gone) during this step: it ends when the step
    // is applied, with what its client was sent. Neither moved to the next
    // tier (which would answer a client that left) nor released.
    if (ends_after_step(seq)) return;
    verdict = s.watch->observe(std::exp(logprob));
    // The token that makes the small tier's confidence fall is not sent (nor
    // any held before it): the next tier writes those positions (the client
    // never sees the unsure token, which would commit the larger model to the
    // smaller one's guess).
    if (verdict == Verdict::escalate) return escalate(seq, 1);
    if (verdict == Verdict::hold && !s.held) s.held.emplace(s.stream);
  }
  if (s.held) ++s.held->tokens;
  ResponseStream& stream = s.stream;
  const int32_t before = stream.completion();
  const int64_t t = now(), previous = stream.last_token_ns();
  const auto finished = stream.push(token, logprob, t, s.held ? s.held->out : out_, top_ids, top_logprobs);
  if (!s.held) tokens_generated_ += static_cast<uint64_t>(stream.completion() - before);  // held: when released
  const PlannedSequence* p = planner_->find(seq);
  const bool full = !finished && p && static_cast<int64_t>(p->tokens.size()) >= cfg_.planner.max_context;
  if (s.held) {
    // An answer that ends while held is judged on what it has.
    if (verdict == Verdict::hold && (finished || full)) verdict = s.watch->judge();
    if (verdict == Verdict::escalate) return escalate(seq, 0);
    if (verdict != Verdict::release) return;
    release_held(s, t);
  } else if (cfg_.metrics && stream.completion() > before) {
    if (before == 0) cfg_.metrics->ttft(static_cast<double>(t - stream.accepted_ns()) * 1e-9);
    else if (previous > 0) cfg_.metrics->inter_token(static_cast<double>(t - previous) * 1e-9);
  }
  if (finished) return end(seq, *finished, true);
  if (full) end(seq, wire::FinishReason::context_full, true);
}

// ------------------------------------------------------------ accounting

// Busy time: call after anything that may start or end work.
void Scheduler::account() {
  const bool busy = !planner_->idle();
  const int64_t t = now();
  if (busy_since_ns_) busy_ms_ += ms(t - busy_since_ns_);
  busy_since_ns_ = busy ? t : 0;
}

messages::StatsFields Scheduler::stats() {
  const PlannerStats ps = planner_->stats();
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
  f.steps = step_;
  f.tokens_generated = tokens_generated_;
  f.model = cfg_.model_name;
  account();
  f.engine_ms = engine_ms_;
  f.busy_ms = busy_ms_;
  f.pages_restored = pages_restored_;
  f.pages_swapped_out = pages_swapped_out_;
  f.pages_swapped_in = pages_swapped_in_;
  f.tokens_shifted = tokens_shifted_;
  f.expert_tokens = expert_tokens_;
  f.preemptions = ps.preemptions;
  f.draining = draining_;
  if (cfg_.metrics)
    if (const StoreState store = cfg_.metrics->store_state(); store.known && !store.writable) f.store_degraded = store.reason;
  // Cascade tiers: every tier's figures; requests counted across them all
  // (the pages above are this, the last, tier's).
  if (cfg_.tier >= 0 && cfg_.metrics) {
    push_figures();
    f.tiers = cfg_.metrics->tiers();
    f.running = f.waiting = 0;
    for (const auto& t : f.tiers) f.running += t.running, f.waiting += t.waiting;
  }
  // Several workers: the pool and work figures are all of theirs together.
  if (cfg_.replica >= 0 && cfg_.metrics) {
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

messages::TierStatsFields Scheduler::tier_stats() {
  const PlannerStats ps = planner_->stats();
  messages::TierStatsFields t;
  t.name = cfg_.tier_name;
  t.requests = requests_in_;
  t.escalated_in = escalated_in_;
  t.escalations = escalations_out_;
  t.tokens = tokens_generated_;
  t.forward_tokens = forward_tokens_;
  t.steps = forward_steps_;
  t.drafted = drafted_;
  t.accepted = accepted_;
  t.running = ps.running;
  t.waiting = ps.waiting;
  t.pages_used = ps.pages_used;
  t.pages_total = ps.pages_total;
  return t;
}

}  // namespace troupe::service
