// Verify windows in the batch planner: drafts take only the budget the
// prompts leave, and window_room() tells the speculation planner that room
// before plan().
#include <catch2/catch.hpp>

#include "engine/schedule/batch_planner.h"
#include "tests/engine/planner_steps.h"

using namespace troupe;

using test::prompt;
using test::step;

namespace {

// One sequence decoding (its prompt of 4 done, its first token sampled).
BatchPlanner& decoding(BatchPlanner& p, Priority priority = Priority::interactive) {
  p.add(1, priority, prompt(4), 64);
  step(p);
  return p;
}

const PlannedSlice* slice_of(const std::vector<PlannedSlice>& slices, uint64_t id) {
  for (const PlannedSlice& s : slices)
    if (s.id == id) return &s;
  return nullptr;
}

}  // namespace

TEST_CASE("a verify window takes the budget the prompts leave, never a prompt's token") {
  PagePool pool(64);
  PlannerLimits l;
  l.token_budget = 8;
  BatchPlanner p(pool, 4, l);
  decoding(p);
  p.add(2, Priority::interactive, prompt(10, 100), 8);
  p.set_drafts(1, {7, 7, 7, 7});
  auto room = p.window_room();
  CHECK(room.step_tokens == 8);  // its decode token and 7 of the prompt
  CHECK(room.sequences == 2);
  CHECK(room.tokens == 0);
  auto s = step(p);
  REQUIRE(slice_of(s, 1));
  CHECK(slice_of(s, 1)->count == 1);  // no window: the prompt fills the step
  CHECK(slice_of(s, 1)->drafts == 0);
  CHECK(slice_of(s, 2)->count == 7);

  p.set_drafts(1, {7, 7, 7, 7});
  room = p.window_room();
  CHECK(room.step_tokens == 4);
  CHECK(room.tokens == 4);
  s = step(p);
  // The prompt's rest (3) and the decode leave 4, and the window takes them all.
  CHECK(slice_of(s, 2)->count == 3);
  CHECK(slice_of(s, 1)->drafts == 4);
  CHECK(slice_of(s, 1)->count == 5);
}

TEST_CASE("a window with the budget to itself takes its drafts, fewer when the budget is short") {
  PagePool pool(64);
  PlannerLimits l;
  l.token_budget = 4;
  BatchPlanner p(pool, 4, l);
  decoding(p);
  p.set_drafts(1, {7, 7, 7, 7, 7});
  CHECK(p.window_room().tokens == 3);
  const auto s = step(p);
  REQUIRE(s.size() == 1);
  CHECK(s[0].drafts == 3);
  CHECK(s[0].count == 4);
}

TEST_CASE("batch work's windows stay within batch work's share of the step") {
  PagePool pool(64);
  PlannerLimits l;
  l.token_budget = 64;
  l.batch_tokens_when_idle = 6;
  BatchPlanner p(pool, 4, l);
  decoding(p, Priority::batch);
  p.add(2, Priority::batch, prompt(20, 100), 8);
  p.set_drafts(1, {7, 7, 7});
  const auto room = p.window_room();
  CHECK(room.tokens == 58);  // the step's budget left
  CHECK(room.of(Priority::batch) == 0);  // but batch work's share is spent on the decode and the prompt
  CHECK(room.of(Priority::interactive) == 58);
  const auto s = step(p);
  CHECK(slice_of(s, 1)->drafts == 0);
  CHECK(slice_of(s, 2)->count == 5);
}

TEST_CASE("a prompt that waits for a slot leaves its budget to the windows") {
  PagePool pool(64);
  PlannerLimits l;
  l.token_budget = 16;
  l.max_running = 1;
  BatchPlanner p(pool, 4, l);
  decoding(p);
  p.add(2, Priority::interactive, prompt(40, 100), 8);
  p.set_drafts(1, {7, 7, 7, 7});
  const auto room = p.window_room();
  CHECK(room.step_tokens == 1);
  CHECK(room.tokens == 15);
  const auto s = step(p);
  REQUIRE(s.size() == 1);  // the prompt waits: one slot, taken
  CHECK(s[0].drafts == 4);
  CHECK(p.find(2)->state == RequestState::waiting);
}
