// Where each request of a server with tiers or several workers runs
// (service/tier_router.h): the tier a new request starts on, the worker of
// that tier, where it went when escalated or when its worker was lost, which
// requests are still somewhere, cancels ahead of their request, and what a
// finished request teaches auto.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "service/admit_request.h"
#include "service/cascade.h"
#include "tests/service/tiers.h"
#include "service/placement.h"
#include "service/route_request.h"
#include "service/tier_router.h"

using namespace troupe;
using namespace troupe::service;

using test::two_tiers;
using test::with_tier;

namespace {

// A request of `peer` routed as `tier` asks.
AdmitRequest routed(const TierTable& table, const std::string& peer, uint64_t id, const std::string& tier) {
  AdmitRequest a;
  a.peer = peer;
  a.client_id = id;
  a.sampling = with_tier(tier);
  a.prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  REQUIRE_FALSE(route_request(&table, a));
  return a;
}

constexpr int64_t kSecond = 1'000'000'000;

}  // namespace

TEST_CASE("the router: duplicates refused, auto settled, sessions kept on the last tier after N escalations") {
  const auto table = two_tiers();
  TierRouter r(table);
  AdmitRequest a;
  a.peer = "p";
  a.client_id = 1;
  a.sampling = with_tier("escalate");
  REQUIRE_FALSE(route_request(table.get(), a));
  CHECK(r.admit(a, 0).tier == 0);
  CHECK(r.where("p", 1).tier == 0);
  AdmitRequest again = a;
  CHECK(r.admit(again, 0).tier == TierRouter::kDuplicate);
  // It escalates: now found on tier 1; then it ends.
  AdmitRequest moved = a;
  moved.route.tier = 1;
  CHECK(r.moved(moved).tier == 1);
  CHECK(r.where("p", 1).tier == 1);
  r.ended("p", 1, {});
  CHECK(r.where("p", 1).tier == -1);
  CHECK(r.live() == 0);
  // A client gone while its request moved: the move reports it.
  CHECK(r.admit(a, 0).tier == 0);
  r.gone("p");
  CHECK(r.moved(moved).tier == TierRouter::kGone);

  AdmitRequest session = a;
  session.client_id = 2;
  session.session_id = "s";
  session.session_escalations = 2;
  CHECK(r.admit(session, 0).tier == 1);
  CHECK(session.route.kind == RouteKind::fixed);

  AdmitRequest au = a;
  au.client_id = 3;
  au.sampling = with_tier("auto");
  REQUIRE_FALSE(route_request(table.get(), au));
  const int32_t tier = r.admit(au, 0).tier;
  CHECK(au.route.chosen_by_auto);
  CHECK(au.route.kind != RouteKind::automatic);
  CHECK(tier == (au.route.kind == RouteKind::verify ? 1 : 0));
  CHECK(au.speculation == (au.route.kind == RouteKind::verify ? SpeculationMode::draft : SpeculationMode::off));

  // A cancel ahead of its request sends the request where the cancel waits.
  AdmitRequest late = a;
  late.client_id = 4;
  late.sampling = with_tier("large");
  REQUIRE_FALSE(route_request(table.get(), late));
  r.cancel_ahead("p", 4, 0);
  CHECK(r.admit(late, 1000).tier == 0);
}

TEST_CASE("the router: workers of a tier, a lost worker's requests moved to another, none up") {
  const auto table = two_tiers();
  TierRouter r(table);
  PlacementConfig pc;
  pc.page_size = 4;
  r.set_workers(1, 2, pc);
  auto request = [](uint64_t id, std::vector<int32_t> prompt) {
    AdmitRequest a;
    a.peer = std::string(1, 'p');  // not = "p": GCC 12 reports a false -Wrestrict there
    a.client_id = id;
    a.sampling = with_tier("large");
    a.prompt = std::move(prompt);
    return a;
  };
  AdmitRequest a = request(1, {1, 2, 3, 4, 5});
  REQUIRE_FALSE(route_request(table.get(), a));
  const auto first = r.admit(a, 0);
  AdmitRequest b = request(2, {9, 9, 9, 9, 9});
  REQUIRE_FALSE(route_request(table.get(), b));
  const auto second = r.admit(b, 0);
  CHECK(first.tier == 1);
  CHECK(second.tier == 1);
  CHECK(first.worker != second.worker);  // spread by load
  // The first one's worker is lost: its request continues on the other.
  r.worker_down(1, first.worker);
  a.moved_from = first.worker;
  const auto moved = r.moved(a);
  CHECK(moved.tier == 1);
  CHECK(moved.worker == second.worker);
  CHECK(r.where("p", 1) == moved);
  CHECK(r.placement(1).live(first.worker) == 0);
  CHECK(r.placement(1).live(second.worker) == 2);
  // Now the other is lost too: nowhere to go.
  r.worker_down(1, second.worker);
  b.moved_from = second.worker;
  CHECK(r.moved(b).tier == TierRouter::kUnavailable);
  CHECK(r.where("p", 2).tier == -1);
  AdmitRequest c = request(3, {1});
  REQUIRE_FALSE(route_request(table.get(), c));
  CHECK(r.admit(c, 0).tier == TierRouter::kUnavailable);
  // One comes back: new requests go to it; the first tier never had more than one.
  r.worker_up(1, first.worker);
  CHECK(r.admit(c, 0) == TierRouter::Place{1, first.worker});
  CHECK(r.placement(0).replicas() == 1);
}

