#include "actors/scheduler_actor.h"

#include <caf/send.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <map>
#include <utility>
#include <unordered_map>

#include "actors/client_gateway.h"
#include "actors/clock.h"
#include "actors/local_messages.h"
#include "engine/speculation/controller.h"
#include "engine/speculation/ngram_drafter.h"
#include "engine/stop_strings.h"
#include "messages/draft_frames.h"
#include "messages/step_frames.h"

namespace troupe::actors {
namespace {

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

struct RequestInfo {
  std::string peer;
  uint64_t client_id = 0;
  messages::SamplingFields sampling;
  bool logprobs = false;
  bool ignore_eos = false;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopStrings> stops;
  int64_t accepted_ns = 0, scheduled_ns = 0, first_token_ns = 0, last_token_ns = 0;
  int32_t completion = 0;
  int32_t verifier_generation = -1;  // planner preemption count when the verifier last got its sampling
  int32_t sample = 0;                // index among the request's n samples
  int32_t forks_pending = 0;         // samples still to fork once the prompt is computed
  std::string session_id;            // a session turn: committed before its Done
  std::vector<ChatMessage> turn_messages;
  std::string answer;                // a session turn's streamed text
  caf::actor sink;                   // the server's own requests (job items) answer here
  int32_t persisted_pages = 0;       // a session turn's leading prompt pages already stored
  std::unique_ptr<SpeculationController> spec;  // speculating requests only
  int32_t max_draft = 0;
  DraftSource drafted_with = DraftSource::none;  // the source of the window in flight
  // The draft model: how much of the history it holds for this sequence
  // (0: send all of it), whether it knows the sequence at all, and the q of
  // the drafts it proposed for this step.
  int32_t draft_synced = 0;
  bool drafter_knows = false;
  std::vector<messages::DraftDistribution> draft_q;
};

// A session's pages on their way to the store: read by the next step's
// exports, then sent to the persistence actor.
struct PendingSpill {
  std::string session_id;
  std::vector<int32_t> tokens;  // full pages of the history
  int32_t first = 0;            // index of pages[0] in it
  std::vector<int32_t> pages;
};

// Restored pages adopted into the prefix cache, written by the next step.
struct PendingRestore {
  std::vector<int32_t> tokens;  // the prefix they hold (whole pages)
  std::vector<messages::PageBytes> pages;
};

// A preempted sequence's pages in host memory until it runs again.
struct SwappedOut {
  std::vector<int32_t> tokens;
  std::vector<std::string> data;  // lossless (KvPageCodec::fp16)
  int64_t bytes = 0;
};

struct IdleSession {
  std::vector<int32_t> tokens;
  int64_t since_ns = 0;
};

}  // namespace

struct SchedulerState {
  SchedulerConfig cfg;
  PagePool pool;
  BatchPlanner planner;
  std::unordered_map<uint64_t, RequestInfo> requests;       // by sequence id
  // (peer, client id) -> the request's sequences: one, or one per sample (n > 1)
  std::map<std::pair<std::string, uint64_t>, std::vector<uint64_t>> ids;
  uint64_t next_seq = 1;
  uint64_t step = 0;
  bool in_flight = false;
  std::vector<uint64_t> in_step;   // sequences of the step in flight
  std::vector<uint64_t> forget;    // ended sequences the verifier may drop
  std::vector<std::pair<uint64_t, bool>> deferred;  // (sequence, tell the client) ended during a step
  std::vector<PendingSpill> spills, spills_in_step;
  std::vector<PendingRestore> restores, restores_in_step;
  std::map<std::string, IdleSession> idle_sessions;  // ended a turn; pages cached until idle
  bool step_has_slices = false;
  std::vector<PreemptedPages> swaps_in_step;  // swap-outs read by the step in flight
  std::map<uint64_t, SwappedOut> swapped;     // by sequence
  int64_t swapped_bytes = 0;
  uint64_t pages_spilled = 0, pages_restored = 0, pages_swapped_out = 0, pages_swapped_in = 0;
  NgramDrafter drafter;
  StepCostModel step_cost;  // the verifier's step time by tokens, for the speculation controllers

  // The draft model: drafts per sequence in flight, its measured cost, and
  // sequences it may forget.
  std::vector<uint64_t> drafting;
  std::vector<uint64_t> draft_forget;
  double draft_round_ms = 0;
  DraftCatchUpCost draft_catch_up;
  int64_t plan_behind_tokens = 0;  // tokens the plan in flight asks the draft model to read
  int64_t draft_paused_until_ns = 0;  // after a failure, drafting pauses a while

