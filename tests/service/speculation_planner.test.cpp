// The scheduler's speculation per step (service/speculation_planner.h), on a
// real batch planner: n-gram drafts set at once, a draft model sent each
// sequence's history once and then what it gained, its answers checked
// against its plan (a bad one pauses drafting), its q per window, windows
// observed, and sequences it knew forgotten.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "engine/page_pool.h"
#include "engine/schedule/batch_planner.h"
#include "messages/draft_frames.h"
#include "service/speculation_planner.h"

using namespace troupe;
using namespace troupe::service;

namespace {

constexpr int32_t kVocab = 100;
constexpr int64_t kSecond = 1'000'000'000;

// A prompt whose last tokens recur: after it samples 4, "1 2 3 4" repeats.
const std::vector<int32_t> kPrompt{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3};

// A batch planner with its pool, and sequences that decode.
struct Decoding {
  PagePool pool{64};
  BatchPlanner planner{pool, 4, limits()};

  static PlannerLimits limits() {
    PlannerLimits l;
    l.token_budget = 64;
    return l;
  }
  // Runs a step in which every slice that wants a token samples `token` (and keeps no draft).
  void step(int32_t token) {
    const auto slices = planner.plan();
    std::vector<std::vector<int32_t>> kept;
    for (const auto& s : slices)
      if (s.wants_token) kept.push_back({token});
    planner.commit(kept);
  }
  // Sequence `id` admitted and prefilled, its first token sampled: decoding.
  void decoding(uint64_t id, std::vector<int32_t> prompt = kPrompt, int32_t first = 4) {
    REQUIRE(planner.add(id, Priority::interactive, std::move(prompt), 64) == BatchPlanner::AddResult::accepted);
    step(first);
    REQUIRE(planner.find(id)->state == RequestState::running);
  }
  std::vector<int32_t> drafts(uint64_t id) const { return planner.find(id)->drafts; }
  std::vector<int32_t> tokens(uint64_t id) const { return planner.find(id)->tokens; }
};

int32_t plenty(uint64_t) { return 100; }

messages::SamplingFields greedy() {
  messages::SamplingFields s;
  s.temperature = 0;
  return s;
}

messages::DraftProposalFields proposal(uint64_t seq, std::vector<int32_t> tokens,
                                       std::vector<messages::DraftDistribution> q = {}) {
  messages::DraftProposalFields p;
  p.sequence_id = seq;
  p.tokens = std::move(tokens);
  p.q = std::move(q);
  return p;
}

std::string answer(uint64_t step, std::vector<messages::DraftProposalFields> proposals, std::string_view error = {}) {
  return messages::draft_result(step, proposals, error, 1.0, 0.5, messages::DrafterInfo{"draft", kVocab, 1});
}

// What a DraftPlan asks of one sequence, copied out of the planner's spans.
struct Asked {
  uint64_t seq = 0;
  int32_t start = 0;
  std::vector<int32_t> tokens;
  int32_t k = 0;
  bool sampling = false;
};

std::vector<Asked> asked(const std::vector<messages::DraftSequenceSpec>& specs) {
  std::vector<Asked> out;
  for (const auto& s : specs)
    out.push_back(
        {s.sequence_id, s.start, std::vector<int32_t>(s.tokens.begin(), s.tokens.end()), s.k, s.sampling != nullptr});
  return out;
}

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& of) {
  return a.size() <= of.size() && std::equal(a.begin(), a.end(), of.begin());
}

}  // namespace

TEST_CASE("speculation planner: an n-gram sequence gets drafts from its own history at once, and no draft model plan") {
  Decoding b;
  b.decoding(1);
  SpeculationPlanner sp(false);
  sp.add(1, SpeculationMode::ngram, 4, greedy());
  CHECK(sp.propose(b.planner, plenty, 0).empty());
  const auto drafts = b.drafts(1);
  CHECK_FALSE(drafts.empty());
  CHECK(drafts.size() <= 4);
  CHECK(is_prefix(drafts, {1, 2, 3, 4}));  // what followed "1 2 3 4" before
  CHECK(sp.q(1, static_cast<int32_t>(drafts.size())).empty());  // n-gram drafts are fixed
  CHECK_FALSE(sp.has_forget());
}

