// The batch planner under a KV budget (PlannerLimits::eviction): when a
// decode would take a sequence past the budget, the step carries an
// eviction to fresh pages, the batch addresses slots (positions less those
// evicted) with the true positions as RoPE's offset, the pages the eviction
// reads stay held until the step is over, and nothing evicted reaches the
// prefix cache.
#include <catch2/catch.hpp>

#include "engine/schedule/batch_planner.h"
#include "tests/engine/planner_steps.h"

using namespace troupe;

using test::prompt;
using test::step;

namespace {

PlannerLimits budgeted(int32_t budget) {
  PlannerLimits l;
  l.token_budget = 64;
  l.eviction.budget = budget;
  return l;
}

}  // namespace

TEST_CASE("a sequence decoding past its KV budget is cut to the budget's keep, and its slots are positions less the evicted") {
  PagePool pool(200);
  BatchPlanner p(pool, 16, budgeted(128));
  REQUIRE(p.add(1, Priority::interactive, prompt(200), 100) == BatchPlanner::AddResult::accepted);
  for (int i = 0; i < 4; ++i) step(p);  // 200 prompt tokens in steps of 64
  const PlannedSequence* s = p.find(1);
  REQUIRE(s->computed == 200);
  REQUIRE(s->evicted == 0);
  const int32_t free_before = pool.free_count();

  // The first decode: the prompt's 200 slots cut to 96 (128 less an eighth, at least 32).
  const auto& slices = p.plan();
  REQUIRE(slices.size() == 1);
  CHECK(slices[0].start == 200);
  REQUIRE(p.evictions().size() == 1);
  const PlannedEviction& e = p.evictions()[0];
  CHECK(e.id == 1);
  CHECK(e.length == 200);
  CHECK(e.keep == 96);
  CHECK(e.rope_offset == 0);
  CHECK(e.src.size() == 13);
  CHECK(e.dst.size() == 6);
  for (int32_t page : e.dst) CHECK(std::find(e.src.begin(), e.src.end(), page) == e.src.end());
  // The old pages stay held while the step runs: nothing else may get them.
  for (int32_t page : e.src) CHECK(pool.ref_count(page) >= 1);
  CHECK(s->evicted == 104);
  const Batch b = p.batch();
  REQUIRE(b.sequences.size() == 1);
  CHECK(b.sequences[0].start_pos == 96);
  CHECK(b.sequences[0].rope_offset == 104);
  CHECK(b.sequences[0].block_table.size() == 7);  // 6 kept pages and the new token's
  p.commit(std::vector<int32_t>{7});
  CHECK(p.evictions().empty());
  CHECK(s->slots() == 97);
  // After the step the old pages went back, but the 12 full ones the prefix cache keeps.
  CHECK(p.stats().pages_cached == 12);
  CHECK(pool.used_count() == 7 + 12);
  CHECK(pool.free_count() == free_before + 13 - 7 - 12);

  // Decoding on: at most the budget's slots held, cut again as it fills.
  int32_t cuts = 0, most = 0;
  for (int i = 0; i < 60; ++i) {
    p.plan();
    cuts += static_cast<int32_t>(p.evictions().size());
    p.batch();
    p.commit(std::vector<int32_t>{7});
    most = std::max(most, s->slots());
  }
  CHECK(cuts == 1);  // at 128 slots, 31 tokens after the first cut: back to 96
  CHECK(most <= 128);
  CHECK(s->computed == 261);
  CHECK(s->computed - s->evicted == s->slots());
}

TEST_CASE("an evicted sequence's pages hold no prefix: none are cached, forked or swapped, and a preemption recomputes it whole") {
  PagePool pool(200);
  BatchPlanner p(pool, 16, budgeted(128));
  REQUIRE(p.add(1, Priority::batch, prompt(150), 40) == BatchPlanner::AddResult::accepted);
  for (int i = 0; i < 10 && p.find(1)->evicted == 0; ++i) step(p);
  const PlannedSequence* s = p.find(1);
  REQUIRE(s->evicted > 0);
  const int32_t cached = p.stats().pages_cached;  // the prompt's pages, cached before the cut
  for (int i = 0; i < 20; ++i) step(p);
  CHECK(p.stats().pages_cached == cached);
  CHECK_FALSE(p.fork(1, 2, 149));
  // A more important request that needs every page preempts it: its evicted
  // pages are not swapped out, and it will be recomputed from its tokens.
  REQUIRE(p.add(3, Priority::interactive, prompt(3150, 500), 4) == BatchPlanner::AddResult::accepted);
  bool preempted = false;
  for (int i = 0; i < 100 && !preempted; ++i) {
    const bool evicted_before = s->evicted > 0;
    p.plan();
    for (const PreemptedPages& pp : p.take_preempted()) CHECK((pp.id != 1 || !evicted_before));
    preempted = evicted_before && s->evicted == 0;  // released (maybe admitted again from its cached prompt)
    p.batch();
    std::vector<int32_t> sampled;
    for (const auto& slice : p.planned())
      if (slice.wants_token) sampled.push_back(7);
    p.commit(sampled);
  }
  REQUIRE(preempted);
  CHECK(s->computed <= 150);  // recomputed from its tokens, at most its cached prompt pages reused
}

TEST_CASE("without a budget no eviction is ever planned") {
  PagePool pool(64);
  PlannerLimits l;
  l.token_budget = 64;
  BatchPlanner p(pool, 16, l);
  REQUIRE(p.add(1, Priority::interactive, prompt(300), 50) == BatchPlanner::AddResult::accepted);
  for (int i = 0; i < 60; ++i) {
    p.plan();
    CHECK(p.evictions().empty());
    p.batch();
    std::vector<int32_t> sampled;
    for (const auto& slice : p.planned())
      if (slice.wants_token) sampled.push_back(7);
    p.commit(sampled);
  }
  CHECK(p.find(1)->evicted == 0);
}
