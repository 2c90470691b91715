// The scheduler's decisions with fabricated step results: the cases the
// end-to-end tests reach only by luck (a wrong step, tokens outside the
// vocabulary, a cancel racing a result, forks, spills racing page reuse,
// rejected draft windows, preemption with swap).
#include <catch2/catch.hpp>

#include <memory>

#include <algorithm>
#include <map>
#include <numeric>

#include "messages/step_frames.h"
#include "service/kv_tiers.h"
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

TEST_CASE("a request runs to max_tokens: Accepted, one token a step after its prompt, then Done with its usage") {
  Scheduler s(config());
  Loop loop(s);
  s.admit(request(1, tokens(10), 5));
  loop.run();
  const auto f = loop.of(1);
  REQUIRE(f.front().kind == wire::ResponseBody::Accepted);
  REQUIRE(f.back().kind == wire::ResponseBody::Done);
  CHECK(f.back().reason == wire::FinishReason::length);
  CHECK(f.back().completion_tokens == 5);
  std::vector<int32_t> want;
  for (int32_t pos = 10; pos < 15; ++pos) want.push_back(loop.engine.token(1, pos));
  CHECK(loop.tokens_of(1) == want);
  require_no_pages_in_use(s);
}

TEST_CASE("a result for another step ends that step's requests with an internal error, and the next request is served") {
  Scheduler s(config());
  Loop loop(s);
  s.admit(request(1, tokens(6), 4));
  SchedulerPlan plan = s.next_step();
  REQUIRE(plan.kind == SchedulerPlan::Kind::step);
  const auto& p = plan_of(plan.bytes);
  const std::vector<messages::SampledToken> sampled{{p.slices()->Get(0)->sequence_id(), 70, 0, {}, {}, false, {}, {}, {}}};
  s.apply(messages::step_result(p.step() + 1, sampled, "", 1), "");
  loop.collect();
  const auto f = loop.of(1);
  REQUIRE(f.back().kind == wire::ResponseBody::Error);
  CHECK(f.back().code == wire::ErrorCode::internal);
  CHECK_THAT(f.back().message, Catch::Contains("does not answer step"));
  require_no_pages_in_use(s);

  s.admit(request(2, tokens(6), 4));
  loop.run();
  CHECK(loop.of(2).back().kind == wire::ResponseBody::Done);
  CHECK(loop.tokens_of(2).size() == 4);
}

TEST_CASE("a token outside the vocabulary ends only the requests in that step, and a queued one goes on") {
  SchedulerConfig c = config();
  c.planner.max_running = 1;
  Scheduler s(c);
  Loop loop(s);
  s.admit(request(1, tokens(6), 4));
  s.admit(request(2, tokens(6, 70), 4));
  SchedulerPlan plan = s.next_step();
  const auto& p = plan_of(plan.bytes);
  REQUIRE(p.slices()->size() == 1);
  const auto vocab = static_cast<int32_t>(c.tokenizer->size());
  const std::vector<messages::SampledToken> sampled{{p.slices()->Get(0)->sequence_id(), vocab, 0, {}, {}, false, {}, {}, {}}};
  s.apply(messages::step_result(p.step(), sampled, "", 1), "");
  loop.collect();
  CHECK(loop.of(1).back().kind == wire::ResponseBody::Error);
  CHECK(loop.of(1).back().code == wire::ErrorCode::internal);
  loop.run();
  CHECK(loop.of(2).back().kind == wire::ResponseBody::Done);
  CHECK(loop.tokens_of(2).size() == 4);
  require_no_pages_in_use(s);
}

