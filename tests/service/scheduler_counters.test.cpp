// The scheduler's counters and the three views made of them
// (service/scheduler_counters.h): the server's, its tier's, its worker's.
#include <catch2/catch.hpp>

#include "service/scheduler_counters.h"

using namespace troupe;
using namespace troupe::service;

namespace {

PlannerStats planner() {
  PlannerStats p;
  p.running = 3;
  p.waiting = 2;
  p.pages_total = 100;
  p.pages_used = 40;
  p.pages_cached = 10;
  p.pages_free = 50;
  p.preemptions = 4;
  return p;
}

SchedulerCounters counted() {
  SchedulerCounters c;
  c.requests_in = 10, c.escalated_in = 2, c.moved_in = 1, c.escalations_out = 3, c.moved_out = 4;
  c.tokens_generated = 500, c.drafted = 60, c.accepted = 45;
  c.pages_restored = 5, c.pages_swapped_out = 6, c.pages_swapped_in = 7, c.tokens_shifted = 8;
  return c;
}

}  // namespace

TEST_CASE("scheduler counters: steps add forward time and tokens, and the step time is a moving average") {
  SchedulerCounters c;
  c.stepped(10, 64);
  CHECK(c.step_ms_avg == 10);
  c.stepped(20, 0);  // a step with only KV work: timed, but no forward tokens
  CHECK(c.engine_ms == 30);
  CHECK(c.step_ms_avg == Approx(12));
  CHECK(c.forward_tokens == 64);
  CHECK(c.forward_steps == 1);
}

TEST_CASE("scheduler counters: busy time runs only while there is work") {
  SchedulerCounters c;
  c.account(false, 1'000'000);
  c.account(true, 2'000'000);
  c.account(true, 5'000'000);
  c.account(false, 7'000'000);
  c.account(false, 90'000'000);
  CHECK(c.busy_ms == Approx(5.0));
}

TEST_CASE("scheduler counters: the server's, tier's and worker's views read the same counters") {
  const SchedulerCounters c = counted();
  const messages::StatsFields s = c.stats(planner());
  CHECK(s.running == 3);
  CHECK(s.pages_cached == 10);
  CHECK(s.preemptions == 4);
  CHECK(s.tokens_generated == 500);
  CHECK(s.pages_swapped_in == 7);
  CHECK(s.tokens_shifted == 8);
  const messages::TierStatsFields t = c.tier("small", planner());
  CHECK(t.name == "small");
  CHECK(t.requests == 10);
  CHECK(t.escalated_in == 2);
  CHECK(t.escalations == 3);
  CHECK(t.drafted == 60);
  CHECK(t.accepted == 45);
  CHECK(t.pages_used == 40);
  const messages::WorkerStatsFields w = c.worker("tcp://127.0.0.1:7001", "small", false, 2, planner());
  CHECK(w.requests == 13);  // from clients, escalated in and moved in
  CHECK(w.moved_out == 4);
  CHECK(w.lost == 2);
  CHECK_FALSE(w.up);
  CHECK(w.tokens == 500);
  CHECK(w.waiting == 2);
}
