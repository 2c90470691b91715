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

using namespace troupe;
using namespace troupe::service;
using test::Frame;

namespace {

std::vector<int32_t> tokens(int32_t n, int32_t first = 60) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

SchedulerConfig config(int32_t pages = 64, int32_t page_size = 4) {
  SchedulerConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.kv_pages = pages;
  c.page_size = page_size;
  c.planner.token_budget = 16;
  c.planner.max_context = 256;
  c.model_name = "test";
  int64_t t = 0;
  c.clock = [t]() mutable { return t += 1000000; };  // a millisecond per reading
  return c;
}

AdmitRequest request(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, const std::string& peer = "client") {
  AdmitRequest a;
  a.peer = peer;
  a.client_id = id;
  a.prompt = std::move(prompt);
  a.sampling.temperature = 0;
  a.sampling.max_tokens = max_tokens;
  return a;
}

// Drives a scheduler against the fake engine, keeping host-tier pages as the
// KV allocator would, and records every frame.
struct Loop {
  explicit Loop(Scheduler& scheduler) : s(scheduler) {}
  Scheduler& s;
  test::FakeEngine engine;
  KvTiers tiers{int64_t{1} << 62};
  std::vector<Frame> seen;
  std::vector<std::string> plans;  // every StepPlan sent
  std::vector<persistence::KvSpill> spills;
  std::vector<AdmitRequest> moved;  // escalated, or moved off a lost worker
  int8_t worker = 0;                // the last worker change reported

  void collect() {
    Outbound out = s.take_outbound();
    for (auto& a : out.escalations) moved.push_back(std::move(a));
    if (out.worker != 0) worker = out.worker;
    for (auto& f : test::frames(out)) seen.push_back(std::move(f));
    for (auto& sp : out.spills) spills.push_back(std::move(sp));
    for (auto& p : out.swap_outs) tiers.keep(std::move(p));
    for (uint64_t seq : out.swap_drops) tiers.drop(seq);
    for (uint64_t seq : out.swap_fetches) {
      s.swap_arrived(tiers.take(seq));
      collect();
    }
  }
  // One plan out and answered; false when there was nothing to send.
  bool step() {
    SchedulerPlan plan = s.next_step();
    collect();
    if (plan.kind == SchedulerPlan::Kind::none) {
      plan = s.next_step();  // a swap-in arrived: plan again
      collect();
      if (plan.kind == SchedulerPlan::Kind::none) return false;
    }
    REQUIRE(plan.kind == SchedulerPlan::Kind::step);
    plans.push_back(plan.bytes);
    s.apply(engine.answer(plan.bytes), "");
    collect();
    return true;
  }
  void run(int max_steps = 500) {
    for (int i = 0; i < max_steps && step(); ++i) {
    }
  }
  std::vector<Frame> of(uint64_t id) const {
    std::vector<Frame> out;
    for (const auto& f : seen)
      if (f.id == id) out.push_back(f);
    return out;
  }
  std::vector<int32_t> tokens_of(uint64_t id, int32_t sample = 0) const {
    std::vector<int32_t> out;
    for (const auto& f : of(id))
      if (f.kind == wire::ResponseBody::Tokens && f.sample == sample) out.insert(out.end(), f.tokens.begin(), f.tokens.end());
    return out;
  }
};

const wire::step::StepPlan& plan_of(const std::string& bytes) {
  const auto* p = messages::check_step_plan(bytes);
  REQUIRE(p);
  return *p;
}

void require_no_pages_in_use(Scheduler& s) {
  const messages::StatsFields st = s.stats();
  CHECK(st.running == 0);
  CHECK(st.waiting == 0);
  CHECK(st.pages_used == 0);
}

}  // namespace

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
