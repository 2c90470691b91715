// Cascade routing's decisions (service/cascade.h) and a request escalating
// between two tiers' schedulers with fabricated step results: the tokens
// before the switch are the small tier's, the rest the large tier's
// continuation of exactly that prefix, in one stream.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "service/cascade.h"
#include "tests/service/tiers.h"
#include "service/response_stream.h"
#include "service/route_request.h"
#include "service/scheduler.h"
#include "tests/service/harness.h"

using namespace troupe;
using namespace troupe::service;

using test::two_tiers;
using test::with_tier;

namespace {

Route route_of(const TierTable& t, const messages::SamplingFields& s, int32_t n = 1) {
  auto r = resolve_route(t, s, n);
  INFO((std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : ""));
  REQUIRE(std::holds_alternative<Route>(r));
  return std::get<Route>(r);
}

std::string refusal(const TierTable& t, const messages::SamplingFields& s, int32_t n = 1) {
  auto r = resolve_route(t, s, n);
  REQUIRE(std::holds_alternative<std::string>(r));
  return std::get<std::string>(r);
}

}  // namespace

TEST_CASE("routes: fixed tiers by role or name, the policies, the server's default, and one-line refusals") {
  const auto t = two_tiers();
  CHECK(route_of(*t, with_tier("small")).tier == 0);
  CHECK(route_of(*t, with_tier("large")).tier == 1);
  CHECK(route_of(*t, with_tier("mini-q8")).tier == 0);
  CHECK(route_of(*t, with_tier("maxi")).kind == RouteKind::fixed);
  const Route e = route_of(*t, with_tier(""));  // the default: escalate
  CHECK(e.kind == RouteKind::escalate);
  CHECK(e.tier == 0);
  CHECK(e.threshold == 0.5f);
  CHECK(e.window == 4);
  auto own = with_tier("escalate");
  own.escalate_threshold = 0.8f;
  CHECK(route_of(*t, own).threshold == 0.8f);
  const Route v = route_of(*t, with_tier("verify"));
  CHECK(v.kind == RouteKind::verify);
  CHECK(v.tier == 1);
  CHECK(route_of(*t, with_tier("auto")).kind == RouteKind::automatic);

  CHECK_THAT(refusal(*t, with_tier("medium")), Catch::StartsWith("sampling.tier: no tier 'medium'") &&
                                                   Catch::Contains("mini-q8"));
  CHECK_THAT(refusal(*t, with_tier("escalate"), 2), Catch::Contains("n = 1"));
  CHECK_THAT(refusal(*t, with_tier("verify", 0.8f)), Catch::Contains("temperature 0"));
  // Sampled requests may escalate (the signal is the probability of what was sampled).
  CHECK(route_of(*t, with_tier("escalate", 0.8f)).kind == RouteKind::escalate);
  // A server without tiers takes no tier at all.
  const TierTable none;
  CHECK(route_of(none, with_tier("")).tier == -1);
  CHECK_THAT(refusal(none, with_tier("small")), Catch::Contains("runs one model"));
}

TEST_CASE("the escalation watch trips on the mean of a full window, not on one unsure token") {
  using V = EscalationWatch::Verdict;
  auto trips = [](EscalationWatch& w, float p) { return w.observe(p) == V::escalate; };
  EscalationWatch w(0.5f, 4);
  CHECK_FALSE(trips(w, 0.1f));  // the window is not full yet
  CHECK_FALSE(trips(w, 0.9f));
  CHECK_FALSE(trips(w, 0.9f));
  CHECK_FALSE(trips(w, 0.9f));  // mean 0.7
  CHECK_FALSE(trips(w, 0.2f));  // 0.9 0.9 0.9 0.2: 0.725
  CHECK_FALSE(trips(w, 0.2f));  // 0.55
  CHECK(trips(w, 0.2f));        // 0.9 0.2 0.2 0.2: 0.375
  EscalationWatch one(0.5f, 1);
  CHECK(trips(one, 0.4f));
  // Only among the first 2 tokens: a later unsure token moves nothing.
  EscalationWatch early(0.5f, 1, 2);
  CHECK(early.observe(0.9f) == V::send);
  CHECK(early.observe(0.9f) == V::send);
  CHECK(early.observe(0.1f) == V::send);
  // A request that arrives with 2 tokens sent has used that span up.
  EscalationWatch moved(0.5f, 1, 2);
  moved.sent_before(2);
  CHECK(moved.observe(0.1f) == V::send);
}