  // Drafts for every speculating sequence about to decode, as its controller
  // chooses for this step's load. N-gram drafts are set at once; those the
  // draft model is to propose are returned as a DraftPlan's sequences (and
  // listed in `drafting`).
  std::vector<messages::DraftSequenceSpec> propose_drafts() {
    int32_t decoding = 0;
    for (const auto& [seq, r] : requests) {
      const PlannedSequence* s = planner.find(seq);
      decoding += s && s->state == RequestState::running;
    }
    const bool drafter_up = cfg.drafter && steady_ns() >= draft_paused_until_ns;
    std::vector<messages::DraftSequenceSpec> model;
    drafting.clear();
    plan_behind_tokens = 0;
    // The step's tokens so far: each sequence's drafts are priced on top of
    // those chosen before it.
    int64_t step_tokens = std::max(1, decoding);
    for (auto& [seq, r] : requests) {
      r.drafted_with = DraftSource::none;
      r.draft_q.clear();
      if (!r.spec) continue;
      const PlannedSequence* s = planner.find(seq);
      if (!s || s->state != RequestState::running || static_cast<int64_t>(s->tokens.size()) - s->computed != 1) continue;
      const int32_t room = std::min(r.max_draft, r.sampling.max_tokens - r.completion - 1);
      std::vector<int32_t> drafts = room > 0 ? drafter.propose(s->tokens, room) : std::vector<int32_t>();
      const auto tokens = static_cast<int32_t>(s->tokens.size());
      const int32_t start = r.draft_synced <= tokens ? r.draft_synced : 0;
      auto choice = r.spec->choose(static_cast<int32_t>(drafts.size()), std::max(1, decoding), step_cost, draft_round_ms,
                                   step_tokens, draft_catch_up.ms(tokens - start));
      step_tokens += choice.k;
      if (choice.source == DraftSource::model) {
        drafts.clear();
        if (drafter_up && room > 0) {
          plan_behind_tokens += tokens - start;
          model.push_back({seq, start, std::span<const int32_t>(s->tokens).subspan(static_cast<size_t>(start)),
                           std::min(choice.k, room), start == 0 ? &r.sampling : nullptr});
          drafting.push_back(seq);
          r.draft_synced = tokens;
          r.drafter_knows = true;
        }
        choice.k = 0;  // set when the draft model answers
      }
      drafts.resize(static_cast<size_t>(choice.k));
      r.drafted_with = choice.k > 0 ? choice.source : DraftSource::none;
      planner.set_drafts(seq, std::move(drafts));
    }
    return model;
  }

  // The draft model's answer to the plan of `drafting`: its drafts join
  // their sequences' windows. Any failure only costs this step's drafts.
  void take_drafts(const std::string& bytes, std::string error) {
    const auto* res = error.empty() ? messages::check_draft_result(bytes) : nullptr;
    if (error.empty() && !res) error = "the draft model sent an unreadable result";
    if (res && res->error()) error = res->error()->str();
    if (res && error.empty() && (res->step() != step + 1 || !res->proposals() || res->proposals()->size() != drafting.size()))
      error = "the draft model's result does not answer its plan";
    if (!error.empty()) {
      std::fprintf(stderr, "troupe: draft model: %s; drafting pauses for 5 s\n", error.c_str());
      draft_paused_until_ns = steady_ns() + 5'000'000'000LL;
      for (uint64_t seq : drafting)
        if (auto r = requests.find(seq); r != requests.end()) r->second.draft_synced = 0;  // resend all next time
      return;
    }
    if (res->round_ms() > 0) draft_round_ms = draft_round_ms > 0 ? 0.7 * draft_round_ms + 0.3 * res->round_ms() : res->round_ms();
    draft_catch_up.observe(res->catch_up_ms(), plan_behind_tokens);
    const auto n_vocab = static_cast<int32_t>(cfg.tokenizer->size());
    for (size_t i = 0; i < drafting.size(); ++i) {
      const auto* p = res->proposals()->Get(static_cast<uint32_t>(i));
      auto r = requests.find(drafting[i]);
      const PlannedSequence* s = planner.find(drafting[i]);
      if (r == requests.end() || !s || p->sequence_id() != drafting[i]) continue;
      if (p->resync()) {
        r->second.draft_synced = 0;
        continue;
      }
      if (!p->tokens() || p->tokens()->size() == 0 || s->state != RequestState::running) continue;
      std::vector<int32_t> drafts(p->tokens()->begin(), p->tokens()->end());
      if (static_cast<int32_t>(drafts.size()) > r->second.max_draft ||
          std::any_of(drafts.begin(), drafts.end(), [&](int32_t t) { return t < 0 || t >= n_vocab; }))
        continue;
      try {
        r->second.draft_q =
            messages::read_draft_q(p->q_sizes(), p->q_tokens(), p->q_probs(), static_cast<int32_t>(drafts.size()), n_vocab);
      } catch (const std::invalid_argument&) {
        continue;
      }
      r->second.drafted_with = DraftSource::model;
      planner.set_drafts(drafting[i], std::move(drafts));
    }
  }

  uint64_t tokens_generated = 0;
  double engine_ms = 0;        // sum of the verifier's step times
  double busy_ms = 0;          // wall time with requests in the system
  int64_t busy_since_ns = 0;   // 0 while idle

  // Busy-time accounting: call after anything that may start or end work.
  void account() {
    const bool busy = !planner.idle();
    const int64_t now = steady_ns();
    if (busy_since_ns) busy_ms += ms(now - busy_since_ns);
    busy_since_ns = busy ? now : 0;
  }