TEST_CASE("speculation planner: a window's acceptance is observed under the source that drafted it") {
  Decoding b;
  b.decoding(1);
  SpeculationPlanner sp(false);
  sp.add(1, SpeculationMode::ngram, 4, greedy());
  REQUIRE(sp.stats(1));
  CHECK(sp.stats(1)->verify_steps == 0);
  sp.propose(b.planner, plenty, 0);
  const auto k = static_cast<int32_t>(b.drafts(1).size());
  REQUIRE(k > 0);
  sp.observe_window(1, k, k - 1);
  const SpeculationStats* s = sp.stats(1);
  CHECK(s->verify_steps == 1);
  CHECK(s->drafted == k);
  CHECK(s->accepted == k - 1);
  CHECK(s->last_source == DraftSource::ngram);
  sp.observe_window(99, 4, 4);  // not a sequence of its: nothing
  CHECK_FALSE(sp.stats(99));
}

TEST_CASE("speculation planner: no drafts for a sequence off, with one token left, still prefilling, or unknown") {
  SECTION("off") {
    Decoding b;
    b.decoding(1);
    SpeculationPlanner sp(true);
    sp.add(1, SpeculationMode::off, 4, greedy());
    CHECK(sp.propose(b.planner, plenty, 0).empty());
    CHECK(b.drafts(1).empty());
  }
  SECTION("a max_draft of 0") {
    Decoding b;
    b.decoding(1);
    SpeculationPlanner sp(false);
    sp.add(1, SpeculationMode::ngram, 0, greedy());
    sp.propose(b.planner, plenty, 0);
    CHECK(b.drafts(1).empty());
  }
  SECTION("one token left to generate") {
    Decoding b;
    b.decoding(1);
    SpeculationPlanner sp(true);
    sp.add(1, SpeculationMode::ngram, 4, greedy());
    sp.propose(b.planner, [](uint64_t) { return 1; }, 0);
    CHECK(b.drafts(1).empty());
    SpeculationPlanner model(true);
    model.add(1, SpeculationMode::draft, 4, greedy());
    CHECK(model.propose(b.planner, [](uint64_t) { return 1; }, 0).empty());
  }
  SECTION("two tokens left: one draft at most") {
    Decoding b;
    b.decoding(1);
    SpeculationPlanner sp(false);
    sp.add(1, SpeculationMode::ngram, 4, greedy());
    sp.propose(b.planner, [](uint64_t) { return 2; }, 0);
    CHECK(b.drafts(1) == std::vector<int32_t>{1});
  }
  SECTION("still prefilling") {
    PagePool pool(64);
    PlannerLimits small;
    small.token_budget = 4;
    BatchPlanner planner(pool, 4, small);
    REQUIRE(planner.add(1, Priority::interactive, kPrompt, 64) == BatchPlanner::AddResult::accepted);
    planner.plan();
    planner.commit(std::vector<std::vector<int32_t>>{});  // 4 of 11 prompt tokens computed
    REQUIRE(planner.find(1)->state == RequestState::running);
    SpeculationPlanner sp(true);
    sp.add(1, SpeculationMode::draft, 4, greedy());
    CHECK(sp.propose(planner, plenty, 0).empty());
    CHECK(planner.find(1)->drafts.empty());
  }
  SECTION("a step the prompts fill, with any source; the budget they leave caps the drafts") {
    Decoding b;
    b.decoding(1);
    REQUIRE(b.planner.add(2, Priority::interactive, std::vector<int32_t>(125, 9), 64) ==
            BatchPlanner::AddResult::accepted);
    SpeculationPlanner ngram(false), model(true);
    ngram.add(1, SpeculationMode::ngram, 4, greedy());
    model.add(1, SpeculationMode::draft, 4, greedy());
    ngram.propose(b.planner, plenty, 0);
    CHECK(b.drafts(1).empty());  // "1 2 3 4" recurs, but the budget goes to the decode and 63 prompt tokens
    CHECK(model.propose(b.planner, plenty, 0).empty());
    b.step(1);
    ngram.propose(b.planner, plenty, 0);
    CHECK(b.drafts(1) == std::vector<int32_t>{2});  // 64 = its decode, the prompt's last 62 and one draft
  }
  SECTION("not in the batch planner") {
    Decoding b;
    SpeculationPlanner sp(true);
    sp.add(5, SpeculationMode::draft, 4, greedy());
    CHECK(sp.propose(b.planner, plenty, 0).empty());
  }
}