TEST_CASE("tier router: every tier starts with one worker, and workers are set and added per tier") {
  TierRouter r(two_tiers());
  CHECK(r.placement(0).replicas() == 1);
  CHECK(r.placement(1).replicas() == 1);
  CHECK(r.live() == 0);
  r.set_workers(1, 3, PlacementConfig{});
  CHECK(r.placement(1).replicas() == 3);
  CHECK(r.placement(0).replicas() == 1);
  CHECK(r.add_worker(1) == 3);
  CHECK(r.placement(1).replicas() == 4);
  CHECK(r.placement(1).is_up(3));
  CHECK(r.add_worker(0) == 1);
  // A tier the table does not have changes nothing.
  r.set_workers(2, 5, PlacementConfig{});
  r.set_workers(-1, 5, PlacementConfig{});
  CHECK(r.add_worker(2) == -1);
  CHECK(r.add_worker(-1) == -1);
  r.worker_down(2, 0);
  r.worker_up(-1, 0);
  r.report(7, 0, ReplicaLoad{});
  CHECK(r.placement(0).replicas() == 2);
  CHECK(r.placement(1).replicas() == 4);
  // A server with no tiers table of its own still has one tier to place on.
  TierRouter single(std::make_shared<TierTable>());
  CHECK(single.placement(0).replicas() == 1);
}

TEST_CASE("tier router: a request without a tier, or with one past the last, runs on the last tier") {
  const auto table = two_tiers();
  TierRouter r(table);
  AdmitRequest none;
  none.peer = "p";
  none.client_id = 1;
  CHECK(r.admit(none, 0).tier == 1);
  CHECK(none.route.tier == 1);
  AdmitRequest past = routed(*table, "p", 2, "large");
  past.route.tier = 9;
  CHECK(r.admit(past, 0).tier == 1);
  // Moved with a tier the table does not have: on to the last.
  AdmitRequest small = routed(*table, "p", 3, "small");
  CHECK(r.admit(small, 0).tier == 0);
  small.route.tier = 9;
  CHECK(r.moved(small).tier == 1);
  CHECK(r.where("p", 3).tier == 1);
  CHECK(r.placement(0).live(0) == 0);  // it left the first tier's worker
}

TEST_CASE("tier router: a session escalated as many times as the table says stays on the last tier, and no other") {
  const auto table = two_tiers();  // escalate_for_good = 2
  TierRouter r(table);
  AdmitRequest once = routed(*table, "p", 1, "escalate");
  once.session_id = "s";
  once.session_escalations = 1;
  CHECK(r.admit(once, 0).tier == 0);
  CHECK(once.route.kind == RouteKind::escalate);
  AdmitRequest no_session = routed(*table, "p", 2, "escalate");
  no_session.session_escalations = 5;
  CHECK(r.admit(no_session, 0).tier == 0);
  AdmitRequest fixed = routed(*table, "p", 3, "small");
  fixed.session_id = "s";
  fixed.session_escalations = 5;
  CHECK(r.admit(fixed, 0).tier == 0);  // a fixed route is the client's choice
  auto never = two_tiers();
  never->escalate_for_good = 0;
  TierRouter r0(never);
  AdmitRequest many = routed(*never, "p", 4, "escalate");
  many.session_id = "s";
  many.session_escalations = 50;
  CHECK(r0.admit(many, 0).tier == 0);
  CHECK(many.route.kind == RouteKind::escalate);
}

