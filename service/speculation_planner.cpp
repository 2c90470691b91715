#include "service/speculation_planner.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace troupe::service {

void SpeculationPlanner::add(uint64_t seq, SpeculationMode mode, int32_t max_draft,
                             const messages::SamplingFields& sampling, std::string scope, int32_t prompt_tokens) {
  Sequence s;
  s.controller = std::make_unique<SpeculationController>(mode, max_draft, draft_model_, acceptance_.prior(scope));
  s.max_draft = std::clamp(max_draft, 1, 8);
  s.sampling = sampling;
  if (drafts_from_suffix(mode)) s.own = std::make_unique<SuffixTree>();
  s.scope = std::move(scope);
  s.prompt_tokens = std::max(0, prompt_tokens);
  seqs_.insert_or_assign(seq, std::move(s));
}

void SpeculationPlanner::remove(uint64_t seq, bool finished) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  if (it->second.model_knows) forget_.push_back(seq);
  acceptance_.remember(it->second.scope, it->second.controller->estimates(), it->second.controller->stats());
  if (finished && it->second.own && it->second.own->sequences() > 0) {
    const std::span<const int32_t> all = it->second.own->open_sequence();
    const auto from = std::min(all.size(), static_cast<size_t>(it->second.prompt_tokens));
    history_.record(it->second.scope, all.subspan(from));
  }
  seqs_.erase(it);
}

void SpeculationPlanner::feed_own(Sequence& r, const std::vector<int32_t>& tokens) {
  if (!r.own) return;
  if (tokens.size() < r.own_fed) {  // not the history it was fed (cannot happen: tokens only grow)
    r.own->clear();
    r.own_fed = 0;
  }
  r.own->append(std::span(tokens).subspan(r.own_fed));
  r.own_fed = tokens.size();
}

SuffixDraft SpeculationPlanner::suffix_draft(Sequence& r, const std::vector<int32_t>& tokens, int32_t room) {
  if (!r.own || room <= 0) return {};
  const SuffixTree* trees[] = {r.own.get(), history_.scope(r.scope), &history_.server()};
  const size_t tail = std::min(tokens.size(), static_cast<size_t>(r.own->depth()));
  return best_suffix_draft(trees, std::span(tokens).last(tail), room, r.own.get());
}

const SpeculationStats* SpeculationPlanner::stats(uint64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second.controller->stats();
}

std::vector<messages::DraftSequenceSpec> SpeculationPlanner::propose(BatchPlanner& planner,
                                                                     const std::function<int32_t(uint64_t)>& remaining,
                                                                     int64_t now) {
  const bool model_up = draft_model_ && now >= paused_until_ns_;
  std::vector<messages::DraftSequenceSpec> model;
  drafting_.clear();
  plan_behind_tokens_ = 0;
  // The step's tokens without windows, and the budget the prompts leave
  // (plan() gives windows only that): each sequence's drafts are priced on
  // top of the step and of the drafts chosen before it, for all the
  // sequences that wait for it.
  BatchPlanner::WindowRoom window = planner.window_room();
  const int32_t waiting_for_step = std::max(1, window.sequences);
  int64_t step_tokens = std::max(1, window.step_tokens);
  for (auto& [seq, r] : seqs_) {
    r.drafted_with = DraftSource::none;
    r.q.clear();
    const PlannedSequence* s = planner.find(seq);
    if (!s || s->state != RequestState::running || static_cast<int64_t>(s->tokens.size()) - s->computed != 1) continue;
    feed_own(r, s->tokens);  // every step, drafting or not: what it wrote joins the history whole
    const int32_t room = std::min({r.max_draft, remaining(seq) - 1, window.of(s->priority)});
    if (room <= 0) {  // its last token, or a step the prompts fill: no window to offer
      planner.set_drafts(seq, {});
      continue;
    }
    std::vector<int32_t> drafts = ngram_.propose(s->tokens, room);
    SuffixDraft suffix = suffix_draft(r, s->tokens, room);
    const auto tokens = static_cast<int32_t>(s->tokens.size());
    const int32_t start = r.draft_synced <= tokens ? r.draft_synced : 0;
    auto choice = r.controller->choose({static_cast<int32_t>(drafts.size()), static_cast<int32_t>(suffix.tokens.size())},
                                       waiting_for_step, step_cost_, round_ms_, step_tokens, catch_up_.ms(tokens - start));
    step_tokens += choice.k;
    window.spend(s->priority, std::min(choice.k, room));
    if (choice.source == DraftSource::suffix) drafts = std::move(suffix.tokens);
    if (choice.source == DraftSource::model) {
      drafts.clear();
      if (model_up) {
        plan_behind_tokens_ += tokens - start;
        model.push_back({seq, start, std::span<const int32_t>(s->tokens).subspan(static_cast<size_t>(start)),
                         std::min(choice.k, room), start == 0 ? &r.sampling : nullptr});
        drafting_.push_back(seq);
        r.draft_synced = tokens;
        r.model_knows = true;
      }
      choice.k = 0;  // set when the draft model answers
    }
    drafts.resize(static_cast<size_t>(choice.k));
    r.drafted_with = choice.k > 0 ? choice.source : DraftSource::none;
    planner.set_drafts(seq, std::move(drafts));
  }
  return model;
}