TEST_CASE("speculation planner: the draft model is sent a sequence's history whole once, then what it gained") {
  Decoding b;
  b.decoding(1);
  SpeculationPlanner sp(true);
  const messages::SamplingFields sampling = greedy();
  sp.add(1, SpeculationMode::draft, 4, sampling);
  const auto first = asked(sp.propose(b.planner, plenty, 0));
  REQUIRE(first.size() == 1);
  CHECK(first[0].seq == 1);
  CHECK(first[0].start == 0);
  CHECK(first[0].tokens == b.tokens(1));  // the prompt and the token sampled
  CHECK(first[0].k >= 1);
  CHECK(first[0].k <= 4);
  CHECK(first[0].sampling);  // with its history: how it samples
  CHECK(b.drafts(1).empty());  // set when the draft model answers
  sp.take(answer(7, {proposal(1, {})}), "", 7, b.planner, kVocab, 0);  // no drafts this time
  b.step(9);
  const auto second = asked(sp.propose(b.planner, plenty, 0));
  REQUIRE(second.size() == 1);
  CHECK(second[0].start == 12);
  CHECK(second[0].tokens == std::vector<int32_t>{9});
  CHECK_FALSE(second[0].sampling);
}

TEST_CASE("speculation planner: the draft model's answer sets each sequence's drafts, with their q") {
  Decoding b;
  b.decoding(1);
  b.decoding(2, {50, 51, 52, 53, 54, 55}, 56);
  SpeculationPlanner sp(true);
  sp.add(1, SpeculationMode::draft, 4, greedy());
  sp.add(2, SpeculationMode::draft, 4, greedy());
  const auto plan = asked(sp.propose(b.planner, plenty, 0));
  REQUIRE(plan.size() == 2);
  CHECK(plan[0].seq == 1);
  CHECK(plan[1].seq == 2);
  const std::vector<messages::DraftDistribution> q{{{10, 0.75f}, {11, 0.25f}}, {{12, 1.0f}}};
  sp.take(answer(3, {proposal(1, {10, 12}, q), proposal(2, {57})}), "", 3, b.planner, kVocab, 0);
  CHECK(b.drafts(1) == std::vector<int32_t>{10, 12});
  CHECK(b.drafts(2) == std::vector<int32_t>{57});
  const auto q1 = sp.q(1, 2);
  REQUIRE(q1.size() == 2);
  CHECK(q1[0] == q[0]);
  CHECK(q1[1] == q[1]);
  CHECK(sp.q(1, 1).size() == 1);  // the window kept fewer drafts
  CHECK(sp.q(1, 0).empty());
  CHECK(sp.q(2, 1).empty());  // greedy drafts: no q
  CHECK(sp.q(3, 1).empty());
  sp.observe_window(1, 2, 1);
  CHECK(sp.stats(1)->last_source == DraftSource::model);
  CHECK(sp.stats(1)->accepted == 1);
}