  explicit SchedulerState(SchedulerConfig c)
      : cfg(std::move(c)), pool(cfg.kv_pages), planner(pool, cfg.page_size, cfg.planner) {}

  void send(const RequestInfo& r, const messages::Bytes& b) { reply(r.peer, r.sink, r.client_id, b); }
  void reply(const std::string& peer, const caf::actor& sink, uint64_t client_id, const messages::Bytes& b) {
    if (sink) caf::anon_send(sink, job_item_atom::value, client_id, b);
    else cfg.gateway->send(peer, b);
  }
  // A finished session turn: its computed full pages not yet stored go to
  // the store (read by the next step, before anything can reuse them).
  void queue_spill(const RequestInfo& r, const PlannedSequence& s) {
    const int32_t full = s.computed / cfg.page_size;
    std::vector<int32_t> tokens(s.tokens.begin(), s.tokens.begin() + static_cast<int64_t>(full) * cfg.page_size);
    if (cfg.kv_transfer && full > r.persisted_pages) {
      const auto table = s.kv.block_table();
      PendingSpill p{r.session_id, tokens, r.persisted_pages,
                     std::vector<int32_t>(table.begin() + r.persisted_pages, table.begin() + full)};
      spills.push_back(std::move(p));
    }
    idle_sessions[r.session_id] = {std::move(tokens), steady_ns()};
  }

  // Restored pages of an admitted session turn: into the prefix cache now,
  // their contents written by the next step (before its forward).
  void restore(std::span<const int32_t> prompt, std::vector<std::string>& data) {
    if (!cfg.kv_transfer || data.empty()) return;
    const int32_t n = static_cast<int32_t>(data.size());
    for (const auto& d : data)
      if (static_cast<int64_t>(d.size()) != cfg.page_bytes) return;  // not this layout: recompute instead
    PendingRestore r;
    r.tokens.assign(prompt.begin(), prompt.begin() + std::min<int64_t>(prompt.size(), static_cast<int64_t>(n) * cfg.page_size));
    for (const auto& [index, page] : planner.adopt_prefix(prompt, n)) r.pages.push_back({page, std::move(data[index])});
    pages_restored += r.pages.size();
    if (!r.pages.empty()) restores.push_back(std::move(r));
  }

  void forget_swap(uint64_t seq) {
    auto it = swapped.find(seq);
    if (it == swapped.end()) return;
    swapped_bytes -= it->second.bytes;
    swapped.erase(it);
  }

  // The head of the queue, if preempted with its pages swapped out, gets
  // them back into the prefix cache (written by the next step) once the
  // pool has room for them; its admission then skips their recompute.
  void swap_in() {
    if (swapped.empty()) return;
    int32_t room = -1;  // free + evictable pages, counted once (stats() walks the cache)
    for (auto it = swapped.begin(); it != swapped.end();) {
      const PlannedSequence* s = planner.find(it->first);
      if (!s || s->state != RequestState::waiting) {  // gone, or running again on its cached pages
        if (!s || s->state == RequestState::finished) {
          swapped_bytes -= it->second.bytes;
          it = swapped.erase(it);
          continue;
        }
        ++it;
        continue;
      }
      const int32_t n = static_cast<int32_t>(it->second.data.size());
      if (planner.queue_position(it->first) != 0) {
        ++it;
        continue;
      }
      if (room < 0) {
        const PlannerStats ps = planner.stats();
        room = ps.pages_free + ps.pages_cached;
      }
      if (room < n + 1) {
        ++it;
        continue;
      }
      PendingRestore r;
      r.tokens = it->second.tokens;
      for (const auto& [index, page] : planner.adopt_prefix(it->second.tokens, n))
        r.pages.push_back({page, std::move(it->second.data[index])});
      pages_swapped_in += r.pages.size();
      if (!r.pages.empty()) restores.push_back(std::move(r));
      swapped_bytes -= it->second.bytes;
      it = swapped.erase(it);
    }
  }

  // Housekeeping: idle sessions' cached pages go back to the pool.
  void drop_idle() {
    const int64_t now = steady_ns();
    for (auto it = idle_sessions.begin(); it != idle_sessions.end();) {
      if (now - it->second.since_ns < std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.session_idle).count()) {
        ++it;
        continue;
      }
      planner.drop_prefix(it->second.tokens);
      it = idle_sessions.erase(it);
    }
  }

  // A session turn that ends without being stored frees its session.
  void release_session(const std::string& session_id) {
    if (!session_id.empty() && cfg.persistence) caf::anon_send(cfg.persistence, session_release_atom::value, session_id);
  }