TEST_CASE("a grammar that allows no token ends its request with grammar_blocked, and the others go on") {
  Scheduler s(config());
  Loop loop(s);
  s.admit(request(1, tokens(6), 4));
  s.admit(request(2, tokens(6, 70), 4));
  SchedulerPlan plan = s.next_step();
  const auto& p = plan_of(plan.bytes);
  REQUIRE(p.slices()->size() == 2);
  const uint64_t first = p.slices()->Get(0)->sequence_id(), second = p.slices()->Get(1)->sequence_id();
  const std::vector<messages::SampledToken> sampled{{first, 70, 0, {}, {}, true, {}, {}, {}}, {second, 71, 0, {}, {}, false, {}, {}, {}}};
  s.apply(messages::step_result(p.step(), sampled, "", 1), "");
  loop.collect();
  REQUIRE(loop.of(1).back().kind == wire::ResponseBody::Done);
  CHECK(loop.of(1).back().reason == wire::FinishReason::grammar_blocked);
  CHECK(loop.tokens_of(1).empty());  // the refused token is never sent
  loop.run();
  CHECK(loop.of(2).back().kind == wire::ResponseBody::Done);
  CHECK(loop.tokens_of(2).size() == 4);
  require_no_pages_in_use(s);
}

TEST_CASE("jump-forward tokens are streamed at once and computed with the next slice as one chunk") {
  Scheduler s(config());
  Loop loop(s);
  s.admit(request(1, tokens(6), 6));
  SchedulerPlan plan = s.next_step();
  const auto& p = plan_of(plan.bytes);
  const uint64_t seq = p.slices()->Get(0)->sequence_id();
  const std::vector<messages::SampledToken> sampled{{seq, 70, 0, {}, {71, 72, 73}, false, {}, {}, {}}};
  s.apply(messages::step_result(p.step(), sampled, "", 1), "");
  loop.collect();
  CHECK(loop.tokens_of(1) == std::vector<int32_t>{70, 71, 72, 73});
  SchedulerPlan next = s.next_step();
  REQUIRE(next.kind == SchedulerPlan::Kind::step);
  const auto& q = plan_of(next.bytes);
  REQUIRE(q.slices()->size() == 1);
  const auto* slice = q.slices()->Get(0);
  CHECK(slice->start() == 6);
  CHECK(std::vector<int32_t>(slice->tokens()->begin(), slice->tokens()->end()) == std::vector<int32_t>{70, 71, 72, 73});
  CHECK(slice->wants_token());
  // Two more tokens reach max_tokens (6); forced tokens past it are not sent.
  const std::vector<messages::SampledToken> more{{seq, 74, 0, {}, {75, 76, 77}, false, {}, {}, {}}};
  s.apply(messages::step_result(q.step(), more, "", 1), "");
  loop.collect();
  CHECK(loop.tokens_of(1) == std::vector<int32_t>{70, 71, 72, 73, 74, 75});
  CHECK(loop.of(1).back().reason == wire::FinishReason::length);
  require_no_pages_in_use(s);
}

TEST_CASE("a step that fails ends its requests with the verifier's reason") {
  Scheduler s(config());
  Loop loop(s);
  s.admit(request(1, tokens(6), 4));
  REQUIRE(s.next_step().kind == SchedulerPlan::Kind::step);
  s.apply("", "verifier unreachable: gone");
  loop.collect();
  CHECK(loop.of(1).back().code == wire::ErrorCode::internal);
  CHECK_THAT(loop.of(1).back().message, Catch::Contains("verifier unreachable: gone"));
  require_no_pages_in_use(s);
}

TEST_CASE("a cancel that arrives while a step is out takes effect when the result returns") {
  Scheduler s(config());
  Loop loop(s);
  s.admit(request(1, tokens(6), 50));
  loop.step();
  SchedulerPlan plan = s.next_step();
  REQUIRE(plan.kind == SchedulerPlan::Kind::step);
  s.cancel("client", 99, 1);
  loop.collect();
  CHECK(loop.of(1).back().kind != wire::ResponseBody::Done);  // not yet: the step's pages are in use
  CHECK(s.next_step().kind == SchedulerPlan::Kind::none);     // one plan out at a time
  s.apply(loop.engine.answer(plan.bytes), "");
  loop.collect();
  CHECK(loop.of(1).back().kind == wire::ResponseBody::Done);
  CHECK(loop.of(1).back().reason == wire::FinishReason::cancelled);
  require_no_pages_in_use(s);
  // The verifier is told to forget the sequence with the next plan.
  s.admit(request(2, tokens(4), 1));
  plan = s.next_step();
  const auto& p = plan_of(plan.bytes);
  REQUIRE(p.forget());
  CHECK(p.forget()->size() == 1);
}