TEST_CASE("the hold rule: the first N tokens are held and judged together by their geometric mean") {
  using V = EscalationWatch::Verdict;
  EscalationWatch sure(0.5f, 1, 0, 4);
  CHECK(sure.observe(0.9f) == V::hold);
  CHECK(sure.observe(0.9f) == V::hold);
  CHECK(sure.observe(0.9f) == V::hold);
  CHECK(sure.observe(0.3f) == V::release);  // (0.9^3 x 0.3)^(1/4) = 0.68
  CHECK(sure.observe(0.01f) == V::send);    // judged once: later tokens go out
  // One very unsure token weighs more in the geometric mean than in the plain
  // one: 0.9 0.2 0.3 0.9 average 0.575, but their geometric mean is 0.47.
  EscalationWatch unsure(0.5f, 1, 0, 4);
  CHECK(unsure.observe(0.9f) == V::hold);
  CHECK(unsure.observe(0.2f) == V::hold);
  CHECK(unsure.observe(0.3f) == V::hold);
  CHECK(unsure.observe(0.9f) == V::escalate);
  // An answer that ends sooner is judged on what it has.
  EscalationWatch short_sure(0.5f, 1, 0, 4), short_unsure(0.5f, 1, 0, 4);
  CHECK(short_sure.observe(0.9f) == V::hold);
  CHECK(short_sure.judge() == V::release);
  CHECK(short_unsure.observe(0.9f) == V::hold);
  CHECK(short_unsure.observe(0.1f) == V::hold);
  CHECK(short_unsure.judge() == V::escalate);  // sqrt(0.09) = 0.3
  // A hold of 1 judges the first token at once; tokens sent before (a moved
  // request's) were released by a hold already.
  EscalationWatch first(0.5f, 1, 0, 1);
  CHECK(first.observe(0.4f) == V::escalate);
  EscalationWatch moved(0.5f, 1, 0, 4);
  moved.sent_before(1);
  CHECK(moved.observe(0.01f) == V::send);
}

TEST_CASE("the hold rule's tail: the geometric mean of the held tokens' least probable tenth, at least two") {
  using V = EscalationWatch::Verdict;
  // 40 held tokens: the tail is the lowest 4. Two unsure tokens among many sure ones pass the
  // geometric mean of all (0.82) but not the tail's ((0.9 x 0.9 x 0.1 x 0.2)^(1/4) = 0.36 < 0.5).
  EscalationWatch tail(0.5f, 1, 0, 40, HoldSignal::tail), mean(0.5f, 1, 0, 40);
  for (int i = 0; i < 40; ++i) {
    const float p = i == 5 ? 0.1f : i == 9 ? 0.2f : 0.9f;
    const V want = i < 39 ? V::hold : V::escalate;
    CHECK(tail.observe(p) == want);
    mean.observe(p);
  }
  CHECK(tail.confidence() == Approx(std::pow(0.9 * 0.9 * 0.1 * 0.2, 0.25)));
  CHECK(mean.confidence() > 0.8f);
  CHECK(mean.judge() == V::release);
  // Fewer than 20 held: the lowest two.
  EscalationWatch brief(0.5f, 1, 0, 40, HoldSignal::tail);
  for (float p : {0.9f, 0.6f, 0.5f}) brief.observe(p);
  CHECK(brief.confidence() == Approx(std::sqrt(0.6 * 0.5)));
  CHECK(brief.judge() == V::release);
  HoldSignal s = HoldSignal::geomean;
  CHECK(parse_hold_signal("tail", s));
  CHECK(s == HoldSignal::tail);
  CHECK_FALSE(parse_hold_signal("median", s));
  CHECK(default_escalate_threshold(48, HoldSignal::tail) == kTailThreshold);
  CHECK(default_escalate_threshold(0, HoldSignal::tail) == kSwitchThreshold);
}