  // Ends a sequence between steps: Done (unless the client is gone), pages freed.
  void end(uint64_t seq, wire::FinishReason reason, bool tell) {
    auto it = requests.find(seq);
    if (it == requests.end()) return;
    RequestInfo& r = it->second;
    if (tell) {
      if (reason != wire::FinishReason::stop_string && reason != wire::FinishReason::cancelled) {
        const std::string rest = r.stops->push(r.decoder->finish()) + r.stops->finish();
        if (!rest.empty()) send(r, messages::tokens_response(r.client_id, rest, {}, {}, r.sample));
        if (!r.session_id.empty()) r.answer += rest;
      }
      // Samples of an n > 1 request that were never forked end with it.
      for (int32_t i = 1; i <= r.forks_pending; ++i) {
        messages::DoneFields unforked;
        unforked.reason = reason == wire::FinishReason::cancelled ? reason : wire::FinishReason::stop;
        unforked.sample = i;
        send(r, messages::done_response(r.client_id, unforked));
      }
      messages::DoneFields d;
      d.reason = reason;
      d.sample = r.sample;
      if (const PlannedSequence* s = planner.find(seq)) {
        d.prompt_tokens = s->prompt_tokens;
        d.cached_prompt_tokens = s->cached_prompt_tokens;
      }
      d.completion_tokens = r.completion;
      const int64_t now = steady_ns();
      d.queue_ms = r.scheduled_ns ? ms(r.scheduled_ns - r.accepted_ns) : ms(now - r.accepted_ns);
      d.ttft_ms = r.first_token_ns ? ms(r.first_token_ns - r.accepted_ns) : 0;
      d.per_token_ms = r.completion > 1 ? ms(r.last_token_ns - r.first_token_ns) / (r.completion - 1) : 0;
      d.total_ms = ms(now - r.accepted_ns);
      if (r.spec && r.spec->stats().verify_steps > 0) {
        const SpeculationStats& sp = r.spec->stats();
        d.speculated = true;
        d.spec_source = draft_source_name(sp.last_source);
        d.spec_drafted = static_cast<int32_t>(sp.drafted);
        d.spec_accepted = static_cast<int32_t>(sp.accepted);
        d.spec_windows = static_cast<int32_t>(sp.verify_steps);
      }
      if (!r.session_id.empty() && reason != wire::FinishReason::cancelled && cfg.persistence) {
        // The persistence actor sends the Done once the turn is durable.
        SessionCommit c;
        c.peer = r.peer;
        c.client_id = r.client_id;
        c.session_id = r.session_id;
        c.messages = std::move(r.turn_messages);
        c.messages.push_back({"assistant", std::move(r.answer)});
        if (const PlannedSequence* s = planner.find(seq)) {
          c.tokens = s->tokens;
          queue_spill(r, *s);
        }
        c.sampling = r.sampling;
        c.done = d;
        caf::anon_send(cfg.persistence, session_commit_atom::value, std::move(c));
        r.session_id.clear();
      } else {
        send(r, messages::done_response(r.client_id, d));
      }
    }
    release_session(r.session_id);
    forget_swap(seq);
    planner.finish(seq);
    forget.push_back(seq);
    if (r.drafter_knows) draft_forget.push_back(seq);
    leave_group(r, seq);
    requests.erase(it);
  }

  void leave_group(const RequestInfo& r, uint64_t seq) {
    auto g = ids.find({r.peer, r.client_id});
    if (g == ids.end()) return;
    std::erase(g->second, seq);
    if (g->second.empty()) ids.erase(g);
  }

  void end_or_defer(uint64_t seq, bool tell) {
    if (in_flight) deferred.emplace_back(seq, tell);
    else end(seq, wire::FinishReason::cancelled, tell);
  }

  // Ends the whole request of `seq` (every sample) with one Error.
  void fail(uint64_t seq, wire::ErrorCode code, const std::string& message) {
    auto it = requests.find(seq);
    if (it == requests.end()) return;
    send(it->second, messages::error_response(it->second.client_id, code, message));
    release_session(it->second.session_id);
    auto g = ids.find({it->second.peer, it->second.client_id});
    const std::vector<uint64_t> members = g != ids.end() ? g->second : std::vector<uint64_t>{seq};
    for (uint64_t m : members) {
      auto mi = requests.find(m);
      if (mi == requests.end()) continue;
      forget_swap(m);
      planner.finish(m);
      forget.push_back(m);
      if (mi->second.drafter_knows) draft_forget.push_back(m);
      leave_group(mi->second, m);
      requests.erase(mi);
    }
  }

  // The prompt of a request with n samples is computed: fork the other n - 1
  // from it, sharing its pages (each recomputes the last prompt position
  // into its own copy of that page and samples from there).
  void fork_samples(uint64_t seq) {
    // A copy, not a reference: adding children may rehash `requests`.
    const RequestInfo& p = requests.at(seq);
    struct {
      std::string peer;
      uint64_t client_id;
      messages::SamplingFields sampling;
      bool logprobs, ignore_eos;
      int64_t accepted_ns, scheduled_ns;
      int32_t forks;
    } parent{p.peer, p.client_id, p.sampling, p.logprobs, p.ignore_eos, p.accepted_ns, p.scheduled_ns, p.forks_pending};
    const PlannedSequence& ps = *planner.find(seq);
    std::vector<uint64_t>& group = ids.at({parent.peer, parent.client_id});
    for (int32_t i = 1; i <= parent.forks; ++i) {
      const uint64_t child = next_seq++;
      if (!planner.fork(seq, child, ps.prompt_tokens - 1)) break;
      RequestInfo r;
      r.peer = parent.peer;
      r.client_id = parent.client_id;
      r.sampling = parent.sampling;
      r.sampling.seed = parent.sampling.seed + static_cast<uint64_t>(i);  // distinct draws
      r.logprobs = parent.logprobs;
      r.ignore_eos = parent.ignore_eos;
      r.decoder = std::make_unique<StreamDecoder>(*cfg.tokenizer);
      r.stops = std::make_unique<StopStrings>(r.sampling.stop);
      r.accepted_ns = parent.accepted_ns;
      r.scheduled_ns = parent.scheduled_ns;
      r.sample = i;
      group.push_back(child);
      requests.emplace(child, std::move(r));
    }
    requests.at(seq).forks_pending = 0;
  }