TEST_CASE("a cancel of an unknown request is an Error naming it, and a gone client's requests end without frames") {
  Scheduler s(config());
  Loop loop(s);
  s.cancel("client", 7, 42);
  loop.collect();
  REQUIRE(loop.of(7).size() == 1);
  CHECK(loop.of(7)[0].code == wire::ErrorCode::unknown_request);
  s.admit(request(1, tokens(6), 50, "doomed"));
  loop.step();
  const size_t before = loop.seen.size();
  s.gone("doomed");
  loop.run();
  CHECK(loop.seen.size() == before);
  require_no_pages_in_use(s);
}

TEST_CASE("a cancel that overtakes its request ends it at once on arrival, for 30 seconds") {
  SchedulerConfig c = config();
  auto t = std::make_shared<int64_t>(0);
  c.clock = [t] { return *t; };
  Scheduler s(c);
  Loop loop(s);
  s.cancel("client", 7, 1);  // the Cancel skipped ahead of its Generate, still being tokenized
  s.admit(request(1, tokens(6), 50));
  loop.run();
  CHECK(loop.of(7).at(0).code == wire::ErrorCode::unknown_request);
  REQUIRE(loop.of(1).size() == 1);
  CHECK(loop.of(1)[0].kind == wire::ResponseBody::Done);
  CHECK(loop.of(1)[0].reason == wire::FinishReason::cancelled);
  require_no_pages_in_use(s);
  s.cancel("client", 8, 2);
  *t += 31'000'000'000;  // too late: a cancel that old belongs to no request now
  s.admit(request(2, tokens(6), 3));
  loop.run();
  CHECK(loop.of(2).back().reason == wire::FinishReason::length);
}

TEST_CASE("a duplicate request id on one connection is refused, and the same id on another connection is not") {
  Scheduler s(config());
  Loop loop(s);
  s.admit(request(1, tokens(6), 3, "a"));
  s.admit(request(1, tokens(6), 3, "a"));
  s.admit(request(1, tokens(6), 3, "b"));
  loop.run();
  int errors = 0, dones = 0;
  for (const auto& f : loop.seen) {
    errors += f.kind == wire::ResponseBody::Error && f.code == wire::ErrorCode::duplicate_id;
    dones += f.kind == wire::ResponseBody::Done;
  }
  CHECK(errors == 1);
  CHECK(dones == 2);
}

TEST_CASE("n = 3 samples fork after the prompt: three streams, each its own sample index, sharing the prompt's pages") {
  Scheduler s(config());
  Loop loop(s);
  AdmitRequest a = request(1, tokens(10), 4);
  a.samples = 3;
  a.sampling.temperature = 0.8f;
  s.admit(std::move(a));
  loop.run();
  std::map<int32_t, int> done;
  for (const auto& f : loop.of(1))
    if (f.kind == wire::ResponseBody::Done) ++done[f.sample];
  CHECK(done == std::map<int32_t, int>{{0, 1}, {1, 1}, {2, 1}});
  for (int32_t i = 0; i < 3; ++i) CHECK(loop.tokens_of(1, i).size() == 4);
  CHECK(loop.tokens_of(1, 1) != loop.tokens_of(1, 2));  // the fake engine's tokens depend on the sequence
  // The children recompute the last prompt position into their own copy of its page.
  bool copied = false, fresh_sampling = false;
  for (const auto& bytes : loop.plans) {
    const auto& p = plan_of(bytes);
    copied = copied || (p.copies() && p.copies()->size() > 0);
    if (p.slices())
      for (const auto* sl : *p.slices())
        if (sl->start() == 9 && sl->sampling()) fresh_sampling = true;
  }
  CHECK(copied);
  CHECK(fresh_sampling);
  require_no_pages_in_use(s);
}

