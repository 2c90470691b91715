// Fairness between tenants in the batch planner: a flood from one client
// identity must not keep another's request out of the next step, shares of
// the queue, slots and pages hold, and weights divide the work.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <random>

#include "engine/schedule/batch_planner.h"
#include "tests/engine/planner_steps.h"

using namespace troupe;
using test::prompt;
using test::step;

namespace {

bool in_step(const std::vector<PlannedSlice>& slices, uint64_t id) {
  return std::any_of(slices.begin(), slices.end(), [&](const PlannedSlice& s) { return s.id == id; });
}

constexpr TenantId kFlood = 1, kPolite = 2;

// Steps until every request has its wanted tokens (then it is finished), at
// most max_steps. Sampled tokens differ from step to step, so no two
// continuations share pages.
int run_to_end(BatchPlanner& p, const std::map<uint64_t, int>& wanted, int max_steps) {
  int steps = 0;
  int32_t next = 0;
  while (!p.idle() && steps < max_steps) {
    const auto& slices = p.plan();
    std::vector<int32_t> sampled;
    for (const auto& s : slices)
      if (s.wants_token) sampled.push_back(7 + next++ % 50);
    p.commit(sampled);
    for (const auto& [id, n_tokens] : wanted)
      if (p.find(id) && p.find(id)->generated() >= n_tokens) p.finish(id);
    ++steps;
  }
  return steps;
}

}  // namespace

TEST_CASE("one tenant may take only its share of the queue, and another still gets in") {
  PagePool pool(64);
  PlannerLimits l;
  l.max_waiting = 8;
  l.tenant_queue_share = 0.5;
  BatchPlanner p(pool, 4, l);
  for (uint64_t id = 1; id <= 4; ++id) REQUIRE(p.add(id, Priority::chat, prompt(8), 4, kFlood) == BatchPlanner::AddResult::accepted);
  CHECK(p.add(5, Priority::chat, prompt(8), 4, kFlood) == BatchPlanner::AddResult::tenant_queue_full);
  CHECK(p.add(6, Priority::chat, prompt(8), 4, kPolite) == BatchPlanner::AddResult::accepted);
  CHECK(p.tenant_load(kFlood).waiting == 4);
  CHECK(p.tenant_load(kPolite).waiting == 1);
}

TEST_CASE("a flood holding every slot gives one up to a newcomer in the very next step") {
  PagePool pool(256);
  PlannerLimits l;
  l.max_running = 4;
  l.token_budget = 64;
  BatchPlanner p(pool, 4, l);
  for (uint64_t id = 1; id <= 10; ++id) p.add(id, Priority::chat, prompt(8, static_cast<int32_t>(id * 100)), 64, kFlood);
  step(p);
  step(p);
  REQUIRE(p.tenant_load(kFlood).running == 4);
  REQUIRE(p.add(100, Priority::chat, prompt(8, 5000), 64, kPolite) == BatchPlanner::AddResult::accepted);
  const auto s = step(p);
  CHECK(in_step(s, 100));
  CHECK(p.find(100)->state == RequestState::running);
  CHECK(p.tenant_load(kFlood).running == 3);
  CHECK(p.running() == 4);
  // The flood keeps the rest: the planner stays work-conserving.
  for (int i = 0; i < 5; ++i) step(p);
  CHECK(p.tenant_load(kFlood).running == 3);
  CHECK(p.tenant_load(kPolite).running == 1);
}

TEST_CASE("in a step where a newcomer prefills, a tenant over its share decodes but does not prefill") {
  PagePool pool(1024);
  PlannerLimits l;
  l.max_running = 8;
  l.token_budget = 64;
  BatchPlanner p(pool, 4, l);
  for (uint64_t id = 1; id <= 4; ++id) p.add(id, Priority::chat, prompt(8, static_cast<int32_t>(id * 100)), 64, kFlood);
  for (uint64_t id = 5; id <= 8; ++id) p.add(id, Priority::chat, prompt(400, static_cast<int32_t>(id * 1000)), 64, kFlood);
  step(p);
  step(p);  // four decoding, one long prompt half way, three waiting
  REQUIRE(p.tenant_load(kFlood).running == 5);
  REQUIRE(p.add(100, Priority::chat, prompt(8, 50000), 8, kPolite) == BatchPlanner::AddResult::accepted);
  const auto s = step(p);
  CHECK(in_step(s, 100));
  for (const PlannedSlice& x : s)
    if (x.id != 100) CHECK(x.count == 1);  // the flood's decodes only
  for (uint64_t id = 1; id <= 4; ++id) CHECK(in_step(s, id));
  CHECK_FALSE(in_step(s, 5));
  // The newcomer decodes now: the flood's prompts go on in the same step.
  const auto next = step(p);
  CHECK(in_step(next, 100));
  CHECK(in_step(next, 5));
}

