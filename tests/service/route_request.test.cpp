// A tokenized request's tier route (service/route_request.h): the route its
// sampling asks for, the speculation each route implies, the draft length a
// routed request gets, and the refusals, on a server with tiers and without.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "service/admit_request.h"
#include "service/cascade.h"
#include "tests/service/tiers.h"
#include "service/route_request.h"

using namespace troupe;
using namespace troupe::service;

using test::two_tiers;
using test::with_tier;

namespace {

AdmitRequest request(const std::string& tier, SpeculationMode speculation = SpeculationMode::automatic) {
  AdmitRequest a;
  a.sampling = with_tier(tier);
  a.speculation = speculation;
  return a;
}

}  // namespace

TEST_CASE("a routed request's speculation: off under escalate, the draft model under verify, n-grams off the last tier") {
  const auto t = two_tiers();
  AdmitRequest a;
  a.sampling = with_tier("escalate");
  a.speculation = SpeculationMode::draft;
  REQUIRE_FALSE(route_request(t.get(), a));
  CHECK(a.speculation == SpeculationMode::off);
  a.sampling = with_tier("verify");
  REQUIRE_FALSE(route_request(t.get(), a));
  CHECK(a.speculation == SpeculationMode::draft);
  a.sampling = with_tier("small");
  a.speculation = SpeculationMode::automatic;
  REQUIRE_FALSE(route_request(t.get(), a));
  CHECK(a.speculation == SpeculationMode::ngram);
  a.sampling = with_tier("nope");
  CHECK(route_request(t.get(), a));
}

TEST_CASE("route request: a server with one model routes nowhere and leaves speculation and draft length as "
          "they were") {
  const TierTable none;
  for (const TierTable* tiers : {static_cast<const TierTable*>(nullptr), &none}) {
    AdmitRequest a = request("", SpeculationMode::ngram);
    REQUIRE_FALSE(route_request(tiers, a));
    CHECK(a.route.kind == RouteKind::fixed);
    CHECK(a.route.tier == -1);
    CHECK(a.speculation == SpeculationMode::ngram);
    CHECK(a.max_draft == 0);  // the server's default stays to be applied
  }
}

TEST_CASE("route request: a server with one model refuses a tier, and the request is left as it was") {
  AdmitRequest a = request("small", SpeculationMode::draft);
  a.route.tier = 5;
  CHECK(route_request(nullptr, a) ==
        "sampling.tier: this server runs one model; 'small' needs a server started with --tiers");
  CHECK(a.route.tier == 5);
  CHECK(a.speculation == SpeculationMode::draft);
}

TEST_CASE("route request: each route's tier, and the speculation a fixed route keeps") {
  const auto t = two_tiers();
  AdmitRequest large = request("large", SpeculationMode::draft);
  REQUIRE_FALSE(route_request(t.get(), large));
  CHECK(large.route.kind == RouteKind::fixed);
  CHECK(large.route.tier == 1);
  CHECK(large.speculation == SpeculationMode::draft);  // the draft model serves the last tier
  AdmitRequest small_off = request("mini-q8", SpeculationMode::off);
  REQUIRE_FALSE(route_request(t.get(), small_off));
  CHECK(small_off.route.tier == 0);
  CHECK(small_off.speculation == SpeculationMode::off);  // off stays off
  AdmitRequest small_draft = request("small", SpeculationMode::draft);
  REQUIRE_FALSE(route_request(t.get(), small_draft));
  CHECK(small_draft.speculation == SpeculationMode::ngram);  // no draft model below the last tier
  AdmitRequest escalate = request("");
  REQUIRE_FALSE(route_request(t.get(), escalate));
  CHECK(escalate.route.kind == RouteKind::escalate);  // the server's default policy
  CHECK(escalate.route.tier == 0);
  CHECK(escalate.route.threshold == 0.5f);
  CHECK(escalate.route.window == 4);
  CHECK(escalate.speculation == SpeculationMode::off);
  AdmitRequest verify = request("verify", SpeculationMode::off);
  REQUIRE_FALSE(route_request(t.get(), verify));
  CHECK(verify.route.tier == 1);
  CHECK(verify.speculation == SpeculationMode::draft);
}

TEST_CASE("route request: auto leaves the speculation to the router") {
  const auto t = two_tiers();
  for (const SpeculationMode m : {SpeculationMode::off, SpeculationMode::ngram, SpeculationMode::draft}) {
    AdmitRequest a = request("auto", m);
    REQUIRE_FALSE(route_request(t.get(), a));
    CHECK(a.route.kind == RouteKind::automatic);
    CHECK(a.speculation == m);
  }
}

TEST_CASE("route request: a routed request drafts 8 tokens unless it asked for a number") {
  const auto t = two_tiers();
  AdmitRequest a = request("large");
  REQUIRE_FALSE(route_request(t.get(), a));
  CHECK(a.max_draft == 8);
  AdmitRequest asked = request("large");
  asked.max_draft = 3;
  REQUIRE_FALSE(route_request(t.get(), asked));
  CHECK(asked.max_draft == 3);
  AdmitRequest negative = request("verify");
  negative.max_draft = -1;
  REQUIRE_FALSE(route_request(t.get(), negative));
  CHECK(negative.max_draft == 8);
}

TEST_CASE("route request: a route the request cannot have is refused in one line, and nothing of it is set") {
  const auto t = two_tiers();
  AdmitRequest unknown = request("medium", SpeculationMode::draft);
  CHECK(route_request(t.get(), unknown) ==
        "sampling.tier: no tier 'medium' on this server (small, large, escalate, verify, auto, mini, mini-q8, maxi)");
  CHECK(unknown.route.tier == -1);
  CHECK(unknown.speculation == SpeculationMode::draft);
  CHECK(unknown.max_draft == 0);
  AdmitRequest samples = request("escalate");
  samples.samples = 2;
  CHECK(route_request(t.get(), samples) == "sampling.tier: escalate runs one sample (n = 1); n > 1 needs a fixed tier");
  CHECK(samples.route.kind == RouteKind::fixed);
  AdmitRequest sampled = request("verify");
  sampled.sampling.temperature = 0.7f;
  CHECK(route_request(t.get(), sampled) == "sampling.tier: verify verifies greedy drafts; it needs temperature 0");
  AdmitRequest several = request("large");
  several.samples = 4;  // a fixed tier takes n > 1
  CHECK_FALSE(route_request(t.get(), several));
}
