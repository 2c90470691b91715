// Each draft source's acceptance carried past the request that measured it
// (service/acceptance_memory.h): per scope and server-wide, sources a
// request did not draft from left alone, the least recently used scopes
// dropped past the bound.
#include <catch2/catch.hpp>

#include "service/acceptance_memory.h"
#include "service/suffix_history.h"

using namespace troupe;
using namespace troupe::service;

namespace {
constexpr size_t kSuffix = static_cast<size_t>(DraftSource::suffix);
constexpr size_t kNgram = static_cast<size_t>(DraftSource::ngram);

// A controller's estimates and stats after `windows` windows of 8 drafts
// from `source`, each keeping `kept`.
struct Ended {
  AcceptanceEstimates estimates;
  SpeculationStats stats;
};
Ended ended(DraftSource source, int windows, int kept) {
  SpeculationController c(SpeculationMode::automatic, 8);
  for (int i = 0; i < windows; ++i) c.observe(source, 8, kept);
  return {c.estimates(), c.stats()};
}

double rate(const AcceptanceEstimate& e) { return e.kept / e.tried; }
}  // namespace

TEST_CASE("acceptance memory: a scope's next request starts from its last one's, another scope from the server's") {
  AcceptanceMemory m;
  CHECK(m.prior(suffix_scope("", "A")) == nullptr);  // nothing measured yet: the default prior
  CHECK(m.prior("") == nullptr);
  const Ended copying = ended(DraftSource::suffix, 6, 8);
  m.remember(suffix_scope("", "A"), copying.estimates, copying.stats);
  const AcceptanceEstimates* a = m.prior(suffix_scope("", "A"));
  REQUIRE(a);
  CHECK(rate((*a)[kSuffix]) == Approx(rate(copying.estimates[kSuffix])));
  CHECK(rate((*a)[kSuffix]) > 0.95);
  CHECK(rate((*a)[kNgram]) == Approx(0.4));  // never drafted from: the default

  const Ended prose = ended(DraftSource::suffix, 6, 0);
  m.remember(suffix_scope("s1", ""), prose.estimates, prose.stats);
  CHECK(rate((*m.prior(suffix_scope("s1", "")))[kSuffix]) < 0.1);
  CHECK(rate((*m.prior(suffix_scope("", "A")))[kSuffix]) > 0.95);  // each scope its own
  // A request of no scope, or of one not seen: the server's, halfway between what it saw.
  const AcceptanceEstimates* server = m.prior("");
  REQUIRE(server);
  CHECK(m.prior(suffix_scope("", "B")) == server);
  CHECK(rate((*server)[kSuffix]) == Approx((rate(copying.estimates[kSuffix]) + rate(prose.estimates[kSuffix])) / 2));
  CHECK((*server)[kSuffix].tried == Approx(SpeculationController::kPriorTries));
}

TEST_CASE("acceptance memory: a request that drafted nothing, or not from a source, changes nothing of it") {
  AcceptanceMemory m;
  const Ended copying = ended(DraftSource::suffix, 6, 8);
  m.remember(suffix_scope("", "A"), copying.estimates, copying.stats);
  const double before = rate((*m.prior(suffix_scope("", "A")))[kSuffix]);
  const Ended nothing = ended(DraftSource::suffix, 0, 0);
  m.remember(suffix_scope("", "A"), nothing.estimates, nothing.stats);
  const Ended ngram_only = ended(DraftSource::ngram, 3, 2);
  m.remember(suffix_scope("", "A"), ngram_only.estimates, ngram_only.stats);
  const AcceptanceEstimates& a = *m.prior(suffix_scope("", "A"));
  CHECK(rate(a[kSuffix]) == Approx(before));
  CHECK(rate(a[kNgram]) == Approx(rate(ngram_only.estimates[kNgram])));
  // The server's first n-gram figure is that request's, not a mean with the default.
  CHECK(rate((*m.prior(""))[kNgram]) == Approx(rate(ngram_only.estimates[kNgram])));
}

TEST_CASE("acceptance memory: past its bound the least recently used scope is dropped") {
  AcceptanceMemory m(2);
  const Ended e = ended(DraftSource::suffix, 2, 8);
  m.remember("job:1", e.estimates, e.stats);
  m.remember("job:2", e.estimates, e.stats);
  m.remember("job:1", e.estimates, e.stats);  // used again: now the most recent
  m.remember("job:3", e.estimates, e.stats);
  CHECK(m.scopes() == 2);
  CHECK(m.prior("job:2") == m.prior(""));  // dropped: the server's
  CHECK(m.prior("job:1") != m.prior(""));
  CHECK(m.prior("job:3") != m.prior(""));
}