TEST_CASE("a session turn's Done waits for its commit, which carries the answer and the turn's token history") {
  SchedulerConfig c = config();
  c.kv_transfer = true;
  c.page_bytes = 64;
  Scheduler s(c);
  Loop loop(s);
  AdmitRequest a = request(1, tokens(9), 3);
  a.session_id = "s1";
  a.turn_messages = {{"user", "hi"}};
  s.admit(std::move(a));
  loop.step();
  Outbound seen;
  for (int i = 0; i < 10; ++i) {
    SchedulerPlan plan = s.next_step();
    if (plan.kind == SchedulerPlan::Kind::none) break;
    s.apply(loop.engine.answer(plan.bytes), "");
    Outbound out = s.take_outbound();
    for (auto& c2 : out.commits) seen.commits.push_back(std::move(c2));
    for (auto& r : out.replies) seen.replies.push_back(std::move(r));
    for (auto& x : out.idle_sessions) seen.idle_sessions.push_back(std::move(x));
    for (auto& x : out.spills) loop.spills.push_back(std::move(x));
  }
  for (const auto& f : test::frames(seen)) CHECK(f.kind != wire::ResponseBody::Done);
  REQUIRE(seen.commits.size() == 1);
  const persistence::SessionCommit& commit = seen.commits[0];
  CHECK(commit.session_id == "s1");
  CHECK(commit.messages.size() == 2);
  CHECK(commit.messages[1].role == "assistant");
  CHECK(commit.tokens.size() == 12);
  CHECK(commit.done.completion_tokens == 3);
  REQUIRE(seen.idle_sessions.size() == 1);
  CHECK(seen.idle_sessions[0].tokens.size() == 8);  // the computed full pages
  // Its two full pages are exported by the next step, as the session's spill.
  REQUIRE(loop.spills.size() == 1);
  CHECK(loop.spills[0].session_id == "s1");
  CHECK(loop.spills[0].data.size() == 2);
}

TEST_CASE("a spill rides the step that reuses its pages: they are exported before a waiting request's prefill writes them") {
  SchedulerConfig c = config(6, 4);
  c.kv_transfer = true;
  c.page_bytes = 64;
  Scheduler s(c);
  Loop loop(s);
  AdmitRequest a = request(1, tokens(12, 60), 2);
  a.session_id = "s1";
  s.admit(std::move(a));
  s.admit(request(2, tokens(16, 100), 2));  // needs 5 pages: waits until the session turn's are free
  for (int i = 0; i < 20 && loop.spills.empty(); ++i) loop.step();
  REQUIRE(loop.spills.size() == 1);
  // The step that exported the session's pages also ran request 2, in some of those very pages.
  std::vector<int32_t> exported, written;
  for (const auto& bytes : loop.plans) {
    const auto& p = plan_of(bytes);
    if (!p.exports() || p.exports()->size() == 0) continue;
    exported.assign(p.exports()->begin(), p.exports()->end());
    for (const auto* sl : *p.slices()) written.insert(written.end(), sl->block_table()->begin(), sl->block_table()->end());
  }
  REQUIRE(exported.size() == 3);
  bool shared = false;
  for (int32_t page : exported) shared = shared || std::find(written.begin(), written.end(), page) != written.end();
  CHECK(shared);
  CHECK(loop.spills[0].data[0][0] == static_cast<char>(exported[0]));  // the exported page's contents
  loop.run();
  CHECK(loop.of(2).back().kind == wire::ResponseBody::Done);
}

TEST_CASE("restored pages of a step that failed are never reused: the same prompt is computed again") {
  SchedulerConfig c = config();
  c.kv_transfer = true;
  c.page_bytes = 64;
  Scheduler s(c);
  Loop loop(s);
  AdmitRequest a = request(1, tokens(12), 2);
  a.restore_pages.assign(3, std::string(64, 'r'));
  s.admit(std::move(a));
  SchedulerPlan plan = s.next_step();
  const auto& p = plan_of(plan.bytes);
  REQUIRE(p.imports());
  CHECK(p.imports()->size() == 3);
  s.apply("", "the worker crashed");
  loop.collect();
  CHECK(loop.of(1).back().kind == wire::ResponseBody::Error);
  s.admit(request(2, tokens(12), 2));
  loop.run();
  CHECK(loop.of(2).back().kind == wire::ResponseBody::Done);
  CHECK(loop.of(2).back().cached_prompt_tokens == 0);
}