TEST_CASE("tier router: a cancel ahead of its request holds it on the first tier's first worker for 30 s, once") {
  const auto table = two_tiers();
  SECTION("within 30 s") {
    TierRouter r(table);
    r.cancel_ahead("p", 1, 0);
    AdmitRequest a = routed(*table, "p", 1, "large");
    CHECK(r.admit(a, 30 * kSecond) == TierRouter::Place{0, 0});
    CHECK(a.route.tier == 0);
    CHECK(r.placement(0).live(0) == 1);
    r.ended("p", 1, {});
    CHECK(r.placement(0).live(0) == 0);
    AdmitRequest again = routed(*table, "p", 1, "large");
    CHECK(r.admit(again, 30 * kSecond).tier == 1);  // the cancel was used up
  }
  SECTION("past 30 s the cancel is forgotten") {
    TierRouter r(table);
    r.cancel_ahead("p", 1, 0);
    AdmitRequest a = routed(*table, "p", 1, "large");
    CHECK(r.admit(a, 30 * kSecond + 1).tier == 1);
  }
  SECTION("another request of the peer, or the same id of another peer, is not held") {
    TierRouter r(table);
    r.cancel_ahead("p", 1, 0);
    AdmitRequest other_id = routed(*table, "p", 2, "large");
    CHECK(r.admit(other_id, 0).tier == 1);
    AdmitRequest other_peer = routed(*table, "q", 1, "large");
    CHECK(r.admit(other_peer, 0).tier == 1);
  }
  SECTION("the first tier's first worker down: placed on that tier as any request") {
    TierRouter r(table);
    r.set_workers(0, 2, PlacementConfig{});
    r.worker_down(0, 0);
    r.cancel_ahead("p", 1, 0);
    AdmitRequest a = routed(*table, "p", 1, "large");
    CHECK(r.admit(a, 0) == TierRouter::Place{0, 1});
  }
}

TEST_CASE("tier router: ended and gone free their workers, gone only its own peer's requests") {
  const auto table = two_tiers();
  TierRouter r(table);
  r.set_workers(1, 2, PlacementConfig{});
  AdmitRequest a = routed(*table, "p", 1, "large"), b = routed(*table, "p", 2, "large"),
               c = routed(*table, "q", 1, "large");
  r.admit(a, 0);
  r.admit(b, 0);
  const auto q = r.admit(c, 0);
  CHECK(r.live() == 3);
  CHECK(r.placement(1).live(0) + r.placement(1).live(1) == 3);
  r.gone("p");
  CHECK(r.live() == 1);
  CHECK(r.where("p", 1).tier == -1);
  CHECK(r.where("p", 2).tier == -1);
  CHECK(r.where("q", 1) == q);
  CHECK(r.placement(1).live(0) + r.placement(1).live(1) == 1);
  r.ended("q", 7, {});  // not here: nothing changes
  r.gone("nobody");
  CHECK(r.live() == 1);
  r.ended("q", 1, {});
  CHECK(r.live() == 0);
  CHECK(r.placement(1).live(q.worker) == 0);
  CHECK(r.where("q", 1).tier == -1);
}

TEST_CASE("tier router: a finished request's outcome teaches auto, one without a workload class does not") {
  const auto table = two_tiers();
  TierRouter r(table);
  RouteOutcome o;
  o.kind = RouteKind::escalate;
  o.workload = AutoChooser::workload(0, 8);
  o.tokens = 100;
  o.large_tokens = 40;
  CHECK(r.chooser().cost(o.workload, RouteKind::escalate) < 0);
  RouteOutcome unclassed = o;
  unclassed.workload = -1;
  r.ended("p", 1, unclassed);
  CHECK(r.chooser().cost(o.workload, RouteKind::escalate) < 0);
  r.ended("p", 1, o);  // the request itself need not be here
  AutoChooser same;
  same.learn(o);
  CHECK(r.chooser().cost(o.workload, RouteKind::escalate) == Approx(same.cost(o.workload, RouteKind::escalate)));
  CHECK(r.chooser().cost(o.workload, RouteKind::escalate) >= 0);
}