void SpeculationPlanner::fail_drafts(const std::string& error, int64_t now) {
  std::fprintf(stderr, "troupe: draft model: %s; drafting pauses for 5 s\n", error.c_str());
  paused_until_ns_ = now + kPauseAfterFailureNs;
  for (uint64_t seq : drafting_)
    if (auto r = seqs_.find(seq); r != seqs_.end()) r->second.draft_synced = 0;  // resend all next time
}

bool SpeculationPlanner::take_proposal(const wire::draft::Proposal& p, uint64_t seq, BatchPlanner& planner,
                                       int32_t n_vocab) {
  auto r = seqs_.find(seq);
  const PlannedSequence* s = planner.find(seq);
  if (r == seqs_.end() || !s || p.sequence_id() != seq) return false;
  if (p.resync()) {
    r->second.draft_synced = 0;
    return false;
  }
  if (!p.tokens() || p.tokens()->size() == 0 || s->state != RequestState::running) return false;
  std::vector<int32_t> drafts(p.tokens()->begin(), p.tokens()->end());
  if (static_cast<int32_t>(drafts.size()) > r->second.max_draft ||
      std::any_of(drafts.begin(), drafts.end(), [&](int32_t t) { return t < 0 || t >= n_vocab; }))
    return false;
  try {
    r->second.q = messages::read_draft_q(p.q_sizes(), p.q_tokens(), p.q_probs(), static_cast<int32_t>(drafts.size()), n_vocab);
  } catch (const std::invalid_argument&) {
    return false;
  }
  r->second.drafted_with = DraftSource::model;
  planner.set_drafts(seq, std::move(drafts));
  return true;
}

void SpeculationPlanner::take(const std::string& bytes, std::string error, uint64_t step, BatchPlanner& planner,
                              int32_t n_vocab, int64_t now) {
  const auto* res = error.empty() ? messages::check_draft_result(bytes) : nullptr;
  if (error.empty() && !res) error = "the draft model sent an unreadable result";
  if (res && res->error()) error = res->error()->str();
  if (res && error.empty() && (res->step() != step || !res->proposals() || res->proposals()->size() != drafting_.size()))
    error = "the draft model's result does not answer its plan";
  if (!error.empty()) return fail_drafts(error, now);
  if (res->round_ms() > 0) round_ms_ = round_ms_ > 0 ? 0.7 * round_ms_ + 0.3 * res->round_ms() : res->round_ms();
  catch_up_.observe(res->catch_up_ms(), plan_behind_tokens_);
  for (size_t i = 0; i < drafting_.size(); ++i)
    take_proposal(*res->proposals()->Get(static_cast<uint32_t>(i)), drafting_[i], planner, n_vocab);
}

std::span<const messages::DraftDistribution> SpeculationPlanner::q(uint64_t seq, int32_t drafts) const {
  auto it = seqs_.find(seq);
  if (drafts <= 0 || it == seqs_.end() || it->second.drafted_with != DraftSource::model || it->second.q.empty()) return {};
  return std::span<const messages::DraftDistribution>(it->second.q).first(static_cast<size_t>(drafts));
}

void SpeculationPlanner::observe_window(uint64_t seq, int32_t drafts, int32_t accepted) {
  if (auto it = seqs_.find(seq); it != seqs_.end())
    it->second.controller->observe(it->second.drafted_with, drafts, accepted);
}

}  // namespace troupe::service