TEST_CASE("auto tries both policies in a class, then keeps the one that costs the last tier fewer passes") {
  AutoChooser a(4);
  const int32_t w = AutoChooser::workload(0, 100);
  CHECK(w != AutoChooser::workload(0, 1000));
  CHECK(w != AutoChooser::workload(2, 100));
  int escalates = 0, verifies = 0;
  for (int i = 0; i < 4; ++i) {
    const RouteKind k = a.choose(w);
    (k == RouteKind::escalate ? escalates : verifies)++;
    RouteOutcome o;
    o.kind = k;
    o.workload = w;
    o.tokens = 100;
    if (k == RouteKind::escalate) o.large_tokens = 90;  // nearly always escalates late: costly
    else o.accepted = 75;                               // drafts accepted well: 26 passes
    a.learn(o);
  }
  CHECK(escalates == 2);
  CHECK(verifies == 2);
  CHECK(a.cost(w, RouteKind::escalate) == Approx(0.91));
  CHECK(a.cost(w, RouteKind::verify) == Approx(0.26));
  int verify_after = 0;
  for (int i = 0; i < 8; ++i) verify_after += a.choose(w) == RouteKind::verify;
  CHECK(verify_after == 6);  // every 4th choice re-measures the other
  // Another class has learned nothing.
  CHECK(a.cost(AutoChooser::workload(1, 100), RouteKind::verify) < 0);
}

namespace {

SchedulerConfig tier_config(int32_t tier, const std::string& name, bool next) {
  SchedulerConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.kv_pages = 64;
  c.page_size = 4;
  c.planner.token_budget = 16;
  c.planner.max_context = 256;
  c.model_name = name;
  c.tier = tier;
  c.tier_name = name;
  c.next_tier = next;
  c.session_spill = !next;
  int64_t t = 0;
  c.clock = [t]() mutable { return t += 1000000; };
  return c;
}

// Runs one scheduler against its fake engine until it has nothing to send.
void drain_steps(Scheduler& s, const test::FakeEngine& engine, Outbound& all) {
  for (int i = 0; i < 200; ++i) {
    SchedulerPlan plan = s.next_step();
    Outbound o = s.take_outbound();
    for (auto& r : o.replies) all.replies.push_back(std::move(r));
    for (auto& e : o.escalations) all.escalations.push_back(std::move(e));
    for (auto& e : o.ended) all.ended.push_back(std::move(e));
    if (plan.kind == SchedulerPlan::Kind::none) return;
    REQUIRE(plan.kind == SchedulerPlan::Kind::step);
    s.apply(engine.answer(plan.bytes), "");
    o = s.take_outbound();
    for (auto& r : o.replies) all.replies.push_back(std::move(r));
    for (auto& e : o.escalations) all.escalations.push_back(std::move(e));
    for (auto& e : o.ended) all.ended.push_back(std::move(e));
  }
}

}  // namespace

