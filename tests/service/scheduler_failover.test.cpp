// The scheduler when its worker is lost, restarts or drains (service/
// scheduler_workers.cpp): requests move with their streams to another
// replica, or end as unavailable; heartbeats bring a worker back empty.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "messages/step_frames.h"
#include "service/scheduler.h"
#include "tests/service/harness.h"
#include "tests/service/scheduler_testing.h"

using namespace troupe;
using namespace troupe::service;
using test::Frame;
using test::Loop;
using test::config;
using test::plan_of;
using test::request;
using test::require_no_pages_in_use;
using test::tokens;

namespace {

SchedulerConfig replica(int32_t index) {
  SchedulerConfig c = config();
  c.replica = index;
  c.failover = true;
  c.worker_name = "worker-" + std::to_string(index);
  return c;
}

// A token that depends on its position only: any worker writes the same.
int32_t by_position(uint64_t, int32_t pos) { return 40 + (pos * 3) % 50; }

}  // namespace

TEST_CASE("a lost worker's request moves with its stream: the client sees one stream, the other worker continues it") {
  Scheduler a(replica(0)), b(replica(1));
  Loop on_a(a), on_b(b);
  on_a.engine.token = on_b.engine.token = by_position;
  a.admit(request(1, tokens(10), 12));
  for (int i = 0; i < 4; ++i) REQUIRE(on_a.step());
  const size_t sent_on_a = on_a.tokens_of(1).size();
  REQUIRE(sent_on_a > 0);
  REQUIRE(sent_on_a < 12);
  // The next step never comes back: the link reports the worker lost.
  SchedulerPlan plan = a.next_step();
  REQUIRE(plan.kind == SchedulerPlan::Kind::step);
  a.apply(messages::worker_lost_result("worker worker-0 went away (its connection dropped)"), "");
  const size_t frames_before = on_a.seen.size();
  on_a.collect();
  CHECK(on_a.worker == -1);
  REQUIRE(on_a.moved.size() == 1);
  AdmitRequest moved = std::move(on_a.moved.front());
  CHECK(moved.moved_from == 0);
  CHECK(moved.prompt.size() == 10 + sent_on_a);  // the prompt and every token sent
  CHECK(moved.first_prompt_tokens == 10);
  CHECK(on_a.seen.size() == frames_before);  // the client hears nothing of it
  CHECK(a.worker_down());
  CHECK(a.live_requests() == 0);
  CHECK(a.stats().pages_used == 0);

  b.admit(std::move(moved));
  on_b.run();
  std::vector<int32_t> all = on_a.tokens_of(1), rest = on_b.tokens_of(1), want;
  all.insert(all.end(), rest.begin(), rest.end());
  for (int32_t pos = 10; pos < 22; ++pos) want.push_back(by_position(0, pos));
  CHECK(all == want);
  // One Accepted (from a), one Done (from b) with the whole request's usage.
  const auto fa = on_a.of(1), fb = on_b.of(1);
  CHECK(std::count_if(fa.begin(), fa.end(), [](const Frame& f) { return f.kind == wire::ResponseBody::Accepted; }) == 1);
  CHECK(std::none_of(fb.begin(), fb.end(), [](const Frame& f) { return f.kind == wire::ResponseBody::Accepted; }));
  REQUIRE(fb.back().kind == wire::ResponseBody::Done);
  CHECK(fb.back().completion_tokens == 12);
  const auto wa = a.worker_stats(), wb = b.worker_stats();
  CHECK_FALSE(wa.up);
  CHECK(wa.lost == 1);
  CHECK(wa.moved_out == 1);
  CHECK(wb.moved_in == 1);
  CHECK(wb.requests == 1);
}

TEST_CASE("a lost worker: new requests bounce to another, a heartbeat brings it back empty, a restart is noticed") {
  Scheduler a(replica(0));
  Loop on_a(a);
  on_a.engine.worker = {64, 4, 256, "test", false, false, 0, false, 7, 99};
  a.admit(request(1, tokens(8), 4));
  on_a.run();
  REQUIRE(on_a.of(1).back().kind == wire::ResponseBody::Done);
  // The worker restarts between two steps: the next result carries another instance.
  a.admit(request(2, tokens(8, 90), 4));
  on_a.engine.worker.instance = 8;
  REQUIRE(on_a.step());
  CHECK(a.worker_down());
  CHECK(on_a.worker == -1);
  REQUIRE(on_a.moved.size() == 1);
  CHECK(on_a.moved.front().client_id == 2);
  // While it is down, a request placed here before the router heard goes back to it.
  a.admit(request(3, tokens(8), 4));
  on_a.collect();
  REQUIRE(on_a.moved.size() == 2);
  CHECK(on_a.moved.back().moved_from == 0);
  // Both left this worker because it was lost: the replica that takes them counts both moved in.
  CHECK(a.worker_stats().moved_out == 2);
  // One already moved off another worker passes through: it stays that worker's move.
  AdmitRequest passing = request(5, tokens(8), 4);
  passing.moved_from = 1;
  a.admit(std::move(passing));
  on_a.collect();
  REQUIRE(on_a.moved.size() == 3);
  CHECK(on_a.moved.back().moved_from == 0);
  CHECK(a.worker_stats().moved_out == 2);
  CHECK(a.next_step().kind == SchedulerPlan::Kind::none);
  // A probe that finds it still gone changes nothing; one that finds it answering brings it back.
  a.probed(messages::worker_lost_result("worker worker-0 did not answer in time"));
  CHECK(a.worker_down());
  a.probed(on_a.engine.answer(messages::step_plan(0, {}, {})));
  CHECK_FALSE(a.worker_down());
  on_a.collect();
  CHECK(on_a.worker == 1);
  CHECK(a.worker_stats().up);
  // Back, empty, and serving.
  a.admit(request(4, tokens(8), 4));
  on_a.run();
  CHECK(on_a.of(4).back().kind == wire::ResponseBody::Done);
  // A worker that comes back with another model stays lost.
  on_a.engine.worker.instance = 9;
  a.probed(on_a.engine.answer(messages::step_plan(0, {}, {})));
  CHECK(a.worker_down());
  on_a.engine.worker.model_fingerprint = 100;
  a.probed(on_a.engine.answer(messages::step_plan(0, {}, {})));
  CHECK(a.worker_down());
}

