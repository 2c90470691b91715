// The continuous-batching planner on its own: budgets, priorities, chunked
// prefill, admission by free pages, preemption and recompute, prefix reuse,
// and pages returning to the pool.
#include <catch2/catch.hpp>

#include <numeric>

#include "engine/schedule/batch_planner.h"
#include "tests/engine/planner_steps.h"

using namespace troupe;

using test::prompt;
using test::step;

TEST_CASE("prefill is chunked under the token budget and decode gets one token a step") {
  PagePool pool(64);
  PlannerLimits l;
  l.token_budget = 16;
  BatchPlanner p(pool, 4, l);
  REQUIRE(p.add(1, Priority::interactive, prompt(40), 8) == BatchPlanner::AddResult::accepted);
  auto s = step(p);
  REQUIRE(s.size() == 1);
  CHECK(s[0].count == 16);
  CHECK_FALSE(s[0].wants_token);
  step(p);
  s = step(p);  // 40 = 16 + 16 + 8
  CHECK(s[0].count == 8);
  CHECK(s[0].wants_token);
  s = step(p);
  CHECK(s[0].count == 1);
  CHECK(s[0].start == 40);
  CHECK(p.find(1)->tokens.size() == 42);
}

TEST_CASE("decode of running sequences comes before new prefill, and priority orders admission") {
  PagePool pool(64);
  PlannerLimits l;
  l.token_budget = 8;
  BatchPlanner p(pool, 4, l);
  p.add(1, Priority::batch, prompt(4), 8);
  step(p);  // 1 is running, decoding
  p.add(2, Priority::batch, prompt(20), 8);
  p.add(3, Priority::interactive, prompt(20), 8);
  CHECK(p.queue_position(2) == 1);  // behind the interactive request
  auto s = step(p);
  REQUIRE(s.size() == 2);
  CHECK(s[0].id == 1);  // the decode token first
  CHECK(s[1].id == 3);  // then the interactive prefill
  CHECK(s[1].count == 7);
}

TEST_CASE("admission waits for free pages, and finishing frees them") {
  PagePool pool(4);
  PlannerLimits l;
  l.prefix_caching = false;
  BatchPlanner p(pool, 4, l);
  p.add(1, Priority::interactive, prompt(12), 4);  // 3 pages + 1 for its first decode
  p.add(2, Priority::interactive, prompt(12), 4);
  auto s = step(p);
  REQUIRE(s.size() == 1);
  CHECK(p.find(2)->state == RequestState::waiting);
  p.finish(1);
  CHECK(pool.free_count() == 4);
  s = step(p);
  REQUIRE(s.size() == 1);
  CHECK(s[0].id == 2);
}

TEST_CASE("when pages run out a less important sequence is preempted and later recomputed") {
  PagePool pool(6);
  PlannerLimits l;
  l.prefix_caching = false;
  l.batch_tokens_when_busy = l.batch_tokens_when_idle = l.token_budget;  // no share limit here: this is about pages
  BatchPlanner p(pool, 4, l);
  p.add(1, Priority::interactive, prompt(12), 100);
  p.add(2, Priority::batch, prompt(12), 100);
  step(p);  // both prefilled: 3 full pages each, all 6 used
  CHECK(pool.free_count() == 0);
  auto s = step(p);  // each needs a 4th page for position 12: the batch one gives way
  CHECK(p.find(2)->state == RequestState::waiting);
  CHECK(p.find(2)->preemptions == 1);
  CHECK(p.find(2)->tokens.size() == 13);  // its sampled token is kept for the recompute
  CHECK(p.stats().preemptions == 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].id == 1);
  p.finish(1);
  s = step(p);  // recompute all 13 tokens of 2 and continue
  REQUIRE(s.size() == 1);
  CHECK(s[0].id == 2);
  CHECK(s[0].start == 0);
  CHECK(s[0].count == 13);
  CHECK(s[0].wants_token);
}

TEST_CASE("a second request sharing a prefix reuses its pages and skips that prefill") {
  PagePool pool(32);
  BatchPlanner p(pool, 4, PlannerLimits{});
  p.add(1, Priority::interactive, prompt(18), 2);
  step(p);
  p.finish(1);
  const auto before = p.stats();
  CHECK(before.pages_cached == 4);  // 16 tokens in full pages stay cached
  auto longer = prompt(18);
  longer.push_back(500);
  p.add(2, Priority::interactive, longer, 2);
  auto s = step(p);
  REQUIRE(s.size() == 1);
  CHECK(s[0].start == 16);
  CHECK(s[0].count == 3);
  CHECK(p.find(2)->cached_prompt_tokens == 16);
}