TEST_CASE("restored pages of a stored session serve its prefix: the prompt's first pages are not computed again") {
  SchedulerConfig c = config();
  c.kv_transfer = true;
  c.page_bytes = 64;
  Scheduler s(c);
  Loop loop(s);
  AdmitRequest a = request(1, tokens(14), 2);
  a.restore_pages.assign(3, std::string(64, 'r'));
  s.admit(std::move(a));
  loop.run();
  const auto& first = plan_of(loop.plans[0]);
  REQUIRE(first.imports()->size() == 3);
  REQUIRE(first.slices()->size() == 1);
  CHECK(first.slices()->Get(0)->start() == 12);  // 3 pages of 4 restored
  CHECK(loop.of(1).back().cached_prompt_tokens == 12);
  CHECK(s.stats().pages_restored == 3);
}

TEST_CASE("a rejected draft window: none of its drafts are kept, the stream gets the verifier's token, the next step follows it") {
  SchedulerConfig c = config();
  Scheduler s(c);
  Loop loop(s);
  // The prompt's last tokens recur in it, so n-gram lookup drafts what followed them.
  const std::vector<int32_t> prompt{61, 62, 63, 64, 70, 61, 62, 63};
  loop.engine.token = [](uint64_t, int32_t pos) { return pos == 8 ? 64 : 50 + pos; };
  AdmitRequest a = request(1, prompt, 6);
  a.speculation = SpeculationMode::ngram;
  a.max_draft = 4;
  s.admit(std::move(a));
  loop.run();
  int windows = 0;
  int32_t after_window = -1;
  for (size_t i = 0; i < loop.plans.size(); ++i) {
    const auto& p = plan_of(loop.plans[i]);
    if (!p.slices()) continue;
    for (const auto* sl : *p.slices())
      if (sl->drafts() > 0) {
        ++windows;
        if (windows == 1 && i + 1 < loop.plans.size())
          after_window = plan_of(loop.plans[i + 1]).slices()->Get(0)->start();
        CHECK(sl->tokens()->Get(1) == 70);  // the draft: what followed "61 62 63 64" before
        if (windows == 1) CHECK(sl->start() == 8);  // the window: [the token at 8, drafts at 9...]
      }
  }
  REQUIRE(windows >= 1);
  CHECK(after_window == 9);  // the verifier's token at 9 comes next: the rejected drafts rolled back
  std::vector<int32_t> want;
  for (int32_t pos = 8; pos < 14; ++pos) want.push_back(loop.engine.token(1, pos));
  CHECK(loop.tokens_of(1) == want);
  const Frame done = loop.of(1).back();
  CHECK(done.kind == wire::ResponseBody::Done);
  require_no_pages_in_use(s);
}

TEST_CASE("under page pressure sequences are preempted, swapped out, swapped back in, and every stream completes exactly") {
  // 20 pages of 4 for 8 streams that each grow to 5: preemption is certain,
  // and the cached pages of preempted ones are evicted before they return.
  SchedulerConfig c = config(20, 4);
  c.kv_transfer = true;
  c.page_bytes = 64;
  Scheduler s(c);
  Loop loop(s);
  for (uint64_t id = 1; id <= 8; ++id) s.admit(request(id, tokens(8, static_cast<int32_t>(60 + 10 * id)), 12));
  loop.run();
  for (uint64_t id = 1; id <= 8; ++id) {
    INFO("request " << id);
    CHECK(loop.of(id).back().kind == wire::ResponseBody::Done);
    // Tokens depend only on (sequence, position): none was lost or repeated across a preemption.
    std::vector<int32_t> want;
    for (int32_t pos = 8; pos < 20; ++pos) want.push_back(loop.engine.token(id, pos));
    CHECK(loop.tokens_of(id) == want);
  }
  const messages::StatsFields st = s.stats();
  CHECK(st.pages_swapped_out > 0);
  CHECK(st.pages_swapped_in > 0);
  bool swapped_out = false, imported = false;
  for (const auto& bytes : loop.plans) {
    const auto& p = plan_of(bytes);
    swapped_out = swapped_out || (p.swap_outs() && p.swap_outs()->size() > 0);
    if (p.imports())
      for (const auto* im : *p.imports()) imported = imported || im->data()->Get(1) == 's';  // the swapped contents
  }
  CHECK(swapped_out);
  CHECK(imported);
  CHECK(loop.tiers.host_bytes() == 0);  // every swapped page came back or was dropped with its sequence
  require_no_pages_in_use(s);
}

