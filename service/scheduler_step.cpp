// The scheduler's step, top to bottom (service/scheduler.h).
//
//   schedule  next_step(): a swap-in first (fetch_swap_in), the draft
//             model's proposals (prepare_step), then build_step():
//             BatchPlanner::plan, the slices' specs, the KV pages that ride
//             the step → SchedulerPlan bytes for the actor to send
//   execute   the actor sends them to the draft model (its answer:
//             apply_drafts(), then next_step() again) or to the worker
//   update    apply(): a lost or failed worker ends or moves the step's
//             requests; else KV exports and swaps are taken, then
//             take_tokens() → take_slice() → deliver() to each stream, and
//             the cancels that waited for the step end (apply_deferred)
#include <climits>
#include <cmath>
#include <stdexcept>

#include "messages/draft_frames.h"
#include "messages/step_frames.h"
#include "service/scheduler.h"
#include "service/step_outcome.h"

namespace troupe::service {

// Schedule: what runs next, handed to the actor as bytes.
SchedulerPlan Scheduler::next_step() {
  SchedulerPlan plan;
  while (phase_ == Phase::ready || phase_ == Phase::drafted) {
    if (phase_ == Phase::ready && !prepare_step(plan)) break;
    const Built built = build_step(plan);
    phase_ = built == Built::step ? Phase::stepping : Phase::ready;
    if (built != Built::retry) break;
  }
  account();
  return plan;
}

// What a step waits for before it is built: its head's swapped-out pages,
// the draft model's proposals. False: the step waits (or there is none).
bool Scheduler::prepare_step(SchedulerPlan& plan) {
  if (planner_->idle()) return transfers_.pending();
  if (cfg_.kv_transfer && fetch_swap_in()) {
    phase_ = Phase::fetching;
    return false;
  }
  auto remaining = [this](uint64_t seq) {
    const auto& s = sequences_.at(seq).stream;
    return s.max_tokens() - s.completion();
  };
  const auto model = speculation_.propose(*planner_, remaining, now());
  if (model.empty() && !speculation_.has_forget()) return true;
  messages::Bytes bytes = messages::draft_plan(step_ + 1, model, speculation_.take_forget());
  if (model.empty()) {
    plan.draft_forget = std::move(bytes);  // only sequences to forget: no need to wait
    return true;
  }
  plan.kind = SchedulerPlan::Kind::drafts;
  plan.bytes = std::move(bytes);
  phase_ = Phase::drafting;  // the step goes out when the draft model answers
  return false;
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
  std::vector<messages::EvictionSpec> evictions;
  if (!slices.empty())
    for (const PlannedEviction& e : planner_->evictions())
      evictions.push_back({e.id, e.src, e.dst, e.length, e.keep, e.rope_offset, cfg_.planner.eviction});
  kv.evictions = evictions;
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
                     speculation_.q(slices[i].id, slices[i].drafts), grammar, s.stream.top_logprobs(), ps.evicted,
                     planner_->eviction_of(ps).on() ? cfg_.planner.eviction.window : 0});
    in_step_.push_back(slices[i].id);
  }
  return specs;
}