TEST_CASE("a lost worker with no other to take its requests ends them as unavailable") {
  SchedulerConfig c = config();
  c.worker_name = "the-only";
  Scheduler s(c);
  Loop loop(s);
  loop.engine.worker = {64, 4, 256, "test", false, false, 0, false, 7, 99};
  s.admit(request(1, tokens(8), 8));
  REQUIRE(loop.step());
  const SchedulerPlan plan = s.next_step();
  REQUIRE(plan.kind == SchedulerPlan::Kind::step);
  s.apply(messages::worker_lost_result("worker the-only went away"), "");
  loop.collect();
  const auto f = loop.of(1);
  REQUIRE(f.back().kind == wire::ResponseBody::Error);
  CHECK(f.back().code == wire::ErrorCode::unavailable);
  CHECK_THAT(f.back().message, Catch::Contains("went away"));
  CHECK(loop.moved.empty());
  // Refused while it is lost, served once it answers.
  s.admit(request(2, tokens(8), 4));
  loop.collect();
  CHECK(loop.of(2).back().code == wire::ErrorCode::unavailable);
  s.probed(loop.engine.answer(messages::step_plan(0, {}, {})));
  s.admit(request(3, tokens(8), 4));
  loop.run();
  CHECK(loop.of(3).back().kind == wire::ResponseBody::Done);
}

TEST_CASE("a draining worker: nothing new goes there, its requests move, and the next heartbeat releases it") {
  Scheduler a(replica(0)), b(replica(1));
  Loop on_a(a), on_b(b);
  on_a.engine.token = on_b.engine.token = by_position;
  on_a.engine.worker = {64, 4, 256, "test", false, false, 0, false, 7, 99};
  a.admit(request(1, tokens(10), 12));
  for (int i = 0; i < 3; ++i) REQUIRE(on_a.step());
  CHECK(a.probe_plan() == messages::step_plan(0, {}, {}));  // an ordinary heartbeat while it serves
  // SIGTERM on the worker: its next result says it drains (its KV is intact).
  on_a.engine.worker.draining = true;
  REQUIRE(on_a.step());
  CHECK(a.worker_down());
  CHECK(on_a.worker == -1);
  REQUIRE(on_a.moved.size() == 1);
  CHECK(on_a.moved.front().moved_from == 0);
  const size_t sent_on_a = on_a.tokens_of(1).size();
  CHECK(on_a.moved.front().prompt.size() == 10 + sent_on_a);
  // The heartbeat lets it go, once; a draining worker's answers never bring it back.
  const messages::Bytes release_bytes = a.probe_plan();  // outlives the root read from it
  const auto* release = messages::check_step_plan(release_bytes);
  REQUIRE(release);
  CHECK(release->release());
  CHECK(a.probe_plan() == messages::step_plan(0, {}, {}));
  a.probed(on_a.engine.answer(messages::step_plan(0, {}, {})));
  CHECK(a.worker_down());
  b.admit(std::move(on_a.moved.front()));
  on_b.run();
  std::vector<int32_t> all = on_a.tokens_of(1), rest = on_b.tokens_of(1), want;
  all.insert(all.end(), rest.begin(), rest.end());
  for (int32_t pos = 10; pos < 22; ++pos) want.push_back(by_position(0, pos));
  CHECK(all == want);
  // The worker restarts (a new process, not draining): it is back, empty.
  on_a.engine.worker.draining = false;
  on_a.engine.worker.instance = 8;
  a.probed(on_a.engine.answer(messages::step_plan(0, {}, {})));
  CHECK_FALSE(a.worker_down());
}

TEST_CASE("a draining worker with no other to move to keeps its requests until they finish") {
  Scheduler s(config());  // one worker: no failover
  Loop loop(s);
  loop.engine.worker = {64, 4, 256, "test", false, false, 0, false, 7, 99};
  s.admit(request(1, tokens(8), 6));
  REQUIRE(loop.step());
  loop.engine.worker.draining = true;
  loop.run();
  REQUIRE(loop.of(1).back().kind == wire::ResponseBody::Done);
  CHECK(loop.of(1).back().completion_tokens == 6);
  CHECK(loop.moved.empty());
}