TEST_CASE("a request escalates mid-stream: one Accepted, the small tier's tokens, then the large tier's continuation of that "
          "prefix, one Done naming both") {
  Scheduler small(tier_config(0, "mini", true)), large(tier_config(1, "maxi", false));
  test::FakeEngine unsure, sure;
  // The small tier grows less sure with each token: the mean of its last 4
  // falls under 0.5 with its 5th (0.8, 0.65, 0.5, 0.35, 0.2: 0.425), which is
  // not sent; the large tier writes that position and on.
  unsure.token = [](uint64_t, int32_t pos) { return 100 + pos; };
  unsure.logprob = [](uint64_t, int32_t pos) { return std::log(0.8f - 0.15f * static_cast<float>(pos - 6)); };
  sure.token = [](uint64_t, int32_t pos) { return 200 + pos; };
  AdmitRequest a;
  a.peer = "client";
  a.client_id = 7;
  a.prompt = {40, 41, 42, 43, 44, 45};
  a.sampling = with_tier("escalate");
  a.sampling.max_tokens = 12;
  a.session_id = "";
  a.accepted_ns = 1;
  REQUIRE_FALSE(route_request(two_tiers().get(), a));
  small.admit(std::move(a));
  Outbound out;
  drain_steps(small, unsure, out);
  REQUIRE(out.escalations.size() == 1);
  CHECK(out.ended.empty());  // it moved; it did not end
  AdmitRequest& moved = out.escalations.front();
  CHECK(moved.route.tier == 1);
  CHECK(moved.first_prompt_tokens == 6);
  CHECK(moved.prompt == std::vector<int32_t>{40, 41, 42, 43, 44, 45, 106, 107, 108, 109});
  CHECK(moved.sampling.max_tokens == 8);
  REQUIRE(moved.carried);
  CHECK(moved.carried->completion() == 4);
  CHECK(small.stats().running == 0);
  CHECK(small.tier_stats().escalations == 1);
  // A cancel that reaches the small tier now follows the request.
  small.cancel("client", 8, 7);
  Outbound after = small.take_outbound();
  REQUIRE(after.moved_cancels.size() == 1);
  CHECK(after.moved_cancels.front().target == 7);
  CHECK(after.replies.empty());

  large.admit(std::move(moved));
  drain_steps(large, sure, out);
  std::vector<test::Frame> frames;
  for (const auto& r : out.replies) frames.push_back(test::read_frame(r));
  int accepted = 0, done = 0;
  std::vector<int32_t> streamed;
  for (const auto& f : frames) {
    accepted += f.kind == wire::ResponseBody::Accepted;
    done += f.kind == wire::ResponseBody::Done;
    if (f.kind == wire::ResponseBody::Tokens) streamed.insert(streamed.end(), f.tokens.begin(), f.tokens.end());
  }
  CHECK(accepted == 1);
  CHECK(done == 1);
  CHECK(frames.back().kind == wire::ResponseBody::Done);
  // The large tier continues from position 10: its tokens are its own for that prefix.
  CHECK(streamed == std::vector<int32_t>{106, 107, 108, 109, 210, 211, 212, 213, 214, 215, 216, 217});
  const auto* done_frame = messages::check_response(out.replies.back().bytes)->body_as_Done();
  REQUIRE(done_frame);
  CHECK(done_frame->usage()->prompt_tokens() == 6);
  CHECK(done_frame->usage()->completion_tokens() == 12);
  REQUIRE(done_frame->tiers());
  REQUIRE(done_frame->tiers()->size() == 2);
  CHECK(done_frame->tiers()->Get(0)->tier()->str() == "mini");
  CHECK(done_frame->tiers()->Get(0)->tokens() == 4);
  CHECK(done_frame->tiers()->Get(1)->tier()->str() == "maxi");
  CHECK(done_frame->tiers()->Get(1)->tokens() == 8);
  REQUIRE(out.ended.size() == 1);
  CHECK(out.ended.front().client_id == 7);
  CHECK(large.tier_stats().escalated_in == 1);
  CHECK(large.tier_stats().tokens == 8);
  CHECK(large.stats().pages_used == 0);
}

TEST_CASE("a sure small tier never escalates, and a fixed route never watches") {
  Scheduler small(tier_config(0, "mini", true));
  test::FakeEngine sure;
  sure.logprob = [](uint64_t, int32_t) { return std::log(0.95f); };
  const std::vector<std::string> tiers{"escalate", "small"};
  for (size_t i = 0; i < tiers.size(); ++i) {
    const std::string& tier = tiers[i];
    AdmitRequest a;
    a.peer = "c";
    a.client_id = i + 1;
    a.prompt = {40, 41, 42};
    a.sampling = with_tier(tier);
    a.sampling.max_tokens = 20;
    REQUIRE_FALSE(route_request(two_tiers().get(), a));
    small.admit(std::move(a));
  }
  Outbound out;
  drain_steps(small, sure, out);
  CHECK(out.escalations.empty());
  CHECK(out.ended.size() == 2);
  CHECK(small.tier_stats().tokens == 40);
  CHECK(small.tier_stats().requests == 2);
}

namespace {

// Tokens streamed to `client` (the Tokens frames' ids) among `replies`.
std::vector<int32_t> streamed_tokens(const std::vector<Reply>& replies, uint64_t client) {
  std::vector<int32_t> out;
  for (const auto& r : replies) {
    const test::Frame f = test::read_frame(r);
    if (r.client_id == client && f.kind == wire::ResponseBody::Tokens) out.insert(out.end(), f.tokens.begin(), f.tokens.end());
  }
  return out;
}

AdmitRequest held_request(uint64_t client, int32_t max_tokens) {
  AdmitRequest a;
  a.peer = "client";
  a.client_id = client;
  a.prompt = {40, 41, 42, 43, 44, 45};
  a.sampling = with_tier("escalate");
  a.sampling.max_tokens = max_tokens;
  a.accepted_ns = 1;
  auto tiers = two_tiers();
  tiers->hold = 4;
  REQUIRE_FALSE(route_request(tiers.get(), a));
  return a;
}

}  // namespace