TEST_CASE("a flood under its shares but with more requests queued also yields its prefill to a newcomer's prompt") {
  // As on a slow CPU: the flood admits a prompt a step, so it holds few
  // slots and pages, but its queue is long.
  PagePool pool(4096);
  PlannerLimits l;
  l.token_budget = 64;
  BatchPlanner p(pool, 4, l);
  for (uint64_t id = 1; id <= 20; ++id) p.add(id, Priority::chat, prompt(400, static_cast<int32_t>(id * 1000)), 64, kFlood);
  step(p);
  REQUIRE(p.tenant_load(kFlood).running == 1);
  REQUIRE(p.add(100, Priority::chat, prompt(8, 50000), 8, kPolite) == BatchPlanner::AddResult::accepted);
  const auto s = step(p);
  REQUIRE(in_step(s, 100));
  CHECK(s.size() == 1);  // the flood's prompt waits a step
  const auto next = step(p);
  CHECK(in_step(next, 1));
  // Two tenants with as many requests each do not hold each other back.
  PagePool pool2(4096);
  BatchPlanner q(pool2, 4, l);
  q.add(1, Priority::chat, prompt(40, 1000), 8, kFlood);
  q.add(2, Priority::chat, prompt(8, 2000), 8, kPolite);
  const auto both = step(q);
  CHECK(in_step(both, 1));
  CHECK(in_step(both, 2));
}

TEST_CASE("with the pages all held by a flood, a newcomer's prompt takes pages from it at once") {
  PagePool pool(24);  // four prompts of 22 tokens hold all 24 pages
  PlannerLimits l;
  l.max_running = 8;
  l.token_budget = 128;
  BatchPlanner p(pool, 4, l);
  for (uint64_t id = 1; id <= 6; ++id) p.add(id, Priority::chat, prompt(22, static_cast<int32_t>(id * 100)), 64, kFlood);
  step(p);
  REQUIRE(p.tenant_load(kFlood).running == 4);
  REQUIRE(p.free_pages() == 0);
  REQUIRE(p.add(100, Priority::chat, prompt(8, 5000), 8, kPolite) == BatchPlanner::AddResult::accepted);
  const auto s = step(p);
  CHECK(in_step(s, 100));
  CHECK(p.find(100)->state == RequestState::running);
  CHECK(p.tenant_load(kFlood).running == 3);
}

TEST_CASE("the least-served tenant's request is admitted before a flood's queued ones") {
  PagePool pool(256);
  PlannerLimits l;
  l.token_budget = 8;  // one prompt of 8 a step
  BatchPlanner p(pool, 4, l);
  for (uint64_t id = 1; id <= 6; ++id) p.add(id, Priority::chat, prompt(8, static_cast<int32_t>(id * 100)), 1, kFlood);
  step(p);  // the flood has been served 8 tokens
  p.finish(1);
  p.add(100, Priority::chat, prompt(8, 5000), 1, kPolite);
  const auto s = step(p);
  REQUIRE(s.size() == 1);
  CHECK(s[0].id == 100);
}

TEST_CASE("priority still comes first: a polite tenant's batch work waits for a flood's chat") {
  PagePool pool(256);
  PlannerLimits l;
  l.token_budget = 8;
  BatchPlanner p(pool, 4, l);
  p.add(1, Priority::chat, prompt(8), 4, kFlood);
  p.add(2, Priority::chat, prompt(8, 100), 4, kFlood);
  p.add(100, Priority::batch, prompt(8, 5000), 4, kPolite);
  auto s = step(p);
  CHECK(in_step(s, 1));
  CHECK_FALSE(in_step(s, 100));
}

TEST_CASE("weights divide a contended step's work between tenants") {
  PagePool pool(1024);
  PlannerLimits l;
  l.max_running = 4;
  l.token_budget = 16;
  l.max_waiting = 4096;
  BatchPlanner p(pool, 4, l);
  uint64_t next = 1;
  std::map<TenantId, int64_t> tokens;
  for (int round = 0; round < 200; ++round) {
    // Both keep four short requests queued; each ends after 4 tokens.
    for (TenantId t : {kFlood, kPolite})
      while (p.tenant_load(t).waiting + p.tenant_load(t).running < 6)
        p.add(next, Priority::chat, prompt(6, static_cast<int32_t>(next * 10)), 4, t, t == kFlood ? 3 : 1), ++next;
    for (const PlannedSlice& s : step(p)) {
      tokens[p.find(s.id)->tenant] += s.count;
      if (p.find(s.id)->generated() >= 4) p.finish(s.id);
    }
  }
  const double ratio = static_cast<double>(tokens[kFlood]) / static_cast<double>(tokens[kPolite]);
  CHECK(ratio > 2.0);
  CHECK(ratio < 4.5);
}