TEST_CASE("speculation planner: a proposal too long, outside the vocabulary, for another sequence or with a bad q "
          "is dropped alone") {
  Decoding b;
  b.decoding(1);
  b.decoding(2, {50, 51, 52, 53, 54, 55}, 56);
  SpeculationPlanner sp(true);
  sp.add(1, SpeculationMode::draft, 4, greedy());
  sp.add(2, SpeculationMode::draft, 4, greedy());
  REQUIRE(sp.propose(b.planner, plenty, 0).size() == 2);
  messages::DraftProposalFields good = proposal(2, {57, 58});
  SECTION("more drafts than its max_draft") {
    sp.take(answer(1, {proposal(1, {5, 6, 7, 8, 9}), good}), "", 1, b.planner, kVocab, 0);
  }
  SECTION("a token outside the vocabulary") {
    sp.take(answer(1, {proposal(1, {5, kVocab}), good}), "", 1, b.planner, kVocab, 0);
  }
  SECTION("a negative token") {
    sp.take(answer(1, {proposal(1, {-1}), good}), "", 1, b.planner, kVocab, 0);
  }
  SECTION("another sequence's proposal in its place") {
    sp.take(answer(1, {proposal(3, {5}), good}), "", 1, b.planner, kVocab, 0);
  }
  SECTION("a q that does not sum to 1") {
    sp.take(answer(1, {proposal(1, {5}, {{{5, 0.5f}}}), good}), "", 1, b.planner, kVocab, 0);
  }
  SECTION("a q for fewer drafts than it proposes") {
    sp.take(answer(1, {proposal(1, {5, 6}, {{{5, 1.0f}}}), good}), "", 1, b.planner, kVocab, 0);
  }
  CHECK(b.drafts(1).empty());
  CHECK(sp.q(1, 1).empty());
  CHECK(b.drafts(2) == std::vector<int32_t>{57, 58});
}

TEST_CASE("speculation planner: a draft model asking to resync is sent the whole history next time") {
  Decoding b;
  b.decoding(1);
  SpeculationPlanner sp(true);
  sp.add(1, SpeculationMode::draft, 4, greedy());
  REQUIRE(sp.propose(b.planner, plenty, 0).size() == 1);
  messages::DraftProposalFields resync = proposal(1, {5});
  resync.resync = true;
  sp.take(answer(1, {resync}), "", 1, b.planner, kVocab, 0);
  CHECK(b.drafts(1).empty());
  b.step(9);
  const auto again = asked(sp.propose(b.planner, plenty, 0));
  REQUIRE(again.size() == 1);
  CHECK(again[0].start == 0);
  CHECK(again[0].tokens == b.tokens(1));
  CHECK(again[0].sampling);
}

TEST_CASE("speculation planner: a draft model that fails pauses drafting for 5 s, then is sent each history whole") {
  auto failing = [](SpeculationPlanner& sp, BatchPlanner& planner, int which) {
    switch (which) {
      case 0: sp.take("", "the draft model timed out", 1, planner, kVocab, 0); break;
      case 1: sp.take("not a result", "", 1, planner, kVocab, 0); break;
      case 2: sp.take(answer(1, {proposal(1, {5})}, "out of memory"), "", 1, planner, kVocab, 0); break;
      case 3: sp.take(answer(2, {proposal(1, {5})}), "", 1, planner, kVocab, 0); break;  // another step's
      case 4: sp.take(answer(1, {}), "", 1, planner, kVocab, 0); break;                  // too few proposals
      default: sp.take(answer(1, {proposal(1, {5}), proposal(1, {6})}), "", 1, planner, kVocab, 0);  // too many
    }
  };
  for (int which = 0; which < 6; ++which) {
    INFO("failure " << which);
    Decoding b;
    b.decoding(1);
    SpeculationPlanner sp(true);
    sp.add(1, SpeculationMode::draft, 4, greedy());
    REQUIRE(sp.propose(b.planner, plenty, 0).size() == 1);
    failing(sp, b.planner, which);
    CHECK(b.drafts(1).empty());
    b.step(9);
    CHECK(sp.propose(b.planner, plenty, 1).empty());
    CHECK(sp.propose(b.planner, plenty, SpeculationPlanner::kPauseAfterFailureNs - 1).empty());
    const auto resumed = asked(sp.propose(b.planner, plenty, SpeculationPlanner::kPauseAfterFailureNs));
    REQUIRE(resumed.size() == 1);
    CHECK(resumed[0].start == 0);  // what it was sent before may be lost
    CHECK(resumed[0].tokens == b.tokens(1));
  }
  CHECK(SpeculationPlanner::kPauseAfterFailureNs == 5 * kSecond);
}