  // One sampled token reaches its request.
  void deliver(uint64_t seq, int32_t token, float logprob) {
    auto it = requests.find(seq);
    if (it == requests.end()) return;
    RequestInfo& r = it->second;
    const int64_t now = steady_ns();
    if (!r.first_token_ns) r.first_token_ns = now;
    r.last_token_ns = now;
    if (!r.ignore_eos && cfg.tokenizer->is_end_of_generation(token)) return end(seq, wire::FinishReason::stop, true);
    ++r.completion;
    ++tokens_generated;
    const std::string text = r.stops->push(r.decoder->push(token));
    if (!r.session_id.empty()) r.answer += text;
    const float lp[] = {logprob};
    send(r, messages::tokens_response(r.client_id, text, std::span<const int32_t>(&token, 1),
                                      r.logprobs ? std::span<const float>(lp) : std::span<const float>(), r.sample));
    const PlannedSequence* s = planner.find(seq);
    if (r.stops->stopped()) end(seq, wire::FinishReason::stop_string, true);
    else if (r.completion >= r.sampling.max_tokens) end(seq, wire::FinishReason::length, true);
    else if (s && static_cast<int64_t>(s->tokens.size()) >= cfg.planner.max_context)
      end(seq, wire::FinishReason::context_full, true);
  }
};