TEST_CASE("a hard slot share caps a tenant while another is active, not while it is alone") {
  PagePool pool(256);
  PlannerLimits l;
  l.max_running = 4;
  l.token_budget = 64;
  l.tenant_slot_share = 0.5;
  BatchPlanner p(pool, 4, l);
  for (uint64_t id = 1; id <= 6; ++id) p.add(id, Priority::chat, prompt(8, static_cast<int32_t>(id * 100)), 64, kFlood);
  step(p);
  CHECK(p.tenant_load(kFlood).running == 4);  // alone: the whole server
  p.add(100, Priority::chat, prompt(8, 5000), 64, kPolite);
  p.add(101, Priority::chat, prompt(8, 6000), 64, kPolite);
  p.add(102, Priority::chat, prompt(8, 7000), 64, kPolite);
  for (int i = 0; i < 4; ++i) step(p);
  CHECK(p.tenant_load(kPolite).running == 2);
  CHECK(p.tenant_load(kFlood).running == 2);
}

TEST_CASE("a tenant back from idle starts level with the others, not with banked credit") {
  PagePool pool(1024);
  PlannerLimits l;
  l.max_running = 2;
  l.token_budget = 8;
  l.max_waiting = 4096;
  BatchPlanner p(pool, 4, l);
  uint64_t next = 1;
  auto keep_queued = [&](TenantId t) {
    while (p.tenant_load(t).waiting + p.tenant_load(t).running < 4)
      p.add(next, Priority::chat, prompt(4, static_cast<int32_t>(next * 10)), 2, t), ++next;
  };
  std::map<TenantId, int64_t> tokens;
  auto run = [&](int steps, bool polite) {
    for (int i = 0; i < steps; ++i) {
      keep_queued(kFlood);
      if (polite) keep_queued(kPolite);
      for (const PlannedSlice& s : step(p)) {
        tokens[p.find(s.id)->tenant] += s.count;
        if (p.find(s.id)->generated() >= 2) p.finish(s.id);
      }
    }
  };
  run(100, false);  // the flood alone, for a long time
  tokens.clear();
  run(60, true);
  // Equal weights: neither is shut out by the other's history.
  CHECK(tokens[kFlood] > tokens[kPolite] / 3);
  CHECK(tokens[kPolite] > tokens[kFlood] / 3);
}

TEST_CASE("many tenants that each outgrow their page share all finish: pages do not move back and forth") {
  // 16 one-request tenants in 24 pages of 16: each grows to 9 pages, far
  // past its 1.5-page share. Taking pages from a tenant over its share for
  // one that soon is over its own only moved the shortage round: two
  // requests took turns for ever, a livelock first seen in the service.
  PagePool pool(24);
  PlannerLimits l;
  l.token_budget = 32;
  BatchPlanner p(pool, 16, l);
  std::map<uint64_t, int> wanted;
  for (uint64_t id = 1; id <= 16; ++id) {
    wanted[id] = 120;
    p.add(id, Priority::interactive, prompt(12, static_cast<int32_t>(id * 1000)), 120, static_cast<TenantId>(id));
  }
  const int steps = run_to_end(p, wanted, 5000);
  INFO("steps " << steps << ", preemptions " << p.stats().preemptions);
  CHECK(p.idle());
  CHECK(p.stats().preemptions < 160);  // 93 with this rule
}

TEST_CASE("random mixes of tenants, weights, priorities and pool sizes always run to the end") {
  // Every request fits the pool alone; then every one must end, whatever
  // the others ask for (400 mixes; the old share rule stalled 71 of them).
  std::mt19937 rng(1);
  int longest = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int pages = 16 + static_cast<int>(rng() % 48), page = rng() % 2 ? 16 : 8;
    PagePool pool(pages);
    PlannerLimits l;
    l.token_budget = rng() % 2 ? 32 : 64;
    l.max_running = rng() % 3 == 0 ? 4 : 64;
    BatchPlanner p(pool, page, l);
    const int n = 2 + static_cast<int>(rng() % 30), tenants = 1 + static_cast<int>(rng() % 16);
    std::map<uint64_t, int> wanted;
    for (uint64_t id = 1; id <= static_cast<uint64_t>(n); ++id) {
      const int length = 5 + static_cast<int>(rng() % 60);
      wanted[id] = std::min(10 + static_cast<int>(rng() % 100), pages * page - length - 1);
      p.add(id, static_cast<Priority>(rng() % 3), prompt(length, static_cast<int32_t>(id * 1000)), wanted[id],
            static_cast<TenantId>(1 + rng() % tenants), 1 + rng() % 3);
    }
    const int steps = run_to_end(p, wanted, 20000);
    INFO("trial " << trial << ": " << pages << " pages of " << page << ", " << n << " requests of " << tenants << " tenants");
    REQUIRE(p.idle());
    longest = std::max(longest, steps);
  }
  CHECK(longest < 5000);
}