// Update: the step's result (or why none came) applied to every stream.
void Scheduler::apply(const std::string& result, const std::string& error_text) {
  if (phase_ != Phase::stepping) return;
  phase_ = Phase::ready;
  std::string error = error_text;
  const auto* res = error.empty() ? messages::check_step_result(result) : nullptr;
  if (error.empty() && !res) error = "the verifier sent an unreadable step result";
  // No result came, or it came from a new worker process: its KV is gone.
  if (res)
    if (std::string lost = health_.lost_in(*res); !lost.empty()) return worker_lost(lost);
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

// The update: the step's counters, then its tokens to their streams.
void Scheduler::take_tokens(const wire::step::StepResult& res) {
  if (const auto* experts = res.expert_tokens()) counters_.expert_tokens.assign(experts->begin(), experts->end());
  int64_t step_tokens = 0;
  std::map<uint64_t, int32_t> window_drafts;
  std::vector<uint64_t> wanted;
  for (const PlannedSlice& p : planner_->planned()) {
    step_tokens += p.count;
    if (p.drafts > 0) window_drafts[p.id] = p.drafts;
    if (p.wants_token) wanted.push_back(p.id);
  }
  counters_.stepped(res.forward_ms(), step_tokens);
  if (step_tokens > 0) speculation_.observe_step(step_tokens, res.forward_ms());
  if (cfg_.metrics) cfg_.metrics->step(res.forward_ms() * 1e-3, step_tokens);
  const std::vector<SliceOutcome> outcomes = read_step_outcome(res, step_, wanted, cfg_.tokenizer->size());
  if (step_has_slices_) {
    std::vector<std::vector<int32_t>> sampled;
    for (const SliceOutcome& o : outcomes) sampled.push_back(o.tokens);
    planner_->commit(sampled);
  }
  for (const SliceOutcome& o : outcomes) {  // before any sample can end: forks need the parent's pages
    auto s = sequences_.find(o.sequence);
    if (s != sequences_.end() && s->second.forks_pending > 0 && !ends_after_step(o.sequence)) fork_samples(o.sequence);
  }
  for (const SliceOutcome& o : outcomes) {
    auto w = window_drafts.find(o.sequence);
    take_slice(o, w != window_drafts.end() ? w->second : 0);
  }
}

void Scheduler::take_slice(const SliceOutcome& o, int32_t window_drafts) {
  const uint64_t seq = o.sequence;
  if (o.grammar_blocked) {  // the output so far stands; nothing the grammar refuses is sent
    if (sequences_.count(seq) && !ends_after_step(seq)) end(seq, wire::FinishReason::grammar_blocked, true);
    return;
  }
  if (window_drafts > 0) speculation_.observe_window(seq, window_drafts, static_cast<int32_t>(o.tokens.size()) - 1);
  const size_t per = o.per_token();
  for (size_t k = 0; k < o.tokens.size(); ++k) {
    if (!sequences_.count(seq)) return;  // ended (stop, length) part way through the window
    deliver(seq, o.tokens[k], o.logprob_of(k), std::span(o.top_ids).subspan(k * per, per),
            std::span(o.top_logprobs).subspan(k * per, per));
  }
  // Jump-forward: forced tokens are certain (probability 1 under the grammar).
  for (int32_t token : o.forced) {
    if (!sequences_.count(seq) || !planner_->find(seq)) return;
    planner_->extend(seq, std::span(&token, 1));
    deliver(seq, token, 0.0f);
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
  if (!s.held) counters_.tokens_generated += static_cast<uint64_t>(stream.completion() - before);  // held: when released
  const PlannedSequence* p = planner_->find(seq);
  const bool full = !finished && p && static_cast<int64_t>(p->tokens.size()) >= cfg_.planner.max_context;
  if (s.held) {
    // An answer that ends while held is judged on what it has.
    if (verdict == Verdict::hold && (finished || full)) verdict = s.watch->judge();
    if (verdict == Verdict::escalate) return escalate(seq, 0);
    if (verdict != Verdict::release) return;
    s.route.confidence = s.watch->confidence();  // kept by the small tier: the router's budget counts it
    release_held(s, t);
  } else if (cfg_.metrics && stream.completion() > before) {
    if (before == 0) cfg_.metrics->ttft(static_cast<double>(t - stream.accepted_ns()) * 1e-9);
    else if (previous > 0) cfg_.metrics->inter_token(static_cast<double>(t - previous) * 1e-9);
  }
  if (finished) return end(seq, *finished, true);
  if (full) end(seq, wire::FinishReason::context_full, true);
}

// The watch kept the small tier's answer: its held frames go out now, and
// its first token reaches the client now.
void Scheduler::release_held(Sequence& s, int64_t t) {
  counters_.tokens_generated += static_cast<uint64_t>(s.stream.completion() - s.held->before.completion());
  auto& replies = s.held->out.replies;
  out_.replies.insert(out_.replies.end(), std::make_move_iterator(replies.begin()), std::make_move_iterator(replies.end()));
  if (cfg_.metrics && s.stream.completion() > 0) cfg_.metrics->ttft(static_cast<double>(t - s.stream.accepted_ns()) * 1e-9);
  s.stream.released(t);
  s.held.reset();
}

}  // namespace troupe::service