namespace {

void run_step(caf::stateful_actor<std::shared_ptr<SchedulerState>>* self);

void on_result(caf::stateful_actor<std::shared_ptr<SchedulerState>>* self, const std::string& bytes,
               const std::string& failure) {
  SchedulerState& st = *self->state;
  st.in_flight = false;
  const auto* res = failure.empty() ? messages::check_step_result(bytes) : nullptr;
  std::string error = failure;
  if (failure.empty() && !res) error = "the verifier sent an unreadable step result";
  if (res && res->error()) error = res->error()->str();
  if (!error.empty()) {
    // The step's KV is unknown: its requests end with the reason; others go on.
    for (uint64_t seq : st.in_step) st.fail(seq, wire::ErrorCode::internal, "engine step failed: " + error);
    // Restored pages may not have been written: they must not be reused.
    for (const auto& r : st.restores_in_step) st.planner.drop_prefix(r.tokens);
  } else {
    // Exported pages, in the order the plan asked for them, to the store.
    const auto* exported = res->exported();
    size_t next = 0;
    for (auto& sp : st.spills_in_step) {
      KvSpill k{sp.session_id, std::move(sp.tokens), sp.first, {}};
      for (size_t i = 0; i < sp.pages.size() && exported && next < exported->size(); ++i, ++next) {
        const auto* d = exported->Get(static_cast<uint32_t>(next))->data();
        if (exported->Get(static_cast<uint32_t>(next))->page() != sp.pages[i] || !d) break;
        k.data.emplace_back(reinterpret_cast<const char*>(d->data()), d->size());
      }
      if (k.data.size() == sp.pages.size())
        // Counted once written: pages_spilled is what the store holds.
        self->request(st.cfg.persistence, caf::infinite, kv_spill_atom::value, std::move(k))
            .then([self](int32_t written) { self->state->pages_spilled += static_cast<uint64_t>(written); });
    }
    const auto* swapped = res->swapped();
    next = 0;
    for (auto& sw : st.swaps_in_step) {
      SwappedOut out{std::move(sw.tokens), {}, 0};
      for (size_t i = 0; i < sw.pages.size() && swapped && next < swapped->size(); ++i, ++next) {
        const auto* d = swapped->Get(static_cast<uint32_t>(next))->data();
        if (!d) break;
        out.data.emplace_back(reinterpret_cast<const char*>(d->data()), d->size());
        out.bytes += static_cast<int64_t>(d->size());
      }
      const PlannedSequence* s = st.planner.find(sw.id);
      if (out.data.size() != sw.pages.size() || !s || s->state != RequestState::waiting) continue;
      st.pages_swapped_out += out.data.size();
      st.forget_swap(sw.id);
      st.swapped_bytes += out.bytes;
      st.swapped.emplace(sw.id, std::move(out));
    }
    try {
      st.engine_ms += res->forward_ms();
      std::vector<std::vector<int32_t>> sampled;  // per wanting slice: accepted drafts, then the next token
      std::vector<std::pair<uint64_t, float>> who;
      if (res->sampled())
        for (const auto* s : *res->sampled()) {
          std::vector<int32_t> kept;
          if (s->accepted()) kept.assign(s->accepted()->begin(), s->accepted()->end());
          kept.push_back(s->token());
          sampled.push_back(std::move(kept));
          who.emplace_back(s->sequence_id(), s->logprob());
        }
      int64_t step_tokens = 0;
      std::map<uint64_t, int32_t> window_drafts;
      for (const PlannedSlice& p : st.planner.planned()) {
        step_tokens += p.count;
        if (p.drafts > 0) window_drafts[p.id] = p.drafts;
      }
      if (step_tokens > 0) st.step_cost.observe(step_tokens, res->forward_ms());
      // The result must answer this step, slice for slice.
      std::vector<uint64_t> wanted;
      for (const PlannedSlice& p : st.planner.planned())
        if (p.wants_token) wanted.push_back(p.id);
      bool matches = res->step() == st.step && wanted.size() == who.size();
      for (size_t i = 0; matches && i < who.size(); ++i) matches = who[i].first == wanted[i];
      for (size_t i = 0; matches && i < sampled.size(); ++i)
        for (int32_t t : sampled[i]) matches = matches && t >= 0 && static_cast<size_t>(t) < st.cfg.tokenizer->size();
      if (!matches) throw std::runtime_error("the verifier's result does not answer step " + std::to_string(st.step));
      if (st.step_has_slices) st.planner.commit(sampled);
      auto deferred = [&](uint64_t seq) {
        return std::any_of(st.deferred.begin(), st.deferred.end(), [&](const auto& d) { return d.first == seq; });
      };
      for (const auto& [seq, lp] : who) {  // before any sample can end: forks need the parent's pages
        auto r = st.requests.find(seq);
        if (r != st.requests.end() && r->second.forks_pending > 0 && !deferred(seq)) st.fork_samples(seq);
      }
      for (size_t i = 0; i < sampled.size(); ++i) {
        const uint64_t seq = who[i].first;
        if (auto r = st.requests.find(seq); r != st.requests.end() && r->second.spec && window_drafts.count(seq))
          r->second.spec->observe(r->second.drafted_with, window_drafts[seq], static_cast<int32_t>(sampled[i].size()) - 1);
        for (int32_t token : sampled[i]) {
          if (!st.requests.count(seq)) break;  // ended (stop, length) part way through the window
          st.deliver(seq, token, who[i].second);
        }
      }
    } catch (const std::exception& e) {
      // A bad result (or a token the tokenizer rejects) must not stop the
      // scheduler: the step's requests end with the reason, others go on.
      for (uint64_t seq : st.in_step) st.fail(seq, wire::ErrorCode::internal, std::string("engine step failed: ") + e.what());
    }
  }
  st.in_step.clear();
  st.spills_in_step.clear();
  st.restores_in_step.clear();
  st.swaps_in_step.clear();
  for (auto [seq, tell] : st.deferred) st.end(seq, wire::FinishReason::cancelled, tell);
  st.deferred.clear();
  run_step(self);
  st.account();
}

// Plans the step and sends it to the verifier. `retry`: a request that
// can never get its pages was failed; plan again.
enum class Sent { step, nothing, retry };

Sent send_step(caf::stateful_actor<std::shared_ptr<SchedulerState>>* self) {
  SchedulerState& st = *self->state;
  const bool transfers = !st.spills.empty() || !st.restores.empty();
  static const std::vector<PlannedSlice> kNone;
  const std::vector<PlannedSlice>* planned = &kNone;
  if (!st.planner.idle()) {
    planned = &st.planner.plan();
    if (planned->empty()) {
      // Nothing running and the head of the queue cannot get its pages: it never will.
      const PlannerStats ps = st.planner.stats();
      if (ps.running == 0 && ps.waiting > 0) {
        uint64_t head = 0;
        int32_t best = INT32_MAX;
        for (const auto& [seq, r] : st.requests) {
          const int32_t pos = st.planner.queue_position(seq);
          if (pos >= 0 && pos < best) best = pos, head = seq;
        }
        st.fail(head, wire::ErrorCode::too_long, "the request needs more KV pages than the server has");
        return Sent::retry;
      }
      if (!transfers) return Sent::nothing;
    }
  } else if (!transfers) {
    return Sent::nothing;
  }
  const std::vector<PlannedSlice>& slices = *planned;
  st.step_has_slices = !slices.empty();
  // Sequences this plan preempted: their pages are read (before this step
  // can reuse them) and kept in host memory, within the swap budget.
  std::vector<int32_t> swap_outs;
  for (auto& p : st.planner.take_preempted()) {
    const int64_t need = static_cast<int64_t>(p.pages.size()) * st.cfg.page_bytes * 3;  // FP16: at most 2.5x a spilled page
    if (!st.cfg.kv_transfer || !st.cfg.planner.prefix_caching || p.pages.empty() ||
        st.swapped_bytes + need > st.cfg.swap_bytes)
      continue;
    swap_outs.insert(swap_outs.end(), p.pages.begin(), p.pages.end());
    st.swaps_in_step.push_back(std::move(p));
  }
  const Batch batch = slices.empty() ? Batch{} : st.planner.batch();
  std::vector<messages::SliceSpec> specs;
  specs.reserve(slices.size());
  st.in_step.clear();
  const int64_t now = steady_ns();
  for (size_t i = 0; i < slices.size(); ++i) {
    RequestInfo& r = st.requests.at(slices[i].id);
    if (!r.scheduled_ns) r.scheduled_ns = now;
    const BatchSequence& b = batch.sequences[i];
    // The verifier learns a sequence's sampling (and any cached prefix) with
    // its first slice, and again after a preemption restarts it.
    const PlannedSequence& ps = *st.planner.find(slices[i].id);
    const bool introduce = r.verifier_generation != ps.preemptions;
    r.verifier_generation = ps.preemptions;
    // The draft model's q for the drafts the window kept (the planner may cut it short).
    std::span<const messages::DraftDistribution> q;
    if (slices[i].drafts > 0 && r.drafted_with == DraftSource::model && !r.draft_q.empty())
      q = std::span<const messages::DraftDistribution>(r.draft_q).first(static_cast<size_t>(slices[i].drafts));
    specs.push_back({slices[i].id, slices[i].start, b.tokens, b.block_table, slices[i].wants_token,
                     introduce ? &r.sampling : nullptr,
                     introduce ? std::span(ps.tokens).first(static_cast<size_t>(slices[i].start)) : std::span<const int32_t>(),
                     r.logprobs, slices[i].drafts, q});
    st.in_step.push_back(slices[i].id);
  }
  std::vector<std::pair<int32_t, int32_t>> copies;
  if (!slices.empty())
    for (const PageCopy& c : st.planner.copies()) copies.emplace_back(c.src, c.dst);
  // Spills and restores travel with this step (exports read before anything else).
  std::vector<int32_t> exports;
  for (const auto& sp : st.spills) exports.insert(exports.end(), sp.pages.begin(), sp.pages.end());
  std::vector<messages::PageBytes> imports;
  for (auto& r : st.restores)
    for (auto& p : r.pages) imports.push_back(std::move(p));
  st.spills_in_step = std::exchange(st.spills, {});
  st.restores_in_step = std::exchange(st.restores, {});
  const messages::Bytes plan =
      messages::step_plan(++st.step, specs, st.forget, copies, exports, imports, swap_outs, st.cfg.spill_codec);
  st.forget.clear();
  st.in_flight = true;
  self->request(st.cfg.verifier, caf::infinite, step_atom::value, plan)
      .then([self](const std::string& result) { on_result(self, result, ""); },
            [self](caf::error& err) { on_result(self, "", "verifier unreachable: " + self->system().render(err)); });
  return Sent::step;
}

void on_drafts(caf::stateful_actor<std::shared_ptr<SchedulerState>>* self, const std::string& bytes,
               const std::string& failure) {
  SchedulerState& st = *self->state;
  st.in_flight = false;
  st.take_drafts(bytes, failure);
  // Cancels that came while the draft model worked: no step is in flight now.
  for (auto [seq, tell] : st.deferred) st.end(seq, wire::FinishReason::cancelled, tell);
  st.deferred.clear();
  if (send_step(self) == Sent::retry) run_step(self);
  st.account();
}

void run_step(caf::stateful_actor<std::shared_ptr<SchedulerState>>* self) {
  SchedulerState& st = *self->state;
  while (!st.in_flight) {
    const bool transfers = !st.spills.empty() || !st.restores.empty();
    if (st.planner.idle() && !transfers) return;
    if (!st.planner.idle()) {
      if (st.cfg.kv_transfer) st.swap_in();
      const auto model = st.propose_drafts();
      if (!model.empty() || (st.cfg.drafter && !st.draft_forget.empty())) {
        const messages::Bytes plan = messages::draft_plan(st.step + 1, model, st.draft_forget);
        st.draft_forget.clear();
        if (model.empty()) {  // only sequences to forget: no need to wait
          self->request(st.cfg.drafter, caf::infinite, propose_atom::value, plan)
              .then([](const std::string&) {}, [](caf::error&) {});
        } else {
          // The step goes out when the draft model answers.
          st.in_flight = true;
          self->request(st.cfg.drafter, caf::infinite, propose_atom::value, plan)
              .then([self](const std::string& result) { on_drafts(self, result, ""); },
                    [self](caf::error& err) { on_drafts(self, "", "unreachable: " + self->system().render(err)); });
          return;
        }
      }
    }
    if (send_step(self) != Sent::retry) return;
  }
}

}  // namespace