TEST_CASE("speculation planner: a removed sequence the draft model knew is forgotten with the next plan, one it "
          "never saw is not") {
  Decoding b;
  b.decoding(1);
  b.decoding(2, {50, 51, 52, 53, 54, 55}, 56);
  SpeculationPlanner sp(true);
  sp.add(1, SpeculationMode::draft, 4, greedy());
  sp.add(2, SpeculationMode::ngram, 4, greedy());
  REQUIRE(sp.propose(b.planner, plenty, 0).size() == 1);
  sp.remove(2);  // drafted by n-grams only: the draft model never saw it
  CHECK_FALSE(sp.has_forget());
  CHECK_FALSE(sp.stats(2));
  sp.remove(1);
  CHECK(sp.has_forget());
  CHECK(sp.take_forget() == std::vector<uint64_t>{1});
  CHECK_FALSE(sp.has_forget());
  CHECK(sp.take_forget().empty());
  CHECK_FALSE(sp.stats(1));
  sp.remove(1);  // again: nothing
  sp.remove(42);
  CHECK_FALSE(sp.has_forget());
}

TEST_CASE("speculation planner: a sequence added again starts afresh, and drafts at most 8 tokens") {
  Decoding b;
  b.decoding(1, {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1}, 2);
  SpeculationPlanner sp(false);
  sp.add(1, SpeculationMode::ngram, 20, greedy());
  sp.propose(b.planner, plenty, 0);
  CHECK(b.drafts(1).size() <= 8);
  const auto k = static_cast<int32_t>(b.drafts(1).size());
  REQUIRE(k > 0);
  sp.observe_window(1, k, k);
  CHECK(sp.stats(1)->verify_steps == 1);
  sp.add(1, SpeculationMode::ngram, 4, greedy());
  CHECK(sp.stats(1)->verify_steps == 0);
  SpeculationPlanner model(true);
  model.add(1, SpeculationMode::draft, 20, greedy());
  const auto plan = asked(model.propose(b.planner, plenty, 0));
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].k <= 8);
  model.take(answer(1, {proposal(1, {5, 6, 7, 8, 9, 10, 11, 12, 13})}), "", 1, b.planner, kVocab, 0);
  CHECK(b.drafts(1).empty());  // nine drafts: more than any window takes
}

TEST_CASE("speculation planner: a job's next item drafts from what an earlier item wrote, another job's does not") {
  Decoding b;
  SpeculationPlanner sp(false);
  // Item 1 of job A writes "50 51 52 53 54 55" after its prompt, and ends.
  const std::vector<int32_t> prompt{7, 8, 9};
  b.decoding(1, prompt, 50);
  sp.add(1, SpeculationMode::suffix, 4, greedy(), suffix_scope("", "A"), static_cast<int32_t>(prompt.size()));
  for (int32_t t = 51; t <= 55; ++t) {
    sp.propose(b.planner, plenty, 0);
    b.step(t);
  }
  sp.propose(b.planner, plenty, 0);  // its own tree has read everything now
  sp.remove(1);
  REQUIRE(sp.history().scope(suffix_scope("", "A")));
  CHECK(sp.history().scope(suffix_scope("", "A"))->tokens() == 6);  // its output, not its prompt
  CHECK(sp.history().server().tokens() == 6);
  // Item 2 of job A (another prompt) has just written "50 51": it is drafted "52 53 ...".
  b.decoding(2, {60, 61}, 50);
  b.step(51);
  sp.add(2, SpeculationMode::suffix, 4, greedy(), suffix_scope("", "A"), 2);
  sp.propose(b.planner, plenty, 0);
  const auto drafts = b.drafts(2);
  REQUIRE_FALSE(drafts.empty());
  CHECK(is_prefix(drafts, {52, 53, 54, 55}));  // k: the controller's, from its prior acceptance
  sp.observe_window(2, static_cast<int32_t>(drafts.size()), static_cast<int32_t>(drafts.size()));
  CHECK(sp.stats(2)->last_source == DraftSource::suffix);
}