TEST_CASE("hold: nothing is sent while the answer's first tokens are judged, then a sure answer goes out whole") {
  Scheduler small(tier_config(0, "mini", true));
  test::FakeEngine sure;
  sure.token = [](uint64_t, int32_t pos) { return 100 + pos; };
  sure.logprob = [](uint64_t, int32_t pos) { return std::log(pos == 7 ? 0.3f : 0.9f); };  // one unsure, mean still high
  small.admit(held_request(7, 10));
  std::vector<size_t> sent;  // tokens the client has after each step
  std::vector<Reply> replies;
  for (int i = 0; i < 40; ++i) {
    SchedulerPlan plan = small.next_step();
    for (auto& r : small.take_outbound().replies) replies.push_back(std::move(r));
    if (plan.kind == SchedulerPlan::Kind::none) break;
    small.apply(sure.answer(plan.bytes), "");
    for (auto& r : small.take_outbound().replies) replies.push_back(std::move(r));
    sent.push_back(streamed_tokens(replies, 7).size());
  }
  CHECK(sent == std::vector<size_t>{0, 0, 0, 4, 5, 6, 7, 8, 9, 10});
  CHECK(streamed_tokens(replies, 7) == std::vector<int32_t>{106, 107, 108, 109, 110, 111, 112, 113, 114, 115});
  const auto* done = messages::check_response(replies.back().bytes)->body_as_Done();
  REQUIRE(done);
  CHECK(done->usage()->completion_tokens() == 10);
  CHECK(done->tiers()->Get(0)->tokens() == 10);
  CHECK(small.tier_stats().escalations == 0);
  CHECK(small.tier_stats().tokens == 10);  // counted as they went out
}

TEST_CASE("hold: an unsure answer is never sent, the next tier writes it from its first token, in the same stream") {
  Scheduler small(tier_config(0, "mini", true)), large(tier_config(1, "maxi", false));
  test::FakeEngine unsure, sure;
  unsure.token = [](uint64_t, int32_t pos) { return 100 + pos; };
  unsure.logprob = [](uint64_t, int32_t) { return std::log(0.3f); };
  sure.token = [](uint64_t, int32_t pos) { return 200 + pos; };
  small.admit(held_request(7, 10));
  small.admit(held_request(8, 2));  // ends before its hold is full: judged when it ends
  Outbound out;
  drain_steps(small, unsure, out);
  CHECK(streamed_tokens(out.replies, 7).empty());
  CHECK(streamed_tokens(out.replies, 8).empty());
  REQUIRE(out.escalations.size() == 2);
  for (AdmitRequest& moved : out.escalations) {
    INFO(moved.client_id);
    CHECK(moved.prompt == std::vector<int32_t>{40, 41, 42, 43, 44, 45});  // nothing of the small tier's
    CHECK(moved.sampling.max_tokens == (moved.client_id == 7 ? 10 : 2));
    REQUIRE(moved.carried);
    CHECK(moved.carried->completion() == 0);
    large.admit(std::move(moved));
  }
  CHECK(small.tier_stats().escalations == 2);
  CHECK(small.tier_stats().tokens == 0);  // written means sent: the held ones were not
  drain_steps(large, sure, out);
  CHECK(streamed_tokens(out.replies, 7) == std::vector<int32_t>{206, 207, 208, 209, 210, 211, 212, 213, 214, 215});
  CHECK(streamed_tokens(out.replies, 8) == std::vector<int32_t>{206, 207});
  int accepted = 0;
  for (const auto& r : out.replies) accepted += test::read_frame(r).kind == wire::ResponseBody::Accepted;
  CHECK(accepted == 2);
  for (const auto& r : out.replies) {
    const auto* done = messages::check_response(r.bytes)->body_as_Done();
    if (!done) continue;
    const int32_t n = r.client_id == 7 ? 10 : 2;
    CHECK(done->usage()->completion_tokens() == n);
    REQUIRE(done->tiers()->size() == 2);  // the small tier tried and sent nothing
    CHECK(done->tiers()->Get(0)->tokens() == 0);
    CHECK(done->tiers()->Get(1)->tokens() == n);
  }
  CHECK(large.stats().pages_used == 0);
}