TEST_CASE("tier router: a worker's reported load steers where its tier's next request goes") {
  const auto table = two_tiers();
  TierRouter r(table);
  PlacementConfig pc;
  pc.page_size = 4;
  r.set_workers(1, 2, pc);
  ReplicaLoad full;
  full.total_pages = 100;
  full.free_pages = 1;  // room for 4 tokens: not the prompt's 8
  r.report(1, 0, full);
  AdmitRequest a = routed(*table, "p", 1, "large");
  CHECK(r.admit(a, 0) == TierRouter::Place{1, 1});
  ReplicaLoad roomy;
  roomy.total_pages = 100;
  roomy.free_pages = 90;
  r.report(1, 0, roomy);
  AdmitRequest b = routed(*table, "p", 2, "large");
  b.prompt = {20, 21, 22, 23, 24, 25, 26, 27};  // no prefix of a's: placed by load alone
  CHECK(r.admit(b, 0) == TierRouter::Place{1, 0});  // now the least loaded
}

TEST_CASE("tier router: the budget rule sets a first-tier escalate's threshold from its class's recent confidences") {
  auto table = two_tiers();
  table->hold = 8;
  table->escalate_budget = 0.25f;
  TierRouter r(table);
  REQUIRE(r.budget().on());
  // Nothing judged yet: the threshold rule's value, and the class it will be counted in.
  AdmitRequest first = routed(*table, "p", 1, "escalate");
  r.admit(first, 0);
  CHECK(first.route.threshold == table->default_threshold);
  CHECK(first.route.budget_class == escalation_class("", "", 0, 8));
  CHECK(route_learns(*table, first.route, first.sampling));
  // Twenty answers the small tier kept, confidences 0.60 .. 0.98: the
  // threshold lands in their lower third (a quarter, raised a little while
  // none has escalated: the realised share is behind the budget).
  for (int i = 0; i < 20; ++i) {
    RouteOutcome o;
    o.budget_class = first.route.budget_class;
    o.confidence = 0.6f + 0.02f * static_cast<float>(i);
    r.ended("p", 100 + static_cast<uint64_t>(i), o);
  }
  AdmitRequest next = routed(*table, "p", 2, "escalate");
  r.admit(next, 0);
  CHECK(next.route.threshold > 0.6f);
  CHECK(next.route.threshold <= 0.76f);
  // Its escalation is counted, and the next tier judges by the threshold rule.
  const double before = r.budget().realised(next.route.budget_class);
  next.route.confidence = 0.55f;
  next.route.tier = 1;
  r.moved(next);
  CHECK(r.budget().realised(escalation_class("", "", 0, 8)) > before);
  CHECK(next.route.budget_class.empty());
  CHECK(next.route.threshold == table->default_threshold);
  // A job's items and a named class have their own figures (the pool's until they have some).
  AdmitRequest item = routed(*table, job_peer("j1"), 3, "escalate");
  r.admit(item, 0);
  CHECK(item.route.budget_class == "job/j1");
  AdmitRequest named = routed(*table, "p", 4, "escalate");
  named.sampling.escalate_class = "extract";
  r.admit(named, 0);
  CHECK(named.route.budget_class == "class/extract");
  CHECK(named.route.threshold == item.route.threshold);
}

TEST_CASE("tier router: the budget rule leaves alone what it does not rule") {
  auto table = two_tiers();
  table->hold = 8;
  table->escalate_budget = 0.25f;
  TierRouter r(table);
  // A request's own threshold wins.
  AdmitRequest own = routed(*table, "p", 1, "escalate");
  own.sampling.escalate_threshold = 0.9f;
  own.route.threshold = 0.9f;
  r.admit(own, 0);
  CHECK(own.route.budget_class.empty());
  CHECK(own.route.threshold == 0.9f);
  CHECK_FALSE(route_learns(*table, own.route, own.sampling));
  // A fixed tier is not judged.
  AdmitRequest fixed = routed(*table, "p", 2, "small");
  r.admit(fixed, 0);
  CHECK(fixed.route.budget_class.empty());
  // A worker's loss moves a request without counting an escalation.
  AdmitRequest lost = routed(*table, "p", 3, "escalate");
  r.admit(lost, 0);
  lost.route.confidence = 0.1f;
  lost.moved_from = 0;
  r.moved(lost);
  CHECK(r.budget().classes() == 0);
  // The switch rule (no hold) keeps its threshold.
  table->hold = 0;
  AdmitRequest sw = routed(*table, "p", 4, "escalate");
  r.admit(sw, 0);
  CHECK(sw.route.budget_class.empty());
  // Off, nothing learns.
  CHECK_FALSE(route_learns(*two_tiers(), sw.route, sw.sampling));
}