caf::behavior scheduler_actor(caf::stateful_actor<std::shared_ptr<SchedulerState>>* self, SchedulerConfig config) {
  self->state = std::make_shared<SchedulerState>(std::move(config));
  self->delayed_send(self, std::chrono::seconds(5), tick_atom::value);
  if (self->state->cfg.drafter)  // what a drafting step costs, before the first one
    self->request(self->state->cfg.drafter, caf::infinite, propose_atom::value, messages::draft_plan(0, {}, {}))
        .then(
            [self](const std::string& bytes) {
              const auto* r = messages::check_draft_result(bytes);
              if (r && r->round_ms() > 0 && self->state->draft_round_ms == 0) self->state->draft_round_ms = r->round_ms();
            },
            [](caf::error&) {});
  return {
      [self](admit_atom, AdmitRequest& a) {
        SchedulerState& st = *self->state;
        const auto key = std::make_pair(a.peer, a.client_id);
        auto refuse = [&](wire::ErrorCode code, const std::string& message) {
          st.reply(a.peer, a.sink, a.client_id, messages::error_response(a.client_id, code, message));
          st.release_session(a.session_id);
        };
        if (st.ids.count(key))
          return refuse(wire::ErrorCode::duplicate_id,
                        "request id " + std::to_string(a.client_id) + " is already running on this connection");
        const uint64_t seq = st.next_seq++;
        const int32_t prompt_tokens = static_cast<int32_t>(a.prompt.size());
        if (!a.session_id.empty()) st.idle_sessions.erase(a.session_id);
        st.restore(a.prompt, a.restore_pages);
        switch (st.planner.add(seq, a.priority, std::move(a.prompt), a.sampling.max_tokens)) {
          case BatchPlanner::AddResult::queue_full:
            return refuse(wire::ErrorCode::queue_full, "the queue is full (" + std::to_string(st.cfg.planner.max_waiting) +
                                                           " waiting); try again later");
          case BatchPlanner::AddResult::too_long:
          case BatchPlanner::AddResult::duplicate:
            return refuse(wire::ErrorCode::too_long, "the prompt does not fit the context");
          case BatchPlanner::AddResult::accepted: break;
        }
        RequestInfo r;
        r.peer = a.peer;
        r.client_id = a.client_id;
        r.sampling = std::move(a.sampling);
        r.logprobs = a.logprobs;
        r.ignore_eos = a.ignore_eos;
        r.forks_pending = a.samples - 1;
        r.decoder = std::make_unique<StreamDecoder>(*st.cfg.tokenizer);
        r.stops = std::make_unique<StopStrings>(r.sampling.stop);
        r.accepted_ns = a.accepted_ns;
        r.session_id = std::move(a.session_id);
        r.turn_messages = std::move(a.turn_messages);
        r.sink = std::move(a.sink);
        r.persisted_pages = a.persisted_pages;
        if (a.speculation != SpeculationMode::off && a.samples == 1) {
          r.spec = std::make_unique<SpeculationController>(a.speculation, a.max_draft, static_cast<bool>(st.cfg.drafter));
          r.max_draft = std::clamp(a.max_draft, 1, 8);
        }
        st.send(r, messages::accepted_response(a.client_id, prompt_tokens, st.planner.queue_position(seq)));
        st.ids.emplace(key, std::vector<uint64_t>{seq});
        st.requests.emplace(seq, std::move(r));
        st.account();
        run_step(self);
      },
      [self](cancel_atom, const std::string& peer, uint64_t id, uint64_t target) {
        SchedulerState& st = *self->state;
        auto it = st.ids.find({peer, target});
        if (it == st.ids.end()) {
          if (is_internal_peer(peer)) return;  // a job item that already ended
          st.cfg.gateway->send(peer, messages::error_response(id, wire::ErrorCode::unknown_request,
                                                              "no running request " + std::to_string(target) +
                                                                  " on this connection"));
          return;
        }
        for (uint64_t seq : std::vector<uint64_t>(it->second)) st.end_or_defer(seq, true);
        run_step(self);
        st.account();
      },
      [self](gone_atom, const std::string& peer) {
        SchedulerState& st = *self->state;
        std::vector<uint64_t> mine;
        for (const auto& [key, seqs] : st.ids)
          if (key.first == peer) mine.insert(mine.end(), seqs.begin(), seqs.end());
        for (uint64_t seq : mine) st.end_or_defer(seq, false);
        run_step(self);
        st.account();
      },
      [self](tick_atom) {
        self->state->drop_idle();
        self->delayed_send(self, std::chrono::seconds(5), tick_atom::value);
      },
      [self](stats_atom, const std::string& peer, uint64_t id) {
        SchedulerState& st = *self->state;
        const PlannerStats ps = st.planner.stats();
        messages::StatsFields f;
        f.running = ps.running;
        f.waiting = ps.waiting;
        f.pages_total = ps.pages_total;
        f.pages_used = ps.pages_used;
        f.pages_cached = ps.pages_cached;
        f.pages_free = ps.pages_free;
        f.live_token_fraction = ps.live_token_fraction;
        f.steps = st.step;
        f.tokens_generated = st.tokens_generated;
        f.model = st.cfg.model_name;
        st.account();
        f.engine_ms = st.engine_ms;
        f.busy_ms = st.busy_ms;
        f.pages_spilled = st.pages_spilled;
        f.pages_restored = st.pages_restored;
        f.pages_swapped_out = st.pages_swapped_out;
        f.pages_swapped_in = st.pages_swapped_in;
        st.cfg.gateway->send(peer, messages::stats_response(id, f));
      },
  };
}

}  // namespace troupe::actors
