#pragma once
// The scheduler's speculation: per step, for every speculating sequence
// about to decode, its controller (engine/speculation/controller.h) picks a
// source and a draft length k for this step's load. N-gram drafts are made
// here at once (microseconds); drafts the draft model is to propose become
// one DraftPlan (messages/draft.fbs), whose answer joins the step's verify
// windows. After the step, each window's acceptance is observed.
//
// The draft model keeps each sequence's history; a plan sends only what it
// gained since the last (draft_synced). A failing draft model costs this
// step's drafts and pauses drafting for a while, never a request.
//
// Suffix drafting (modes suffix and auto) reads three trees: the sequence's
// own (its prompt and output, fed as they grow), its scope's and the
// server's (service/suffix_history.h); a sequence's output joins the last
// two when it ends. Its controller starts from what its scope's earlier
// sequences measured of each source (service/acceptance_memory.h).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <map>
#include <vector>

#include "engine/schedule/batch_planner.h"
#include "engine/speculation/controller.h"
#include "engine/speculation/ngram_drafter.h"
#include "engine/speculation/suffix_tree.h"
#include "messages/draft_frames.h"
#include "service/acceptance_memory.h"
#include "service/suffix_history.h"

namespace troupe::service {

class SpeculationPlanner {
 public:
  static constexpr int64_t kPauseAfterFailureNs = 5'000'000'000;

  explicit SpeculationPlanner(bool draft_model, SuffixLimits limits = {}) : draft_model_(draft_model), history_(limits) {}

  // `scope`: suffix_scope() of its session or job; `prompt_tokens`: where
  // its output starts (what joins the history when it ends).
  void add(uint64_t seq, SpeculationMode mode, int32_t max_draft, const messages::SamplingFields& sampling,
           std::string scope = {}, int32_t prompt_tokens = 0);
  // Ended: a draft model that knows it may forget it; `finished`: its
  // output is whole (not cancelled or failed) and joins the history.
  void remove(uint64_t seq, bool finished = true);
  const SuffixHistory& history() const { return history_; }
  const AcceptanceMemory& acceptance() const { return acceptance_; }
  // A scope's tree rebuilt from earlier outputs where it is not held (SuffixHistory::seed).
  bool seed(const std::string& scope, std::span<const std::vector<int32_t>> outputs) { return history_.seed(scope, outputs); }
  const SpeculationStats* stats(uint64_t seq) const;

  // Sets this step's drafts in the planner: n-gram ones at once; returns
  // those for the draft model to propose (empty: none). `remaining(seq)`:
  // tokens the sequence may still generate.
  std::vector<messages::DraftSequenceSpec> propose(BatchPlanner& planner, const std::function<int32_t(uint64_t)>& remaining,
                                                   int64_t now);
  // The draft model's answer to the plan for step `step`.
  void take(const std::string& bytes, std::string error, uint64_t step, BatchPlanner& planner, int32_t n_vocab,
            int64_t now);
  // The draft model's q for the first `drafts` of a window it proposed (empty: fixed drafts).
  std::span<const messages::DraftDistribution> q(uint64_t seq, int32_t drafts) const;

  // After the step: what a window of `drafts` kept, and what the step cost.
  void observe_window(uint64_t seq, int32_t drafts, int32_t accepted);
  void observe_step(int64_t tokens, double ms) { step_cost_.observe(tokens, ms); }
  // The draft model's cost of one drafting round, measured before any step.
  void set_round_ms(double ms) {
    if (round_ms_ == 0) round_ms_ = ms;
  }

  // Sequences the draft model may drop (sent with the next DraftPlan).
  bool has_forget() const { return !forget_.empty(); }
  std::vector<uint64_t> take_forget() { return std::exchange(forget_, {}); }

 private:
  struct Sequence {
    std::unique_ptr<SpeculationController> controller;
    int32_t max_draft = 0;
    messages::SamplingFields sampling;
    DraftSource drafted_with = DraftSource::none;  // the source of the window in flight
    int32_t draft_synced = 0;  // history the draft model holds (0: send all of it)
    bool model_knows = false;
    std::vector<messages::DraftDistribution> q;
    std::unique_ptr<SuffixTree> own;  // modes suffix and auto: its prompt and output
    size_t own_fed = 0;               // tokens of the sequence fed to `own`
    std::string scope;
    int32_t prompt_tokens = 0;
  };
  // Its own suffix tree takes the tokens it gained since the last step.
  void feed_own(Sequence& r, const std::vector<int32_t>& tokens);
  // The suffix trees' draft for a sequence about to decode `tokens`.
  SuffixDraft suffix_draft(Sequence& r, const std::vector<int32_t>& tokens, int32_t room);
  void fail_drafts(const std::string& error, int64_t now);
  bool take_proposal(const wire::draft::Proposal& p, uint64_t seq, BatchPlanner& planner, int32_t n_vocab);

  bool draft_model_;
  std::map<uint64_t, Sequence> seqs_;  // ordered: each step prices drafts in arrival order
  NgramDrafter ngram_;
  SuffixHistory history_;
  AcceptanceMemory acceptance_;
  StepCostModel step_cost_;  // the verifier's step time by tokens
  std::vector<uint64_t> drafting_;  // sequences of the DraftPlan in flight, in its order
  std::vector<uint64_t> forget_;
  double round_ms_ = 0;
  DraftCatchUpCost catch_up_;
  int64_t plan_behind_tokens_ = 0;  // tokens the plan in flight asks the draft model to read
  int64_t paused_until_ns_ = 0;
};

}  // namespace troupe::service