TEST_CASE("hold: a request cancelled while its tokens are held ends without them") {
  Scheduler small(tier_config(0, "mini", true));
  test::FakeEngine sure;
  sure.logprob = [](uint64_t, int32_t) { return std::log(0.9f); };
  small.admit(held_request(7, 10));
  std::vector<Reply> replies;
  for (int i = 0; i < 2; ++i) {  // two tokens, both held
    SchedulerPlan plan = small.next_step();
    REQUIRE(plan.kind == SchedulerPlan::Kind::step);
    small.apply(sure.answer(plan.bytes), "");
  }
  small.cancel("client", 9, 7);
  for (auto& r : small.take_outbound().replies) replies.push_back(std::move(r));
  CHECK(streamed_tokens(replies, 7).empty());
  const auto* last = messages::check_response(replies.back().bytes);
  REQUIRE(last->body_as_Done());
  CHECK(last->body_as_Done()->usage()->completion_tokens() == 0);
  CHECK(last->body_as_Done()->finish_reason() == wire::FinishReason::cancelled);

  // Cancelled while the step that would judge it unsure is out: that step's
  // token neither escalates it (the next tier would answer a client that
  // left) nor releases it.
  test::FakeEngine unsure;
  unsure.logprob = [](uint64_t, int32_t) { return std::log(0.1f); };
  small.admit(held_request(8, 10));
  for (int i = 0; i < 3; ++i) {
    SchedulerPlan plan = small.next_step();
    REQUIRE(plan.kind == SchedulerPlan::Kind::step);
    small.apply(unsure.answer(plan.bytes), "");
  }
  SchedulerPlan judging = small.next_step();  // its 4th token: the hold is full
  REQUIRE(judging.kind == SchedulerPlan::Kind::step);
  small.cancel("client", 10, 8);
  small.apply(unsure.answer(judging.bytes), "");
  Outbound after = small.take_outbound();
  CHECK(after.escalations.empty());
  CHECK(streamed_tokens(after.replies, 8).empty());
  REQUIRE_FALSE(after.replies.empty());
  const auto* done = messages::check_response(after.replies.back().bytes)->body_as_Done();
  REQUIRE(done);
  CHECK(done->finish_reason() == wire::FinishReason::cancelled);
  CHECK(done->usage()->completion_tokens() == 0);
  CHECK(small.tier_stats().escalations == 0);
  // Nothing judged: the budget rule counts neither.
  REQUIRE_FALSE(after.ended.empty());
  for (const auto& e : after.ended) CHECK(e.outcome.confidence < 0);
}

TEST_CASE("hold: the confidence an answer was judged by reaches the router, a kept one's as it ends, an escalated one's "
          "with it") {
  Scheduler small(tier_config(0, "mini", true)), large(tier_config(1, "maxi", false));
  test::FakeEngine engine;
  // Request 7 sure but for one token; request 8 unsure throughout.
  engine.logprob = [](uint64_t seq, int32_t pos) { return std::log(seq == 1 ? (pos == 7 ? 0.3f : 0.9f) : 0.3f); };
  for (uint64_t id : {7, 8}) {
    AdmitRequest a = held_request(id, 10);
    a.route.budget_class = "class/x";  // as the router sets it under the budget rule
    a.route.threshold = 0.5f;
    small.admit(std::move(a));
  }
  Outbound out;
  drain_steps(small, engine, out);
  REQUIRE(out.escalations.size() == 1);
  AdmitRequest& moved = out.escalations.front();
  CHECK(moved.client_id == 8);
  CHECK(moved.route.confidence == Approx(0.3f));
  CHECK(moved.route.budget_class == "class/x");
  const auto kept = std::find_if(out.ended.begin(), out.ended.end(), [](const auto& e) { return e.client_id == 7; });
  REQUIRE(kept != out.ended.end());
  CHECK(kept->outcome.budget_class == "class/x");
  CHECK(kept->outcome.confidence == Approx(std::pow(0.9 * 0.9 * 0.9 * 0.3, 0.25)));
  // The next tier judges afresh (not at all, being the last): its outcome carries no confidence.
  large.admit(std::move(moved));
  Outbound later;
  drain_steps(large, engine, later);
  REQUIRE(later.ended.size() == 1);
  CHECK(later.ended.front().outcome.confidence < 0);
}
