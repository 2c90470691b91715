// Several front ends on one worker: each holds its own share of the KV pool,
// and a crashed front end's share is freed once it has been silent (the
// worker's busy time aside). One StepRunner stepping two front ends:
// tests/worker/step_runner.test.cpp.
#include <catch2/catch.hpp>

#include "worker/front_shares.h"

using namespace troupe;
using namespace std::chrono_literals;
using worker::FrontShares;

TEST_CASE("front shares: each front end holds its own part of the pool, a third is refused while both live") {
  FrontShares shares(100, 2, 10s);
  const auto t0 = FrontShares::Clock::time_point{} + 1h;
  std::vector<uint64_t> evicted;
  std::string why;
  const auto a = shares.hold(11, t0, evicted, why), b = shares.hold(22, t0, evicted, why);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->pages == 50);
  CHECK(b->pages == 50);
  CHECK(a->first_page != b->first_page);
  CHECK(a->epoch != b->epoch);
  CHECK(shares.hold(11, t0 + 1s, evicted, why)->epoch == a->epoch);  // the same holding
  CHECK_FALSE(shares.hold(33, t0 + 2s, evicted, why));
  CHECK_THAT(why, Catch::Contains("--fronts") && Catch::Contains("every share is held"));
  CHECK(evicted.empty());
  // A front end that lets go frees its share for the next, with a new epoch.
  shares.release(11);
  CHECK(shares.held() == 1);
  const auto c = shares.hold(33, t0 + 3s, evicted, why);
  REQUIRE(c);
  CHECK(c->first_page == a->first_page);
  CHECK(c->epoch != a->epoch);
  CHECK(evicted.empty());
}

TEST_CASE("front shares: a silent front end's share goes to a new one, but not while the worker was busy") {
  FrontShares shares(64, 1, 10s);
  const auto t0 = FrontShares::Clock::time_point{} + 1h;
  std::vector<uint64_t> evicted;
  std::string why;
  const auto a = shares.hold(1, t0, evicted, why);
  REQUIRE(a);
  CHECK(a->pages == 64);
  // 30 s of one long step: the front end that waits on it is not silent.
  shares.worked(30s);
  CHECK_FALSE(shares.hold(2, t0 + 31s, evicted, why));
  // 12 s more with nothing to do: it is gone, its share is the newcomer's.
  const auto b = shares.hold(2, t0 + 43s, evicted, why);
  REQUIRE(b);
  CHECK(evicted == std::vector<uint64_t>{1});
  CHECK(b->epoch != a->epoch);
  // The old front end, back, is now the stranger.
  CHECK_FALSE(shares.hold(1, t0 + 44s, evicted, why));
  CHECK_THROWS_WITH(FrontShares(3, 4, 10s), Catch::Contains("cannot be shared by 4"));
}