TEST_CASE("a prompt longer than the whole KV cache is refused as too_long, and the next request is served") {
  Scheduler s(config(4, 4));
  Loop loop(s);
  s.admit(request(1, tokens(40), 2));
  loop.run();
  CHECK(loop.of(1).back().code == wire::ErrorCode::too_long);
  s.admit(request(2, tokens(6), 2));
  loop.run();
  CHECK(loop.of(2).back().kind == wire::ResponseBody::Done);
}

TEST_CASE("a session past its window moves its kept turns' KV instead of computing it: the plan shifts, the prefill starts after them") {
  SchedulerConfig c = config(64, 4);
  c.kv_shift = true;
  Scheduler s(c);
  Loop loop(s);
  const std::vector<int32_t> history = tokens(40, 60);
  s.admit(request(1, history, 1));  // the previous turn: its full pages stay cached
  loop.run();
  // The next prompt keeps the first 8 tokens, drops 12, keeps the last 20, then 6 new ones.
  std::vector<int32_t> prompt(history.begin(), history.begin() + 8);
  prompt.insert(prompt.end(), history.begin() + 20, history.end());
  const std::vector<int32_t> fresh = tokens(6, 120);
  prompt.insert(prompt.end(), fresh.begin(), fresh.end());
  AdmitRequest a = request(2, prompt, 2);
  a.restore_tokens = history;
  a.reuse = {20, 8, 20};
  s.admit(std::move(a));
  SchedulerPlan plan = s.next_step();
  REQUIRE(plan.kind == SchedulerPlan::Kind::step);
  const auto& p = plan_of(plan.bytes);
  REQUIRE(p.shifts());
  int32_t moved = 0;
  for (const auto* sh : *p.shifts()) {
    moved += sh->count();
    if (sh->src_start() >= 20) CHECK(sh->delta() == -12);
    else CHECK(sh->delta() == 0);
  }
  CHECK(moved == 20);  // pages 2..6 of the prompt: [8, 28)
  REQUIRE(p.slices()->size() == 1);
  CHECK(p.slices()->Get(0)->start() == 28);  // the kept turns' whole pages are not computed again
  s.apply(loop.engine.answer(plan.bytes), "");
  loop.collect();
  loop.run();
  CHECK(loop.of(2).back().kind == wire::ResponseBody::Done);
  CHECK(loop.of(2).back().cached_prompt_tokens == 28);
  CHECK(s.stats().tokens_shifted == 20);
  require_no_pages_in_use(s);
}

TEST_CASE("a sliding-window model's local slots show in Stats and on the wire: all of them, and those a window holds") {
  SchedulerConfig c = config(64, 4);
  c.kv_local_pages = 16;
  c.sliding_window = 8;
  Scheduler s(c);
  Loop loop(s);
  loop.engine.worker.kv_local_pages = 16;
  std::vector<int32_t> prompt(30);
  std::iota(prompt.begin(), prompt.end(), 40);
  s.admit(request(1, prompt, 20));
  for (int i = 0; i < 4; ++i) REQUIRE(loop.step());
  messages::StatsFields st = s.stats();
  CHECK(st.local_pages_total == 16);
  CHECK(st.local_pages_used > 0);
  CHECK(st.local_pages_used < st.pages_used);  // the window reaches a few of the sequence's pages
  const messages::Bytes bytes = messages::stats_response(9, st);
  const auto* reply = messages::check_response(bytes)->body_as_StatsReply();
  REQUIRE(reply);
  CHECK(reply->local_pages_total() == 16);
  CHECK(reply->local_pages_used() == st.local_pages_used);
  loop.run();
  CHECK(loop.tokens_of(1).size() == 20);
  CHECK(s.stats().local_pages_total == 16);
  // A model without a window reports none.
  Scheduler plain(config());
  CHECK(plain.stats().local_pages_total == 0);
}