TEST_CASE("queue limits, duplicates and over-long prompts are refused, cancels free pages") {
  PagePool pool(16);
  PlannerLimits l;
  l.tenant_queue_share = 1.0;  // one tenant may fill the queue here
  l.max_waiting = 2;
  l.max_context = 32;
  BatchPlanner p(pool, 4, l);
  CHECK(p.add(1, Priority::batch, prompt(4), 4) == BatchPlanner::AddResult::accepted);
  CHECK(p.add(1, Priority::batch, prompt(4), 4) == BatchPlanner::AddResult::duplicate);
  CHECK(p.add(2, Priority::batch, prompt(40), 4) == BatchPlanner::AddResult::too_long);
  CHECK(p.add(3, Priority::batch, prompt(4), 4) == BatchPlanner::AddResult::accepted);
  CHECK(p.add(4, Priority::batch, prompt(4), 4) == BatchPlanner::AddResult::queue_full);
  step(p);
  CHECK(p.cancel(1));
  CHECK_FALSE(p.cancel(1));
  CHECK(p.cancel(3));
  CHECK(p.idle());
  CHECK(pool.used_count() == p.stats().pages_cached);  // only cached prefix pages remain
}

TEST_CASE("a forked sample shares the prompt's pages and copies the one it writes") {
  PagePool pool(32);
  PlannerLimits l;
  l.prefix_caching = false;
  BatchPlanner p(pool, 4, l);
  p.add(1, Priority::interactive, prompt(10), 8);  // pages 0..2, the last holds positions 8, 9
  step(p);                                          // prefill; token sampled
  const auto parent_table = std::vector<int32_t>(p.find(1)->kv.block_table().begin(), p.find(1)->kv.block_table().end());
  REQUIRE(p.fork(1, 2, 9));  // recompute position 9 for the child
  const PlannedSequence* child = p.find(2);
  REQUIRE(child);
  CHECK(child->computed == 9);
  CHECK(child->tokens.size() == 10);
  CHECK(pool.ref_count(parent_table[0]) == 2);
  CHECK(pool.ref_count(parent_table[2]) == 2);

  const auto& slices = p.plan();
  REQUIRE(slices.size() == 2);
  // The parent writes position 10 into page 2, the child position 9: both
  // would write the shared page, so one of them gets a copy first.
  REQUIRE(p.copies().size() == 1);
  const PageCopy c = p.copies()[0];
  CHECK(c.src == parent_table[2]);
  const auto t1 = p.find(1)->kv.block_table(), t2 = p.find(2)->kv.block_table();
  CHECK(t1[2] != t2[2]);
  CHECK(t1[0] == t2[0]);  // full pages stay shared
  CHECK(pool.ref_count(t1[2]) == 1);
  CHECK(pool.ref_count(t2[2]) == 1);
  p.commit(std::vector<int32_t>{7, 7});
  p.finish(1);
  p.finish(2);
  CHECK(pool.used_count() == 0);
}

TEST_CASE("requests that together need more pages than the pool all finish, and no step is empty") {
  PagePool pool(6);
  PlannerLimits l;
  l.prefix_caching = false;
  l.token_budget = 8;
  BatchPlanner p(pool, 4, l);
  for (uint64_t id = 1; id <= 3; ++id) p.add(id, id == 3 ? Priority::batch : Priority::interactive, prompt(18), 5);
  int steps = 0;
  while (!p.idle() && steps < 500) {
    REQUIRE_FALSE(p.plan().empty());  // there is always something to run
    std::vector<int32_t> sampled;
    for (const auto& sl : p.planned())
      if (sl.wants_token) sampled.push_back(7);
    p.commit(sampled);
    for (uint64_t id = 1; id <= 3; ++id)
      if (p.find(id) && p.find(id)->generated() >= 5) p.finish(id);
    ++steps;
  }
  CHECK(p.idle());
  CHECK(pool.used_count() == 0);
}

TEST_CASE("batch work fills only what interactive requests leave, and the whole step once they are gone") {
  PagePool pool(256);
  PlannerLimits l;
  l.token_budget = 64;
  l.batch_tokens_when_busy = 8;
  l.batch_tokens_when_idle = 48;
  BatchPlanner p(pool, 4, l);
  REQUIRE(p.add(1, Priority::interactive, prompt(20), 6) == BatchPlanner::AddResult::accepted);
  for (uint64_t id = 2; id <= 5; ++id) REQUIRE(p.add(id, Priority::batch, prompt(100, 50), 4) == BatchPlanner::AddResult::accepted);
  auto batch_tokens = [](const std::vector<PlannedSlice>& slices) {
    int32_t n = 0;
    for (const auto& s : slices) n += s.id >= 2 ? s.count : 0;
    return n;
  };
  for (int i = 0; i < 5; ++i) {
    const auto slices = step(p);
    CHECK(batch_tokens(slices) <= 8);
    CHECK(std::any_of(slices.begin(), slices.end(), [](const PlannedSlice& s) { return s.id == 1; }));  // never starved
  }
  p.finish(1);
  const auto slices = step(p);
  CHECK(batch_tokens(slices) == 48);  // idle capacity, in steps short enough not to hold up a newcomer
}