TEST_CASE("speculation planner: what an item writes in steps the prompts fill joins the history whole") {
  Decoding b;
  SpeculationPlanner sp(false);
  const std::vector<int32_t> prompt{7, 8, 9};
  b.decoding(1, prompt, 50);
  sp.add(1, SpeculationMode::suffix, 4, greedy(), suffix_scope("", "A"), static_cast<int32_t>(prompt.size()));
  // Long prompts fill every step's budget: no window, no drafts, for the whole output.
  REQUIRE(b.planner.add(2, Priority::interactive, std::vector<int32_t>(240, 9), 8) ==
          BatchPlanner::AddResult::accepted);
  REQUIRE(b.planner.add(3, Priority::interactive, std::vector<int32_t>(200, 9), 8) ==
          BatchPlanner::AddResult::accepted);
  for (int32_t t = 51; t <= 53; ++t) {  // its decode and 63 prompt tokens a step
    sp.propose(b.planner, plenty, 0);
    CHECK(b.drafts(1).empty());
    b.step(t);
  }
  sp.propose(b.planner, plenty, 0);
  CHECK(b.drafts(1).empty());
  sp.remove(1);
  REQUIRE(sp.history().scope(suffix_scope("", "A")));
  CHECK(sp.history().scope(suffix_scope("", "A"))->tokens() == 4);  // 50 51 52 53
}

TEST_CASE("speculation planner: n-gram, draft and off sequences build no suffix tree, and a moved one adds nothing") {
  Decoding b;
  SpeculationPlanner sp(false);
  b.decoding(1, {7, 8, 9}, 50);
  sp.add(1, SpeculationMode::ngram, 4, greedy(), suffix_scope("s1", ""), 3);
  sp.propose(b.planner, plenty, 0);
  sp.remove(1);
  CHECK(sp.history().server().tokens() == 0);
  b.decoding(2, {7, 8, 9}, 50);
  sp.add(2, SpeculationMode::automatic, 4, greedy(), suffix_scope("s1", ""), 3);
  sp.propose(b.planner, plenty, 0);
  sp.remove(2, false);  // escalated: it goes on on another tier
  CHECK(sp.history().server().tokens() == 0);
  CHECK_FALSE(sp.history().scope(suffix_scope("s1", "")));
}

TEST_CASE("speculation planner: a job's next item starts from the acceptance its earlier items measured") {
  Decoding b;
  b.decoding(1);
  SpeculationPlanner sp(false);
  const std::string job = suffix_scope("", "A");
  sp.add(1, SpeculationMode::ngram, 8, greedy(), job, static_cast<int32_t>(kPrompt.size()));
  sp.propose(b.planner, plenty, 0);
  const auto first = static_cast<int32_t>(b.drafts(1).size());
  REQUIRE(first > 0);
  for (int i = 0; i < 6; ++i) sp.observe_window(1, first, first);  // item 1's drafts were all kept
  sp.remove(1);
  const AcceptanceEstimates* learned = sp.acceptance().prior(job);
  REQUIRE(learned);
  const AcceptanceEstimate& ngram = (*learned)[static_cast<size_t>(DraftSource::ngram)];
  CHECK(ngram.kept / ngram.tried > 0.9);

  // The job's next item (here the same text again) drafts all the n-gram
  // drafter offers at once; a planner that never saw item 1 starts from the
  // default prior and drafts fewer.
  sp.add(1, SpeculationMode::ngram, 8, greedy(), job, static_cast<int32_t>(kPrompt.size()));
  sp.propose(b.planner, plenty, 0);
  const auto informed = b.drafts(1).size();
  SpeculationPlanner fresh(false);
  fresh.add(1, SpeculationMode::ngram, 8, greedy(), job, static_cast<int32_t>(kPrompt.size()));
  fresh.propose(b.planner, plenty, 0);
  const auto uninformed = b.drafts(1).size();
  CHECK(informed > uninformed);
  CHECK(uninformed > 0);
}
